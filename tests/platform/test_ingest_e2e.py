"""End to end: Debezium records through the real Kafka broker into the real job and Delta."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from connectors import delta_sink as sink
from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from streaming_app.runner import run_job
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _mirror(spark, cfg, table):
    df = spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table))
    key = ["id"] if table == "items" else ["a", "b"]
    return [r.asDict() for r in df.orderBy(*key).collect()]


def _norm(rows):
    # Spark returns naive UTC datetimes (session time zone UTC); compare on that basis.
    out = []
    for r in rows:
        r = dict(r)
        if r.get("ts") is not None and getattr(r["ts"], "tzinfo", None) is not None:
            r["ts"] = r["ts"].replace(tzinfo=None)
        out.append(r)
    return out


@pytest.mark.parametrize("decode", ["driver", "executors"])
def test_cdc_to_mirrors_quarantine_and_batches(kafka_broker, spark, tmp_path, decode):
    _, cfg = job_config(tmp_path, kafka_broker.bootstrap, name=f"e2e_{decode}", max_offsets=120,
                        topic_prefix=f"e2e_{decode}")
    cfg = dataclasses.replace(cfg, decode=decode)
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    hist = History(cfg, seed=1)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 300)

    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    assert res.totals["batches"] >= 2  # maxOffsetsPerTrigger split the backlog

    for table in ("items", "pairs"):
        assert _norm(_mirror(spark, cfg, table)) == _norm(hist.expected_rows(table))

    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    assert collections.Counter(r.error_code for r in q) == collections.Counter(hist.bad)
    assert all(r.reason and r.value is not None or r.error_code == "DATA_INVALID_JSON" for r in q)
    assert len({(r.topic, r.partition, r.offset) for r in q}) == len(q)

    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    assert sorted(b.batch_id for b in batches) == list(range(len(batches)))
    # every Kafka record was counted exactly once over all batches
    assert sum(b.records_in for b in batches) == prod.sent
    assert sum(b.tombstones for b in batches) == hist.tombstones

    # a second run on the same checkpoint picks up only the new records
    hist.send(prod, 120)
    run_job(cfg, available_now=True, spark=spark, quiet=True)
    for table in ("items", "pairs"):
        assert _norm(_mirror(spark, cfg, table)) == _norm(hist.expected_rows(table))
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    assert sum(b.records_in for b in batches) == prod.sent
    prod.close()

    # the same rows through delta-rs, without Spark
    from deltalake import DeltaTable

    dl = sink.read_table(str(cfg.lake_root / "mirrors" / "items")).sort_by("id").to_pylist()
    assert _norm(dl) == _norm(hist.expected_rows("items"))
    dq = DeltaTable(str(cfg.lake_root / "quarantine")).to_pyarrow_table()
    assert dq.num_rows == len(hist.bad)
