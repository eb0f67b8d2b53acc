"""The CLI against a real broker: broker start/status/stop, and produce (file, random, edges)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.config import dump_toml
from devstack.kafka_broker import EmbeddedBroker
from devstack.process import free_port

pytestmark = [pytest.mark.kafka]


def _cli(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "streaming_app", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_broker_start_status_stop(tmp_path):
    port, home = free_port(), tmp_path / "kafka"
    r = _cli("broker", "start", "--port", str(port), "--dir", str(home))
    assert r.returncode == 0 and f"127.0.0.1:{port}" in r.stdout, r.stdout + r.stderr
    try:
        st = _cli("broker", "status", "--port", str(port), "--dir", str(home))
        assert st.returncode == 0 and json.loads(st.stdout)["running"] is True
        again = _cli("broker", "start", "--port", str(port), "--dir", str(home))  # idempotent
        assert again.returncode == 0
    finally:
        stop = _cli("broker", "stop", "--port", str(port), "--dir", str(home))
    assert stop.returncode == 0 and "stopped" in stop.stdout
    st = _cli("broker", "status", "--port", str(port), "--dir", str(home))
    assert st.returncode == 1 and json.loads(st.stdout)["running"] is False
    # a restart keeps the formatted storage (and the controller's port)
    r = _cli("broker", "start", "--port", str(port), "--dir", str(home))
    assert r.returncode == 0, r.stderr
    assert _cli("broker", "stop", "--port", str(port), "--dir", str(home)).returncode == 0


def test_port_taken_is_a_clear_error(kafka_broker, tmp_path):
    r = _cli("broker", "start", "--port", str(kafka_broker.port), "--dir", str(tmp_path / "k2"))
    assert r.returncode == 2 and "already taken" in r.stderr and "Traceback" not in r.stderr


def _read_all(bootstrap, topic):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      consumer_timeout_ms=3000)
    parts = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    out = [json.loads(m.value) for m in c]
    c.close()
    return out


def test_produce_file_random_and_edges(kafka_broker, tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text(dump_toml({
        "kafka": {"bootstrap_servers": kafka_broker.bootstrap},
        "tables": [{"name": "sales", "topic": "cli.sales", "primary_key": "id",
                    "columns": {"id": "long", "brand": "string", "price": "long"}},
                   {"name": "edges", "topic": "cli.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long"}}]}))
    csv = tmp_path / "sales.csv"
    csv.write_text("id,brand,price\n1,Apple,1199\n2,HP,999\n")
    r = _cli("produce", "--config", str(cfg), "--table", "sales", "--file", str(csv))
    assert r.returncode == 0, r.stderr
    r = _cli("produce", "--config", str(cfg), "--table", "sales", "--count", "40", "--seed", "3")
    assert r.returncode == 0, r.stderr
    msgs = _read_all(kafka_broker.bootstrap, "cli.sales")
    assert len(msgs) == 42 and [m["op"] for m in msgs].count("r") == 2
    assert {m["after"]["brand"] for m in msgs if m["op"] == "r"} == {"Apple", "HP"}
    # the same seed gives the same stream: every generated change now appears exactly twice
    r2 = _cli("produce", "--config", str(cfg), "--table", "sales", "--count", "40", "--seed", "3")
    assert r2.returncode == 0, r2.stderr
    import collections

    stamps = ("ts_ms", "ts_us", "ts_ns", "source")  # times of sending differ between the two runs
    generated = [json.dumps({k: v for k, v in m.items() if k not in stamps}, sort_keys=True)
                 for m in _read_all(kafka_broker.bootstrap, "cli.sales") if m["op"] != "r"]
    counts = collections.Counter(generated)
    assert len(generated) == 80 and set(counts.values()) == {2}

    r = _cli("produce", "--config", str(cfg), "--table", "edges", "--edges-workload", "adversarial",
             "--edges", "40", "--updates", "20")
    assert r.returncode == 0, r.stderr
    edges = _read_all(kafka_broker.bootstrap, "cli.edges")
    assert len(edges) == 60 and {m["op"] for m in edges} <= {"c", "d"}

    bad = _cli("produce", "--config", str(cfg), "--table", "nope")
    assert bad.returncode == 2 and "no table named 'nope'" in bad.stderr
