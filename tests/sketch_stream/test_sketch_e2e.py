"""Issue 4 end to end: TPC-H rows as CDC through the real broker and job; three registered
queries' sketches kept current in Delta; checked against the independent oracle
(tests.oracles.sketch_reference) on the final mirrors; the sketches used for data skipping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.delta_sink import latest_version
from connectors.kafka import create_topics
from devstack.producer import CdcProducer, RandomUpdates, conform
from operators.sketch import RangePartition
from tests.oracles.sketch_reference import reference_sketch
from core.config import dump_toml
from streaming_app.settings import parse_config
from streaming_app.demo_run import tpch_subset
from streaming_app.runner import run_job
from streaming_app.sketches.register import register_query
from streaming_app.sketches.query import run_query
from streaming_app.sketches.tables import bits_to_ids

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TABLES = {
    "customer": (["c_custkey"], {"c_custkey": "long", "c_name": "string", "c_nationkey": "long",
                                 "c_acctbal": "decimal(15,2)"}),
    "orders": (["o_orderkey"], {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)",
                                "o_orderdate": "date"}),
    "lineitem": (["l_orderkey", "l_linenumber"], {"l_orderkey": "long", "l_linenumber": "int",
                                                  "l_quantity": "decimal(15,2)",
                                                  "l_extendedprice": "decimal(15,2)", "l_shipdate": "date"}),
}

Q_HAVING = ("SELECT l_orderkey, SUM(l_quantity) AS qty FROM lineitem GROUP BY l_orderkey "
            "HAVING SUM(l_quantity) > 200")
Q_TOPK = ("SELECT o_orderkey, SUM(l_extendedprice) AS revenue FROM orders JOIN lineitem "
          "ON o_orderkey = l_orderkey GROUP BY o_orderkey ORDER BY revenue DESC LIMIT 5")
Q_MINMAX = ("SELECT c_nationkey, MAX(c_acctbal) AS top, MIN(c_acctbal) AS low FROM customer "
            "GROUP BY c_nationkey HAVING MAX(c_acctbal) > 8000")
QUERIES = {  # name -> (sql, [(table, attribute), ...], fragments)
    "big_orders": (Q_HAVING, [("lineitem", "l_orderkey")], 16),
    # sketched on both join inputs: running it again reads less of orders and of lineitem
    "top_revenue": (Q_TOPK, [("orders", "o_orderkey"), ("lineitem", "l_orderkey")], 8),
    "rich_nations": (Q_MINMAX, [("customer", "c_custkey")], 6),
    "lazy_big": (Q_HAVING, [("lineitem", "l_orderkey")], 16),
}


def partition_spec(name: str) -> list[str]:
    _, parts, n = QUERIES[name]
    return [f"{t}.{a}:{n}" for t, a in parts]


def config_data(tmp_path, bootstrap: str, max_offsets: int, name: str = "sk") -> dict:
    return {
        "job": {"name": name, "lake_root": str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": max_offsets},
        "spark": {"master": "local[2]", "ui": False},
        # lineitem (about 400 rows) is past the threshold and orders (100) is not, so the top-k
        # join runs with one input probed through Spark in the mirror and one in memory
        "sketch": {"spark_join_rows": 200, "snapshot_every": 2},
        "tables": [{"name": t, "topic": f"{name}.{t}", "primary_key": pk, "columns": cols}
                   for t, (pk, cols) in TABLES.items()],
        # one query from the config: registered at setup while the mirror is still empty, so
        # it stays pending and is captured by the first batch that brings rows
        "sketches": [{"name": "top_revenue", "sql": Q_TOPK, "partition": partition_spec("top_revenue")}],
    }


def tpch_rows(cfg, n_orders: int = 100) -> dict[str, list[dict]]:
    d = tpch_subset()
    def read(t):
        return pq.read_table(d / f"{t}.parquet", columns=cfg.table(t).column_names)

    orders = read("orders").slice(0, n_orders)
    keys = pa.array(sorted(orders.column("o_orderkey").to_pylist()))
    li = read("lineitem")
    li = li.filter(pa.compute.is_in(li.column("l_orderkey"), value_set=keys))
    cust = read("customer").slice(0, 150)
    return {"orders": conform(cfg.table("orders"), orders), "lineitem": conform(cfg.table("lineitem"), li),
            "customer": conform(cfg.table("customer"), cust)}


def send_snapshot(prod, cfg, rows):
    for t, rs in rows.items():
        for r in rs:
            prod.send(cfg.table(t), "r", None, r)
    prod.flush()


def send_updates(prod, cfg, rows, n: int, seed: int):
    gens = {t: RandomUpdates(cfg.table(t), seed=seed + i, live=rows[t], mix=(0.35, 0.35, 0.3))
            for i, t in enumerate(sorted(rows))}
    for i in range(n):
        t = sorted(rows)[i % 3]
        op, before, after = gens[t].next()
        prod.send(cfg.table(t), op, before, after)
    prod.flush()
    for t, g in gens.items():
        rows[t] = list(g.live.values())


def mirrors(spark, cfg) -> dict[str, pa.Table]:
    return {t.name: spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / t.name)).toArrow()
            for t in cfg.tables}


def check_sketches(spark, cfg, names):
    """Every sketches row equals the oracle on the final mirrors; no sketch_deltas duplicate."""
    data = mirrors(spark, cfg)
    regs = {(r.name, r.partition_table): r
            for r in spark.read.format("delta").load(str(cfg.lake_root / "registered_queries")).collect()}
    rows = {(r.query, r.table_name): r for r in spark.read.format("delta").load(str(cfg.lake_root / "sketches")).collect()}
    assert set(rows) == {(n, t) for n in names for t, _ in QUERIES[n][1]}
    assert set(regs) == set(rows)
    for name in names:
        sql, parts, _ = QUERIES[name]
        part = {t: RangePartition(a, json.loads(regs[name, t].boundaries)["values"]) for t, a in parts}
        want = reference_sketch(sql, data, part)
        for table, _ in parts:
            got = rows[name, table]
            assert list(got.fragments) == want[table], (name, table)
            assert bits_to_ids(bytes(got.bitset), got.n_fragments) == want[table]
            assert got.predicate == part[table].predicate(want[table])
            assert got.mirror_version == latest_version(spark, str(cfg.lake_root / "mirrors" / table))
    deltas = spark.read.format("delta").load(str(cfg.lake_root / "sketch_deltas"))
    assert deltas.count() == deltas.dropDuplicates(["query", "batch_id", "table_name", "fragment", "change"]).count()
    return data


def test_three_sketches_stream_equal_oracle_and_skip(kafka_broker, spark, tmp_path):
    data = config_data(tmp_path, kafka_broker.bootstrap, max_offsets=350)
    cfg = parse_config(data)
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    rows = tpch_rows(cfg)
    prod = CdcProducer(kafka_broker.bootstrap)
    send_snapshot(prod, cfg, rows)
    run_job(cfg, available_now=True, spark=spark, quiet=True)

    # two queries registered from outside the job (what `ivmstream sketch register` does)
    for name in ("big_orders", "rich_nations"):
        sql, parts, n = QUERIES[name]
        reg = register_query(spark, cfg, name, sql, [(t, a, n) for t, a in parts])
        assert reg.captured and reg.capture_version >= 1
    # a lazy query: captured now, left alone by the job, brought forward when it is used
    lazy = register_query(spark, cfg, "lazy_big", Q_HAVING, [("lineitem", "l_orderkey", 16)], mode="lazy")
    check_sketches(spark, cfg, ["big_orders", "rich_nations", "top_revenue", "lazy_big"])

    send_updates(prod, cfg, rows, 240, seed=7)
    run_job(cfg, available_now=True, spark=spark, quiet=True)
    prod.close()
    stale = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).where("query = 'lazy_big'").first()
    assert stale.mirror_version == lazy.capture_version < latest_version(spark, str(cfg.lake_root / "mirrors/lineitem"))
    out = run_query(spark, cfg, Q_HAVING, use_sketch="lazy_big")  # lazy maintenance happens here
    assert out["equal"]
    final = check_sketches(spark, cfg, list(QUERIES))

    # the job did maintain incrementally: deltas recorded in batches after the registration
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    metrics = [json.loads(b.metrics).get("sketches") for b in batches]
    assert any(m and m["delta_rows_in"] > 0 for m in metrics)
    assert any(m and m["per_query"].get("big_orders", {}).get("delta_rows", 0) > 0 for m in metrics)
    assert not any(m and "lazy_big" in m["per_query"] for m in metrics)
    # the top-k join probed its Delta-backed lineitem input with Spark in some batch
    assert sum(m["per_query"].get("top_revenue", {}).get("spark_probes", 0) for m in metrics if m) > 0
    # the progress listener reported the sketch metrics of the streaming query's batches
    from streaming_app.sketches.progress import _LISTENERS

    def reported():
        return [x for lst in list(_LISTENERS.values()) for x in lst.lines]

    deadline = time.time() + 30
    while time.time() < deadline and not any("sketches:" in x for x in reported()):
        time.sleep(0.5)
    assert any("big_orders" in x and "delta rows" in x for x in reported())

    # using the sketches: same results with the predicate, never more files
    used = {}
    for name, (sql, parts, _) in QUERIES.items():
        out = used[name] = run_query(spark, cfg, sql, use_sketch=name)  # the grouped predicate form
        assert out["equal"], (name, out["plain"].rows, out["sketch"].rows)
        assert len(out["plain"].rows) == len(out["sketch"].rows)
        assert set(out["predicates"]) == {t for t, _ in parts}
        for t, _ in parts:  # Spark read no more files than the Delta statistics say it must
            assert out["sketch"].scan[t]["files"] <= out["expected"][t]["files"] <= out["plain"].scan[t]["files"]
    assert final["lineitem"].num_rows > 0
    # the flat form: the same result from the same files
    flat = run_query(spark, cfg, QUERIES["top_revenue"][0], use_sketch="top_revenue", form="flat")
    assert flat["equal"] and flat["sketch"].rows == used["top_revenue"]["sketch"].rows
    assert ({t: s["files"] for t, s in flat["sketch"].scan.items()}
            == {t: s["files"] for t, s in used["top_revenue"]["sketch"].scan.items()})

    # the CLI reads sketches without Spark for eager queries
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    env = {**os.environ, "IVMSTREAM_CONFIG": str(path)}
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "filter", "big_orders"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    sk = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).where("query = 'big_orders'").first()
    assert res.stdout.strip() == sk.predicate
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "show", "--json", "rich_nations"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    rich = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).where("query = 'rich_nations'").first()
    # value ranges counted apart from the NULL fragment; bounds typed as the column, upper exclusive
    null_in = rich.n_fragments in rich.fragments
    assert shown["tables"][0]["fragments"] == f"{len(rich.fragments) - null_in} of {rich.n_fragments}"
    assert shown["tables"][0]["null_fragment"] == null_in
    ranges = shown["tables"][0]["ranges"]
    assert ranges and all(set(r) <= {"ge", "lt"} for r in ranges)
    assert all(type(v) is int for r in ranges for v in r.values()), ranges  # c_custkey is a long
    assert shown["tables"][0]["mirror_version"] == rich.mirror_version
    # the job drained every record, so the eager sketch reflects every mirror's latest version
    assert shown["staleness"]["current"] and shown["staleness"]["behind"] == {}, shown["staleness"]
    # a sketch on two tables: one "table: predicate" line each, or one table's with --table
    top = {r.table_name: r.predicate for r in
           spark.read.format("delta").load(str(cfg.lake_root / "sketches")).where("query = 'top_revenue'").collect()}
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "filter", "top_revenue"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.strip().splitlines()) == sorted(f"{t}: {p}" for t, p in top.items())
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "filter", "top_revenue", "--table",
                          "lineitem"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == top["lineitem"], res.stderr
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "filter", "top_revenue", "--table",
                          "lineitem", "--form", "grouped"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    li = spark.read.format("delta").load(str(cfg.lake_root / "mirrors/lineitem"))
    by_grouped, by_flat = li.where(res.stdout.strip()), li.where(top["lineitem"])
    assert by_grouped.count() == by_flat.count() > 0 and by_grouped.exceptAll(by_flat).count() == 0
    res = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "show", "nope"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
