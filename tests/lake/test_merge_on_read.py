"""Merge-on-read mirrors (``connectors.dv_table``) against the copy-on-write path and a replay.

The same random histories (final images, deletes, truncates, keys of two columns so matching
goes by hash and check) go into a copy-on-write mirror (delta-rs MERGE) and a merge-on-read one:
after every batch both hold the replay's rows, and each batch's change feed is the same multiset
of (kind, row) in both. Then what the long-running job does to them: a replayed batch changes
nothing, a checkpoint replaces the log, compaction folds small files and deleted rows away
without touching the change feed, VACUUM keeps what a needed version reads, and delta-rs is never
let near the table. No Spark here (tests/lake/test_merge_on_read_spark.py reads them with Spark).
"""

from __future__ import annotations

import decimal
import os
import tempfile
import time
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import delta_sink as sink
from connectors import dv_table as dv
from connectors import object_store as store
from connectors.maintenance import Maintenance
from core.config import MaintenanceConfig
from streaming_app.settings import parse_config

CFG = parse_config({"job": {"name": "m", "mirrors": "merge-on-read"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                    "tables": [{"name": "t", "topic": "t", "primary_key": ["k", "j"],
                                "columns": {"k": "long", "j": "int", "v": "string", "d": "decimal(9,2)"}}]})
TABLE = CFG.tables[0]

FINAL = st.dictionaries(st.tuples(st.integers(0, 400), st.integers(0, 2)),
                        st.one_of(st.none(), st.text(alphabet="abcxyz", max_size=5)), min_size=1, max_size=60)
HISTORY = st.lists(st.tuples(st.integers(0, 9).map(lambda n: n == 0), FINAL), min_size=1, max_size=10)


def _changes(final: dict) -> pa.Table:
    return sink.mirror_changes_frame(TABLE, {
        key: None if v is None else {"k": key[0], "j": key[1], "v": v, "d": None if not v else decimal.Decimal(len(v)) * decimal.Decimal("1.25")}
        for key, v in final.items()})


def _rows(t: pa.Table) -> dict:
    return {(r["k"], r["j"]): r["v"] for r in t.to_pylist()}


def _feed(path: str, after: int, to: int) -> Counter:
    t = sink.read_changes(None, path, after, to)
    return Counter((r[sink.WEIGHT], r["k"], r["j"], r["v"], str(r["d"])) for r in (t.to_pylist() if t else []))


def _pair(tmp: str):
    cow = sink.ensure_mirror(None, sink.Lake(f"{tmp}/cow"), TABLE, sink.COPY_ON_WRITE)
    mor = sink.ensure_mirror(None, sink.Lake(f"{tmp}/mor"), TABLE, sink.MERGE_ON_READ)
    return cow, mor


def test_config_names_the_layout():
    assert CFG.mirrors == "merge-on-read"
    with pytest.raises(Exception, match="mirrors must be"):
        parse_config({"job": {"name": "m", "mirrors": "lsm"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                      "tables": [{"name": "t", "topic": "t", "primary_key": ["k"], "columns": {"k": "long"}}]})


@settings(max_examples=30, deadline=None)
@given(history=HISTORY, seed_rows=st.integers(0, 1500))
def test_merge_on_read_equals_copy_on_write_and_replay(history, seed_rows):
    with tempfile.TemporaryDirectory() as tmp:
        cow, mor = _pair(tmp)
        assert sink.merge_on_read(mor) and not sink.merge_on_read(cow)
        model = {(i % 401, i % 3): f"r{i}" for i in range(seed_rows)}
        for p in (cow, mor):
            if model:
                sink.merge_mirror(None, p, TABLE, _changes(model), "app", 0)
        for batch_id, (truncate, final) in enumerate(history, start=1):
            if truncate:
                model.clear()
            for key, v in final.items():
                if v is None:
                    model.pop(key, None)
                else:
                    model[key] = v
            before = {p: sink.latest_version(None, p) for p in (cow, mor)}
            for p in (cow, mor):
                sink.merge_mirror(None, p, TABLE, _changes(final), "app", batch_id, truncate=truncate)
            after = {p: sink.latest_version(None, p) for p in (cow, mor)}
            sink.merge_mirror(None, mor, TABLE, _changes(final), "app", batch_id, truncate=truncate)  # a replay
            assert sink.latest_version(None, mor) == after[mor]
            assert _rows(sink.read_table(mor)) == model == _rows(sink.read_table(cow))
            assert _feed(mor, before[mor], after[mor]) == _feed(cow, before[cow], after[cow])
        # a process that opens the table afresh replays the same log
        assert _rows(dv.DVTable(mor).read()) == model


def _batches(path: str, n: int, start: int = 0, keys: int = 300, model: dict | None = None) -> dict:
    """``n`` batches of updates, inserts and deletes into ``path``; the live rows after them."""
    model = {} if model is None else model
    for b in range(start, start + n):
        final = {(i, i % 2): (None if (i + b) % 7 == 0 else f"b{b}") for i in range(b % 4, keys, 3 + b % 3)}
        sink.merge_mirror(None, path, TABLE, _changes(final), "app", b)
        for k, v in final.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
    return model


def test_checkpoint_and_log_cleanup_keep_the_table(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 12)
    t = dv.open_table(path)
    rows, version = _rows(t.read()), t.snapshot().version
    assert t.checkpoint() == version
    assert t.cleanup_log(0) == version  # every commit below the checkpoint
    fresh = dv.DVTable(path)
    assert fresh.snapshot().version == version and _rows(fresh.read()) == rows
    assert fresh.snapshot().txns == {"app": 11}
    sink.merge_mirror(None, path, TABLE, _changes({(1, 1): "after"}), "app", 12)
    assert _rows(dv.DVTable(path).read())[(1, 1)] == "after"


def test_compaction_purges_deleted_rows_and_keeps_the_feed(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 20)
    t = dv.open_table(path)
    rows, v0 = _rows(t.read()), t.snapshot().version
    feed = _feed(path, 0, v0)
    files = len(t.snapshot().files)
    removed, written = t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=2)
    assert removed == files and written == 1
    snap = t.snapshot()
    assert len(snap.files) == 1 and all(f.dv is None for f in snap.files.values())
    assert _rows(t.read()) == rows
    assert _feed(path, 0, snap.version) == feed  # compaction adds no change
    assert _rows(t.read(v0)) == rows  # time travel before it still reads (files kept until VACUUM)


def test_size_tiers():
    assert [dv.size_tier(n, 10, 4) for n in (0, 9, 10, 39, 40, 159, 160)] == [0, 0, 1, 1, 2, 2, 3]


def test_compaction_folds_a_tier_and_leaves_the_larger_files(tmp_path):
    """The per-batch files fold into one; later batch files fold among themselves, not into it
    again (the larger file is rewritten only when its own tier fills, or to purge dead rows)."""
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    model = _batches(path, 8)
    t = dv.open_table(path)
    assert t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=4, purge_share=1.0) == (8, 1)
    (big,) = t.snapshot().files.values()
    model = _batches(path, 3, start=8, model=model)
    floor = big.size  # the folded file is tier 1, each batch's file tier 0
    assert t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=4, purge_share=1.0,
                     tier_floor=floor) == (0, 0)  # three tier-0 files: not yet
    model = _batches(path, 1, start=11, model=model)
    assert t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=4, purge_share=1.0,
                     tier_floor=floor) == (4, 1)
    assert big.path in t.snapshot().files and len(t.snapshot().files) == 2
    assert _rows(dv.DVTable(path).read()) == model
    # a file whose deletion vector removes more than purge_share of its rows is rewritten alone
    removed, _ = t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=4, purge_share=0.01,
                           tier_floor=floor)
    assert removed >= 1 and big.path not in t.snapshot().files
    assert _rows(dv.DVTable(path).read()) == model


def test_vacuum_keeps_what_a_version_inside_the_retention_reads(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 8)
    t = dv.open_table(path)
    v0, rows0 = t.snapshot().version, _rows(t.read())
    t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=2)
    assert t.vacuum(1) == []  # nothing left the table an hour ago
    assert _rows(t.read(v0)) == rows0
    time.sleep(0.05)
    gone = t.vacuum(0)
    assert any(g.startswith("part-") for g in gone) and any(g.startswith("deletion_vector_") for g in gone)
    assert _rows(t.read()) == rows0
    for f in t.snapshot().files.values():
        assert os.path.exists(os.path.join(path, f.path))


def test_maintenance_turn_on_a_merge_on_read_mirror(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    model = _batches(path, 25)
    lines = []
    m = Maintenance(MaintenanceConfig(compact_min_files=4, checkpoint_every=5, retention_hours=0),
                    say=lines.append, root=str(tmp_path))
    acts = m.maintain(path)
    assert {a.kind for a in acts} == {"compact", "vacuum", "checkpoint"}, lines
    assert all(line.startswith("maintenance: ") for line in lines)
    assert _rows(dv.DVTable(path).read()) == model
    assert os.path.exists(os.path.join(path, "_delta_log", "_last_checkpoint"))


def test_needed_version_stretches_the_retention(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 3)
    need = dv.open_table(path).snapshot().version - 1
    m = Maintenance(MaintenanceConfig(retention_hours=0), needed=lambda p: need)
    # the commit after it is seconds old: one hour more than its age, in whole hours
    assert m.retention_hours(path) == 2
    assert Maintenance(MaintenanceConfig(retention_hours=0)).retention_hours(path) == 0


def test_delta_rs_is_never_let_near_a_merge_on_read_table(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 3)
    with pytest.raises(store.MergeOnReadTable):
        store.rs_table(path)
    # every reader of the lake answers through dv_table instead
    assert sink.read_table(path).num_rows == len(_rows(dv.DVTable(path).read()))
    assert sink.read_version(None, path, 1).num_rows > 0
    assert sink.done_before(path, "app", 2) and not sink.done_before(path, "app", 3)
    assert sink.file_actions(path)["path"]


def test_a_copy_on_write_mirror_moves_to_merge_on_read_with_its_history(tmp_path):
    lake = sink.Lake(tmp_path)
    path = sink.ensure_mirror(None, lake, TABLE, sink.COPY_ON_WRITE)
    model = _batches(path, 4)
    v = sink.latest_version(None, path)
    feed = _feed(path, 0, v)
    assert sink.ensure_mirror(None, lake, TABLE, sink.MERGE_ON_READ) == path
    assert sink.merge_on_read(path)
    assert _rows(sink.read_table(path)) == model
    assert _feed(path, 0, v) == feed  # delta-rs's change data, read by dv_table
    _batches(path, 3, start=4, model=model)
    assert _rows(sink.read_table(path)) == model
    # and stays merge-on-read when a later start asks for copy-on-write
    assert sink.ensure_mirror(None, lake, TABLE, sink.COPY_ON_WRITE) == path and sink.merge_on_read(path)


def test_bytes_written_per_change_do_not_grow_with_the_table(tmp_path):
    """A batch of 100 changes into 2,000 and into 40,000 rows writes about the same bytes."""
    written = {}
    for rows in (2_000, 40_000):
        path = sink.ensure_mirror(None, sink.Lake(tmp_path / str(rows)), TABLE, sink.MERGE_ON_READ)
        sink.merge_mirror(None, path, TABLE, _changes({(i, 0): "seed" for i in range(rows)}), "app", 0)
        before = _disk(path)
        sink.merge_mirror(None, path, TABLE, _changes({(i * (rows // 100), 0): "new" for i in range(100)}), "app", 1)
        written[rows] = _disk(path) - before
    assert written[40_000] < 2 * written[2_000], written


def _disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


@pytest.mark.parametrize("layout", [sink.COPY_ON_WRITE, sink.MERGE_ON_READ])
def test_recovery_reads_the_change_feed_across_a_vacuum(tmp_path, layout):
    """What a restart reads (the change feed after the version its snapshot reflects) survives a
    VACUUM at retention 0 when maintenance is told that version; a VACUUM told nothing removes
    the change data of those versions, and the reader then fails rather than answer short."""
    path = sink.ensure_mirror(None, sink.Lake(tmp_path / "a"), TABLE, layout)
    at_snap = dict(_batches(path, 6))
    snap_version = sink.latest_version(None, path)  # a state snapshot reflects this version
    _batches(path, 8, start=6, model=dict(at_snap))
    latest = sink.latest_version(None, path)
    feed = _feed(path, snap_version, latest)
    assert feed
    m = Maintenance(MaintenanceConfig(retention_hours=0, compact_min_files=2), needed=lambda p: snap_version,
                    say=lambda line: None)
    acts = m.maintain(path)  # compaction, then a VACUUM that keeps the needed versions
    assert _feed(path, snap_version, latest) == feed
    if layout == sink.MERGE_ON_READ:  # exactly: what the versions before it alone read went
        assert "vacuum" in {a.kind for a in acts}
        assert _rows(sink.read_version(None, path, snap_version)) == at_snap  # that version still reads
        assert dv.open_table(path).vacuum(0, keep_from=-1) == []  # from before the first commit: all kept
        time.sleep(0.05)  # the same VACUUM told no version: the change data goes
        dv.open_table(path).vacuum(0)
        with pytest.raises(Exception):
            _feed(path, snap_version, latest)


def test_a_feature_we_do_not_implement_is_refused(tmp_path):
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    _batches(path, 2)
    t = dv.open_table(path)
    proto = dict(t.snapshot().protocol, writerFeatures=dv.WRITER_FEATURES + ["rowTracking"])
    t.commit([{"protocol": proto}], "SET TBLPROPERTIES")  # as another engine would enable it
    with pytest.raises(dv.UnsupportedFeature, match="rowTracking"):
        _batches(path, 1, start=2)
    assert sink.read_table(path).num_rows > 0  # a writer feature does not stop reading
