"""Registering and dropping a sketched query: checks, boundaries from the mirrors, the first
capture (a ``sketches`` row and a snapshot in ``state_snapshots``); the running job picks the
change up at its next batch."""

from __future__ import annotations

from connectors import delta_sink as sink
from core.errors import ConfigError
from core.faults import kill_point
from operators.sketch_safety.registration import check_query, check_safe
from streaming_app.sketches.outputs import write_sketch_rows
from streaming_app.sketches.query_state import QueryState
from streaming_app.sketches.registry import (
    SPARK_BOUNDARIES_ROWS,
    Registration,
    append_registration,
    as_parts,
    compute_boundaries,
    read_registry,
)
from streaming_app.sketches.snapshots import open_store, store_name, write_snapshot
from streaming_app.sketches.tables import REGISTERED, SKETCHES, ensure_tables


def register_query(spark, cfg, name: str, sql: str, partitions, mode: str = "eager", *,
                   replace: bool = False, capture: bool = True, check: bool = True,
                   boundaries=None) -> Registration:
    """Store the query in ``registered_queries`` (one row per partitioned table of
    ``partitions`` = [(table, attribute, fragments), ...]) with boundaries from each mirror's
    current version; with ``capture`` also capture the initial sketch and state there
    (a ``sketches`` row and a snapshot). The running job picks the rows up at its next
    batch. A partition attribute the safety check cannot prove safe is refused
    (UnsafeSketchError). ``boundaries``: the one partitioned table's fragment boundaries, fixed
    instead of equi-depth from the mirror."""
    lake = sink.Lake(cfg.lake_root)
    for t in cfg.tables:
        sink.ensure_mirror(spark, lake, t)
    ensure_tables(spark, lake)
    if mode not in ("eager", "lazy"):
        raise ConfigError(f"sketch {name!r}: mode {mode!r} is not eager or lazy")
    parts = as_parts(partitions)
    if any(p.fragments < 1 for p in parts):
        raise ConfigError(f"sketch {name!r}: fragments must be >= 1")
    check_query(cfg, name, sql, parts)
    if check:
        check_safe(cfg, name, sql, parts)
    existing = read_registry(spark, lake)
    if name in existing and not replace:
        raise ConfigError(f"sketch {name!r} is already registered (drop it first)")
    if name in existing:
        drop_query(spark, cfg, name)
    for p in parts:
        p.capture_version = sink.latest_version(spark, lake.mirror(p.table))
        # statestore: the driver holds no table, so a big mirror's column is sorted on the executors
        p.boundaries = list(boundaries) if boundaries is not None else \
            compute_boundaries(spark, lake, p.table, p.attribute, p.fragments, p.capture_version,
                               spark_above=SPARK_BOUNDARIES_ROWS if cfg.state.backend == "statestore" else None)
    reg = Registration(name, sql, parts, mode, sink.utcnow())
    kill_point("register.begin", -1)  # the kill campaign times kills into the writes below
    append_registration(spark, lake, reg)
    if capture and reg.captured:
        kill_point("register.capture", -1)
        q = QueryState(reg)
        versions = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in cfg.tables}
        q.capture(spark, lake, cfg, versions,
                  progress=lambda line: print(f"sketch {name}: capturing from the mirrors, {line}", flush=True))
        write_sketch_rows(spark, lake, [q], batch_id=-1, app_id=None)
        write_snapshot(open_store(spark, lake), q, batch_id=-1, app_id=None)
    return reg


def drop_query(spark, cfg, name: str) -> bool:
    from delta.tables import DeltaTable

    lake = sink.Lake(cfg.lake_root)
    ensure_tables(spark, lake)
    if name not in read_registry(spark, lake):
        return False
    lit = name.replace("'", "''")
    DeltaTable.forPath(spark, lake.output(REGISTERED)).delete(f"name = '{lit}'")
    DeltaTable.forPath(spark, lake.output(SKETCHES)).delete(f"query = '{lit}'")
    open_store(spark, lake).drop(store_name(name))
    return True
