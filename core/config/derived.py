"""The derived data the job keeps: triangle-counted ``[[graphs]]``, recursive ``[[views]]``,
registered ``[[sketches]]``, and the ``[sketch]`` and ``[state]`` settings of their upkeep."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from core.errors import ConfigError
from core.config.common import (NAME, MAX_FRAGMENTS, check_keys, entry_name, shown, want_int,
                                         want_name, want_number, want_str)
from core.config.tables import TableConfig, check_columns

_GRAPH_KEYS = {"name", "table", "src", "dst", "mode", "epsilon", "relation"}
_VIEW_KEYS = {"name", "table", "kind", "src", "dst", "cost", "expires"}
_SKETCH_KEYS = {"name", "sql", "partition", "fragments", "mode", "boundaries"}
_SKETCH_SETTINGS_KEYS = {"snapshot_every", "spark_join_rows"}
_STATE_KEYS = {"snapshot_every", "backend", "cdc_buckets"}


@dataclass(frozen=True)
class TrianglesConfig:
    """A triangle-counted graph (``[[graphs]]``) over a CDC table's (src, dst) columns."""

    name: str
    table: str
    src: str = "src"
    dst: str = "dst"
    mode: str = "undirected"  # undirected | directed | three_relation
    epsilon: float = 0.5
    relation: str | None = None  # column naming R/S/T in three_relation mode


@dataclass(frozen=True)
class ViewConfig:
    """A recursive view (reachability or shortest paths) over a CDC link table."""

    name: str
    table: str
    kind: str = "reachability"  # reachability | shortest_paths
    src: str = "src"
    dst: str = "dst"
    cost: str | None = None
    expires: str | None = None  # column holding an expiry time (epoch seconds)


@dataclass(frozen=True)
class SketchConfig:
    """A registered query whose provenance sketch the job keeps current (issue 4)."""

    name: str
    sql: str
    partitions: tuple  # ((table, attribute, fragments), ...): one per partitioned table
    mode: str = "eager"  # eager | lazy
    # fixed fragment boundaries of the one partitioned table (else equi-depth from the mirror
    # at capture); the statestore backend needs them before its first batch
    boundaries: tuple | None = None

    @property
    def table(self) -> str:
        return self.partitions[0][0]

    @property
    def attribute(self) -> str:
        return self.partitions[0][1]

    @property
    def fragments(self) -> int:
        return self.partitions[0][2]


@dataclass(frozen=True)
class SketchSettings:
    """``[sketch]``: how the job maintains registered queries (issue 4)."""

    snapshot_every: int = 3  # batches between engine snapshots of each query (into state_snapshots)
    # join inputs over a table with at least this many rows at capture stay in the Delta
    # mirror and are probed with Spark (time travel) instead of held in driver memory
    spark_join_rows: int = 1_000_000


@dataclass(frozen=True)
class StateSettings:
    """``[state]``: where operator state lives (issue 24) and how triangle and view maintainers
    keep their engine snapshots (issue 18)."""

    snapshot_every: int = 10  # batches that changed an engine between two of its snapshots
    # "memory": engines in the driver (snapshots in state_snapshots); "statestore": sketch
    # operators in the streaming query, keyed state in Spark's RocksDB state store on the executors
    backend: str = "memory"
    # buckets per table of the last-image state (statestore): pinned by the checkpoint
    cdc_buckets: int = 64


def parse_sketch(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> SketchConfig:
    w = entry_name(raw, "sketches", i, where)
    check_keys(raw, _SKETCH_KEYS, w)
    for k in ("name", "sql", "partition"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    name = want_name(raw["name"], w, "name", NAME)
    sql = want_str(raw["sql"], w, "sql")
    specs = raw["partition"]
    if isinstance(specs, str):
        specs = [x for x in specs.split(",") if x.strip()]
    if not isinstance(specs, list) or not specs or not all(isinstance(x, str) for x in specs):
        raise ConfigError(f"{w}: partition must be 'TABLE.ATTRIBUTE[:FRAGMENTS]' or an array of them, "
                          f"got {shown(raw['partition'])}")
    default = want_int(raw.get("fragments", 16), w, "fragments", 1, MAX_FRAGMENTS)
    parts = []
    for spec in specs:
        part, colon, frags = spec.strip().partition(":")
        if part.count(".") != 1:
            raise ConfigError(f"{w}: partition {spec.strip()!r} must be TABLE.ATTRIBUTE[:FRAGMENTS]")
        if colon:
            if not frags.strip().isdigit():
                raise ConfigError(f"{w}: partition {spec.strip()!r}: FRAGMENTS {frags!r} is not an integer")
            frags = want_int(int(frags), w, f"partition {spec.strip()!r}: FRAGMENTS", 1, MAX_FRAGMENTS)
        else:
            frags = default
        table, attr = (x.strip() for x in part.split("."))
        check_columns(w, table, [attr], tables)
        if any(table == t for t, _, _ in parts):
            raise ConfigError(f"{w}: one partition attribute per table ({table!r} given twice)")
        parts.append((table, attr, frags))
    mode = raw.get("mode", "eager")
    if mode not in ("eager", "lazy"):
        raise ConfigError(f"{w}: mode must be \"eager\" or \"lazy\", got {shown(mode)}")
    bounds = raw.get("boundaries")
    if bounds is not None:
        if len(parts) != 1 or not isinstance(bounds, list) or len(bounds) < 2 or \
                not all(isinstance(b, (int, float, str)) and not isinstance(b, bool) for b in bounds) or \
                len({type(b) is str for b in bounds}) != 1 or any(not a < b for a, b in zip(bounds, bounds[1:])):
            raise ConfigError(f"{w}: boundaries must be a strictly increasing array of at least two numbers or "
                              f"strings, with one partitioned table; got {shown(bounds)}")
        parts = [(parts[0][0], parts[0][1], len(bounds) - 1)]
        bounds = tuple(bounds)
    return SketchConfig(name=name, sql=sql, partitions=tuple(parts), mode=mode, boundaries=bounds)


def parse_graph(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> TrianglesConfig:
    w = entry_name(raw, "graphs", i, where)
    check_keys(raw, _GRAPH_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    want_name(raw["name"], w, "name")
    for k in ("table", "src", "dst", "mode", "relation"):
        if k in raw:
            want_str(raw[k], w, k)
    g = TrianglesConfig(**{k: raw[k] for k in raw})
    if g.mode not in ("undirected", "directed", "three_relation"):
        raise ConfigError(f"{w}: mode {g.mode!r} is not undirected, directed or three_relation")
    eps = want_number(g.epsilon, w, "epsilon", 0.0, 1.0)
    check_columns(w, g.table, [g.src, g.dst] + ([g.relation] if g.relation else []), tables)
    if g.mode == "three_relation" and not g.relation:
        raise ConfigError(f"{w}: three_relation mode needs a 'relation' column (values R, S, T)")
    return replace(g, epsilon=eps)


def parse_view(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> ViewConfig:
    w = entry_name(raw, "views", i, where)
    check_keys(raw, _VIEW_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    want_name(raw["name"], w, "name")
    for k in ("table", "kind", "src", "dst", "cost", "expires"):
        if k in raw:
            want_str(raw[k], w, k)
    v = ViewConfig(**{k: raw[k] for k in raw})
    if v.kind not in ("reachability", "shortest_paths"):
        raise ConfigError(f"{w}: kind {v.kind!r} is not reachability or shortest_paths")
    if v.kind == "shortest_paths" and not v.cost:
        raise ConfigError(f"{w}: shortest_paths needs a 'cost' column")
    check_columns(w, v.table, [c for c in (v.src, v.dst, v.cost, v.expires) if c], tables)
    return v


def parse_sketch_settings(sk: Any, where: str) -> SketchSettings:
    w = f"{where}: [sketch]"
    check_keys(sk, _SKETCH_SETTINGS_KEYS, w)
    return SketchSettings(
        snapshot_every=want_int(sk.get("snapshot_every", SketchSettings.snapshot_every), w, "snapshot_every",
                                 1, 1_000_000),
        spark_join_rows=want_int(sk.get("spark_join_rows", SketchSettings.spark_join_rows), w,
                                  "spark_join_rows", 0))


def parse_state_settings(st: Any, where: str) -> StateSettings:
    w = f"{where}: [state]"
    check_keys(st, _STATE_KEYS, w)
    backend = st.get("backend", StateSettings.backend)
    if backend not in ("memory", "statestore"):
        raise ConfigError(f"{w}: backend must be \"memory\" or \"statestore\", got {shown(backend)}")
    return StateSettings(snapshot_every=want_int(st.get("snapshot_every", StateSettings.snapshot_every), w,
                                                  "snapshot_every", 1, 1_000_000),
                         backend=backend,
                         cdc_buckets=want_int(st.get("cdc_buckets", StateSettings.cdc_buckets), w, "cdc_buckets",
                                               1, 1_000_000))
