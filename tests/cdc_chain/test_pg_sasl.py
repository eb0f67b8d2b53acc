"""Issue 42, secure Kafka end to end through Debezium: PostgreSQL -> the Debezium connector in a
Kafka Connect worker -> a SASL_SSL broker (SCRAM-SHA-512 over TLS) -> the job -> Delta.

As a user would: `ivmstream connect start --config job.toml` starts the worker with the job's
security settings (its own clients and the producers, consumers and admin client it makes),
`ivmstream connect register --config job.toml` creates the tables' topics through the secure
listener and registers the real connector, rows change in PostgreSQL, and the job reads
through SASL_SSL. Every mirror then equals its PostgreSQL table, value for value."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from core.config import dump_toml
from devstack.pg_history import TABLES, Workload, job_tables, mirror_mismatches
from devstack.process import free_port
from streaming_app.runner import run_job
from streaming_app.settings import load_config
from tests.cdc_chain.chain import wait_for_markers

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres]

CLI = [sys.executable, "-m", "streaming_app"]


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    # the passwords come from files: none in the environment the commands see
    env = {k: v for k, v in os.environ.items() if k not in ("IVMSTREAM_KAFKA_PASSWORD", "IVMSTREAM_DB_PASSWORD")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_debezium_through_a_sasl_ssl_broker_mirrors_equal_postgres(postgres, secure_kafka, spark, tmp_path):
    t0 = time.monotonic()
    database = "shop_sasl"
    postgres.create_database(database)
    work = Workload(postgres, database, seed=42)
    work.setup()
    (tmp_path / "kafka.pw").write_text(secure_kafka.password + "\n")
    (tmp_path / "db.pw").write_text(postgres.password() + "\n")
    connect_port = free_port()
    data = {
        "job": {"name": "pg_sasl", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ck")},
        "kafka": {**secure_kafka.section, "password_file": "kafka.pw"},
        "spark": {"master": "local[2]", "ui": False},
        "debezium": {"host": "127.0.0.1", "port": postgres.port, "database": database, "user": "postgres",
                     "password_file": "db.pw", "topic_prefix": "sasl", "connector_name": "pg_sasl",
                     "slot_name": "slot_sasl", "publication_name": "pub_sasl",
                     "connect_url": f"http://127.0.0.1:{connect_port}",
                     "properties": {"poll.interval.ms": 50}},  # Debezium's 500 ms default only waits
        "tables": job_tables("sasl"),
    }
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    cfg = load_config(path)
    home = ["--port", str(connect_port), "--dir", str(tmp_path / "connect")]
    r = cli("connect", "start", "--config", str(path), *home)
    try:
        assert r.returncode == 0 and f"broker {secure_kafka.bootstrap}" in r.stdout, r.stdout + r.stderr
        worker = (tmp_path / "connect" / "connect-distributed.properties").read_text()
        assert "admin.security.protocol=SASL_SSL" in worker and "producer.sasl.mechanism=SCRAM-SHA-512" in worker
        r = cli("connect", "register", "--config", str(path))
        assert r.returncode == 0 and "RUNNING" in r.stdout, r.stdout + r.stderr
        assert secure_kafka.password not in r.stdout + r.stderr and postgres.password() not in r.stdout + r.stderr

        work.initial(accounts=20, orders=8, nodes=8)
        work.churn(40)
        work.markers()
        wait_for_markers(cfg, timeout_s=120)  # a consumer through SASL_SSL too
        res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    finally:
        stop = cli("connect", "stop", *home)
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stdout + stop.stderr

    rows = values = 0
    for table in TABLES:
        cols = list(TABLES[table][1])
        mirror = (spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table))
                  .select(*[f"`{c}`" for c in cols]).toArrow().to_pylist())
        n, v, bad = mirror_mismatches(postgres, database, table, mirror)
        assert not bad, f"{table}: {len(bad)} differences with PostgreSQL, e.g. {bad[:3]}"
        rows, values = rows + n, values + v
    assert rows > 30 and res.totals["records"] >= rows and res.totals["quarantined"] == 0, (rows, res.totals)
    print(f"\n[pg over SASL_SSL] {res.totals['records']} records in {res.totals['batches']} batches; history "
          f"{work.steps}; {rows} rows / {values} values equal PostgreSQL; {time.monotonic() - t0:.0f} s")
