"""Table maintenance on real Delta tables (delta-rs, no Spark): compaction keeps the rows and the
change feed, VACUUM keeps every version a reader needs, checkpoints follow the commit count."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from connectors import delta_sink as sink
from connectors import object_store as store
from connectors.maintenance import Maintenance
from core.config import MaintenanceConfig

DDL = "id BIGINT, v STRING"


def _table(tmp_path: Path, name: str = "t") -> str:
    path = str(tmp_path / name)
    sink.ensure_table(None, path, DDL, cdf=True)
    return path


def _upsert(path: str, ids, v: str, batch: int) -> None:
    data = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids]})
    sink.merge_small(None, path, data, ["id"], "app", batch)


def _rows(path: str, version: int | None = None) -> dict:
    t = store.rs_table(path, version=version).to_pyarrow_table()
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist()))


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def _files(path: str) -> set:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts}


def test_compaction_keeps_rows_and_change_feed(tmp_path):
    path = _table(tmp_path)
    for b in range(8):
        _upsert(path, range(b * 10, b * 10 + 10), "a", b)
    before, feed = _rows(path), sink.read_changes(None, path, 0, 8, ["id", "v"])
    lines = []
    m = Maintenance(MaintenanceConfig(compact_min_files=4, retention_hours=1000, checkpoint_every=100),
                    say=lines.append)
    acts = m.maintain(path)
    assert [a.kind for a in acts][:1] == ["compact"]
    assert len(store.rs_table(path).file_uris()) == 1
    assert _rows(path) == before
    # the compaction commit carries no data change: the feed of the batches is the same
    assert _sorted(sink.read_changes(None, path, 0, 8, ["id", "v"])).equals(_sorted(feed))
    assert sink.read_changes(None, path, 8, store.rs_table(path).version(), ["id", "v"]).num_rows == 0
    assert all(line.startswith("maintenance: ") for line in lines)


def test_vacuum_keeps_what_a_reader_needs(tmp_path):
    path = _table(tmp_path)
    for b in range(6):
        _upsert(path, [1, 2, 3], f"v{b}-", b)  # every batch rewrites the one file
    need = 3
    expect_at_need = _rows(path, need)
    feed_after_need = sink.read_changes(None, path, need, 6, ["id", "v"])
    m = Maintenance(MaintenanceConfig(retention_hours=0, checkpoint_every=100), needed=lambda p: need)
    assert m.retention_hours(path) >= 1  # stretched over the commits after the needed version
    m.maintain(path)
    assert _rows(path, need) == expect_at_need
    assert _sorted(sink.read_changes(None, path, need, 6, ["id", "v"])).equals(_sorted(feed_after_need))
    # with nothing needed and no retention, only the live file (and no change-data file) stays
    files_before = _files(path)
    Maintenance(MaintenanceConfig(retention_hours=0, checkpoint_every=100)).maintain(path)
    live = {u.split("/")[-1] for u in store.rs_table(path).file_uris()}
    assert {f.split("/")[-1] for f in _files(path)} == live
    assert len(_files(path)) < len(files_before)
    assert _rows(path) == {1: "v5-1", 2: "v5-2", 3: "v5-3"}


def test_checkpoint_after_enough_commits(tmp_path):
    path = _table(tmp_path)
    m = Maintenance(MaintenanceConfig(checkpoint_every=4, compact_min_files=1000))  # 3 commits: v0..v2
    for b in range(2):
        _upsert(path, [b], "x", b)
    assert not [a for a in m.maintain(path) if a.kind == "checkpoint"]
    for b in range(2, 5):
        _upsert(path, [b], "x", b)
    assert [a.kind for a in m.maintain(path)] == ["checkpoint"]
    assert (Path(path) / "_delta_log" / "_last_checkpoint").exists()
    assert _rows(path) == {b: f"x{b}" for b in range(5)}


def test_turns_go_round_the_tables(tmp_path):
    a, b = _table(tmp_path, "a"), _table(tmp_path, "b")
    for i in range(4):
        _upsert(a, [i], "x", i)
        _upsert(b, [i], "x", i)
    seen = []
    m = Maintenance(MaintenanceConfig(every_batches=2, checkpoint_every=1, compact_min_files=1000),
                    root=str(tmp_path), say=seen.append)
    for batch in range(8):
        m.after_batch(batch)
    assert [line.split()[2].rstrip(":") for line in seen] == ["a", "b"]  # batches 1 and 3; 5, 7 had nothing due


def test_disabled_does_nothing(tmp_path):
    a = _table(tmp_path, "a")
    for i in range(12):
        _upsert(a, [i], "x", i)
    m = Maintenance(MaintenanceConfig(enabled=False, every_batches=1, checkpoint_every=1), root=str(tmp_path))
    assert all(m.after_batch(i) == [] for i in range(5))
