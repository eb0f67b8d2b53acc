"""Streaming sketch maintenance at TPC-H SF1: CDC throughput with 0, 1 and 10 registered
queries, freshness, and incremental maintenance vs recapturing every sketch each batch.

One run, per variant (0 = plain ingest, 1 query, 10 queries), each on its own copy of the same
lake and its own topics:

1. base: TPC-H orders and lineitem at ``--sf`` bulk-loaded once into Delta mirrors (change data
   feed on, files clustered by the key, as ``ivmstream sketch layout`` leaves them); each variant
   starts from a copy. Only the update stream goes through Kafka.
2. registration: the variant's queries (single-table HAVING, top-k over orders JOIN lineitem,
   MIN/MAX with HAVING, with varied constants) registered and captured at the mirrors' version.
3. backlog: ``--batches`` x ``--batch`` random lineitem changes (updates of quantity and price,
   deletes, inserts of new lines of existing orders) produced before the job starts; the job
   drains them at ``maxOffsetsPerTrigger = --batch``. Records/s = records / (last batch end -
   first batch start).
4. trickle: ``--trickle`` changes at ``--rate``/s while the job runs; freshness = batch end (its
   sketch MERGE is committed by then) minus the send time of the batch's newest record.
5. full maintenance: every sketch recaptured from the final mirrors (read the tables through
   Spark, capture with the engine) - what a job without incremental maintenance pays per batch.

Usage: python bench/streaming_sketch.py [--sf 1] [--batches 6] [--batch 2000] [--variants 0,1,10]
       python bench/streaming_sketch.py --quick     # SF0.1, 3 batches of 1000
Writes bench/results/streaming_sketch.md (+ .json, .png).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from connectors import delta_sink as sink  # noqa: E402
from connectors.kafka import reset_topics  # noqa: E402
from streaming_app.settings import parse_config  # noqa: E402
from devstack.kafka_broker import EmbeddedBroker  # noqa: E402
from devstack.process import free_port  # noqa: E402
from devstack.producer import CdcProducer  # noqa: E402

COLS = {
    "orders": (["o_orderkey"], {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)",
                                "o_orderdate": "date"}),
    "lineitem": (["l_orderkey", "l_linenumber"], {"l_orderkey": "long", "l_linenumber": "int",
                                                  "l_quantity": "decimal(15,2)",
                                                  "l_extendedprice": "decimal(15,2)", "l_shipdate": "date"}),
}
FILES = {"orders": 16, "lineitem": 64}


def queries(n: int) -> list[tuple[str, str, str, str]]:
    """n registered queries: (name, sql, table, attribute), three shapes with varied constants."""
    out = []
    for i in range(n):
        shape = i % 3
        if shape == 0:
            sql = (f"SELECT l_orderkey, SUM(l_quantity) AS qty FROM lineitem GROUP BY l_orderkey "
                   f"HAVING SUM(l_quantity) > {300 + 5 * i}")
            out.append((f"q{i}_having", sql, "lineitem", "l_orderkey"))
        elif shape == 1:
            sql = (f"SELECT o_orderkey, SUM(l_extendedprice) AS revenue FROM orders JOIN lineitem "
                   f"ON o_orderkey = l_orderkey GROUP BY o_orderkey ORDER BY revenue DESC LIMIT {5 + i}")
            out.append((f"q{i}_topk", sql, "orders", "o_orderkey"))
        else:
            sql = (f"SELECT o_custkey, MAX(o_totalprice) AS top FROM orders GROUP BY o_custkey "
                   f"HAVING MAX(o_totalprice) > {450000 + 5000 * i}")
            out.append((f"q{i}_minmax", sql, "orders", "o_orderkey"))
    return out


class LineitemChanges:
    """Plausible lineitem CDC: updates of quantity/price, deletes, inserts of new lines of
    existing orders, over a sample of the live rows (keys stay unique)."""

    def __init__(self, rows: list[dict], seed: int):
        self.rng = random.Random(seed)
        self.live = {(r["l_orderkey"], r["l_linenumber"]): r for r in rows}
        self.keys = list(self.live)
        self.orders = sorted({k[0] for k in self.keys})
        self.next_line = 8  # TPC-H orders have at most 7 lines

    def _pick(self):
        while True:
            i = self.rng.randrange(len(self.keys))
            k = self.keys[i]
            if k in self.live:
                return k

    def next(self):
        r = self.rng.random()
        if r < 0.5:
            k = self._pick()
            before = self.live[k]
            q = self.rng.randrange(1, 51)
            after = dict(before, l_quantity=Decimal(q), l_extendedprice=Decimal(f"{q * self.rng.uniform(900, 2000):.2f}"))
            self.live[k] = after
            return "u", before, after
        if r < 0.75:
            k = self._pick()
            return "d", self.live.pop(k), None
        o = self.rng.choice(self.orders)
        q = self.rng.randrange(1, 51)
        row = {"l_orderkey": o, "l_linenumber": self.next_line, "l_quantity": Decimal(q),
               "l_extendedprice": Decimal(f"{q * self.rng.uniform(900, 2000):.2f}"),
               "l_shipdate": dt.date(1995, 1, 1) + dt.timedelta(days=self.rng.randrange(1500))}
        self.next_line += 1
        k = (o, row["l_linenumber"])
        self.live[k] = row
        self.keys.append(k)
        return "c", None, row


def build_base(spark, base: Path, sf: float) -> None:
    from streaming_app.demo_run import tpch_subset

    if (base / "_done").exists():
        return
    shutil.rmtree(base, ignore_errors=True)
    cfg = parse_config({"job": {"lake_root": str(base)},
                        "tables": [{"name": t, "topic": t, "primary_key": pk, "columns": c}
                                   for t, (pk, c) in COLS.items()]})
    lake = sink.Lake(base)
    d = tpch_subset(sf)
    for t, (pk, cols) in COLS.items():
        path = sink.ensure_mirror(spark, lake, cfg.table(t))
        df = spark.read.parquet(str(d / f"{t}.parquet")).select(*cols)
        for c, typ in cols.items():
            df = df.withColumn(c, df[c].cast(sink.spark_ddl_type(typ)))
        (df.repartitionByRange(FILES[t], pk[0]).sortWithinPartitions(*pk)
         .write.format("delta").mode("append").save(path))
        print(f"  base {t}: {spark.read.format('delta').load(path).count():,} rows", flush=True)
    (base / "_done").write_text("ok")


def run_variant(broker, spark, work: Path, base: Path, n_queries: int, args, sample: list[dict]) -> dict:
    from operators.sketch import SketchMaintainer
    from streaming_app.runner import run_job
    from operators.sketch_safety.registration import check_query
    from streaming_app.sketches.register import register_query
    from streaming_app.sketches.registry import read_registry

    name = f"bench_sk{n_queries}"
    root = work / name
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base, root / "lake")
    data = {
        "job": {"name": name, "lake_root": str(root / "lake"), "checkpoint_root": str(root / "ckpt"),
                "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": broker.bootstrap, "max_offsets_per_trigger": args.batch},
        "spark": {"master": "local[2]", "ui": False},
        "sketch": {"snapshot_every": args.batches + 100},  # snapshots timed separately (registration)
        "tables": [{"name": t, "topic": f"{name}.{t}", "primary_key": pk, "columns": c}
                   for t, (pk, c) in COLS.items()],
    }
    cfg = parse_config(data)
    lake = sink.Lake(cfg.lake_root)
    # emptied first: a rerun in the same --work dir (broker storage kept) must not read the
    # previous run's records; one partition, so send order = offsets
    reset_topics(broker.bootstrap, cfg.topics, partitions=1)
    t0 = time.perf_counter()
    for qn, sql, table, attr in queries(n_queries):
        t1 = time.perf_counter()
        # captured when the job starts, all queries from one read of each mirror
        register_query(spark, cfg, qn, sql, [(table, attr, args.fragments)], capture=False)
        print(f"  [{name}] registered {qn} ({time.perf_counter() - t1:.0f}s)", flush=True)
    register_s = time.perf_counter() - t0

    li = cfg.table("lineitem")
    gen = LineitemChanges(sample, seed=5 + n_queries)
    backlog = args.batches * args.batch
    prod = CdcProducer(broker.bootstrap)
    for _ in range(backlog):
        op, before, after = gen.next()
        prod.send(li, op, before, after)
    prod.flush()
    sent_at: list[float] = []
    stop = threading.Event()
    drained = threading.Event()

    def last_offset() -> int:
        try:
            b = spark.read.format("delta").load(str(lake.output("batches"))).where(f"job = '{name}'").collect()
        except Exception:  # noqa: BLE001 - not created yet
            return -1
        return max((json.loads(r.kafka_offsets).get(li.topic, {}).get("0", [0, -1])[1] for r in b), default=-1)

    def driver():
        deadline = time.time() + args.timeout
        while time.time() < deadline and last_offset() < backlog - 1:
            time.sleep(2.0)
        drained.set()
        t_start = time.time()
        for i in range(args.trickle):  # freshness phase: a steady trickle the job keeps up with
            op, before, after = gen.next()
            prod.send(li, op, before, after)
            prod.flush()
            sent_at.append(time.time())
            delay = t_start + (i + 1) / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
        while time.time() < deadline and last_offset() < backlog + args.trickle - 1:
            time.sleep(1.0)
        stop.set()

    th = threading.Thread(target=driver)
    th.start()
    print(f"  [{name}] {backlog} changes queued; job running", flush=True)
    run_job(cfg, spark=spark, quiet=True, stop_event=stop)
    th.join()
    prod.close()

    rows = spark.read.format("delta").load(str(lake.output("batches"))).where(f"job = '{name}'").collect()
    rows = sorted((r for r in rows if r.records_in > 0), key=lambda r: r.batch_id)
    hi_of = {r.batch_id: json.loads(r.kafka_offsets).get(li.topic, {}).get("0", [0, -1])[1] for r in rows}
    back = [r for r in rows if hi_of[r.batch_id] < backlog]
    trick = [r for r in rows if hi_of[r.batch_id] >= backlog]
    fresh = [r.finished_at.timestamp() - sent_at[hi_of[r.batch_id] - backlog] for r in trick
             if 0 <= hi_of[r.batch_id] - backlog < len(sent_at)]
    maint, apply_ms, probes = [], [], []
    for r in back:
        m = json.loads(r.metrics).get("sketches")
        if m and m.get("per_query"):
            maint.append(m["ms"])
            apply_ms.append(sum(v.get("apply_ms", 0.0) for v in m["per_query"].values()))
            probes.append(sum(v.get("spark_probes", 0) for v in m["per_query"].values()))
    recs = sum(r.records_in for r in back)
    span = (back[-1].finished_at.timestamp() - back[0].started_at.timestamp()) if back else float("nan")
    batch_s = [r.finished_at.timestamp() - r.started_at.timestamp() for r in back]

    # full maintenance: recapture every sketch from the final mirrors (Spark read + engine capture)
    recapture_ms = read_ms = 0.0
    if n_queries:  # one read of each mirror shared by all captures (the cheapest full maintenance)
        t1 = time.perf_counter()
        versions = {t: sink.latest_version(spark, lake.mirror(t)) for t in COLS}
        full = {t: sink.read_version(spark, lake.mirror(t), versions[t], list(COLS[t][1])) for t in COLS}
        read_ms = (time.perf_counter() - t1) * 1000
        regs = list(read_registry(spark, lake).values())
        for i, reg in enumerate(regs):
            tabs = check_query(cfg, reg.name, reg.sql, reg.parts)
            SketchMaintainer.from_sql(reg.sql, reg.partitions()).initialize({t: full[t] for t in tabs})
            print(f"  [{name}] full recapture {i + 1}/{len(regs)}: {time.perf_counter() - t1:.0f}s so far",
                  flush=True)
        recapture_ms = (time.perf_counter() - t1) * 1000
        del full
    return {"queries": n_queries, "batches": len(back), "records": recs, "seconds": span,
            "rps": recs / span if span else float("nan"), "batch_s": float(np.mean(batch_s)) if batch_s else 0.0,
            "fresh_p50": float(np.percentile(fresh, 50)) if fresh else float("nan"),
            "fresh_p95": float(np.percentile(fresh, 95)) if fresh else float("nan"),
            "fresh_batches": len(fresh), "maint_ms": float(np.mean(maint)) if maint else 0.0,
            "apply_ms": float(np.mean(apply_ms)) if apply_ms else 0.0,
            "spark_probes": float(np.mean(probes)) if probes else 0.0,
            "recapture_ms": recapture_ms, "recapture_read_ms": read_ms, "register_s": register_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--batches", type=int, default=6, help="backlog batches per variant")
    ap.add_argument("--batch", type=int, default=2000, help="maxOffsetsPerTrigger (changes per batch)")
    ap.add_argument("--trickle", type=int, default=300, help="changes sent at --rate for freshness")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--fragments", type=int, default=256)
    ap.add_argument("--variants", default="0,1,10")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per variant")
    ap.add_argument("--work", default=None, help="work directory (keeps the base lake between runs)")
    ap.add_argument("--quick", action="store_true", help="SF0.1, 3 batches of 1000, 100-change trickle")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "streaming_sketch.md"))
    args = ap.parse_args()
    if args.quick:
        args.sf, args.batches, args.batch, args.trickle = 0.1, 3, 1000, 100
    from core.config import SparkConfig
    from streaming_app.demo_run import tpch_subset
    from streaming_app.spark_session import SessionOptions, build_session

    work = Path(args.work or tempfile.mkdtemp(prefix="ivm-bench-sketch-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / f"base-sf{args.sf}"
    broker = EmbeddedBroker(work / "kafka", port=free_port())
    broker.start()
    spark = build_session(SparkConfig(master="local[2]", ui=False, driver_memory="8g"),
                          SessionOptions(app_name="bench-sketch", ui=False))
    results = []
    try:
        t0 = time.perf_counter()
        build_base(spark, base, args.sf)
        li = pq.read_table(tpch_subset(args.sf) / "lineitem.parquet", columns=list(COLS["lineitem"][1]))
        idx = np.random.default_rng(1).choice(li.num_rows, size=min(li.num_rows, 200_000), replace=False)
        sample = li.take(np.sort(idx)).to_pylist()
        del li
        print(f"[1/2] base lake SF{args.sf} ready ({time.perf_counter() - t0:.0f}s)", flush=True)
        for n in (int(x) for x in args.variants.split(",")):
            print(f"[2/2] variant: {n} registered queries", flush=True)
            r = run_variant(broker, spark, work, base, n, args, sample)
            print(json.dumps(r), flush=True)
            results.append(r)
    finally:
        spark.stop()
        broker.stop()
    write(Path(args.out), args, results)
    return 0


def write(out: Path, args, results: list[dict]) -> None:
    plain = next((r for r in results if r["queries"] == 0), None)
    lines = ["# Streaming sketch maintenance (bench/streaming_sketch.py)", "",
             f"TPC-H SF{args.sf} orders + lineitem bulk-loaded into Delta mirrors; per variant "
             f"{args.batches} batches of {args.batch} lineitem changes (50% updates, 25% deletes, 25% inserts) "
             f"drained from a Kafka backlog, then {args.trickle} changes at {args.rate:.0f}/s for freshness. "
             f"{args.fragments} fragments per sketch; `[sketch] spark_join_rows` at its default (1,000,000), so "
             "both inputs of the top-k joins stay in their Delta mirrors and are probed through Spark. "
             "Spark local[2] on a 2-core machine shared with other jobs.", "",
             "| registered queries | batches | records/s | vs plain ingest | s/batch | freshness p50 s | "
             "freshness p95 s | sketch maintenance ms/batch (CDF reads, engine, Spark probes, Delta writes) | "
             "engine apply ms/batch | Spark probes/batch | full recapture ms (all sketches) | "
             "full / incremental per batch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rel = f"{100 * r['rps'] / plain['rps']:.0f}%" if plain and plain["rps"] else "-"
        ratio = f"{r['recapture_ms'] / r['maint_ms']:.1f}x" if r["maint_ms"] else "-"
        lines.append(f"| {r['queries']} | {r['batches']} | {r['rps']:.0f} | {rel} | {r['batch_s']:.1f} | "
                     f"{r['fresh_p50']:.2f} | {r['fresh_p95']:.2f} | {r['maint_ms']:.0f} | {r['apply_ms']:.1f} | "
                     f"{r['spark_probes']:.1f} | {r['recapture_ms']:.0f} | {ratio} |")
    lines += ["", "* records/s: backlog records / (last backlog batch end - first batch start); the plain "
              "variant is the same job with no registered query (MERGE into the mirrors dominates).",
              "* freshness: batch end (its sketch MERGE is committed by then) minus the send time of the "
              "batch's newest record, over the trickle batches.",
              "* full recapture: every registered sketch captured again from the final mirrors (tables read "
              "through Spark, engine capture), i.e. the per-batch cost of maintaining sketches without IMP.",
              "* the queries are captured when the job starts (one read of each mirror for all of them); "
              "that start is not in the batch figures.", "",
              "Raw figures: [streaming_sketch.json](streaming_sketch.json).", ""]
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sk = [r for r in results if r["queries"]]
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        ax[0].bar([str(r["queries"]) for r in results], [r["rps"] for r in results], color="tab:blue")
        ax[0].set_xlabel("registered queries")
        ax[0].set_ylabel("CDC records/s")
        ax[0].set_title("throughput")
        x = np.arange(len(sk))
        ax[1].bar(x - 0.2, [r["maint_ms"] / 1000 for r in sk], 0.4, label="incremental (per batch)")
        ax[1].bar(x + 0.2, [r["recapture_ms"] / 1000 for r in sk], 0.4, label="full recapture")
        ax[1].set_xticks(x, [str(r["queries"]) for r in sk])
        ax[1].set_xlabel("registered queries")
        ax[1].set_ylabel("seconds")
        ax[1].set_yscale("log")
        ax[1].legend(fontsize=8)
        ax[1].set_title("sketch maintenance per batch")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
    except ImportError:
        pass
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
