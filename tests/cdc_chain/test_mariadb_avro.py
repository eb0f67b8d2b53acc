"""Issue 41's chain from MariaDB: Debezium's MySQL connector with Apicurio's Avro converter
(Confluent wire format) -> Kafka -> the job, schemas in a real registry.

The MariaDB history of the JSON chain (tests/cdc_chain/test_mariadb_e2e.py) captured by two
connectors writing Avro: the change envelopes with Debezium's default modes ("def") and rows
flattened by ExtractNewRecordState in rewrite mode ("unw"). Every mirror equals its MariaDB
table value for value, except the differences Debezium itself introduces, each named (as in
the JSON chain).
"""

from __future__ import annotations

import collections
import json
import time

import pytest

from connectors import avro as AV
from connectors.connect import connector_properties
from devstack import mariadb_history as H
from streaming_app.runner import run_job
from streaming_app.settings import parse_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.mariadb, pytest.mark.registry]

DATABASE = "shop_avro"
VARIANTS = ("def", "unw")
ALLOWED = {"def": {H.ZERO_DATE, H.ZERO_TIMESTAMP}, "unw": {H.ZERO_DATE, H.ZERO_TIMESTAMP, H.UNWRAP_TRUNCATE}}


def _config(tmp, variant, db, bootstrap, connect_url, registry_url, server_id):
    v = H.VARIANTS[variant]
    prefix = f"av{variant}"
    return parse_config({
        "job": {"name": f"myav_{variant}", "lake_root": str(tmp / variant / "lake"),
                "checkpoint_root": str(tmp / variant / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 120},
        "spark": {"master": "local[2]", "ui": False},
        "debezium": {"connector": "mysql", "host": "127.0.0.1", "port": db.port, "database": DATABASE,
                     "user": "root", "password": db.password(), "topic_prefix": prefix,
                     "connector_name": f"myav_{variant}", "server_id": server_id,
                     "decimal_handling_mode": v["decimal_handling_mode"],
                     "time_precision_mode": v["time_precision_mode"], "connect_url": connect_url,
                     "encoding": "avro", "properties": {"poll.interval.ms": 50, **v["properties"]}},
        "registry": {"url": registry_url},
        "tables": H.job_tables(prefix, DATABASE, variant),
    })


def _wait_for_markers(cfg, timeout_s=240):
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
                    row = (doc.get("after") or {}) if "op" in doc else doc
                    if -1 in (row.get("id"), row.get("order_id"), row.get("src")):
                        pending.discard(msg.topic)
                if not pending:
                    break
    finally:
        c.close()
    assert not pending, f"no marker on {pending} after {timeout_s}s"


@pytest.fixture(scope="module")
def chain(mariadb, kafka_broker, kafka_connect, registry_server, tmp_path_factory):
    mariadb.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    mariadb.create_database(DATABASE)
    work = H.Workload(mariadb, DATABASE, seed=41)
    work.setup()
    work.initial()
    tmp = tmp_path_factory.mktemp("myavro")
    cfgs = {v: _config(tmp, v, mariadb, kafka_broker.bootstrap, kafka_connect.url, registry_server.url, 5411 + i)
            for i, v in enumerate(VARIANTS)}
    for cfg in cfgs.values():
        kafka_connect.register(cfg.debezium.connector_name, connector_properties(cfg))
    for cfg in cfgs.values():
        kafka_connect.wait_running(cfg.debezium.connector_name, timeout_s=180)
    mariadb.wait_binlog_clients(len(cfgs))
    steps = work.run()
    for cfg in cfgs.values():
        _wait_for_markers(cfg)
    yield cfgs, work, steps
    for cfg in cfgs.values():
        kafka_connect.delete(cfg.debezium.connector_name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_mariadb_through_avro_mirrors_equal_mariadb(chain, mariadb, spark, variant, capsys):
    cfgs, work, steps = chain
    cfg = cfgs[variant]
    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    rows = values = 0
    causes: collections.Counter = collections.Counter()
    for table in H.TABLES:
        cols = list(H.TABLES[table][1])
        mirror = (spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table))
                  .select(*[f"`{c}`" for c in cols]).toArrow().to_pylist())
        r, v, named, bad = H.mirror_mismatches(mariadb, DATABASE, table, mirror, variant,
                                               work.lines_before_truncate, work.lines_touched)
        assert not bad, f"{variant} {table}: {len(bad)} differences not named, e.g. {bad[:3]}"
        rows, values = rows + r, values + v
        causes.update(named)
    assert set(causes) <= ALLOWED[variant], causes
    assert causes[H.ZERO_DATE] == 2 and causes[H.ZERO_TIMESTAMP] == 1, causes
    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    codes = collections.Counter(r.error_code for r in q)
    assert codes == {"DATA_NOT_BOOLEAN": 1}, (codes, [r.reason for r in q][:3])
    sc = spark.read.format("delta").load(str(cfg.lake_root / "schema_changes")).collect()
    assert [(r.table, r.column, r.change) for r in sc] == [("items", "legacy", "dropped")]
    metrics = [json.loads(b.metrics) for b in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    truncated = any(m.get("mirror", {}).get("order_lines", {}).get("truncated") for m in metrics)
    assert truncated == (variant != "unw")
    with capsys.disabled():
        print(f"\n[mariadb chain avro {variant}] {res.totals['records']} records in {res.totals['batches']} batches; "
              f"history {steps}; {rows} rows / {values} values compared with MariaDB, 0 unexplained; "
              f"named differences {dict(causes)}; quarantined {dict(codes)}")
