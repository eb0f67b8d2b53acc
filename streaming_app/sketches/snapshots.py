"""Each sketched query's engine snapshots in the one snapshot store (``state.snapshot_store``).

A query is the store's maintainer ``sketch.<query name>``; a snapshot row holds the
``SketchMaintainer``'s bytes under ``sketch.maintainer.v1`` (``operators.sketch.codec``, through
``state.engines.SketchEngine``), the mirror versions its state reflects, and as its config the
query's SQL and partitions (tables, attributes, fragment counts, boundaries): a query dropped
and registered again differently never restores the old state. The job writes one every
``[sketch] snapshot_every`` batches and at a query's first capture, idempotent on its batch;
``sketch register`` and a lazy sketch's refresh write one outside the job (batch id -1). At
start-up the newest snapshot consistent with the committed mirrors is restored
(``state.recovery.restore_newest``) and brought forward from the change feed
(``query_state.QueryState.bring_forward``); without a usable one the query is captured again.

Lakes written before the store kept sketch snapshots in a table ``sketch_state``: it is not
read any more (each of their queries is captured once from the mirrors, then snapshotted here)
and not deleted.
"""

from __future__ import annotations

import json

from state.engines import SketchEngine
from state.recovery import restore_newest
from state.snapshot_store import Snapshot, SnapshotStore
from streaming_app.sketches import delta_side
from streaming_app.sketches.registry import Registration
from streaming_app.sketches.tables import bounds_to_json


def store_name(query: str) -> str:
    return f"sketch.{query}"

def registration_config(reg: Registration) -> dict:
    """What a snapshot's state depends on besides the mirror versions."""

    return {"sql": reg.sql, "parts": [[p.table, p.attribute, p.fragments,
                                       json.loads(bounds_to_json(p.boundaries)) if p.boundaries else None]
                                      for p in sorted(reg.parts, key=lambda p: p.table)]}

def open_store(spark, lake) -> SnapshotStore:
    store = SnapshotStore(lake.root, spark)
    store.ensure()
    return store

def write_snapshot(store: SnapshotStore, q, batch_id: int, app_id: str | None) -> bool:
    """One query's snapshot (``app_id`` None: outside the job, a plain append)."""
    encoding, data = SketchEngine(q.engine).snapshot()
    return store.write(store_name(q.name), app_id, batch_id, q.versions, encoding, data, registration_config(q.reg))

def restore_latest(store: SnapshotStore, reg: Registration, committed: dict) -> tuple[SketchEngine, Snapshot | None,
                                                                                       str | None]:
    """The query's engine from its newest usable snapshot: (engine, snapshot, None), or
    (engine, None, why not) with nothing restored."""
    engine = SketchEngine(store_factory=delta_side.delta_side_factory(set()))
    snap, why = restore_newest(store, store_name(reg.name), committed, registration_config(reg), engine)
    return engine, snap, why
