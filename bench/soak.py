"""What a batch costs as the table grows: the mirror write per layout and table size.

``mirrors``: one table of 5 columns loaded with N rows (its snapshot), then batches of uniformly
random changes (``RandomUpdates``: inserts, updates and deletes of live keys, each live key equally
likely) written as the job writes them (``mirror_changes_frame`` + ``merge_mirror``: the final
image per key, one commit with its change feed and txn), into a copy-on-write mirror (delta-rs
MERGE) and a merge-on-read one (``connectors.dv_table``), alternately, the same batches into
both. Per layout and size: mirror ms per batch (p50 of the steady batches, the first after the
load apart), bytes written per change (the table folder's growth, every file: data, deletion
vectors, change data, log), and on disk / live after the batches (no maintenance: what the
batches leave). ``--spark-batches K`` also runs Spark's own deletion-vector MERGE on the largest
size (a Delta table written by Spark with ``delta.enableDeletionVectors``), the peer design.

Usage: python bench/soak.py mirrors [--sizes 50000,1000000] [--batches 21] [--batch 1000]
       [--spark-batches 4] [--out bench/results/mirrors]
Prints a table and writes <out>.md / .json / .png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from connectors import delta_sink as sink  # noqa: E402
from devstack.producer import RandomUpdates  # noqa: E402
from streaming_app.settings import parse_config  # noqa: E402

CFG = parse_config({"job": {"name": "soak"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                    "tables": [{"name": "orders", "topic": "t", "primary_key": "id",
                                "columns": {"id": "long", "customer": "long", "status": "string",
                                            "amount": "decimal(12,2)", "qty": "int"}}]})
TABLE = CFG.tables[0]
LAYOUTS = (sink.COPY_ON_WRITE, sink.MERGE_ON_READ)


def snapshot(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    import decimal

    amounts = [decimal.Decimal(int(x)) / 100 for x in rng.integers(0, 10**7, n)]
    return pa.table({"id": pa.array(np.arange(1, n + 1), pa.int64()),
                     "customer": pa.array(rng.integers(0, 10**5, n), pa.int64()),
                     "status": pa.array([f"status_{i}" for i in rng.integers(0, 20, n)]),
                     "amount": pa.array(amounts, pa.decimal128(12, 2)),
                     "qty": pa.array(rng.integers(0, 1000, n).astype(np.int32), pa.int32())})


def disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def live_bytes(path: str) -> int:
    return sum(sink.file_actions(path)["size_bytes"])


def batches(snap: pa.Table, count: int, size: int, seed: int = 7) -> list[dict]:
    """``count`` batches of ``size`` uniformly random changes, folded to the final image per key."""
    gen = RandomUpdates(TABLE, seed=seed, live=snap.to_pylist(), domain=10**5)
    out = []
    for _ in range(count):
        final: dict = {}
        for _ in range(size):
            op, before, after = gen.next()
            row = after if after is not None else before
            final[(row["id"],)] = after
        out.append(final)
    return out


def run_mirrors(sizes: list[int], count: int, size: int, spark_batches: int, out: Path) -> list[dict]:
    results = []
    for n in sizes:
        snap = snapshot(n)
        work = batches(snap, count, size)
        tmp = Path(tempfile.mkdtemp(prefix=f"soak-{n}-"))
        paths = {}
        for layout in LAYOUTS:
            lake = sink.Lake(tmp / layout)
            path = sink.ensure_mirror(None, lake, TABLE, layout)
            t = time.perf_counter()
            sink.merge_mirror(None, path, TABLE, _frame(snap), "soak", 0)
            print(f"  {n:,} rows, {layout}: loaded in {time.perf_counter() - t:.1f} s", flush=True)
            paths[layout] = path
        ms = {layout: [] for layout in LAYOUTS}
        written = {layout: 0 for layout in LAYOUTS}
        changes = 0
        for b, final in enumerate(work, start=1):
            changes += size
            for layout in (LAYOUTS if b % 2 else LAYOUTS[::-1]):  # alternate who goes first
                path = paths[layout]
                before = disk(path)
                t = time.perf_counter()
                sink.merge_mirror(None, path, TABLE, sink.mirror_changes_frame(TABLE, final), "soak", b)
                ms[layout].append((time.perf_counter() - t) * 1000)
                written[layout] += disk(path) - before
            print(f"  {n:,} rows, batch {b}: " + ", ".join(f"{lay} {ms[lay][-1]:,.0f} ms" for lay in LAYOUTS),
                  flush=True)
        for layout in LAYOUTS:
            steady = ms[layout][1:]
            results.append({"rows": n, "layout": layout, "first_ms": round(ms[layout][0], 1),
                            "p50_ms": round(statistics.median(steady), 1),
                            "p90_ms": round(sorted(steady)[int(0.9 * (len(steady) - 1))], 1),
                            "bytes_per_change": round(written[layout] / changes),
                            "disk_mb": round(disk(paths[layout]) / 2**20, 1),
                            "live_mb": round(live_bytes(paths[layout]) / 2**20, 1),
                            "ms_series": [round(x, 1) for x in ms[layout]]})
        if spark_batches and n == max(sizes):
            results.append(spark_dv_merge(snap, work[:spark_batches], tmp / "spark", size))
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def _frame(snap: pa.Table) -> pa.Table:
    """The snapshot as the mirror's changes frame (every row an upsert), without a dict per row."""
    return snap.append_column(sink.DELETED, pa.array(np.zeros(snap.num_rows, dtype=bool)))


def spark_dv_merge(snap: pa.Table, work: list[dict], where: Path, size: int) -> dict:
    """Spark's MERGE on a deletion-vector table of the same rows: the peer design, timed per batch."""
    from delta.tables import DeltaTable

    from streaming_app.spark_session import lake_session

    spark, _ = lake_session(lake=str(where.parent))
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    path = str(where)
    spark.createDataFrame(snap).write.format("delta").option("delta.enableDeletionVectors", "true") \
        .option("delta.enableChangeDataFeed", "true").save(path)
    ms, written = [], 0
    for final in work:
        frame = sink.mirror_changes_frame(TABLE, final)
        before = disk(path)
        t = time.perf_counter()
        src = spark.createDataFrame(frame)
        cols = {f"`{c}`": f"s.`{c}`" for c in TABLE.column_names}
        (DeltaTable.forPath(spark, path).alias("t").merge(src.alias("s"), "t.id = s.id")
         .whenMatchedDelete(condition=f"s.{sink.DELETED}").whenMatchedUpdate(set=cols)
         .whenNotMatchedInsert(condition=f"NOT s.{sink.DELETED}", values=cols).execute())
        ms.append((time.perf_counter() - t) * 1000)
        written += disk(path) - before
        print(f"  {snap.num_rows:,} rows, Spark DV MERGE: {ms[-1]:,.0f} ms", flush=True)
    steady = ms[1:] or ms
    return {"rows": snap.num_rows, "layout": "spark-dv-merge", "first_ms": round(ms[0], 1),
            "p50_ms": round(statistics.median(steady), 1), "p90_ms": round(max(steady), 1),
            "bytes_per_change": round(written / (size * len(work))), "disk_mb": round(disk(path) / 2**20, 1),
            "live_mb": None, "ms_series": [round(x, 1) for x in ms]}


def report(results: list[dict], out: Path, count: int, size: int) -> str:
    load = os.getloadavg()
    lines = [f"# Mirror write per batch: {count} batches of {size:,} uniformly random changes",
             "", f"Load average when the run ended: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min), "
             f"{os.cpu_count()} cores.", "",
             "| rows | layout | first batch ms | steady p50 ms | p90 ms | bytes written / change | on disk MB | live MB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['rows']:,} | {r['layout']} | {r['first_ms']:,.0f} | {r['p50_ms']:,.0f} | {r['p90_ms']:,.0f} "
                     f"| {r['bytes_per_change']:,} | {r['disk_mb']} | {r['live_mb'] if r['live_mb'] is not None else '-'} |")
    by = {(r["rows"], r["layout"]): r for r in results}
    sizes = sorted({r["rows"] for r in results})
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        lines.append("")
        for layout in LAYOUTS:
            if (lo, layout) in by and (hi, layout) in by:
                ratio = by[(hi, layout)]["p50_ms"] / max(by[(lo, layout)]["p50_ms"], 1e-9)
                lines.append(f"- {layout}: mirror ms at {hi:,} rows / at {lo:,} rows = **{ratio:.2f}x**")
        if (hi, sink.COPY_ON_WRITE) in by and (hi, sink.MERGE_ON_READ) in by:
            c, m = by[(hi, sink.COPY_ON_WRITE)], by[(hi, sink.MERGE_ON_READ)]
            lines.append(f"- at {hi:,} rows merge-on-read is **{c['p50_ms'] / m['p50_ms']:.1f}x** faster per batch "
                         f"and writes **{c['bytes_per_change'] / max(m['bytes_per_change'], 1):.0f}x** fewer bytes "
                         "per change than copy-on-write")
        if (hi, "spark-dv-merge") in by and (hi, sink.MERGE_ON_READ) in by:
            s, m = by[(hi, "spark-dv-merge")], by[(hi, sink.MERGE_ON_READ)]
            lines.append(f"- Spark's deletion-vector MERGE at {hi:,} rows: {s['p50_ms']:,.0f} ms per batch, "
                         f"**{s['p50_ms'] / m['p50_ms']:.0f}x** the merge-on-read writer's")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in results:
            ax.plot(range(1, len(r["ms_series"]) + 1), r["ms_series"], marker=".",
                    label=f"{r['layout']}, {r['rows']:,} rows")
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("mirror write ms (log)")
        ax.set_title(f"Mirror write per batch of {size:,} uniformly random changes")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
    except ImportError:
        pass
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mirrors", help="mirror write per batch by layout and table size")
    m.add_argument("--sizes", default="50000,1000000")
    m.add_argument("--batches", type=int, default=21)
    m.add_argument("--batch", type=int, default=1000)
    m.add_argument("--spark-batches", type=int, default=4)
    m.add_argument("--out", default=str(REPO / "bench" / "results" / "mirrors"))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    res = run_mirrors(sizes, a.batches, a.batch, a.spark_batches, Path(a.out))
    print(report(res, Path(a.out), a.batches, a.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
