"""Issue 42, replication factor: ``[kafka] replication_factor`` (1 for the one-broker dev stack,
3 in production) reaches every place the project creates topics: the tables' topics (`produce`,
`connect register`), Debezium's (``topic.creation.default.replication.factor``) and Kafka
Connect's internal ones; more copies than brokers is one line before a topic is made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from connectors.connect import connector_properties
from connectors.kafka import BrokerError, check_replication
from core.config import dump_toml
from devstack.kafka_connect import EmbeddedConnect
from streaming_app.settings import parse_config

TABLE = {"name": "items", "topic": "pg.public.items", "primary_key": "id", "columns": {"id": "long", "v": "string"}}
DEBEZIUM = {"connector": "postgres", "database": "shop", "topic_prefix": "pg", "password": "pw"}
STORAGE = ("config.storage.replication.factor", "offset.storage.replication.factor",
           "status.storage.replication.factor")


def test_default_is_one_and_three_reaches_debezium_and_the_connect_worker(tmp_path):
    default = parse_config({"debezium": DEBEZIUM, "tables": [TABLE]})
    assert default.kafka.replication_factor == 1
    assert connector_properties(default)["topic.creation.default.replication.factor"] == "1"
    cfg = parse_config({"kafka": {"replication_factor": 3}, "debezium": DEBEZIUM, "tables": [TABLE]})
    assert connector_properties(cfg)["topic.creation.default.replication.factor"] == "3"
    worker = EmbeddedConnect(tmp_path, replication_factor=cfg.kafka.replication_factor).worker_properties()
    assert [worker[k] for k in STORAGE] == ["3", "3", "3"]
    assert [EmbeddedConnect(tmp_path).worker_properties()[k] for k in STORAGE] == ["1", "1", "1"]


def test_more_copies_than_brokers_is_one_line():
    check_replication(3, 3, "b:9092")
    with pytest.raises(BrokerError, match=r"replication_factor = 3, but the cluster at b:9092 has 1 broker:") as e:
        check_replication(3, 1, "b:9092")
    assert "\n" not in str(e.value)


@pytest.mark.kafka
def test_produce_and_connect_start_refuse_more_copies_than_the_brokers(kafka_broker, tmp_path):
    """On the one-broker test broker: `produce` with replication_factor = 2 ends in one line and
    makes no topic; `connect start --config` ends in one line before the worker starts."""
    from kafka import KafkaAdminClient

    from devstack.process import free_port

    topic = f"rf.{tmp_path.name[-10:]}"
    data = {"kafka": {"bootstrap_servers": kafka_broker.bootstrap, "replication_factor": 2},
            "tables": [{**TABLE, "topic": topic}]}
    (tmp_path / "job.toml").write_text(dump_toml(data))
    (tmp_path / "items.csv").write_text("id,v\n1,a\n")
    cli = [sys.executable, "-m", "streaming_app"]
    r = subprocess.run([*cli, "produce", "--config", str(tmp_path / "job.toml"), "--table", "items",
                        "--file", str(tmp_path / "items.csv")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "replication_factor = 2, but the cluster at" in r.stderr and "has 1 broker" in r.stderr
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        assert topic not in admin.list_topics()
    finally:
        admin.close()
    r = subprocess.run([*cli, "connect", "start", "--config", str(tmp_path / "job.toml"), "--port", str(free_port()),
                        "--dir", str(tmp_path / "connect"), "--bootstrap-servers", kafka_broker.bootstrap],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "replication_factor = 2" in r.stderr and not (tmp_path / "connect" / "connect.pid").exists()
