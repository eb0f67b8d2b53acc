"""Issue 41's chain: PostgreSQL -> Debezium (Apicurio's Avro converter, Confluent wire format)
-> Kafka -> the job, with the schemas in a real registry (Apicurio, `ivmstream registry`).

The same seeded history as the JSON chain (tests/cdc_chain/test_postgres_e2e.py: inserts,
updates, TOASTed text left alone, primary-key changes, deletes, TRUNCATE, ADD and DROP
COLUMN, infinity and NaN) runs in a real PostgreSQL while a Debezium connector registered by
``connect register``'s properties ([debezium] encoding = "avro") captures it. After the job
drains, every mirror equals its PostgreSQL table value for value.
"""

from __future__ import annotations

import collections
import json
import time

import pytest

from connectors import avro as AV
from connectors.connect import connector_properties
from core.errors import DATA_NOT_REPRESENTABLE
from devstack.pg_history import TABLES, Workload, job_tables, mirror_mismatches
from streaming_app.runner import run_job
from streaming_app.settings import parse_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres, pytest.mark.registry]


def _config(tmp_path, pg, bootstrap, connect_url, registry_url, database):
    return parse_config({
        "job": {"name": "pg_avro", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ckpt"),
                "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 150},
        "spark": {"master": "local[2]", "ui": False},
        "debezium": {"host": "127.0.0.1", "port": pg.port, "database": database, "user": "postgres",
                     "password": pg.password(), "topic_prefix": "av", "connector_name": "pg_avro",
                     "slot_name": "slot_av", "publication_name": "pub_av", "connect_url": connect_url,
                     "encoding": "avro", "properties": {"poll.interval.ms": 50}},
        "registry": {"url": registry_url},
        "tables": job_tables("av"),
    })


def _wait_for_markers(cfg, timeout_s=180):
    """Until every table's topic holds its marker row (the workload's last change), read as Avro."""
    from kafka import KafkaConsumer

    pending = {t.topic for t in cfg.tables}
    c = KafkaConsumer(*pending, bootstrap_servers=cfg.kafka.bootstrap_servers, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=2000)
    deadline = time.time() + timeout_s
    try:
        while pending and time.time() < deadline:
            for msg in c:
                if msg.value:
                    doc, _ = AV.read(msg.value, cfg.registry)
                    after = doc.get("after") or {}
                    if -1 in (after.get("id"), after.get("order_id"), after.get("src")):
                        pending.discard(msg.topic)
                if not pending:
                    break
    finally:
        c.close()
    assert not pending, f"no marker on {pending} after {timeout_s}s"


def test_postgres_through_avro_mirrors_equal_postgres(postgres, kafka_broker, kafka_connect, registry_server,
                                                      spark, tmp_path, capsys):
    database = "shop_avro"
    postgres.create_database(database)
    work = Workload(postgres, database, seed=41)
    work.setup()
    cfg = _config(tmp_path, postgres, kafka_broker.bootstrap, kafka_connect.url, registry_server.url, database)
    props = connector_properties(cfg)
    assert props["value.converter"] == "io.apicurio.registry.utils.converter.AvroConverter"
    kafka_connect.register(cfg.debezium.connector_name, props)
    kafka_connect.wait_running(cfg.debezium.connector_name, timeout_s=120)
    steps = work.run()
    _wait_for_markers(cfg)

    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    rows = values = 0
    for table in TABLES:
        cols = list(TABLES[table][1])
        mirror = (spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table))
                  .select(*[f"`{c}`" for c in cols]).toArrow().to_pylist())
        r, v, bad = mirror_mismatches(postgres, database, table, mirror)
        assert not bad, f"{table}: {len(bad)} differences with PostgreSQL, e.g. {bad[:3]}"
        rows, values = rows + r, values + v

    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    codes = collections.Counter(r.error_code for r in q)
    assert set(codes) == {DATA_NOT_REPRESENTABLE}, (codes, [r.reason for r in q][:3])
    sc = spark.read.format("delta").load(str(cfg.lake_root / "schema_changes")).collect()
    assert [(r.table, r.column, r.change) for r in sc] == [("accounts", "legacy", "dropped")]
    metrics = [json.loads(b.metrics).get("mirror", {})
               for b in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    kept = sum(m.get("accounts", {}).get("toast_values_kept", 0) for m in metrics)
    assert kept >= 5 and any(m.get("lines", {}).get("truncated") for m in metrics)
    ids = sorted(sid for url, sid in AV.cached_ids() if url == registry_server.url)
    assert len(ids) >= 4  # a key and a value schema per table, and accounts' new value schemas after DDL
    with capsys.disabled():
        print(f"\n[pg chain avro] {res.totals['records']} records in {res.totals['batches']} batches; history {steps}; "
              f"{rows} rows / {values} values compared with PostgreSQL, 0 mismatches; TOASTed values kept {kept}; "
              f"quarantined {dict(codes)}; schema ids {ids}")
