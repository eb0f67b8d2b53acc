"""Issue 42, blocker 5: what the README's Ordering section says. The topics the project creates
(`ivmstream produce`, the demos, `connect register`) have one partition, and on them a TRUNCATE
and the two halves of a primary-key change, read in one batch amid other rows, leave the mirror
exactly as the source; a job whose table reads a topic of more partitions says so at start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient

from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from core.config import dump_toml
from streaming_app import preflight
from streaming_app.runner import run_job
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _partitions(bootstrap: str, topics: list[str]) -> dict[str, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {d["name"]: len(d["partitions"]) for d in admin.describe_topics(topics)}
    finally:
        admin.close()


def test_one_partition_topics_keep_truncates_and_key_changes_exact(kafka_broker, spark, tmp_path):
    data, cfg = job_config(tmp_path, kafka_broker.bootstrap, name="ordering", max_offsets=100_000,
                           topic_prefix=f"ord{tmp_path.name[-8:]}")
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    for table in ("items", "pairs"):  # the README's way to create a table's topic
        r = subprocess.run([sys.executable, "-m", "streaming_app", "produce", "--config", str(path), "--table", table,
                            "--count", "0"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert _partitions(kafka_broker.bootstrap, cfg.topics) == {t: 1 for t in cfg.topics}

    hist = History(cfg, seed=42)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 400, debezium_kinds=True)  # truncates, key changes, TOAST placeholders, bad records
    prod.close()
    notes: list[str] = []
    preflight.check_topics(cfg, say=notes.append)
    assert notes == []
    res = run_job(cfg, available_now=True, spark=spark, quiet=True)  # everything in one batch
    assert res is not None

    def mirror(t, key):
        return [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / t))
                .orderBy(*key).collect()]

    def norm(rows):
        return [{k: (v.replace(tzinfo=None) if k == "ts" and v is not None else v) for k, v in r.items()}
                for r in rows]

    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    assert len(batches) == 1 and batches[0].records_in == prod.sent
    assert json.loads(batches[0].metrics)["mirror"]["items"]["truncated"]  # a TRUNCATE amid the batch
    assert norm(mirror("items", ["id"])) == norm(hist.expected_rows("items"))
    assert norm(mirror("pairs", ["a", "b"])) == norm(hist.expected_rows("pairs"))


def test_a_topic_of_two_partitions_is_said_at_start(kafka_broker, tmp_path):
    _, cfg = job_config(tmp_path, kafka_broker.bootstrap, topic_prefix=f"two{tmp_path.name[-8:]}")
    create_topics(kafka_broker.bootstrap, [cfg.topics[0]], partitions=2)
    create_topics(kafka_broker.bootstrap, [cfg.topics[1]], partitions=1)
    notes: list[str] = []
    preflight.check_topics(cfg, say=notes.append)
    assert notes == [f"note: topic {cfg.topics[0]} has 2 partitions: a TRUNCATE and a primary-key change are "
                     "applied exactly only on a topic of one partition (README: Ordering)"]
