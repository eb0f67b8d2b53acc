"""Layout rules of the product packages, read from the source with ``ast``: the folders are
floors and an import never runs up a floor (so no two folders import each other), every
module imports, no import cycle between modules (deferred imports inside functions count: they
are cycles waiting for a caller), product code never imports test oracles or bench code, and
the job never reaches the dev stack.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The floors, bottom up: a module imports its own folder and the folders below it, never one
# above (ARCHITECTURE.md, "Floors"). A folder that does not exist yet is skipped.
FLOORS = ("core", "operators", "connectors", "state", "devstack", "streaming_app")
PRODUCT = tuple(f for f in FLOORS if (ROOT / f).is_dir())

# An operator package's own ``reference`` module is its from-scratch twin (style.md); the
# package may use it for a recount, other packages may not.
REFERENCE_MODULE = "reference"
FORBIDDEN = ("tests", "bench")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PRODUCT:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


MODULES = _modules()


def _type_checking(node) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path):
    """(imported name, line) of every import in the module, at any depth, except those under
    ``if TYPE_CHECKING``. ``from a import b`` names ``a.b`` when that is a module, else ``a``."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    skip: set = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                yield (full if full in MODULES else base), node.lineno


def _graph() -> dict[str, dict[str, int]]:
    """module -> {product module it imports: line}."""
    g: dict = {}
    for m, path in MODULES.items():
        g[m] = {}
        for target, line in _imports(m, path):
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != m:
                g[m].setdefault(target, line)
    return g


def _cycles(g: dict) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    out = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _cycle_path(g: dict, comp: list[str]) -> str:
    """One concrete cycle through the component, each edge with its file and line."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:  # breadth-first back to start inside the component
        v = queue.pop(0)
        for w in sorted(g[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                path = path[::-1] + [start]
                return " -> ".join(f"{a} ({MODULES[a].relative_to(ROOT)}:{g[a][b]})"
                                   for a, b in zip(path, path[1:])) + f" -> {start}"
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return " <-> ".join(comp)


def test_the_graph_sees_the_packages():
    g = _graph()
    assert {"streaming_app.cli", "core.config", "connectors.debezium", "operators.sketch",
            "operators.sketch.codec", "state.protocol"} <= set(g)
    assert "core.config" in g["connectors.debezium"]  # imports are read


def test_cycle_finder_finds_a_cycle():
    g = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(g) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports(module):
    importlib.import_module(module)


def _floor(module: str) -> int:
    return FLOORS.index(module.split(".")[0])


def _upward(g: dict) -> list[str]:
    return sorted(f"{MODULES[m].relative_to(ROOT)}:{line} imports {t} (floor {t.split('.')[0]} is above "
                  f"{m.split('.')[0]})" for m, targets in g.items() for t, line in targets.items()
                  if _floor(t) > _floor(m))


def test_no_import_runs_up_a_floor():
    bad = _upward(_graph())
    assert not bad, "imports that run up a floor:\n" + "\n".join(bad)


def test_no_two_folders_import_each_other():
    g = _graph()
    pairs = {(m.split(".")[0], t.split(".")[0]) for m, ts in g.items() for t in ts}
    both = sorted({tuple(sorted(p)) for p in pairs if p[0] != p[1] and p[::-1] in pairs})
    assert not both, f"folders that import each other both ways: {both}"


def test_floor_rule_catches_an_upward_import():
    g = {"core.errors": {"streaming_app.job": 7}, "streaming_app.job": {"core.errors": 1}}
    found = [f"{m} -> {t}" for m, ts in g.items() for t in ts if _floor(t) > _floor(m)]
    assert found == ["core.errors -> streaming_app.job"]
    assert _floor("state.recovery") > _floor("connectors.delta_sink") > _floor("operators.sketch")


def test_every_import_of_ours_resolves():
    """Deferred imports (inside functions) run only on their path: one that names a module or a
    name that moved fails here, not in the first batch that reaches it."""
    bad = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in PRODUCT:
                mod = importlib.import_module(node.module)
                for a in node.names:
                    if not hasattr(mod, a.name) and f"{node.module}.{a.name}" not in MODULES:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module} has no {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PRODUCT:
                        importlib.import_module(a.name)
    assert not bad, "\n".join(bad)


# Imported where used, not at the top: starting them costs a JVM, a database or Kafka client,
# pandas or z3, which a CLI command that fails on its flags, or a job without that feature,
# never needs. Everything else is imported at the top of the module.
HEAVY = ("pyspark", "delta", "duckdb", "kafka", "psycopg", "pymysql", "z3", "dd", "matplotlib", "networkx",
         "fastavro", "pandas", "tpchgen")


def _top_level_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _owner(name: str) -> str | None:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


@functools.cache
def _heavy(module: str, _inside: frozenset = frozenset()) -> bool:
    """The module imports a HEAVY package when it is imported (itself or through ours; a
    package and its modules may name each other, so a module already being looked at is skipped)."""
    for name in _top_level_imports(MODULES[module]):
        if name.split(".")[0] in HEAVY:
            return True
        own = _owner(name)
        if own and own != module and own not in _inside and _heavy(own, _inside | {module}):
            return True
    return False


def test_imports_are_at_the_top_but_heavy_ones():
    bad = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            tries = {id(n) for t in ast.walk(fn) if isinstance(t, ast.Try) for n in ast.walk(t)}
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in tries:
                    continue  # an optional import, tried
                name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if name.split(".")[0] in HEAVY or (_owner(name) and _heavy(_owner(name))):
                    continue
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not bad, "imports inside functions that belong at the top:\n" + "\n".join(bad)


def test_no_private_name_is_used_across_modules():
    """``from ours import _x`` and ``module._x`` name another module's internals: what another
    module needs is public (no underscore)."""
    bad = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        ours = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCT:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{a.name}")
                    if f"{node.module}.{a.name}" in MODULES:
                        ours[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PRODUCT:
                        ours[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ours
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {ours[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    g = _graph()
    found = [_cycle_path(g, c) for c in _cycles(g)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_config_imports_no_feature_code():
    """The config schema is what connectors and every feature read: it imports none of them
    (a feature's checks it needs live in operators/, or the feature calls the config)."""
    g = _graph()
    package = [m for m in g if m == "core.config" or m.startswith("core.config.")]
    assert len(package) > 1  # the package and its section modules are all read
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}" for m in package for t, line in g[m].items()
           if t.startswith(("streaming_app", "connectors", "state")) and not t.startswith("core.config")]
    assert not bad, "\n".join(bad)


def _forbidden(importer: str, target: str) -> str | None:
    top = target.split(".")[0]
    if target.startswith("tests.oracles"):
        return "a test oracle"
    if top in FORBIDDEN:
        return f"{top} code"
    parts = target.split(".")
    if parts[-1] == REFERENCE_MODULE and not importer.startswith(".".join(parts[:-1]) + "."):
        return "another package's reference twin (a test oracle)"
    return None


def test_product_code_imports_no_oracle_or_bench():
    bad = set()
    for m, path in MODULES.items():
        for target, line in _imports(m, path):
            why = _forbidden(m, target)
            if why:
                bad.add(f"{path.relative_to(ROOT)}:{line} imports {target} ({why})")
    assert not bad, "product code imports:\n" + "\n".join(sorted(bad))


def test_oracle_rule_catches_what_it_should():
    assert _forbidden("operators.sketch_advisor.advise", "tests.oracles.sketch_reference") == "a test oracle"
    assert _forbidden("streaming_app.job", "tests.jobproc") == "tests code"
    assert _forbidden("operators.sketch_advisor.x", "bench.harness.datasets") == "bench code"
    assert _forbidden("operators.triangles.counter", "operators.triangles.reference") is None
    assert _forbidden("operators.recursive.views", "operators.triangles.reference") is not None


# The dev stack (local servers, CDC and history generators) is a floor below the CLI, whose server
# commands and demos use it; the job itself never reaches it.
DEV_STACK = "devstack"
JOB = ("streaming_app.job", "streaming_app.runner", "state.backends", "state.statestore.backend")


def _reach(g: dict, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for t in g[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_the_job_never_reaches_the_dev_stack():
    g = _graph()
    assert any(t.split(".")[0] == DEV_STACK for t in g["streaming_app.cli"])  # the graph sees the CLI's use
    for job in (j for j in JOB if j in g):
        reached = sorted(m for m in _reach(g, job) if m.split(".")[0] == DEV_STACK)
        assert not reached, f"{job} reaches the dev stack: {reached}"
