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

``sf1``: the same measure on the TPC-H lineitem mirror (6M rows at SF1, a key of two columns).

``job``: the issue's own run, through the job: one table of 5 columns whose snapshot goes through
Kafka and one ``ivmstream run --available-now``, then ``--changes`` uniformly random changes
drained by a second run in batches of ``--batch`` (``max_offsets_per_trigger``), per layout and
table size. From the job's ``batches`` table: the mirror step and the whole batch (its
``finished_at - started_at``) per batch, the first after the start apart; bytes written per change
(the mirror folder's growth during the second run, maintenance's writes included); the mirror on
disk against its live files at the end; the mirror checked against the generator's live rows.

``soak``: the whole job (``ivmstream run`` in its own process) on an orders table of ``--rows``
rows with two sketches, a triangle graph and a reachability view, fed ``--rate`` changes/s for
``--minutes``, maintenance at its defaults: the lake on disk against its live files, the job's
RSS and each batch's time over time, and every output against its recount at the end.

Usage: python bench/soak.py mirrors [--sizes 50000,1000000] [--batches 21] [--batch 1000]
       [--spark-batches 4] [--out bench/results/mirrors]
       python bench/soak.py sf1 [--sf 1] [--batches 11] [--cow-batches 3]
       python bench/soak.py job [--sizes 50000,1000000] [--changes 20000] [--batch 1000]
       python bench/soak.py soak [--minutes 60] [--rows 1000000] [--rate 1000]
Prints a table and writes <out>.md / .json / .png.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
        # a restart: a new process's first batch (no snapshot, key index or rows in memory)
        from connectors import dv_table

        dv_table.drop_caches()
        final = batches(snap, count + 1, size)[-1]  # the next batch of the same generator
        t = time.perf_counter()
        sink.merge_mirror(None, paths[sink.MERGE_ON_READ], TABLE, sink.mirror_changes_frame(TABLE, final), "soak",
                          count + 1)
        restart_ms = (time.perf_counter() - t) * 1000
        print(f"  {n:,} rows, merge-on-read, first batch after a restart: {restart_ms:,.0f} ms", flush=True)
        for layout in LAYOUTS:
            steady = ms[layout][1:]
            results.append({"rows": n, "layout": layout, "first_ms": round(ms[layout][0], 1),
                            "p50_ms": round(statistics.median(steady), 1),
                            "p90_ms": round(sorted(steady)[int(0.9 * (len(steady) - 1))], 1),
                            "bytes_per_change": round(written[layout] / changes),
                            "restart_ms": round(restart_ms, 1) if layout == sink.MERGE_ON_READ else None,
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


def run_sf1(sf: float, count: int, size: int, cow_batches: int, out: Path) -> str:
    """The TPC-H lineitem mirror at scale factor ``sf`` (6M rows at SF1): batches of ``size``
    uniformly random changes (60% updates of a live row's quantity and price, 20% deletes of a
    live row, 20% inserts of new lines), the live keys kept in arrays so that each live key is
    equally likely; merge-on-read for ``count`` batches, copy-on-write for ``cow_batches``."""
    import decimal

    from pyarrow.compute import max as pc_max

    from bench.harness.datasets import load_tpch
    from streaming_app.demo_run import DEMO_DIR
    from streaming_app.settings import load_config

    table = load_config(DEMO_DIR / "demo.toml").table("lineitem")
    schema = sink.arrow_schema(table)
    t0 = time.perf_counter()
    li = load_tpch(sf, ("lineitem",))["lineitem"].select(table.column_names).cast(schema)
    print(f"  lineitem at SF{sf:g}: {li.num_rows:,} rows, generated/read in {time.perf_counter() - t0:.1f} s",
          flush=True)
    rng = np.random.default_rng(3)
    # per live key: its row in the snapshot (>= 0) or -1 - k for the k-th inserted row
    live_pos = np.arange(li.num_rows)
    next_order = int(pc_max(li.column("l_orderkey"))) + 1
    inserted: list[dict] = []
    template = li.slice(0, 1).to_pylist()[0]

    def draw() -> dict:
        """One batch: distinct live keys picked uniformly for updates and deletes, new keys inserted."""
        nonlocal live_pos, next_order
        final: dict = {}
        kinds = rng.random(size)
        n_old = int((kinds >= 0.2).sum())
        picks = rng.choice(live_pos.size, n_old, replace=False)
        gone = []
        for p, kind in zip(picks.tolist(), kinds[kinds >= 0.2].tolist()):
            src = int(live_pos[p])
            row = li.slice(src, 1).to_pylist()[0] if src >= 0 else inserted[-1 - src]
            key = (row["l_orderkey"], row["l_linenumber"])
            if kind < 0.4:
                final[key] = None
                gone.append(p)
            else:
                final[key] = dict(row, l_quantity=decimal.Decimal(int(rng.integers(1, 50))),
                                  l_extendedprice=decimal.Decimal(int(rng.integers(100, 10**7))) / 100)
        live_pos = np.delete(live_pos, gone)
        for _ in range(size - n_old):
            new = dict(template, l_orderkey=next_order, l_linenumber=1)
            next_order += 1
            inserted.append(new)
            final[(new["l_orderkey"], 1)] = new
        live_pos = np.concatenate([live_pos, -np.arange(len(inserted) - (size - n_old), len(inserted)) - 1])
        return final

    tmp = Path(tempfile.mkdtemp(prefix="soak-sf1-"))
    lines = [f"# TPC-H lineitem mirror at SF{sf:g} ({li.num_rows:,} rows): batches of {size:,} uniformly random "
             "changes", ""]
    res = {}
    for layout, n in ((sink.MERGE_ON_READ, count), (sink.COPY_ON_WRITE, cow_batches)):
        if not n:
            continue
        path = sink.ensure_mirror(None, sink.Lake(tmp / layout), table, layout)
        t = time.perf_counter()
        sink.merge_mirror(None, path, table, _frame(li), "sf1", 0)
        load_s = time.perf_counter() - t
        ms, written = [], 0
        for b in range(1, n + 1):
            frame = sink.mirror_changes_frame(table, draw())
            before = disk(path)
            t = time.perf_counter()
            sink.merge_mirror(None, path, table, frame, "sf1", b)
            ms.append((time.perf_counter() - t) * 1000)
            written += disk(path) - before
            print(f"  SF{sf:g} {layout} batch {b}: {ms[-1]:,.0f} ms", flush=True)
        steady = ms[1:] or ms
        res[layout] = (load_s, ms[0], statistics.median(steady), max(steady), written / (size * n))
        shutil.rmtree(tmp / layout, ignore_errors=True)
    load = os.getloadavg()
    lines += [f"Load average when the run ended: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, {os.cpu_count()} cores.",
              "", "| layout | load s | first batch ms | steady p50 ms | max ms | bytes written / change |",
              "|---|---:|---:|---:|---:|---:|"]
    for layout, (load_s, first, p50, mx, bpc) in res.items():
        lines.append(f"| {layout} | {load_s:,.1f} | {first:,.0f} | {p50:,.0f} | {mx:,.0f} | {bpc:,.0f} |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    shutil.rmtree(tmp, ignore_errors=True)
    return text


# -- the soak: the whole job for an hour --------------------------------------------------------

SOAK_SKETCHES = [
    {"name": "big_customers", "sql": "SELECT customer, SUM(qty) AS q FROM orders GROUP BY customer HAVING SUM(qty) > 9000",
     "partition": "orders.customer", "fragments": 64},
    {"name": "busy_status", "sql": "SELECT status, COUNT(*) AS n FROM orders GROUP BY status HAVING COUNT(*) > 50100",
     "partition": "orders.id", "fragments": 64},
]


def _job_config(root: Path, bootstrap: str, layout: str, cap: int) -> dict:
    return {"job": {"name": "table", "lake_root": str(root / "lake"), "checkpoint_root": str(root / "ckpt"),
                    "mirrors": layout},
            "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": cap},
            "spark": {"master": "local[2]", "ui": False},
            "tables": [{"name": "orders", "topic": "table.orders", "primary_key": ["id"],
                        "columns": {"id": "long", "customer": "long", "status": "string",
                                    "amount": "decimal(12,2)", "qty": "int"}}]}


def _run_job(root: Path, data: dict) -> None:
    import subprocess

    from core.config import dump_toml

    (root / "job.toml").write_text(dump_toml(data))
    with open(root / "job.log", "a") as log:
        rc = subprocess.call([sys.executable, "-m", "streaming_app", "run", "--config", str(root / "job.toml"),
                              "--no-ui", "--available-now"], stdout=log, stderr=subprocess.STDOUT)
    if rc:
        raise RuntimeError(f"the job failed (rc {rc}): see {root / 'job.log'}")


def run_job_table(sizes: list[int], changes: int, size: int, out: Path) -> str:
    """The issue's table through the job, per table size and mirror layout."""
    from connectors.kafka import create_topics
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port
    from devstack.producer import CdcProducer

    results = []
    for n in sizes:
        snap = snapshot(n)
        for layout in (sink.MERGE_ON_READ, sink.COPY_ON_WRITE):
            root = Path(tempfile.mkdtemp(prefix=f"table-{n}-"))
            broker = EmbeddedBroker(root / "kafka", port=free_port())
            broker.start()
            try:
                cfg = parse_config(_job_config(root, broker.bootstrap, layout, size))
                orders = cfg.tables[0]
                create_topics(broker.bootstrap, cfg.topics, partitions=1)
                prod = CdcProducer(broker.bootstrap)
                for r in snap.to_pylist():
                    prod.send(orders, "r", None, r)
                prod.flush()
                t = time.perf_counter()
                _run_job(root, _job_config(root, broker.bootstrap, layout, 100_000))
                load_s = time.perf_counter() - t
                gen = RandomUpdates(orders, seed=11, live=snap.to_pylist(), domain=10**5)
                for _ in range(changes):
                    prod.send(orders, *gen.next())
                prod.flush()
                prod.close()
                mirror = root / "lake" / "mirrors" / "orders"
                before, loaded = disk(str(mirror)), len(_job_batches(root / "lake"))
                _run_job(root, _job_config(root, broker.bootstrap, layout, size))
                rows = _job_batches(root / "lake")[loaded:]
                got = sink.read_table(str(mirror)).sort_by("id").to_pylist()
                want = sorted(gen.live.values(), key=lambda r: r["id"])
                whole = [(b["finished_at"] - b["started_at"]).total_seconds() * 1000 for b in rows]
                steps = [b["step_ms"] if isinstance(b["step_ms"], dict) else dict(b["step_ms"]) for b in rows]
                mir = [st.get("mirror", 0.0) for st in steps]
                res = {"rows": n, "layout": layout, "batches": len(rows), "load_s": round(load_s, 1),
                       "mirror_ms": round(statistics.median(mir[1:]), 1), "batch_ms": round(statistics.median(whole[1:]), 1),
                       "first_mirror_ms": round(mir[0], 1), "first_batch_ms": round(whole[0], 1),
                       "bytes_per_change": round((disk(str(mirror)) - before) / changes),
                       "disk_mb": round(disk(str(mirror)) / 2**20, 1), "live_mb": round(live_bytes(str(mirror)) / 2**20, 1),
                       "exact": got == [dict(r) for r in want], "batch_ms_series": [round(x, 1) for x in whole]}
                results.append(res)
                print(f"  {n:,} rows, {layout}: {res}", flush=True)
            finally:
                broker.stop()
                shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    lines = [f"# The issue's table through the job: {changes:,} uniformly random changes in batches of {size:,}", "",
             f"Load average at the end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, {os.cpu_count()} cores. "
             "Steady batches: the p50 of the batches after the first of the run; the first apart.", "",
             "| table | layout | mirror ms per batch | batch ms | first batch ms (mirror) | bytes written per change "
             "| mirror on disk / live | mirror equal to the source |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['rows']:,} rows | {r['layout']} | {r['mirror_ms']:,.0f} | {r['batch_ms']:,.0f} | "
                     f"{r['first_batch_ms']:,.0f} ({r['first_mirror_ms']:,.0f}) | {r['bytes_per_change']:,} | "
                     f"{r['disk_mb'] / max(r['live_mb'], 1e-9):.1f}x ({r['disk_mb']:,.1f} MB for {r['live_mb']:,.1f}) | "
                     f"{'yes' if r['exact'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    return text


def soak_config(root: Path, bootstrap: str) -> dict:
    return {
        "job": {"name": "soak", "lake_root": str(root / "lake"), "checkpoint_root": str(root / "ckpt"),
                "trigger_interval_s": 2},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 20000},
        "spark": {"master": "local[2]", "ui": False},
        "tables": [{"name": "orders", "topic": "soak.orders", "primary_key": ["id"],
                    "columns": {"id": "long", "customer": "long", "status": "string", "amount": "decimal(12,2)",
                                "qty": "int"}},
                   {"name": "edges", "topic": "soak.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long", "cost": "double"}}],
        "sketches": SOAK_SKETCHES,
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected"}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
    }


def _soak_producer(cfg_data: dict, rows: int, rate: float, seconds: float, out: str, sent, snap_n, done,
                   halt) -> None:
    """The snapshot (``rows`` orders, the edges), then ``rate`` changes/s for ``seconds``: orders
    updated (half), inserted and deleted (a quarter each) uniformly at random (19 of 20 changes),
    edges (1 of 20). At the
    end the live rows go to ``out`` (parquet) for the final comparison."""
    from devstack.producer import CdcProducer
    from streaming_app.demo_run import EdgeChanges

    cfg = parse_config(cfg_data)
    orders, edges_t = cfg.table("orders"), cfg.table("edges")
    prod = CdcProducer(cfg.kafka.bootstrap_servers)
    snap = snapshot(rows).to_pylist()
    # as many inserts as deletes, so the table stays at ``rows`` (session 19's run used the default
    # mix, 50% inserts / 20% deletes: its table grew from 1.0 M to about 2.0 M rows in the hour)
    gen = RandomUpdates(orders, seed=5, live=snap, domain=1000, mix=(0.25, 0.5, 0.25))
    edges = EdgeChanges(seed=7)
    for r in snap:
        prod.send(orders, "r", None, r)
    for r in edges.live.values():
        prod.send(edges_t, "r", None, r)
    prod.flush()
    sent.value = snap_n.value = prod.sent
    print(f"soak: snapshot of {rows:,} orders and {len(edges.live)} edges sent", flush=True)
    t0, i = time.monotonic(), 0
    while not halt.is_set() and time.monotonic() - t0 < seconds:
        if i % 20 == 19:
            prod.send(edges_t, *edges.next())
        else:
            prod.send(orders, *gen.next())
        i += 1
        if i % 200 == 0:
            sent.value = prod.sent
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                halt.wait(delay)
    prod.flush()
    sent.value = prod.sent
    prod.close()
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(list(gen.live.values()), sink.arrow_schema(orders)), out + ".orders.parquet")
    pq.write_table(pa.Table.from_pylist(list(edges.live.values()), sink.arrow_schema(edges_t)), out + ".edges.parquet")
    done.set()


def _rss_mb(pid: int) -> tuple[float, float]:
    """Resident memory, MB, of a process (the driver's Python) and of its children (its JVM)."""
    def rss(p: int) -> float:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return rss(pid), sum(rss(c) for c in children)


def _disk_parts(lake: Path) -> dict:
    """The lake on disk in MB: all of it, the log folders, the change data, and the data and
    deletion-vector files the tables no longer reference (kept for the retention)."""
    total = logs = cdf = 0
    for d, _, fs in os.walk(lake):
        n = sum(os.path.getsize(os.path.join(d, f)) for f in fs)
        total += n
        if "_delta_log" in d:
            logs += n
        elif "_change_data" in d:
            cdf += n
    live = sum(sum(sink.file_actions(str(p))["size_bytes"]) for p in _tables(lake))
    mb = 2**20
    return {"disk_mb": round(total / mb, 1), "live_mb": round(live / mb, 1), "log_mb": round(logs / mb, 1),
            "cdf_mb": round(cdf / mb, 1), "replaced_mb": round((total - live - logs - cdf) / mb, 1)}


def _tables(lake: Path) -> list[Path]:
    """The Delta tables of the lake: its outputs and its mirrors."""
    folders = [lake, lake / "mirrors"]
    return [p for f in folders if f.is_dir() for p in f.iterdir() if (p / "_delta_log").is_dir()]


def _job_batches(lake: Path) -> list[dict]:
    try:
        t = sink.read_table(str(lake / "batches"), columns=["batch_id", "started_at", "finished_at", "records_in", "step_ms"])
    except Exception:  # noqa: BLE001 - no batch yet
        return []
    return sorted(t.to_pylist(), key=lambda r: r["batch_id"])


def run_soak(minutes: float, rows: int, rate: float, out: Path) -> str:
    import multiprocessing
    import signal
    import subprocess

    from connectors.kafka import create_topics
    from core.config import dump_toml
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port

    root = Path(tempfile.mkdtemp(prefix="soak-"))
    broker = EmbeddedBroker(root / "kafka", port=free_port())
    broker.start()
    proc = job = None
    try:
        data = soak_config(root, broker.bootstrap)
        cfg = parse_config(data)
        (root / "soak.toml").write_text(dump_toml(data))
        create_topics(broker.bootstrap, cfg.topics, partitions=1)
        mp = multiprocessing.get_context("spawn")
        sent, snap_n, done, halt = mp.Value("q", 0), mp.Value("q", 0), mp.Event(), mp.Event()
        live_out = str(root / "live")
        proc = mp.Process(target=_soak_producer, args=(data, rows, rate, minutes * 60, live_out, sent, snap_n, done,
                                                                halt))
        proc.start()
        log = open(root / "job.log", "w")
        job = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(root / "soak.toml"),
                                "--no-ui"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        lake = root / "lake"
        samples = []
        t0 = time.monotonic()
        while True:
            time.sleep(15)
            batches = _job_batches(lake)
            read = sum(b["records_in"] for b in batches)
            py, jvm = _rss_mb(job.pid)
            samples.append({"s": round(time.monotonic() - t0, 1), **_disk_parts(lake),
                            "rss_mb": round(py + jvm, 1), "py_mb": round(py, 1), "jvm_mb": round(jvm, 1),
                            "batches": len(batches), "read": read, "sent": sent.value, "snapshot": snap_n.value})
            print(f"soak: {samples[-1]}", flush=True)
            if job.poll() is not None:
                raise RuntimeError(f"the job ended early: see {root / 'job.log'}")
            if done.is_set() and read >= sent.value:
                break
        job.send_signal(signal.SIGINT)
        job.wait(timeout=120)
        return soak_report(root, cfg, samples, minutes, rows, rate, out)
    finally:
        if proc is not None and proc.is_alive():
            halt.set()
            proc.join(timeout=30)
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        broker.stop()


def soak_report(root: Path, cfg, samples: list[dict], minutes: float, rows: int, rate: float, out: Path) -> str:
    import networkx as nx
    import pyarrow.parquet as pq

    from operators.sketch import RangePartition
    from streaming_app.sketches.tables import bounds_from_json
    from tests.oracles.sketch_reference import reference_sketch

    lake = root / "lake"
    problems = []
    want = pq.read_table(str(root / "live.orders.parquet")).sort_by("id").to_pylist()
    got = sink.read_table(str(lake / "mirrors" / "orders")).sort_by("id").to_pylist()
    if want != got:
        problems.append(f"orders mirror: {len(got):,} rows, the producer's live rows {len(want):,}")
    edges = pq.read_table(str(root / "live.edges.parquet")).to_pylist()
    g = nx.Graph()
    g.add_edges_from((e["src"], e["dst"]) for e in edges if e["src"] != e["dst"])
    counts = sink.read_table(str(lake / "triangle_counts")).to_pylist()
    last = max(counts, key=lambda c: c["batch_id"]) if counts else {"triangles": None}
    if last["triangles"] != sum(nx.triangles(g).values()) // 3:
        problems.append(f"triangles {last['triangles']} != networkx {sum(nx.triangles(g).values()) // 3}")
    d = nx.DiGraph()
    d.add_edges_from((e["src"], e["dst"]) for e in edges)
    closure = {(x, y) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = {(int(r["src"]), int(r["dst"])) for r in sink.read_table(str(lake / "reachability")).to_pylist()}
    if reach != closure:
        problems.append(f"reachability: {len(reach ^ closure)} pairs differ from networkx")
    mirrors = {"orders": sink.read_table(str(lake / "mirrors" / "orders"))}
    sk = {(r["query"], r["table_name"]): r for r in sink.read_table(str(lake / "sketches")).to_pylist()}
    for r in sink.read_table(str(lake / "registered_queries")).to_pylist():
        if not r["boundaries"]:
            continue
        part = {r["partition_table"]: RangePartition(r["attribute"], bounds_from_json(r["boundaries"]))}
        fr = reference_sketch(r["sql"], mirrors, part)[r["partition_table"]]
        row = sk.get((r["name"], r["partition_table"]))
        if row is None or sorted(row["fragments"]) != fr:
            problems.append(f"sketch {r['name']}: differs from its recapture")
    batches = _job_batches(lake)
    snap_n = samples[-1].get("snapshot", 0)
    ms, steps, seen = [], [], 0  # the steady batches: those after the snapshot was read
    for b in batches:
        if seen >= snap_n:
            st = dict(b["step_ms"]) if not isinstance(b["step_ms"], dict) else b["step_ms"]
            ms.append((b["finished_at"], sum(st.values())))
            steps.append(st)
        seen += b["records_in"]
    start = ms[0][0] if ms else None
    first10 = [m for t, m in ms if (t - start).total_seconds() < 600]
    last10 = [m for t, m in ms if (ms[-1][0] - t).total_seconds() < 600]
    # where a batch's time went, per step: p50 of the first and of the last 10 minutes
    early = [st for (t, _), st in zip(ms, steps) if (t - start).total_seconds() < 600]
    late = [st for (t, _), st in zip(ms, steps) if (ms[-1][0] - t).total_seconds() < 600]
    names = sorted({k for st in steps for k in st})
    by_step = {k: (statistics.median([st.get(k, 0.0) for st in early]) if early else 0.0,
                   statistics.median([st.get(k, 0.0) for st in late]) if late else 0.0) for k in names}
    stalls: dict[str, list[float]] = {}  # the maintenance lines of the job: ms per action kind
    for line in (root / "job.log").read_text(errors="replace").splitlines():
        m = re.match(r"maintenance: (\w+) .*\(([\d,.]+) ms\)$", line.strip())
        if m:
            stalls.setdefault(m.group(1), []).append(float(m.group(2).replace(",", "")))
    steady = [x for x in samples if snap_n and x["read"] >= snap_n] or samples
    rss = [x["rss_mb"] for x in steady]
    mid = statistics.median(rss)
    rss_first = statistics.median([x["rss_mb"] for x in steady if x["s"] - steady[0]["s"] < 600])
    rss_last = statistics.median([x["rss_mb"] for x in steady if steady[-1]["s"] - x["s"] < 600])
    end = samples[-1]
    kept = end["replaced_mb"] + end["cdf_mb"] + end["log_mb"]
    changes = max(end["sent"] - snap_n, 1)
    load = os.getloadavg()
    lines = [f"# Soak: {minutes:g} min at {rate:,.0f} changes/s, orders of {rows:,} rows, 2 sketches, a triangle "
             "graph, a view, maintenance at its defaults", "",
             f"Load average at the end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, {os.cpu_count()} cores.", "",
             f"- batches: {len(batches):,} ({len(ms):,} after the snapshot); per-batch p50 first 10 min "
             f"{statistics.median(first10):,.0f} ms, last 10 min {statistics.median(last10):,.0f} ms "
             f"(last/first {statistics.median(last10) / statistics.median(first10):.2f})"
             if first10 and last10 else "- too few batches",
             f"- the orders mirror: {rows:,} rows after the snapshot, {len(got):,} at the end",
             f"- disk at the end {end['disk_mb']:,.1f} MB: live files {end['live_mb']:,.1f} MB, and what the "
             f"retention keeps {kept:,.1f} MB (files the tables replaced {end['replaced_mb']:,.1f}, change data "
             f"{end['cdf_mb']:,.1f}, logs {end['log_mb']:,.1f}); disk / (3 x live + kept) "
             f"{end['disk_mb'] / (3 * end['live_mb'] + kept):.2f}; kept per change after the snapshot "
             f"{kept * 2**20 / changes:,.0f} B ({changes:,} changes)",
             f"- job RSS (Python driver + JVM) after the snapshot: median {mid:,.0f} MB, min {min(rss):,.0f} "
             f"({min(rss) / mid - 1:+.0%}), max {max(rss):,.0f} ({max(rss) / mid - 1:+.0%}), first {rss[0]:,.0f}, "
             f"last {rss[-1]:,.0f}; median of the first 10 min {rss_first:,.0f}, of the last 10 min {rss_last:,.0f} "
             f"({rss_last / rss_first - 1:+.0%}); Python {steady[0].get('py_mb', 0):,.0f} -> {end.get('py_mb', 0):,.0f} MB, "
             f"JVM {steady[0].get('jvm_mb', 0):,.0f} -> {end.get('jvm_mb', 0):,.0f} MB",
             "- per step, p50 ms of the first 10 min -> of the last 10 min: " + ", ".join(
                 f"{k} {a:,.0f} -> {z:,.0f}" for k, (a, z) in by_step.items() if max(a, z) >= 1),
             "- maintenance, the batch's wait per action: " + (", ".join(
                 f"{k} {len(v)}x, median {statistics.median(v):,.0f} ms, max {max(v):,.0f} ms"
                 for k, v in sorted(stalls.items())) or "none ran"),
             f"- outputs against their recounts: {'all equal' if not problems else '; '.join(problems)}"]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"samples": samples, "batch_ms": [m for _, m in ms], "step_ms": steps,
                                                    "problems": problems}, default=str, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
        xs = [x["s"] / 60 for x in samples]
        a1.plot(xs, [x["disk_mb"] for x in samples], label="lake on disk")
        a1.plot(xs, [x["live_mb"] for x in samples], label="live files")
        a1.plot(xs, [x.get("replaced_mb", 0) for x in samples], label="replaced files (kept for the retention)")
        a1.plot(xs, [x.get("cdf_mb", 0) for x in samples], label="change data")
        a1.set_ylabel("MB")
        a1.legend(fontsize=7)
        t0 = samples[0]["s"]
        if ms:
            off = (start - ms[0][0]).total_seconds()  # 0: the steady batches on the samples' clock below
            first_s = next((x["s"] for x in samples if snap_n and x["read"] >= snap_n), t0)
            a2.plot([(first_s + off + (t - start).total_seconds()) / 60 for t, _ in ms], [m for _, m in ms], ".",
                    ms=2)
        a2.set_ylabel("batch ms")
        a3.plot(xs, [x["rss_mb"] for x in samples], label="job RSS")
        a3.plot(xs, [x.get("py_mb", 0) for x in samples], label="Python driver")
        a3.plot(xs, [x.get("jvm_mb", 0) for x in samples], label="JVM")
        a3.set_ylabel("MB")
        a3.legend(fontsize=7)
        a3.set_xlabel("minutes")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
    except ImportError:
        pass
    shutil.rmtree(root, ignore_errors=True) if not problems else None
    return text


def report(results: list[dict], out: Path, count: int, size: int) -> str:
    load = os.getloadavg()
    lines = [f"# Mirror write per batch: {count} batches of {size:,} uniformly random changes",
             "", f"Load average when the run ended: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min), "
             f"{os.cpu_count()} cores.", "",
             "The first batch follows the load in the same process; *after a restart* is one more batch",
             "in a process that has nothing of the table in memory (it reads the key column and the rows of",
             "the files the batch touches).", "",
             "| rows | layout | first batch ms | steady p50 ms | p90 ms | after a restart ms | bytes written / change "
             "| on disk MB | live MB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rs = f"{r['restart_ms']:,.0f}" if r.get("restart_ms") is not None else "-"
        lines.append(f"| {r['rows']:,} | {r['layout']} | {r['first_ms']:,.0f} | {r['p50_ms']:,.0f} | {r['p90_ms']:,.0f} | {rs} "
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
    f = sub.add_parser("sf1", help="the TPC-H lineitem mirror: mirror write per batch")
    f.add_argument("--sf", type=float, default=1.0)
    f.add_argument("--batches", type=int, default=11)
    f.add_argument("--batch", type=int, default=1000)
    f.add_argument("--cow-batches", type=int, default=3)
    f.add_argument("--out", default=str(REPO / "bench" / "results" / "mirrors_sf1"))
    j = sub.add_parser("job", help="the issue's table through the job: mirror and batch ms, bytes per change")
    j.add_argument("--sizes", default="50000,1000000")
    j.add_argument("--changes", type=int, default=20000)
    j.add_argument("--batch", type=int, default=1000)
    j.add_argument("--out", default=str(REPO / "bench" / "results" / "mirrors_job"))
    k = sub.add_parser("soak", help="the whole job at a steady change rate, disk and batch time over time")
    k.add_argument("--minutes", type=float, default=60)
    k.add_argument("--rows", type=int, default=1_000_000)
    k.add_argument("--rate", type=float, default=1000)
    k.add_argument("--out", default=str(REPO / "bench" / "results" / "soak"))
    a = ap.parse_args()
    if a.cmd == "soak":
        print(run_soak(a.minutes, a.rows, a.rate, Path(a.out)))
        return 0
    if a.cmd == "job":
        print(run_job_table([int(x) for x in a.sizes.split(",")], a.changes, a.batch, Path(a.out)))
        return 0
    if a.cmd == "sf1":
        print(run_sf1(a.sf, a.batches, a.batch, a.cow_batches, Path(a.out)))
        return 0
    sizes = [int(s) for s in a.sizes.split(",")]
    res = run_mirrors(sizes, a.batches, a.batch, a.spark_batches, Path(a.out))
    print(report(res, Path(a.out), a.batches, a.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
