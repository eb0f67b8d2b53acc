"""The state backends the job is given (``state.backends``): both answer every hook with the
declared signature, the job refuses a statestore config without its backend, the runner builds
the one the config names, and the layers hold (operators import no state, state no job wiring).
No Spark session is started."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from core.errors import ConfigError
from state.backends import MemoryBackend, StateBackend
from state.statestore.backend import SketchTables, StatestoreBackend
from streaming_app.job import IngestJob
from streaming_app.runner import state_backend
from streaming_app.settings import parse_config
from streaming_app.sketches.keyed import KeyedSketchTables

ROOT = Path(__file__).resolve().parents[2]
BASE = {"tables": [{"name": "t", "topic": "t.t", "primary_key": ["id"], "columns": {"id": "long", "v": "long"}}]}
HOOKS = [n for n, v in vars(StateBackend).items() if inspect.isfunction(v) and not n.startswith("_")]


def test_the_protocol_declares_the_hooks_the_job_calls():
    job_source = inspect.getsource(IngestJob)
    assert len(HOOKS) == 11
    for hook in HOOKS:  # every hook is one the job calls
        assert f"self.backend.{hook}(" in job_source, hook


@pytest.mark.parametrize("cls", [MemoryBackend, StatestoreBackend])
def test_every_backend_implements_every_hook(cls):
    for hook in HOOKS:
        impl = getattr(cls, hook)
        assert impl is not getattr(StateBackend, hook), f"{cls.__name__} does not implement {hook}"
        want = list(inspect.signature(getattr(StateBackend, hook)).parameters)
        assert list(inspect.signature(impl).parameters) == want, (cls.__name__, hook)
    assert cls.name in ("memory", "statestore")


def test_the_sketch_tables_implement_what_the_statestore_backend_asks():
    for name, v in vars(SketchTables).items():
        if inspect.isfunction(v) and not name.startswith("_"):
            impl = getattr(KeyedSketchTables, name)
            assert list(inspect.signature(impl).parameters) == list(inspect.signature(v).parameters), name


class _Named:
    def __init__(self, name):
        self.name = name


def test_the_runner_builds_the_backend_the_config_names():
    memory = parse_config(BASE)
    statestore = parse_config({**BASE, "state": {"backend": "statestore"}})
    assert isinstance(state_backend(memory), MemoryBackend)
    backend = state_backend(statestore)
    assert isinstance(backend, StatestoreBackend) and isinstance(backend.sketches, KeyedSketchTables)
    ms = [_Named("sketches"), _Named("triangles.g")]
    assert [m.name for m in backend.maintainers(ms)] == ["triangles.g"]  # the keyed operators keep the sketches
    assert [m.name for m in MemoryBackend().maintainers(ms)] == ["sketches", "triangles.g"]


def test_a_statestore_config_without_its_backend_is_refused():
    cfg = parse_config({**BASE, "state": {"backend": "statestore"}})
    with pytest.raises(ConfigError) as e:
        IngestJob(cfg, spark=None)
    assert "statestore" in str(e.value) and "\n" not in str(e.value)


def _imports(folder: str) -> set[tuple[str, str]]:
    """(file, imported top-level package) of every import in the folder's modules."""
    out = set()
    for f in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                out |= {(f.relative_to(ROOT).as_posix(), a.name.split(".")[0]) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add((f.relative_to(ROOT).as_posix(), node.module.split(".")[0]))
    return out


@pytest.mark.parametrize("folder, above", [("operators", {"state", "connectors", "streaming_app"}),
                                           ("state", {"streaming_app"})])
def test_no_import_runs_up_from(folder, above):
    found = _imports(folder)
    assert any(top == "core" for _, top in found)  # the imports are read
    bad = sorted(f"{f} imports {top}" for f, top in found if top in above)
    assert not bad, "\n".join(bad)
