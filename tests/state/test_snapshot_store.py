"""The snapshot store on Delta (delta-rs, local lake): idempotent per (app id:maintainer,
batch), the newest snapshot consistent with committed mirror versions, bounded history."""

from __future__ import annotations

import deltalake

from state.snapshot_store import SnapshotStore, consistent


def test_write_is_idempotent_per_batch_and_latest_is_consistent(tmp_path):
    store = SnapshotStore(tmp_path / "lake", keep=10)
    store.ensure()
    for b in range(4):
        assert store.write("triangles.g", "job:q1", b, {"edges": 2 * b + 2}, "triangles.engine.v1", bytes([b]) * 9)
    assert not store.write("triangles.g", "job:q1", 2, {"edges": 99}, "x", b"replayed")  # a replay
    assert store.write("view.r", "job:q1", 3, {"edges": 8}, "ivmstream.recursive.v1", b"{}")
    snap = store.latest("triangles.g", {"edges": 7})  # mirror committed at 7: batch 3 (v8) is ahead
    assert (snap.batch_id, snap.versions, snap.state, snap.encoding) == (2, {"edges": 6}, bytes([2]) * 9,
                                                                         "triangles.engine.v1")
    assert store.latest("triangles.g", {"edges": 1}) is None
    assert store.latest("triangles.g", {"other": 100}) is None  # reflects a table not committed at all
    assert store.latest("view.r", {"edges": 8}).state == b"{}"
    assert store.latest("nobody", {"edges": 8}) is None
    # a new writer (fresh checkpoint: new app id) starts its batch ids again
    assert store.write("triangles.g", "job:q2", 0, {"edges": 8}, "triangles.engine.v1", b"new")
    assert store.latest("triangles.g", {"edges": 8}).state == b"new"


def test_old_snapshots_are_deleted_and_vacuumed(tmp_path):
    store = SnapshotStore(tmp_path / "lake", keep=2)
    store.ensure()
    for b in range(7):
        store.write("triangles.g", "job:q1", b, {"edges": b}, "triangles.engine.v1", b"x" * 1000)
        store.write("view.r", "job:q1", b, {"edges": b}, "ivmstream.recursive.v1", b"y" * 1000)
        assert len(store.list("triangles.g")) <= 3
    store.prune("triangles.g")
    assert [r["batch_id"] for r in store.list("triangles.g")] == [6, 5]
    assert len(store.list("view.r")) <= 3
    files = deltalake.DeltaTable(store.path).file_uris()
    on_disk = list((tmp_path / "lake" / "state_snapshots").glob("*.parquet"))
    assert len(on_disk) == len(files) <= 6


def test_consistent():
    assert consistent({"a": 3, "b": 1}, {"a": 3, "b": 2, "c": 0})
    assert not consistent({"a": 4}, {"a": 3})
    assert not consistent({"a": 1}, {})


def test_oldest_versions_is_what_a_restart_may_read_from(tmp_path):
    store = SnapshotStore(tmp_path / "lake", keep=2)
    assert store.oldest_versions() == {}  # no table yet
    store.ensure()
    assert store.oldest_versions() == {}
    for b in range(5):
        store.write("triangles.g", "job:q1", b, {"edges": 10 + b}, "triangles.engine.v1", b"x")
        store.write("sketch.q", "job:q1", b, {"orders": 3 + b, "lineitem": 7 + 2 * b}, "sketch.maintainer.v1", b"y")
    store.prune("triangles.g")
    store.prune("sketch.q")
    # two kept per maintainer (batches 3, 4): the older one bounds what maintenance may remove
    assert store.oldest_versions() == {"edges": 13, "orders": 6, "lineitem": 13}
