"""Issue 25's acceptance: MariaDB -> Debezium's MySQL connector (Kafka Connect) -> Kafka -> the job.

No hand-written Debezium JSON: a seeded history (streaming_app.mariadb_history) runs in a real
MariaDB while three real connectors capture it, each into its own topics and its own job:
Debezium's default modes ("def"), decimal.handling.mode=string + time.precision.mode=connect +
bigint.unsigned.handling.mode=long ("str"), and the ExtractNewRecordState transform in rewrite
mode ("unw"). After each job drains, every mirror equals its MariaDB table value for value,
except for differences Debezium itself introduces, each counted under its name (zero dates,
connect's millisecond cut and NULL TIME, the wrapped BIGINT UNSIGNED, TRUNCATE dropped by the
transform); the sketch equals a recapture from MariaDB's rows and the triangle count equals
networkx on MariaDB's edge table.
"""

from __future__ import annotations

import collections
import json
import time

import networkx as nx
import pytest

from connectors.kafka_connect import connector_properties, rest
from operators.sketch import RangePartition
from tests.oracles.sketch_reference import reference_sketch
from streaming_app import mariadb_history as H
from streaming_app.settings import parse_config
from streaming_app.runner import run_job
from streaming_app.sketches.tables import bits_to_ids

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.mariadb]

DATABASE = "shop"
# the causes each variant may show (and the ones its history makes certain)
ALLOWED = {"def": {H.ZERO_DATE, H.ZERO_TIMESTAMP},
           "str": {H.ZERO_DATE, H.ZERO_TIMESTAMP, H.CONNECT_MS, H.CONNECT_TIME_NULL, H.UNSIGNED_WRAP},
           "unw": {H.ZERO_DATE, H.ZERO_TIMESTAMP, H.UNWRAP_TRUNCATE}}


def _config(tmp, variant, db, bootstrap, connect_url, server_id):
    v = H.VARIANTS[variant]
    prefix = f"my{variant}"
    return parse_config({
        "job": {"name": f"my_{variant}", "lake_root": str(tmp / variant / "lake"),
                "checkpoint_root": str(tmp / variant / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 120},
        "spark": {"master": "local[2]", "ui": False},
        "debezium": {"connector": "mysql", "host": "127.0.0.1", "port": db.port, "database": DATABASE,
                     "user": "root", "password": db.password(), "topic_prefix": prefix, "connector_name": f"my_{variant}",
                     "server_id": server_id, "decimal_handling_mode": v["decimal_handling_mode"],
                     "time_precision_mode": v["time_precision_mode"], "connect_url": connect_url,
                     "properties": {"poll.interval.ms": 50, **v["properties"]}},
        "tables": H.job_tables(prefix, DATABASE, variant),
        "graphs": [{"name": "g", "table": "edges", "src": "src", "dst": "dst", "mode": "undirected"}],
        "sketches": [{"name": "heavy_orders", "sql": H.SKETCH_SQL, "partition": "order_lines.order_id:8"}],
    })


def _wait_for_markers(bootstrap, cfg, timeout_s=240):
    """Until every table's topic holds its marker row (the history's last change)."""
    from kafka import KafkaConsumer

    pending = {t.topic for t in cfg.tables}
    c = KafkaConsumer(*pending, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=2000)
    deadline = time.time() + timeout_s
    try:
        while pending and time.time() < deadline:
            for msg in c:
                if msg.value:
                    payload = json.loads(msg.value).get("payload") or {}
                    row = (payload.get("after") or {}) if "op" in payload else payload
                    if -1 in (row.get("id"), row.get("order_id"), row.get("src")):
                        pending.discard(msg.topic)
                if not pending:
                    break
    finally:
        c.close()
    assert not pending, f"no marker on {pending} after {timeout_s}s"


@pytest.fixture(scope="module")
def chain(mariadb, kafka_broker, kafka_connect, tmp_path_factory):
    mariadb.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    mariadb.create_database(DATABASE)
    work = H.Workload(mariadb, DATABASE, seed=25)
    work.setup()
    work.initial()  # read by each connector's snapshot (op r), the rest from the binlog
    tmp = tmp_path_factory.mktemp("mychain")
    cfgs = {v: _config(tmp, v, mariadb, kafka_broker.bootstrap, kafka_connect.url, 5401 + i)
            for i, v in enumerate(H.VARIANTS)}
    t0 = time.monotonic()
    for cfg in cfgs.values():  # each snapshots the empty tables, then streams the binlog
        kafka_connect.register(cfg.debezium.connector_name, connector_properties(cfg))
    for cfg in cfgs.values():
        kafka_connect.wait_running(cfg.debezium.connector_name, timeout_s=180)
    mariadb.wait_binlog_clients(len(cfgs))  # every snapshot done: the DDL below cannot race one
    steps = work.run()
    for cfg in cfgs.values():
        _wait_for_markers(kafka_broker.bootstrap, cfg)
    versions = {"mariadb": mariadb.server_version(), "kafka_connect": rest(kafka_connect.url, "GET", "/")["version"],
                "debezium": kafka_connect.connector_status("my_def")["connector"].get("version", "?")}
    yield cfgs, work, steps, versions, time.monotonic() - t0
    for cfg in cfgs.values():
        kafka_connect.delete(cfg.debezium.connector_name)


@pytest.mark.parametrize("variant", list(H.VARIANTS))
def test_mirrors_sketch_and_triangles_equal_mariadb(chain, mariadb, spark, variant, capsys):
    cfgs, work, steps, versions, t_chain = chain
    cfg = cfgs[variant]
    t0 = time.monotonic()
    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    t_job = time.monotonic() - t0
    assert res.totals["batches"] >= 2

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
    # the history makes these certain: the zero-date row, and per variant its own losses
    assert causes[H.ZERO_DATE] == 2 and causes[H.ZERO_TIMESTAMP] == 1, causes
    if variant == "str":
        assert causes[H.CONNECT_MS] > 0 and causes[H.CONNECT_TIME_NULL] > 0 and causes[H.UNSIGNED_WRAP] > 0, causes
    if variant == "unw":
        assert causes[H.UNWRAP_TRUNCATE] > 0, causes

    # quarantine: the TINYINT(1) set to 2, with its own code, and nothing else
    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    codes = collections.Counter(r.error_code for r in q)
    assert codes == {"DATA_NOT_BOOLEAN": 1}, codes
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    metrics = [json.loads(b.metrics) for b in batches]
    ignored = sum(m.get("decoder", {}).get("before_values_ignored", 0) for m in metrics)
    if variant != "unw":  # the update from 2 back to 1: its before image holds the 2
        assert ignored == 1, ignored
    truncated = any(m.get("mirror", {}).get("order_lines", {}).get("truncated") for m in metrics)
    assert truncated == (variant != "unw")
    sc = spark.read.format("delta").load(str(cfg.lake_root / "schema_changes")).collect()
    assert [(r.table, r.column, r.change) for r in sc] == [("items", "legacy", "dropped")]

    # sketch == a recapture from the rows of order_lines (the mirror's, equal to MariaDB's as checked
    # above, with the rows the unwrap variant keeps past the TRUNCATE it never saw)
    order_lines = spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / "order_lines")).toArrow()
    reg = spark.read.format("delta").load(str(cfg.lake_root / "registered_queries")).first()
    part = {"order_lines": RangePartition("order_id", json.loads(reg.boundaries)["values"])}
    want = reference_sketch(H.SKETCH_SQL, {"order_lines": order_lines}, part)["order_lines"]
    got = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).first()
    assert list(got.fragments) == want and bits_to_ids(bytes(got.bitset), got.n_fragments) == want

    # triangle count == networkx on MariaDB's edge table
    g = nx.Graph()
    g.add_edges_from(mariadb.query("SELECT src, dst FROM edges", database=DATABASE))
    counts = spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).orderBy("batch_id").collect()
    assert counts[-1].triangles == sum(nx.triangles(g).values()) // 3
    assert counts[-1].edges == g.number_of_edges()

    with capsys.disabled():
        print(f"\n[mariadb chain {variant}] MariaDB {versions['mariadb']}, Debezium {versions['debezium']}, "
              f"Kafka Connect {versions['kafka_connect']}; chain ready and history captured in {t_chain:.0f}s; "
              f"job {t_job:.0f}s: {res.totals['records']} records in {res.totals['batches']} batches; "
              f"history {steps}; {rows} rows / {values} values compared with MariaDB, 0 unexplained; "
              f"named differences {dict(causes)}; quarantined {dict(codes)}; before values ignored {ignored}; "
              f"triangles {counts[-1].triangles}; sketch {want}")
