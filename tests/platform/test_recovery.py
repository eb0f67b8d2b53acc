"""Exactly once across SIGKILL: the job process is killed inside batches and restarted.

The kill is a real SIGKILL of the `ivmstream run` process (IVMSTREAM_KILL_AT names the step
and batch), at a different step each time: after collecting, between two mirror commits,
after the quarantine write, and after the batch record but before Spark's own commit.
"""

from __future__ import annotations

import signal

import pytest

from connectors.kafka import create_topics
from tests.jobproc import run_job_process
from devstack.producer import CdcProducer
from core.config import dump_toml
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _run(config_path, kill_at: str | None, timeout=300) -> int:
    return run_job_process(config_path, kill_at, timeout)[0]


def test_sigkill_inside_batches_loses_nothing_and_counts_nothing_twice(kafka_broker, spark, tmp_path):
    data, cfg = job_config(tmp_path, kafka_broker.bootstrap, name="recov", max_offsets=50, topic_prefix="recov")
    cfg_file = tmp_path / "job.toml"
    cfg_file.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    hist = History(cfg, seed=7)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 170)

    for kill_at in ("mirror.items:0", "collect:1", "quarantine:1", "batch_record:2"):
        assert _run(cfg_file, kill_at) == -signal.SIGKILL
    assert _run(cfg_file, None) == 0
    prod.close()

    def mirror(t, key):
        return [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / t)).orderBy(*key).collect()]

    def norm(rows):
        return [{k: (v.replace(tzinfo=None) if k == "ts" and v is not None else v) for k, v in r.items()} for r in rows]

    assert norm(mirror("items", ["id"])) == norm(hist.expected_rows("items"))
    assert norm(mirror("pairs", ["a", "b"])) == norm(hist.expected_rows("pairs"))

    batches = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    ids = [b["batch_id"] for b in batches]
    assert len(ids) == len(set(ids)) and len(ids) >= 3  # the last kill was after batch 2's record
    assert sum(b["records_in"] for b in batches) == prod.sent  # nothing lost, nothing twice

    quarantine = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    assert sorted(r.error_code for r in quarantine) == sorted(hist.bad)

    # one MERGE commit per batch that changed the table: a replay committed nothing again
    from delta.tables import DeltaTable

    for t in ("items", "pairs"):
        merges = DeltaTable.forPath(spark, str(cfg.lake_root / "mirrors" / t)).history().where("operation = 'MERGE'").count()
        versions = {b["mirror_versions"][t] for b in batches}
        assert merges == len(versions - {0})


def test_sigkill_with_toast_key_changes_and_truncates(kafka_broker, spark, tmp_path):
    """The same, on a history with what real Debezium sends beyond upserts: updates with the
    TOAST placeholder, primary-key changes (d, tombstone, c with the old key in a header and a
    placeholder) and truncates, on one-partition topics as `connect register` makes them. One
    kill lands inside a mirror MERGE (armed at its start, fired 300 ms in)."""
    data, cfg = job_config(tmp_path, kafka_broker.bootstrap, name="recdbz", max_offsets=40, topic_prefix="recdbz")
    cfg_file = tmp_path / "job.toml"
    cfg_file.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=1)
    hist = History(cfg, seed=21)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 160, debezium_kinds=True)

    for kill_at in ("mirror.begin.items:1@300", "quarantine:2"):
        assert _run(cfg_file, kill_at) == -signal.SIGKILL
    assert _run(cfg_file, None) == 0
    prod.close()

    def mirror(t, key):
        return [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / t)).orderBy(*key).collect()]

    def norm(rows):
        return [{k: (v.replace(tzinfo=None) if k == "ts" and v is not None else v) for k, v in r.items()} for r in rows]

    assert norm(mirror("items", ["id"])) == norm(hist.expected_rows("items"))
    assert norm(mirror("pairs", ["a", "b"])) == norm(hist.expected_rows("pairs"))
    batches = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    assert len({b["batch_id"] for b in batches}) == len(batches)
    assert sum(b["records_in"] for b in batches) == prod.sent
    import json

    kept = sum(json.loads(b["metrics"]).get("mirror", {}).get("items", {}).get("toast_values_kept", 0) for b in batches)
    truncated = any(json.loads(b["metrics"]).get("mirror", {}).get("items", {}).get("truncated") for b in batches)
    assert kept > 0 and truncated
