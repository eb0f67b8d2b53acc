"""The job's appends to its output tables (``delta_sink.append_small``) go through
``connectors.dv_table``'s log writer (a parquet file, its add and txn actions; the log followed by
probing, not listed): delta-rs and Spark read what was appended, a replayed batch is skipped,
the change feed sees the appends, maintenance keeps working, and the table stays a plain Delta
table (no deletion vectors)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction

from connectors import delta_sink as sink
from connectors import dv_table as dv
from connectors import object_store as store
from connectors.maintenance import Maintenance
from core.config import MaintenanceConfig

DDL = ("id BIGINT, n INT, s STRING, d DECIMAL(12,3), x DOUBLE, day DATE, ts TIMESTAMP, ok BOOLEAN, "
       "b BINARY, tags ARRAY<INT>")


def _rows(batch: int, n: int = 3) -> pa.Table:
    ids = [batch * 100 + i for i in range(n)]
    return pa.table({
        "id": pa.array(ids, pa.int64()), "n": pa.array([i % 7 - 3 for i in ids], pa.int32()),
        "s": [None if i % 5 == 0 else f"s{i}ü" for i in ids],
        "d": pa.array([decimal.Decimal(i) / 1000 for i in ids], pa.decimal128(12, 3)),
        "x": [None if i % 4 == 0 else i / 3 for i in ids],
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 300) for i in ids], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in ids],
                       pa.timestamp("us", tz="UTC")),
        "ok": [i % 2 == 0 for i in ids], "b": [bytes([i % 256]) * 3 for i in ids],
        "tags": pa.array([[i, None] if i % 3 else [] for i in ids], pa.list_(pa.int32())),
    })


def _table(tmp_path: Path, name: str = "out", cdf: bool = False) -> str:
    path = str(tmp_path / name)
    sink.ensure_table(None, path, DDL, cdf=cdf)
    return path


def _sorted(t: pa.Table) -> list:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def _engines(path: str) -> list[str]:
    """The engine of each commit's commitInfo, oldest first."""
    out = []
    for f in sorted(Path(path, "_delta_log").glob("*.json")):
        info = [json.loads(x)["commitInfo"] for x in f.read_text().splitlines() if '"commitInfo"' in x]
        out.append(info[0].get("engineInfo", "") if info else "")
    return out


def test_appends_read_back_by_delta_rs_and_stay_a_plain_table(tmp_path):
    path = _table(tmp_path)
    protocol = store.rs_table(path).protocol()
    appended = [_rows(b) for b in range(4)]
    for b, t in enumerate(appended):
        sink.append_small(None, path, t, "app", b)
    engines = _engines(path)
    assert engines[1:] == [dv.ENGINE] * 4, engines  # the log writer wrote them, not delta-rs
    dt_ = store.rs_table(path)
    assert dt_.version() == 4
    assert _sorted(dt_.to_pyarrow_table()) == _sorted(pa.concat_tables(appended))
    p = dt_.protocol()
    assert (p.min_reader_version, p.min_writer_version, p.reader_features, p.writer_features) == \
        (protocol.min_reader_version, protocol.min_writer_version, protocol.reader_features, protocol.writer_features)
    assert not sink.has_deletion_vectors(path)
    assert dt_.transaction_version("app") == 3
    # delta-rs keeps writing the table after our commits (its own append, then its MERGE)
    store.rs_write(path, _rows(9), mode="append")
    dt_ = store.rs_table(path)
    dt_.merge(_rows(0).slice(0, 1), "t.id = s.id", source_alias="s", target_alias="t") \
        .when_matched_delete().execute()
    assert sorted(store.rs_table(path).to_pyarrow_table().column("id").to_pylist()) == \
        sorted(pa.concat_tables(appended[1:] + [_rows(9)]).column("id").to_pylist() + [1, 2])
    # and the log writer follows delta-rs's commits (it probes the versions they took)
    sink.append_small(None, path, _rows(10), "app", 10)
    assert store.rs_table(path).version() == 7 and _engines(path)[-1] == dv.ENGINE
    # the file's statistics let delta-rs skip it
    adds = sink.file_actions(path)
    i = adds["path"].index(next(p for p in adds["path"] if p in Path(path, "_delta_log", f"{7:020d}.json").read_text()))
    assert (adds["num_records"][i], adds["min.id"][i], adds["max.id"][i]) == (3, 1000, 1002)


def test_replayed_batch_is_skipped(tmp_path):
    path = _table(tmp_path)
    sink.append_small(None, path, _rows(1), "app", 5)
    v = store.rs_table(path).version()
    sink.append_small(None, path, _rows(2), "app", 5)  # the same batch replayed, other rows
    sink.append_small(None, path, _rows(3), "app", 4)  # an older batch
    assert store.rs_table(path).version() == v
    sink.append_small(None, path, _rows(4), "other", 5)  # another app's txn is its own
    # a batch delta-rs committed (the previous writer of these tables) is skipped too
    store.rs_write(path, _rows(6), mode="append",
                   commit_properties=CommitProperties(app_transactions=[Transaction(app_id="app", version=6)]))
    sink.append_small(None, path, _rows(7), "app", 6)
    # and in a new process, after a delta-rs checkpoint and log cleanup (the log read from it)
    store.rs_table(path).create_checkpoint()
    for f in Path(path, "_delta_log").glob("0000000000000000000[0-2].json"):
        f.unlink()
    dv.drop_caches()
    sink.append_small(None, path, _rows(8), "app", 6)
    sink.append_small(None, path, _rows(9), "app", 7)
    assert sink.done_before(path, "app", 7) and not sink.done_before(path, "app", 8)
    ids = {i // 100 for i in store.rs_table(path).to_pyarrow_table().column("id").to_pylist()}
    assert ids == {1, 4, 6, 9}


def test_change_feed_sees_appends(tmp_path):
    path = _table(tmp_path, cdf=True)
    for b in range(3):
        sink.append_small(None, path, _rows(b, 2), "app", b)
    t = sink.read_changes(None, path, 0, 3, ["id", "s"], version_column="v")
    got = sorted(zip(t.column("id").to_pylist(), t.column(sink.WEIGHT).to_pylist(), t.column("v").to_pylist()))
    assert got == [(0, 1, 1), (1, 1, 1), (100, 1, 2), (101, 1, 2), (200, 1, 3), (201, 1, 3)]
    t = sink.read_changes(None, path, 1, 3, ["id"], where="id >= 101 AND id < 201")
    assert sorted(t.column("id").to_pylist()) == [101, 200]


def test_partitioned_table_goes_through_delta_rs(tmp_path):
    path = str(tmp_path / "parts")
    sink.ensure_table(None, path, "id BIGINT, p STRING", partition_by=["p"])
    sink.append_small(None, path, pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]}), "app", 0)
    sink.append_small(None, path, pa.table({"id": pa.array([3], pa.int64()), "p": ["a"]}), "app", 0)
    assert sorted(store.rs_table(path).to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    assert dv.ENGINE not in _engines(path)
    with pytest.raises(dv.UnsupportedFeature, match="partition"):
        dv.open_table(path).append(pa.table({"id": pa.array([3], pa.int64()), "p": ["a"]}))


def test_maintenance_of_an_appended_table(tmp_path):
    path = _table(tmp_path, cdf=True)
    appended = [_rows(b, 2) for b in range(12)]
    for b, t in enumerate(appended):
        sink.append_small(None, path, t, "app", b)
    feed = sink.read_changes(None, path, 0, 12, ["id"])
    m = Maintenance(MaintenanceConfig(compact_min_files=4, retention_hours=0, checkpoint_every=5))
    kinds = [a.kind for a in m.maintain(path)]
    assert kinds[:1] == ["compact"] and "vacuum" in kinds and "checkpoint" in kinds, kinds
    dt_ = store.rs_table(path)
    assert len(dt_.file_uris()) == 1
    assert _sorted(dt_.to_pyarrow_table()) == _sorted(pa.concat_tables(appended))
    # vacuum took the appended files the compaction replaced; the checkpoint is there
    on_disk = {p.name for p in Path(path).glob("*.parquet")}
    assert on_disk == {u.split("/")[-1] for u in dt_.file_uris()}
    assert Path(path, "_delta_log", "_last_checkpoint").exists()
    # appends go on after maintenance, in this process and in a new one (from the checkpoint)
    sink.append_small(None, path, _rows(20, 1), "app", 12)
    dv.drop_caches()
    sink.append_small(None, path, _rows(21, 1), "app", 13)
    sink.append_small(None, path, _rows(22, 1), "app", 13)
    assert _engines(path)[-1] == dv.ENGINE
    assert sorted(store.rs_table(path).to_pyarrow_table().column("id").to_pylist()) == \
        sorted(pa.concat_tables(appended).column("id").to_pylist() + [2000, 2100])
    # the writer's snapshot keeps the live files only, not the compacted files' remove actions
    snap = dv.open_table(path).snapshot()
    assert len(snap.files) == 3 and not snap.tombstones
    v = store.rs_table(path).version()
    t = sink.read_changes(None, path, v - 2, v, ["id"])
    assert sorted(t.column("id").to_pylist()) == [2000, 2100]
    assert feed.num_rows == 24


@pytest.mark.spark
def test_spark_reads_the_appends(spark, tmp_path):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    path = _table(tmp_path, cdf=True)
    appended = [_rows(b) for b in range(3)]
    for b, t in enumerate(appended):
        sink.append_small(None, path, t, "app", b)
    assert _engines(path)[1:] == [dv.ENGINE] * 3

    def norm(r: dict) -> dict:
        return {k: v.replace(tzinfo=None) if isinstance(v, dt.datetime) else (bytes(v) if isinstance(v, bytearray) else v)
                for k, v in r.items()}

    want = sorted((norm(r) for r in pa.concat_tables(appended).to_pylist()), key=lambda r: r["id"])
    got = sorted((norm(r.asDict()) for r in spark.read.format("delta").load(path).collect()), key=lambda r: r["id"])
    assert got == want
    cdf = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
           .option("endingVersion", 3).load(path).select("id", "_change_type", "_commit_version").collect())
    assert sorted((r.id, r._change_type, r._commit_version) for r in cdf) == \
        sorted((r["id"], "insert", b + 1) for b, t in enumerate(appended) for r in t.to_pylist())
    # Spark's own idempotent append skips a batch the log writer committed, and the reverse
    sink.append(spark, path, _rows(7), "app", 2)
    sink.append(spark, path, _rows(8), "app", 3)
    sink.append_small(None, path, _rows(9), "app", 3)
    ids = {r.id // 100 for r in spark.read.format("delta").load(path).select("id").collect()}
    assert ids == {0, 1, 2, 8}


@pytest.mark.s3
def test_appends_on_an_s3_lake(s3_server, tmp_path):
    from core.config import S3Config

    store.use(S3Config(**s3_server.s3_section()))
    try:
        path = store.join(s3_server.lake(f"append-{tmp_path.name}"), "out")
        sink.ensure_table(None, path, DDL, cdf=True)
        for b in range(3):
            sink.append_small(None, path, _rows(b), "app", b)
        sink.append_small(None, path, _rows(7), "app", 2)  # replayed: skipped
        dt_ = store.rs_table(path)
        assert dt_.version() == 3 and dt_.transaction_version("app") == 2
        assert _sorted(dt_.to_pyarrow_table()) == _sorted(pa.concat_tables([_rows(b) for b in range(3)]))
        info = dt_.history(1)[0]
        assert info.get("engineInfo") == dv.ENGINE, info
        t = sink.read_changes(None, path, 1, 3, ["id"])
        assert sorted(t.column("id").to_pylist()) == [100, 101, 102, 200, 201, 202]
    finally:
        store.use(None)


# -- merge on small output tables: copy-on-write by the log writer ------------------------------

KEYED_DDL = "q STRING, t STRING, n BIGINT, frag ARRAY<INT>, m MAP<STRING, BIGINT>"


def _keyed(items: dict, deleted: set = frozenset()) -> pa.Table:
    """Rows keyed on (q, t) (the ``sketches`` table's shape), with a ``__deleted`` flag."""
    keys = sorted(items) + sorted(deleted)
    return pa.table({
        "q": [k[0] for k in keys], "t": [k[1] for k in keys],
        "n": pa.array([items.get(k, 0) for k in keys], pa.int64()),
        "frag": pa.array([[items.get(k, 0) % 5, 1] for k in keys], pa.list_(pa.int32())),
        "m": pa.array([[("x", items.get(k, 0))] for k in keys], pa.map_(pa.string(), pa.int64())),
        "__deleted": [k in deleted for k in keys]})


def _state(path: str) -> dict:
    t = store.rs_table(path).to_pyarrow_table()
    return {(r["q"], r["t"]): (r["n"], r["frag"], dict(r["m"])) for r in t.to_pylist()}


def _model_state(model: dict) -> dict:
    return {k: (n, [n % 5, 1], {"x": n}) for k, n in model.items()}


def test_small_merge_is_copy_on_write_with_exact_change_feed(tmp_path):
    path = str(tmp_path / "keyed")
    sink.ensure_table(None, path, KEYED_DDL, cdf=True)
    model: dict = {}
    feed_model: list = []
    import random

    rnd = random.Random(3)
    for b in range(12):
        items, gone = {}, set()
        for _ in range(15):
            k = (f"q{rnd.randrange(4)}", f"t{rnd.randrange(6)}")
            if k in model and rnd.random() < 0.3:
                gone.add(k)
                items.pop(k, None)
            else:
                items[k] = rnd.randrange(1000)
                gone.discard(k)
        for k in gone:
            feed_model.append((b + 1, k, model.pop(k), "delete"))
        for k, n in items.items():
            if k in model:
                feed_model += [(b + 1, k, model[k], "update_preimage"), (b + 1, k, n, "update_postimage")]
            else:
                feed_model.append((b + 1, k, n, "insert"))
            model[k] = n
        sink.merge(None, path, _keyed(items, gone), ["q", "t"], app_id="app", batch_id=b, deleted="__deleted")
        assert _state(path) == _model_state(model), b
    assert _engines(path)[1:] == [dv.ENGINE] * 12
    assert not sink.has_deletion_vectors(path)
    # a replayed batch is skipped
    sink.merge(None, path, _keyed({("q0", "t0"): -1}), ["q", "t"], app_id="app", batch_id=11, deleted="__deleted")
    assert store.rs_table(path).version() == 12 and _state(path) == _model_state(model)
    # the change feed, read by delta-rs: exactly the model's changes
    t = store.rs_table(path)
    feed = pa.RecordBatchReader.from_stream(t.load_cdf(starting_version=1, ending_version=12)).read_all()
    got = sorted((r["_commit_version"], (r["q"], r["t"]), r["n"], r["_change_type"]) for r in feed.to_pylist())
    assert got == sorted(feed_model)
    w = sink.read_changes(None, path, 0, 12, ["q", "t", "n"])
    assert sum(w.column(sink.WEIGHT).to_pylist()) == len(model)
    # delta-rs merges after ours and ours after delta-rs's, maintenance in between
    sink.merge(None, path, _keyed({("q9", "t9"): 9}), ["q", "t"], app_id="app", batch_id=12, deleted="__deleted",
               small=False)
    Maintenance(MaintenanceConfig(compact_min_files=2, retention_hours=0, checkpoint_every=2)).maintain(path)
    dv.drop_caches()
    sink.merge(None, path, _keyed({("q9", "t9"): 10}, {("q0", "t0")}), ["q", "t"], app_id="app", batch_id=13,
               deleted="__deleted")
    model[("q9", "t9")] = 10
    model.pop(("q0", "t0"), None)
    assert _state(path) == _model_state(model)
    assert _engines(path)[-1] == dv.ENGINE


def test_truncating_merge_and_a_table_without_change_feed(tmp_path):
    path = str(tmp_path / "plain")
    sink.ensure_table(None, path, "id BIGINT, v STRING", cdf=False)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    sink.merge(None, path, data, ["id"], app_id="app", batch_id=0)
    sink.merge(None, path, pa.table({"id": pa.array([2, 4], pa.int64()), "v": ["B", "d"]}), ["id"],
               app_id="app", batch_id=1, truncate=True)
    t = store.rs_table(path).to_pyarrow_table()
    assert sorted(zip(t.column("id").to_pylist(), t.column("v").to_pylist())) == [(2, "B"), (4, "d")]
    assert not list(Path(path).glob("_change_data/*"))  # no change feed on this table: no change-data files
    assert _engines(path)[1:] == [dv.ENGINE] * 2


@pytest.mark.spark
def test_spark_reads_a_copy_on_write_merge(spark, tmp_path):
    path = str(tmp_path / "keyed")
    sink.ensure_table(None, path, KEYED_DDL, cdf=True)
    sink.merge(None, path, _keyed({("a", "x"): 1, ("a", "y"): 2, ("b", "x"): 3}), ["q", "t"], app_id="app",
               batch_id=0, deleted="__deleted")
    sink.merge(None, path, _keyed({("a", "x"): 10, ("c", "z"): 4}, {("b", "x")}), ["q", "t"], app_id="app",
               batch_id=1, deleted="__deleted")
    assert _engines(path)[1:] == [dv.ENGINE] * 2
    rows = {(r.q, r.t): (r.n, list(r.frag), dict(r.m)) for r in spark.read.format("delta").load(path).collect()}
    assert rows == _model_state({("a", "x"): 10, ("a", "y"): 2, ("c", "z"): 4})
    cdf = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
           .option("endingVersion", 2).load(path).select("q", "t", "n", "_change_type", "_commit_version").collect())
    assert sorted((r._commit_version, r.q, r.t, r.n, r._change_type) for r in cdf) == sorted([
        (1, "a", "x", 1, "insert"), (1, "a", "y", 2, "insert"), (1, "b", "x", 3, "insert"),
        (2, "a", "x", 1, "update_preimage"), (2, "a", "x", 10, "update_postimage"), (2, "b", "x", 3, "delete"),
        (2, "c", "z", 4, "insert")])
    # Spark's own MERGE goes on after ours, and ours after it
    with sink.txn(spark, "app", 2):
        spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT 'a' AS q, 'y' AS t) s ON t.q = s.q AND t.t = s.t "
                  "WHEN MATCHED THEN DELETE")
    sink.merge(None, path, _keyed({("d", "d"): 5}), ["q", "t"], app_id="app", batch_id=2, deleted="__deleted")
    sink.merge(None, path, _keyed({("d", "d"): 6}), ["q", "t"], app_id="app", batch_id=3, deleted="__deleted")
    assert _state(path) == _model_state({("a", "x"): 10, ("c", "z"): 4, ("d", "d"): 6})
