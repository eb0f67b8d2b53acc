"""Spark reads the merge-on-read mirrors ``connectors.dv_table`` writes: the rows, the change data
feed, time travel, and the table after our checkpoint (its JSON commits gone), compaction and
VACUUM, equal to what dv_table reads and to the replay. Spark is the reference reader of Delta's
deletion vectors; the README's Spark SQL recipes run on these tables."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from collections import Counter

import pytest

from connectors import delta_sink as sink
from connectors import dv_table as dv
from streaming_app.settings import parse_config

pytestmark = [pytest.mark.spark]

TABLE = parse_config({"job": {"name": "m"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                      "tables": [{"name": "t", "topic": "t", "primary_key": ["id"],
                                  "columns": {"id": "long", "n": "int", "s": "string", "d": "decimal(12,3)",
                                              "x": "double", "day": "date", "ts": "timestamp", "ok": "boolean"}}]}
                     ).tables[0]


def _row(i: int, rnd: random.Random) -> dict:
    return {"id": i, "n": rnd.randrange(-5, 5), "s": rnd.choice([None, "", "a", "ü"]) ,
            "d": decimal.Decimal(rnd.randrange(-10**6, 10**6)) / 1000, "x": rnd.choice([0.5, -1e300, None]),
            "day": dt.date(2020, 1, 1) + dt.timedelta(days=rnd.randrange(900)),
            "ts": dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=rnd.randrange(10**6)),
            "ok": rnd.random() < 0.5}


def _spark_rows(spark, path: str, version: int | None = None) -> list:
    r = spark.read.format("delta")
    if version is not None:
        r = r.option("versionAsOf", version)
    return sorted(_norm(x.asDict()) for x in r.load(path).collect())


def _norm(r: dict) -> tuple:
    return tuple((k, v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v) for k, v in sorted(r.items()))


def _ours(path: str, version: int | None = None) -> list:
    return sorted(_norm(r) for r in dv.DVTable(path).read(version).to_pylist())


def test_spark_reads_what_dv_table_writes(spark, tmp_path):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    path = sink.ensure_mirror(None, sink.Lake(tmp_path), TABLE, sink.MERGE_ON_READ)
    rnd = random.Random(5)
    model: dict = {}
    for b in range(10):
        final = {}
        for _ in range(2000 if b == 0 else 150):
            i = rnd.randrange(3000)
            final[i] = None if (i in model and rnd.random() < 0.3) else _row(i, rnd)
        if b == 6:
            model.clear()
        for i, r in final.items():
            if r is None:
                model.pop(i, None)
            else:
                model[i] = r
        sink.merge_mirror(None, path, TABLE, sink.mirror_changes_frame(TABLE, {(i,): r for i, r in final.items()}),
                          "app", b, truncate=b == 6)
    version = dv.open_table(path).snapshot().version
    expected = sorted(_norm(r) for r in model.values())
    assert _spark_rows(spark, path) == expected == _ours(path)
    for v in (2, 5, 7):
        assert _spark_rows(spark, path, v) == _ours(path, v)

    feed = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
            .option("endingVersion", version).load(path).collect())
    theirs = Counter(_norm({k: v for k, v in r.asDict().items() if k != "_commit_timestamp"}) for r in feed)
    ours = Counter(_norm(r) for r in dv.DVTable(path).changes(0, version).to_pylist())
    assert theirs == ours and sum(theirs.values()) > 2000

    t = dv.open_table(path)
    t.checkpoint()
    t.cleanup_log(0)  # Spark now starts from our checkpoint
    assert _spark_rows(spark, path) == expected
    t.compact(target_bytes=1 << 20, small_bytes=1 << 19, min_small=2)
    t.vacuum(0)
    assert _spark_rows(spark, path) == expected == _ours(path)
    n = spark.sql(f"SELECT count(*) AS n FROM delta.`{path}`").first().n
    assert n == len(model)
