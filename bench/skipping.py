"""Data skipping with provenance sketches: TPC-H Q3-, Q10- and Q18-like top-k queries over Delta,
run on Spark with and without the sketch's predicate.

Steps: generate TPC-H (tpchgen-cli) at ``--sf``; write customer, orders and lineitem as Delta
"mirrors" clustered by the partition attribute (``repartitionByRange(files, attr)`` sorted
within files - the layout ``ivmstream sketch layout --config F TABLE ATTR`` gives an existing
mirror with ``OPTIMIZE ... ZORDER BY (attr)``); capture each query's sketch with the engine
(operators.sketch) on equi-depth fragments of ``lineitem.l_orderkey``; then run each query on
Spark without and with the sketch predicate (streaming_app.sketch_query.run_query) and
report files / bytes selected by the Delta file statistics, wall time and result equality.

Usage: python bench/skipping.py [--sf 1] [--files 64] [--fragments 256]
Writes bench/results/skipping.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from connectors import delta_sink as sink  # noqa: E402
from streaming_app.config import parse_config  # noqa: E402

COLS = {
    "customer": {"c_custkey": "long", "c_name": "string", "c_nationkey": "long", "c_acctbal": "decimal(15,2)",
                 "c_mktsegment": "string"},
    "orders": {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)",
               "o_orderdate": "date", "o_shippriority": "int"},
    "lineitem": {"l_orderkey": "long", "l_linenumber": "int", "l_quantity": "decimal(15,2)",
                 "l_extendedprice": "decimal(15,2)", "l_discount": "decimal(15,2)", "l_returnflag": "string",
                 "l_shipdate": "date"},
}
PK = {"customer": ["c_custkey"], "orders": ["o_orderkey"], "lineitem": ["l_orderkey", "l_linenumber"]}
CLUSTER = {"customer": "c_custkey", "orders": "o_orderkey", "lineitem": "l_orderkey"}

QUERIES = {
    "Q3": ("SELECT l_orderkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority "
           "FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
           "WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1995-03-15' "
           "AND l_shipdate > DATE '1995-03-15' "
           "GROUP BY l_orderkey, o_orderdate, o_shippriority ORDER BY revenue DESC LIMIT 10"),
    "Q10": ("SELECT c_custkey, c_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue "
            "FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
            "WHERE o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01' AND l_returnflag = 'R' "
            "GROUP BY c_custkey, c_name ORDER BY revenue DESC LIMIT 20"),
    "Q18": ("SELECT o_orderkey, o_totalprice, SUM(l_quantity) AS qty FROM orders JOIN lineitem "
            "ON o_orderkey = l_orderkey GROUP BY o_orderkey, o_totalprice HAVING SUM(l_quantity) > 300 "
            "ORDER BY o_totalprice DESC LIMIT 100"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--files", type=int, default=64, help="Delta files per table")
    ap.add_argument("--fragments", type=int, default=256, help="fragments of lineitem.l_orderkey")
    ap.add_argument("--work", default=None, help="lake directory (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "skipping.md"))
    args = ap.parse_args()

    from operators.sketch import SketchMaintainer
    from streaming_app import sketch_maintainer as sm
    from streaming_app.demo_run import tpch_subset
    from streaming_app.sketch_query import run_query
    from streaming_app.spark_session import SessionOptions, build_session

    work = Path(args.work or tempfile.mkdtemp(prefix="ivm-bench-skip-"))
    cfg = parse_config({
        "job": {"name": "bench_skip", "lake_root": str(work / "lake"), "checkpoint_root": str(work / "ckpt")},
        "spark": {"master": "local[2]", "ui": False, "driver_memory": "4g"},
        "tables": [{"name": t, "topic": f"b.{t}", "primary_key": PK[t], "columns": c} for t, c in COLS.items()],
    })
    spark = build_session(cfg.spark, SessionOptions(app_name="bench-skipping", ui=False))
    lake = sink.Lake(cfg.lake_root)
    t0 = time.perf_counter()
    data_dir = tpch_subset(args.sf)
    print(f"[1/4] TPC-H SF{args.sf} in {data_dir} ({time.perf_counter() - t0:.0f}s)", flush=True)
    for t, cols in COLS.items():
        path = lake.mirror(t)
        if not sink.exists(spark, path):
            df = spark.read.parquet(str(data_dir / f"{t}.parquet")).select(*cols)
            for c, typ in cols.items():
                df = df.withColumn(c, df[c].cast(sink.spark_ddl_type(typ)))
            (df.repartitionByRange(args.files, CLUSTER[t]).sortWithinPartitions(CLUSTER[t])
             .write.format("delta").option("delta.enableChangeDataFeed", "true").save(path))
    print(f"[2/4] Delta tables clustered by key, {args.files} files each", flush=True)

    versions = {t: sink.latest_version(spark, lake.mirror(t)) for t in COLS}
    sm.ensure_tables(spark, lake)
    tables = {t: sink.read_version(spark, lake.mirror(t), versions[t], list(COLS[t])) for t in COLS}
    bounds = sm.compute_boundaries(spark, lake, "lineitem", "l_orderkey", args.fragments, versions["lineitem"])
    results = []
    for name, sql in QUERIES.items():
        reg = sm.Registration(name, sql, "lineitem", "l_orderkey", args.fragments, bounds, "eager",
                              versions["lineitem"], sink.utcnow())
        q = sm.QueryState(reg)
        t1 = time.perf_counter()
        q.tables = sm.check_query(cfg, name, sql, "lineitem", "l_orderkey")
        q.engine = SketchMaintainer.from_sql(sql, {"lineitem": reg.partition()})
        q.engine.initialize({t: tables[t] for t in q.tables})
        q.versions = {t: versions[t] for t in q.tables}
        capture_s = time.perf_counter() - t1
        sm.drop_query(spark, cfg, name)
        sm.append_registration(spark, lake, reg)
        sm.write_sketch_rows(spark, lake, [q], batch_id=-1, app_id=None)
        print(f"[3/4] {name}: sketch {len(q.fragments())}/{args.fragments + 1} fragments, captured in "
              f"{capture_s:.1f}s", flush=True)
        run_query(spark, cfg, sql)  # warm-up (JIT, file listing caches) for a fairer timing
        out = run_query(spark, cfg, sql, use_sketch=name)
        li_plain = _li_stats(lake, None)
        li_sk = _li_stats(lake, reg, q.fragments())
        results.append((name, len(q.fragments()), capture_s, out, li_plain, li_sk))
        print(f"[4/4] {name}: files {out['plain'].files} -> {out['sketch'].files}, bytes {out['plain'].bytes} -> "
              f"{out['sketch'].bytes}, {out['plain'].seconds:.2f}s -> {out['sketch'].seconds:.2f}s, "
              f"equal={out['equal']}", flush=True)
    _write(Path(args.out), args, results)
    spark.stop()
    return 0 if all(r[3]["equal"] for r in results) else 1


def _li_stats(lake, reg, fragments=None) -> dict:
    from streaming_app.sketch_query import file_stats, merged_runs

    if reg is None:
        return file_stats(lake.mirror("lineitem"))
    runs, has_null = merged_runs(reg, fragments)
    return file_stats(lake.mirror("lineitem"), "l_orderkey", runs, has_null)


def _write(path: Path, args, results) -> None:
    lines = [
        "# Data skipping with provenance sketches (bench/skipping.py)", "",
        f"TPC-H SF{args.sf}; customer, orders, lineitem as Delta tables of {args.files} files each, clustered by "
        f"their key (`ivmstream sketch layout --config F TABLE ATTR` does the same for a live mirror with "
        f"OPTIMIZE ... ZORDER BY); sketches on `lineitem.l_orderkey`, {args.fragments} equi-depth fragments, "
        "captured by the engine. Spark local[2] on this shared 2-core machine; time = one run after a warm-up.",
        "Files / bytes = Delta add actions whose min/max statistics overlap the query's tables (plain) or, for "
        "lineitem, the sketch's merged ranges (with sketch).", "",
        "| query | sketch fragments | capture s | lineitem files | lineitem bytes | lineitem reduction | "
        "all files | all bytes | total reduction | time s | results equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, nfr, cap, out, lp, ls in results:
        p, s = out["plain"], out["sketch"]
        lines.append(
            f"| {name} | {nfr}/{args.fragments + 1} | {cap:.1f} | {lp['files']} -> {ls['files']} | "
            f"{lp['bytes']:,} -> {ls['bytes']:,} | {lp['bytes'] / max(ls['bytes'], 1):.1f}x | "
            f"{p.files} -> {s.files} | {p.bytes:,} -> {s.bytes:,} | {p.bytes / max(s.bytes, 1):.1f}x | "
            f"{p.seconds:.2f} -> {s.seconds:.2f} | {out['equal']} |")
    lines += ["", "Queries:", ""] + [f"* {n}: `{q}`" for n, q in QUERIES.items()] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
