"""Issue 14's acceptance: PostgreSQL -> Debezium (Kafka Connect) -> Kafka -> the job -> Delta.

No hand-written Debezium JSON: a seeded history runs in a real PostgreSQL database while two
real Debezium connectors capture it, one with the defaults (decimal.handling.mode=precise,
time.precision.mode=adaptive) and one with string decimals and connect times, each into its
own topics and its own job. After the jobs drain, every mirror equals its PostgreSQL table
row for row and value for value, the sketch equals a recapture from PostgreSQL's rows, and
the triangle count equals networkx on PostgreSQL's edge table.
"""

from __future__ import annotations

import collections
import json

import networkx as nx
import pyarrow as pa
import pytest

from connectors.connect import connector_properties
from devstack.pg_history import SKETCH_SQL, TABLES, Workload, job_tables, mirror_mismatches, pg_rows
from operators.sketch import RangePartition
from tests.cdc_chain.chain import wait_for_markers
from tests.oracles.sketch_reference import reference_sketch
from streaming_app.settings import parse_config
from streaming_app.runner import run_job
from streaming_app.sketches.tables import bits_to_ids

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres]

MODES = {"pa": ("precise", "adaptive"), "sc": ("string", "connect")}


def _config(tmp_path, prefix, pg, bootstrap, connect_url, database):
    decimal_mode, time_mode = MODES[prefix]
    data = {
        "job": {"name": f"pg_{prefix}", "lake_root": str(tmp_path / prefix / "lake"),
                "checkpoint_root": str(tmp_path / prefix / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 150},
        "spark": {"master": "local[2]", "ui": False},
        "debezium": {"host": "127.0.0.1", "port": pg.port, "database": database, "user": "postgres",
                     "password": pg.password(),
                     "topic_prefix": prefix, "connector_name": f"pg_{prefix}", "slot_name": f"slot_{prefix}",
                     "publication_name": f"pub_{prefix}", "decimal_handling_mode": decimal_mode,
                     "time_precision_mode": time_mode, "connect_url": connect_url,
                     "properties": {"poll.interval.ms": 50}},  # Debezium's 500 ms default only waits
        "tables": job_tables(prefix),
        "graphs": [{"name": "g", "table": "edges", "src": "src", "dst": "dst", "mode": "undirected"}],
        "sketches": [{"name": "heavy_orders", "sql": SKETCH_SQL, "partition": "lines.order_id:8"}],
    }
    return parse_config(data)


def _compare(spark, cfg, pg, database, table):
    cols = list(TABLES[table][1])
    mirror = (spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table))
              .select(*[f"`{c}`" for c in cols]).toArrow().to_pylist())
    rows, values, bad = mirror_mismatches(pg, database, table, mirror)
    assert not bad, f"{table}: {len(bad)} differences with PostgreSQL, e.g. {bad[:3]}"
    return rows, values


@pytest.fixture(scope="module")
def chain(postgres, kafka_broker, kafka_connect, tmp_path_factory):
    database = "shop"
    postgres.create_database(database)
    work = Workload(postgres, database, seed=11)
    work.setup()
    tmp = tmp_path_factory.mktemp("pgchain")
    cfgs = {p: _config(tmp, p, postgres, kafka_broker.bootstrap, kafka_connect.url, database) for p in MODES}
    for p, cfg in cfgs.items():  # both connectors snapshot the empty tables, then stream
        kafka_connect.register(cfg.debezium.connector_name, connector_properties(cfg))
        kafka_connect.wait_running(cfg.debezium.connector_name, timeout_s=120)
    steps = work.run()
    for cfg in cfgs.values():
        wait_for_markers(cfg)
    return database, cfgs, steps


@pytest.mark.parametrize("prefix", list(MODES))
def test_mirrors_sketch_and_triangles_equal_postgres(chain, postgres, spark, prefix, capsys):
    database, cfgs, steps = chain
    cfg = cfgs[prefix]
    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    assert res.totals["batches"] >= 2

    rows = values = 0
    for table in TABLES:
        r, v = _compare(spark, cfg, postgres, database, table)
        rows, values = rows + r, values + v

    # quarantine: only the row set to infinity / NaN, with the code for values a declared type
    # cannot hold; it came back to finite values later, so the mirror equals PostgreSQL again
    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    codes = collections.Counter(r.error_code for r in q)
    assert set(codes) == {"DATA_NOT_REPRESENTABLE"}, codes
    # the dropped column was recorded once; the added one is not declared and was ignored
    sc = spark.read.format("delta").load(str(cfg.lake_root / "schema_changes")).collect()
    assert [(r.table, r.column, r.change) for r in sc] == [("accounts", "legacy", "dropped")]

    # the history really exercised TOAST placeholders and the truncate (the batches say so)
    mirror_metrics = [json.loads(b.metrics).get("mirror", {})
                      for b in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    kept = sum(m.get("accounts", {}).get("toast_values_kept", 0) for m in mirror_metrics)
    assert kept >= 5, (kept, steps)
    assert any(m.get("lines", {}).get("truncated") for m in mirror_metrics)

    # sketch == a recapture from PostgreSQL's own rows (the truncate of lines included)
    _, lines = pg_rows(postgres, database, "lines")
    data = {"lines": pa.Table.from_pylist(lines)}
    reg = spark.read.format("delta").load(str(cfg.lake_root / "registered_queries")).first()
    part = {"lines": RangePartition("order_id", json.loads(reg.boundaries)["values"])}
    want = reference_sketch(SKETCH_SQL, data, part)["lines"]
    got = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).first()
    assert list(got.fragments) == want and bits_to_ids(bytes(got.bitset), got.n_fragments) == want

    # triangle count == networkx on PostgreSQL's edge table
    edges = postgres.query("SELECT src, dst FROM edges", database=database)
    g = nx.Graph()
    g.add_edges_from(edges)
    counts = spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).orderBy("batch_id").collect()
    assert counts[-1].triangles == sum(nx.triangles(g).values()) // 3
    assert counts[-1].edges == g.number_of_edges()

    with capsys.disabled():
        print(f"\n[pg chain {prefix}: decimal={MODES[prefix][0]} time={MODES[prefix][1]}] "
              f"{res.totals['records']} records in {res.totals['batches']} batches; history {steps}; "
              f"{rows} rows / {values} values compared with PostgreSQL, 0 mismatches; "
              f"TOASTed values kept {kept}; quarantined {dict(codes)}; triangles {counts[-1].triangles}; sketch {want}")
