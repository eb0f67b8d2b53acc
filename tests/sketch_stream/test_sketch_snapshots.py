"""A sketched query's engine snapshots in the one snapshot store (no Spark: a local lake through
delta-rs): written idempotently per batch under maintainer ``sketch.<query>``, restored only
when consistent with the committed mirrors and taken for the same SQL and partitions, dropped
with the query; the state size the job reports counts the engine's entries."""

from __future__ import annotations

import pyarrow as pa

from operators.sketch import SketchMaintainer
from state.snapshot_store import SnapshotStore
from streaming_app.sketches.query_state import QueryState, state_entries
from streaming_app.sketches.registry import Part, Registration
from streaming_app.sketches.snapshots import registration_config, restore_latest, store_name, write_snapshot

SQL = "SELECT a, COUNT(*) AS n FROM t GROUP BY a HAVING COUNT(*) > 1"


def query(bounds=(0, 5, 10, 15), rows=(1, 1, 7, 7, 7, 12)) -> QueryState:
    reg = Registration("busy", SQL, [Part("t", "a", len(bounds) - 1, list(bounds), 0)])
    m = SketchMaintainer.from_sql(SQL, reg.partitions())
    m.initialize({"t": pa.table({"a": list(rows)})})
    return QueryState(reg, engine=m, versions={"t": 4}, tables=["t"])


def test_written_once_per_batch_restored_when_consistent_and_dropped(tmp_path):
    store = SnapshotStore(tmp_path / "lake")
    store.ensure()
    q = query()
    assert write_snapshot(store, q, 7, "job:q1")
    assert not write_snapshot(store, q, 7, "job:q1")  # a replayed batch
    assert [(r["maintainer"], r["batch_id"], r["encoding"]) for r in store.list(store_name("busy"))] == \
        [("sketch.busy", 7, "sketch.maintainer.v1")]

    engine, snap, why = restore_latest(store, q.reg, {"t": 4, "other": 9})
    assert why is None and snap.batch_id == 7 and snap.versions == {"t": 4}
    assert engine.maintainer.sketch == q.engine.sketch == {"t": [0, 1]}
    r = QueryState(q.reg)
    r.restored(engine.maintainer, snap.versions)
    assert (r.tables, r.versions) == (["t"], {"t": 4})
    d = {"t": pa.table({"a": [1], "__weight": pa.array([-1], pa.int64())})}  # group 1 falls to one row
    assert r.engine.apply(d).removed["t"] == {0}

    engine, snap, why = restore_latest(store, q.reg, {"t": 3})  # the mirror is behind the snapshot
    assert snap is None and why == "no snapshot consistent with the mirrors"

    other = query(bounds=(0, 8, 15))  # same name, registered again with other boundaries
    engine, snap, why = restore_latest(store, other.reg, {"t": 4})
    assert snap is None and "other settings" in why
    assert registration_config(other.reg) != registration_config(q.reg)

    assert write_snapshot(store, other, -1, None)  # `sketch register` (no txn), newer
    assert write_snapshot(store, other, -1, None)
    assert restore_latest(store, other.reg, {"t": 4})[1].batch_id == -1
    assert store.drop(store_name("busy")) == 3  # keep (2) + 1 between two prunes
    assert restore_latest(store, other.reg, {"t": 4})[1] is None and store.list("sketch.busy") == []


def test_state_entries_count_groups_result_rows_and_fragments():
    q = query()
    m = q.engine
    agg = [n.state for n in m.query.root.walk() if type(n.state).__name__ == "AggState"]
    assert len(agg) == 1 and len(agg[0].slot_of) == 3  # groups 1, 7 and 12
    assert len(m.merge.rows) == 2 and len(m.merge.counts) == 2  # result rows (1, 2), (7, 3); fragments 0, 1
    assert state_entries(m) == q.state_size() == 3 + 2 + 2
    assert QueryState(q.reg).state_size() == 0
