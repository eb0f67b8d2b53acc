"""Streaming sketch maintenance cost: throughput with 0, 1 and 10 registered queries, freshness,
and incremental maintenance vs recapturing every sketch each batch.

For each variant (0 = plain ingest, 1 query, 10 queries) on a fresh broker topic set and lake:
load a TPC-H SF0.01 subset (orders + lineitem) as CDC, run the job to load it, register the
variant's queries (HAVING / top-k over the join / MIN-MAX shapes with different constants),
then stream ``--updates`` random changes at ``--rate`` per second while the job runs (trigger
0.5 s) and measure
  * records/s: update records / time from the first update batch's start to the last's end;
  * freshness: batch end (its sketch MERGE is committed before) minus the send time of the
    newest record of the batch (records of one single-partition topic are matched to offsets
    by send order), p50/p95 over batches;
  * per batch sketch maintenance ms (the job's metrics) vs recapturing all the variant's
    sketches from the mirrors (engine ``initialize`` on the final mirrors, the cost a
    non-incremental job would pay every batch).

Usage: python bench/streaming_sketch.py [--orders 1500] [--updates 6000] [--rate 400] [--quick]
Writes bench/results/streaming_sketch.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from connectors.kafka_broker import EmbeddedBroker, create_topics, free_port  # noqa: E402
from connectors.producer import CdcProducer, RandomUpdates, conform  # noqa: E402
from streaming_app.config import parse_config  # noqa: E402

COLS = {
    "orders": (["o_orderkey"], {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)",
                                "o_orderdate": "date"}),
    "lineitem": (["l_orderkey", "l_linenumber"], {"l_orderkey": "long", "l_linenumber": "int",
                                                  "l_quantity": "decimal(15,2)",
                                                  "l_extendedprice": "decimal(15,2)", "l_shipdate": "date"}),
}


def queries(n: int) -> list[tuple[str, str, str, str]]:
    """n registered queries: (name, sql, table, attribute), three shapes with varied constants."""
    out = []
    for i in range(n):
        shape = i % 3
        if shape == 0:
            sql = (f"SELECT l_orderkey, SUM(l_quantity) AS qty FROM lineitem GROUP BY l_orderkey "
                   f"HAVING SUM(l_quantity) > {150 + 10 * i}")
            out.append((f"q{i}_having", sql, "lineitem", "l_orderkey"))
        elif shape == 1:
            sql = (f"SELECT o_orderkey, SUM(l_extendedprice) AS revenue FROM orders JOIN lineitem "
                   f"ON o_orderkey = l_orderkey GROUP BY o_orderkey ORDER BY revenue DESC LIMIT {5 + i}")
            out.append((f"q{i}_topk", sql, "orders", "o_orderkey"))
        else:
            sql = (f"SELECT o_custkey, MAX(o_totalprice) AS top FROM orders GROUP BY o_custkey "
                   f"HAVING MAX(o_totalprice) > {300000 + 5000 * i}")
            out.append((f"q{i}_minmax", sql, "orders", "o_orderkey"))
    return out


def run_variant(broker, work: Path, n_queries: int, args, spark) -> dict:
    from streaming_app.runner import run_job
    from streaming_app.sketch_maintainer import QueryState, read_registry, register_query
    from connectors import delta_sink as sink
    from streaming_app.demo_run import tpch_subset

    name = f"bench_sk{n_queries}"
    data = {
        "job": {"name": name, "lake_root": str(work / name / "lake"),
                "checkpoint_root": str(work / name / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": broker.bootstrap, "max_offsets_per_trigger": args.batch},
        "spark": {"master": "local[2]", "ui": False},
        "tables": [{"name": t, "topic": f"{name}.{t}", "primary_key": pk, "columns": c}
                   for t, (pk, c) in COLS.items()],
    }
    cfg = parse_config(data)
    create_topics(broker.bootstrap, cfg.topics, partitions=1)  # one partition: send order = offsets
    d = tpch_subset()
    orders = pq.read_table(d / "orders.parquet", columns=list(COLS["orders"][1])).slice(0, args.orders)
    li = pq.read_table(d / "lineitem.parquet", columns=list(COLS["lineitem"][1]))
    li = li.filter(pa.compute.is_in(li.column("l_orderkey"), value_set=orders.column("o_orderkey")))
    rows = {"orders": conform(cfg.table("orders"), orders), "lineitem": conform(cfg.table("lineitem"), li)}
    prod = CdcProducer(broker.bootstrap)
    for t, rs in rows.items():
        for r in rs:
            prod.send(cfg.table(t), "r", None, r)
    prod.flush()
    run_job(cfg, available_now=True, spark=spark, quiet=True)
    for qn, sql, table, attr in queries(n_queries):
        register_query(spark, cfg, qn, sql, table, attr, args.fragments)

    # stream updates at a fixed rate into the lineitem topic (one partition: send order = offsets)
    li_table = cfg.table("lineitem")
    base = len(rows["lineitem"])
    gen = RandomUpdates(li_table, seed=5, live=rows["lineitem"], mix=(0.4, 0.4, 0.2))
    sent_at: list[float] = []
    stop = threading.Event()

    def produce():
        p2 = CdcProducer(broker.bootstrap)
        t0 = time.time()
        for i in range(args.updates):
            op, before, after = gen.next()
            p2.send(li_table, op, before, after)
            sent_at.append(time.time())
            delay = t0 + (i + 1) / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
        p2.flush()
        p2.close()

    th = threading.Thread(target=produce)
    t_start = time.time()
    th.start()

    def stopper():
        th.join()
        # let the job drain what was sent, then stop it
        deadline = time.time() + 300
        lake_batches = str(cfg.lake_root / "batches")
        while time.time() < deadline:
            try:
                b = spark.read.format("delta").load(lake_batches).where(f"job = '{name}'").collect()
                hi = max((json.loads(r.kafka_offsets).get(li_table.topic, {}).get("0", [0, -1])[1] for r in b),
                         default=-1)
                if hi >= base + args.updates - 1:
                    break
            except Exception:  # noqa: BLE001
                pass
            time.sleep(1.0)
        stop.set()

    st = threading.Thread(target=stopper)
    st.start()
    run_job(cfg, spark=spark, quiet=True, stop_event=stop)
    st.join()
    prod.close()

    batches = [r for r in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
               if r.started_at.timestamp() >= t_start - 1 and r.records_in > 0]
    batches.sort(key=lambda r: r.batch_id)
    fresh, maint, applied = [], [], []
    for b in batches:
        hi = json.loads(b.kafka_offsets).get(li_table.topic, {}).get("0")
        if hi and base <= hi[1] < base + len(sent_at):
            fresh.append(b.finished_at.timestamp() - sent_at[hi[1] - base])
        m = json.loads(b.metrics).get("sketches")
        if m:
            maint.append(m["ms"])
            applied.append(sum(v.get("apply_ms", 0.0) for v in m["per_query"].values()))
    recs = sum(b.records_in for b in batches)
    span = batches[-1].finished_at.timestamp() - batches[0].started_at.timestamp() if batches else float("nan")
    # full recapture of every sketch at the final mirror versions (what each batch would cost)
    from operators.sketch import SketchMaintainer

    recapture_ms = init_ms = 0.0
    lake = sink.Lake(cfg.lake_root)
    versions = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in cfg.tables}
    for reg in (read_registry(spark, lake).values() if n_queries else []):
        t = time.perf_counter()
        data = {tn: sink.read_version(spark, lake.mirror(tn), versions[tn], cfg.table(tn).column_names)
                for tn in COLS}
        t2 = time.perf_counter()
        SketchMaintainer.from_sql(reg.sql, {reg.table: reg.partition()}).initialize(data)
        init_ms += (time.perf_counter() - t2) * 1000
        recapture_ms += (time.perf_counter() - t) * 1000
    return {"queries": n_queries, "batches": len(batches), "records": recs, "seconds": span,
            "rps": recs / span if span else float("nan"),
            "fresh_p50": float(np.percentile(fresh, 50)) if fresh else float("nan"),
            "fresh_p95": float(np.percentile(fresh, 95)) if fresh else float("nan"),
            "maint_ms": float(np.mean(maint)) if maint else 0.0, "recapture_ms": recapture_ms,
            "apply_ms": float(np.mean(applied)) if applied else 0.0, "init_ms": init_ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=1500)
    ap.add_argument("--updates", type=int, default=6000)
    ap.add_argument("--rate", type=float, default=400.0)
    ap.add_argument("--batch", type=int, default=2000, help="maxOffsetsPerTrigger")
    ap.add_argument("--fragments", type=int, default=64)
    ap.add_argument("--variants", default="0,1,10")
    ap.add_argument("--quick", action="store_true", help="500 orders, 1500 updates")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "streaming_sketch.md"))
    args = ap.parse_args()
    if args.quick:
        args.orders, args.updates, args.rate = 500, 1500, 300.0
    from streaming_app.config import SparkConfig
    from streaming_app.spark_session import SessionOptions, build_session

    work = Path(tempfile.mkdtemp(prefix="ivm-bench-sketch-"))
    broker = EmbeddedBroker(work / "kafka", port=free_port())
    broker.start()
    spark = build_session(SparkConfig(master="local[2]", ui=False), SessionOptions(app_name="bench-sketch", ui=False))
    results = []
    try:
        for n in (int(x) for x in args.variants.split(",")):
            r = run_variant(broker, work, n, args, spark)
            print(json.dumps(r), flush=True)
            results.append(r)
    finally:
        spark.stop()
        broker.stop()
    plain = next((r for r in results if r["queries"] == 0), None)
    lines = ["# Streaming sketch maintenance (bench/streaming_sketch.py)", "",
             f"TPC-H SF0.01 subset ({args.orders} orders and their lineitems) loaded as CDC, then "
             f"{args.updates} random lineitem changes at {args.rate:.0f}/s while the job runs "
             f"(trigger 0.5 s, maxOffsetsPerTrigger {args.batch}, {args.fragments} fragments per sketch). "
             "Spark local[2] on a shared 2-core machine.", "",
             "| registered queries | batches | records/s | vs plain ingest | freshness p50 s | freshness p95 s "
             "| maintainer ms/batch (incl. CDF read + Delta writes) | full recapture ms (read + capture) "
             "| engine apply ms/batch | engine capture ms | capture / apply |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rel = f"{100 * r['rps'] / plain['rps']:.0f}%" if plain and plain["rps"] else "-"
        ratio = f"{r['init_ms'] / r['apply_ms']:.1f}x" if r["apply_ms"] else "-"
        lines.append(f"| {r['queries']} | {r['batches']} | {r['rps']:.0f} | {rel} | {r['fresh_p50']:.2f} | "
                     f"{r['fresh_p95']:.2f} | {r['maint_ms']:.0f} | {r['recapture_ms']:.0f} | "
                     f"{r['apply_ms']:.1f} | {r['init_ms']:.0f} | {ratio} |")
    lines += ["", "Freshness = batch end (the sketch MERGE commits before it) minus the send time of the "
              "batch's newest record; it includes waiting for the trigger and the batch's own Delta commits.", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
