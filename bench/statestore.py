"""Memory backend vs statestore backend: driver memory while sketch state grows, throughput,
2 executors vs 1, restart time. One run of each, side by side.

Workload: one CDC table t(id, g, v, p) through the real broker, ``--rows`` inserts then
``--updates`` updates of uniformly random ids (each of the ``--rows`` ids equally likely; no
deletes, so every id stays live); 1 and 10 registered sketches, each an aggregation
``GROUP BY id`` (one group per row: state grows with the table) with its own HAVING
threshold, partitioned on ``id`` with fixed boundaries. Every run is the job as its own
process (``ivmstream run --available-now``), on ``local[2]`` for the side-by-side runs and on
``local-cluster[E,1,1024]`` (E = 1, 2 executor JVMs) for the scaling pair; sampled every 0.2 s:
RSS of the driver's Python process, of the driver JVM, and of the executor JVMs.

    .venv/bin/python -m bench.statestore --rows 20000 --updates 5000

``--tpch SF``: TPC-H lineitem (l_orderkey, l_linenumber, l_quantity, l_extendedprice,
l_shipdate) at SF bulk-loaded into its Delta mirror once; per run a copy of it, 1, 3 or 10
sketches registered (``GROUP BY l_orderkey`` with HAVING on SUM or MAX, varied constants; one
group per order, so each sketch adds ~1.5 M groups at SF1), ``--batches`` x ``--batch`` random
lineitem changes (updates, deletes, inserts; ``bench.streaming_sketch.LineitemChanges``: each
live key of a uniform sample of 50,000 loaded rows equally likely, inserts into orders of that
sample) queued before the start. Run 1 starts over the
loaded mirror: capture at registration, then the batches; run 2 is a restart with as many
changes again. Each on ``local-cluster[2,1,2048]`` (executors in their own JVMs, so the driver's
RSS is the driver's): peak RSS of the driver Python, the driver JVM and the executors; capture
seconds; the state (Spark's stateOperators numRowsTotal / memoryUsedBytes for statestore, the
engine's state entries for memory); seconds from process start to run 2's first batch;
records/s of run 2's batches.

    .venv/bin/python -m bench.statestore --tpch 1 --sketches 1,3,10 --backends memory,statestore

Figures go to bench/results/statestore.md (statestore_tpch.md with --tpch), with the
machine's load average: it is shared.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from connectors.kafka import create_topics  # noqa: E402
from core.config import dump_toml  # noqa: E402
from streaming_app.settings import parse_config  # noqa: E402
from devstack.kafka_broker import EmbeddedBroker  # noqa: E402
from devstack.process import descendants, free_port  # noqa: E402
from devstack.producer import CdcProducer  # noqa: E402

COLUMNS = {"id": "long", "g": "long", "v": "long", "p": "long"}


def sketches(n: int, rows: int) -> list[dict]:
    step = max(rows // 16, 1)
    bounds = list(range(0, rows + step, step))
    return [{"name": f"q{i}", "sql": f"SELECT id, SUM(v) AS s FROM t GROUP BY id HAVING SUM(v) > {10 * i}",
             "partition": "t.id", "boundaries": bounds} for i in range(n)]


def config(root: Path, bootstrap: str, topic: str, backend: str, n_sketches: int, rows: int, master: str,
           max_offsets: int) -> dict:
    return {
        "job": {"name": f"b{backend[:3]}{n_sketches}", "lake_root": str(root / "lake"),
                "checkpoint_root": str(root / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": max_offsets},
        "spark": {"master": master, "ui": False, "driver_memory": "1g",
                  "shuffle_partitions": 4},
        "state": {"backend": backend, "cdc_buckets": 16},
        "tables": [{"name": "t", "topic": topic, "primary_key": ["id"], "columns": COLUMNS}],
        "sketches": sketches(n_sketches, rows),
    }


def produce(bootstrap: str, table, rows: int, updates: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    prod = CdcProducer(bootstrap)
    live = {}
    if updates == 0:
        for i in range(rows):
            r = {"id": i, "g": i % 100, "v": rnd.randrange(100), "p": rnd.randrange(1000)}
            prod.send(table, "c", None, r)
            live[i] = r
    else:
        for _ in range(updates):
            i = rnd.randrange(rows)
            r = {"id": i, "g": i % 100, "v": rnd.randrange(100), "p": rnd.randrange(1000)}
            prod.send(table, "u", {"id": i, "g": i % 100, "v": 0, "p": 0}, r)
    prod.close()


def _rss_mb(pid: int) -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cmd(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def run(config_path: Path, keep: Path | None = None) -> dict:
    """One job run to the end of the topic: seconds, first-batch seconds, RSS peaks (MB)."""
    t0, t0_utc = time.monotonic(), time.time()
    # PYTHONPATH: the executors' Python workers import this checkout too (local-cluster ships no
    # py-files; without it they take whatever the virtualenv's install points at)
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(config_path),
                             "--available-now", "--no-ui"], cwd=ROOT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"driver_py": 0.0, "driver_jvm": 0.0, "executors": 0.0, "workers": 0.0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak["driver_py"] = max(peak["driver_py"], _rss_mb(proc.pid))
            ex, jvm, wk = 0.0, 0.0, 0.0
            for c in descendants(proc.pid):
                cmd = _cmd(c)
                if b"CoarseGrainedExecutorBackend" in cmd:
                    ex += _rss_mb(c)
                elif b"java" in cmd and b"SparkSubmit" in cmd:
                    jvm = max(jvm, _rss_mb(c))
                elif b"pyspark" in cmd:
                    wk += _rss_mb(c)
            peak["executors"] = max(peak["executors"], ex)
            peak["workers"] = max(peak["workers"], wk)
            peak["driver_jvm"] = max(peak["driver_jvm"], jvm)
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    first = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if first is None and line.startswith("batch "):
            first = time.monotonic() - t0
    proc.wait()
    done.set()
    if keep is not None:
        keep.write_text("".join(lines))
    th.join()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n" + "".join(lines[-40:]))
    return {"s": time.monotonic() - t0, "first_batch_s": first, "t0_utc": t0_utc, **peak}


def batch_figures(lake: Path, after_utc: float) -> dict:
    """From the run's ``batches`` rows (delta-rs, no Spark): records, summed batch seconds, and
    the seconds from the process start to its first batch's start (restart cost)."""
    from deltalake import DeltaTable

    rows = [r for r in DeltaTable(str(lake / "batches")).to_pyarrow_table().to_pylist()
            if r["started_at"].timestamp() >= after_utc]
    rows.sort(key=lambda r: r["started_at"])
    # The statestore backend's keyed operators run on the executors inside the batch's first
    # collect, before the row's clock starts: their seconds are the step "operators".
    def busy(rs):
        return sum((r["finished_at"] - r["started_at"]).total_seconds()
                   + dict(r["step_ms"] or []).get("operators", 0.0) / 1000 for r in rs)

    return {"records": sum(r["records_in"] for r in rows), "batch_s": busy(rows), "batches": len(rows),
            "steady_records": sum(r["records_in"] for r in rows[1:]), "steady_s": busy(rows[1:]),
            "batch0_s": round((rows[0]["finished_at"] - rows[0]["started_at"]).total_seconds(), 1) if rows else None,
            "to_first_batch_s": rows[0]["started_at"].timestamp() - after_utc if rows else None}


LINEITEM = {"l_orderkey": "long", "l_linenumber": "int", "l_quantity": "decimal(15,2)",
            "l_extendedprice": "decimal(15,2)", "l_shipdate": "date"}


def tpch_sketches(n: int, fragments: int) -> list[dict]:
    out = []
    for i in range(n):
        if i % 2 == 0:
            sql = (f"SELECT l_orderkey, SUM(l_quantity) AS qty FROM lineitem GROUP BY l_orderkey "
                   f"HAVING SUM(l_quantity) > {250 + 5 * i}")
        else:
            sql = (f"SELECT l_orderkey, MAX(l_extendedprice) AS top FROM lineitem GROUP BY l_orderkey "
                   f"HAVING MAX(l_extendedprice) > {90000 + 1000 * i}")
        out.append({"name": f"q{i}", "sql": sql, "partition": "lineitem.l_orderkey", "fragments": fragments})
    return out


def tpch_config(root: Path, bootstrap: str, topic: str, backend: str, n: int, master: str, args) -> dict:
    return {
        "job": {"name": f"t{backend[:3]}{n}", "lake_root": str(root / "lake"), "checkpoint_root": str(root / "ckpt"),
                "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": args.batch},
        "spark": {"master": master, "ui": False, "driver_memory": "1g", "shuffle_partitions": 4,
                  # local-cluster[E,C,M]'s M is the worker's memory; an executor takes spark.executor.memory
                  # (1g unless set), which also caps its direct buffers (parquet's compressor at capture)
                  "conf": {"spark.executor.memory": f"{args.executor_mb}m"}},
        "state": {"backend": backend, "cdc_buckets": 64},
        "sketch": {"snapshot_every": 1000},  # the memory backend's snapshots are not what is compared here
        "tables": [{"name": "lineitem", "topic": topic, "primary_key": ["l_orderkey", "l_linenumber"],
                    "columns": LINEITEM}],
        "sketches": tpch_sketches(n, args.fragments),
    }


def build_tpch_base(base: Path, sf: float) -> None:
    """The lineitem mirror at ``sf``, loaded once (a Spark application of its own, then gone)."""
    if (base / "_done").exists():
        return
    code = f"""
import shutil, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from connectors import delta_sink as sink
from core.config import SparkConfig
from streaming_app.settings import parse_config
from streaming_app.demo_run import tpch_subset
from streaming_app.spark_session import SessionOptions, build_session
base = Path({str(base)!r})
shutil.rmtree(base, ignore_errors=True)
spark = build_session(SparkConfig(master="local[2]", ui=False, driver_memory="4g"), SessionOptions(app_name="base", ui=False))
cols = {LINEITEM!r}
cfg = parse_config({{"job": {{"lake_root": str(base)}}, "tables": [{{"name": "lineitem", "topic": "lineitem",
                    "primary_key": ["l_orderkey", "l_linenumber"], "columns": cols}}]}})
path = sink.ensure_mirror(spark, sink.Lake(base), cfg.table("lineitem"))
df = spark.read.parquet(str(tpch_subset({sf}) / "lineitem.parquet")).select(*cols)
for c, typ in cols.items():
    df = df.withColumn(c, df[c].cast(sink.spark_ddl_type(typ)))
df.repartitionByRange(16, "l_orderkey").sortWithinPartitions("l_orderkey", "l_linenumber").write.format("delta").mode("append").save(path)
print("base lineitem", spark.read.format("delta").load(path).count(), "rows", flush=True)
spark.stop()
(base / "_done").write_text("ok")
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def tpch_changes(base: Path, sf: float, seed: int):
    """A ``LineitemChanges`` over a sample of the loaded rows (bench/streaming_sketch.py's)."""
    import numpy as np
    import pyarrow.parquet as pq

    from bench.streaming_sketch import LineitemChanges
    from streaming_app.demo_run import tpch_subset

    li = pq.read_table(tpch_subset(sf) / "lineitem.parquet", columns=list(LINEITEM))
    idx = np.random.default_rng(seed).choice(li.num_rows, size=min(li.num_rows, 50_000), replace=False)
    rows = li.take(np.sort(idx)).to_pylist()
    for r in rows:
        r["l_linenumber"] = int(r["l_linenumber"])
    return LineitemChanges(rows, seed)


def _last_metrics(lake: Path, after_utc: float) -> dict:
    import json

    from deltalake import DeltaTable

    rows = [r for r in DeltaTable(str(lake / "batches")).to_pyarrow_table().to_pylist()
            if r["started_at"].timestamp() >= after_utc]
    rows.sort(key=lambda r: r["batch_id"])
    return json.loads(rows[-1]["metrics"] or "{}") if rows else {}


def tpch_main(args) -> None:
    import json
    import shutil

    work = Path(os.environ.get("BENCH_DIR", "/tmp/statestore/bench"))
    base = work / f"base-sf{args.tpch:g}"
    build_tpch_base(base, args.tpch)
    broker = EmbeddedBroker(work / "kafka", port=free_port()).start()
    master = f"local-cluster[2,1,{args.executor_mb}]"
    results = []
    try:
        for backend in args.backends.split(","):
            for n in (int(x) for x in args.sketches.split(",")):
                name = f"{backend}-sf{args.tpch:g}-{n}"
                root = work / name
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
                shutil.copytree(base, root / "lake")
                topic = f"tpch.{name}.{int(time.time())}"
                create_topics(broker.bootstrap, [topic], partitions=1)
                data = tpch_config(root, broker.bootstrap, topic, backend, n, master, args)
                path = root / "job.toml"
                path.write_text(dump_toml(data))
                table = parse_config(data).table("lineitem")
                gen = tpch_changes(base, args.tpch, seed=5)
                prod = CdcProducer(broker.bootstrap)

                def produce_changes(k: int) -> None:
                    for _ in range(k):
                        prod.send(table, *gen.next())
                    prod.flush()

                produce_changes(args.batches * args.batch)
                load1 = os.getloadavg()[0]
                first = run(path, keep=root / "run1.log")
                f1 = batch_figures(root / "lake", first["t0_utc"])
                produce_changes(args.batches * args.batch)
                load2 = os.getloadavg()[0]
                second = run(path, keep=root / "run2.log")
                f2 = batch_figures(root / "lake", second["t0_utc"])
                prod.close()
                m = _last_metrics(root / "lake", second["t0_utc"]).get("sketches", {})
                cap = {}
                ckpt = root / "ckpt" / data["job"]["name"]
                if backend == "statestore":
                    cap = json.loads((ckpt / "ivmstream_capture.json").read_text()) \
                        if (ckpt / "ivmstream_capture.json").exists() else {}
                    ops = m.get("state_operators", {})
                    state_rows = sum((o.get("numRowsTotal") or 0) for o in ops.values())
                    state_mb = sum((o.get("memoryUsedBytes") or 0) for o in ops.values()) / 2**20
                    capture_s = (cap.get("seconds") or {}).get("total")
                    prog = ckpt / "ivmstream_last_progress.json"
                    if prog.exists():
                        shutil.copy(prog, ROOT / "bench" / "results" / f"statestore_progress_sf{args.tpch:g}_{n}.json")
                    entries = sum(int(cap.get(k) or 0) for k in ("images", "groups", "fragments")) or None
                else:
                    state_rows, state_mb = m.get("state_size"), None
                    entries = state_rows
                    capture_s = _memory_capture_s(root / "run1.log")
                r = {"backend": backend, "sf": args.tpch, "sketches": n, "load": f"{load1:.1f}/{load2:.1f}",
                     "capture_s": capture_s, "run1_s": round(first["s"], 1),
                     "batch0_operators_s": _batch0_operators_s(root / "run1.log"),
                     "restart_to_first_batch_s": round(f2["to_first_batch_s"] or 0, 1),
                     "rec_per_s": round(f2["records"] / max(f2["batch_s"], 1e-9), 1),
                     "state_rows": state_rows, "entries": entries,
                     "state_mb": None if state_mb is None else round(state_mb),
                     "driver_py_mb": round(max(first["driver_py"], second["driver_py"])),
                     "driver_jvm_mb": round(max(first["driver_jvm"], second["driver_jvm"])),
                     "executors_mb": round(max(first["executors"], second["executors"])),
                     "workers_mb": round(max(first["workers"], second["workers"]))}
                results.append(r)
                print(r, flush=True)
                shutil.rmtree(root / "lake", ignore_errors=True)
    finally:
        broker.stop()
    out = Path(args.out or ROOT / "bench" / "results" / f"statestore_tpch_sf{args.tpch:g}.md")
    keys = list(results[0]) if results else []
    lines = [f"# statestore vs memory backend at TPC-H SF{args.tpch:g} (bench/statestore.py --tpch {args.tpch:g} "
             f"--sketches {args.sketches} --batches {args.batches} --batch {args.batch})", "",
             "One run each on a shared 2-core machine (load average at the start of run 1 / run 2 in `load`), "
             f"`{master}`. RSS in MB (peak over both runs); workers = the executors' Python "
             "workers. state_rows: Spark's stateOperators numRowsTotal summed over the three operators "
             "(statestore: pages of last images and of groups, and μ counters) or the engine's state entries "
             "(memory), after run 2's next-to-last batch; entries: last images + groups + fragments the "
             "statestore capture wrote (memory: as state_rows).", "",
             "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in results]
    out.write_text("\n".join(lines) + "\n")
    (out.with_suffix(".json")).write_text(json.dumps(results, indent=1))
    print("\n".join(lines))
    if results:
        plot_tpch(results, out.with_suffix(".png"))


def plot_tpch(results: list, path: Path) -> None:
    """Driver RSS (Python, JVM) and state rows per run: the driver should stay flat as state grows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['backend'][:3]} SF{r['sf']:g} x{r['sketches']}" for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.bar(names, [r["driver_py_mb"] for r in results], label="driver Python")
    a.bar(names, [r["driver_jvm_mb"] for r in results], bottom=[r["driver_py_mb"] for r in results],
          label="driver JVM")
    a.set_ylabel("peak RSS (MB)")
    a.set_title("driver memory")
    a.legend()
    b.bar(names, [(r.get("entries") or r["state_rows"] or 0) / 1e6 for r in results])
    b.set_ylabel("state entries (millions)")
    b.set_title("operator state")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _batch0_operators_s(log: Path) -> float | None:
    """Seconds of run 1's batch 0 keyed operators (statestore: with the initial state's load)."""
    import re

    m = re.search(r"batch +0:.*?operators (\d+)ms", log.read_text())
    return round(int(m.group(1)) / 1000, 1) if m else None


def _memory_capture_s(log: Path) -> float | None:
    """Seconds of the memory backend's captures at start, from its lines ("captured from the mirrors ... in N ms")."""
    import re

    ms = [float(x) for x in re.findall(r"captured from the mirrors, [\d,]+ rows in (\d+) ms", log.read_text())]
    return round(sum(ms) / 1000, 1) if ms else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--updates", type=int, default=5000)
    ap.add_argument("--max-offsets", type=int, default=5000)
    ap.add_argument("--only", default=None, help="comma list of run names (mem1, mem10, ss1, ss10, ss10x1)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tpch", type=float, default=None, help="TPC-H scale factor: the lineitem runs (see above)")
    ap.add_argument("--sketches", default="1,3,10")
    ap.add_argument("--backends", default="memory,statestore")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--fragments", type=int, default=256)
    ap.add_argument("--executor-mb", type=int, default=2048, help="--tpch: memory of each of the 2 executors")
    args = ap.parse_args()
    if args.tpch is not None:
        tpch_main(args)
        return
    args.out = args.out or str(ROOT / "bench" / "results" / "statestore.md")
    work = Path(os.environ.get("BENCH_DIR", "/tmp/statestore/bench"))
    broker = EmbeddedBroker(work / "kafka", port=free_port()).start()
    plan = [("mem1", "memory", 1, "local[2]"), ("mem10", "memory", 10, "local[2]"),
            ("ss1", "statestore", 1, "local[2]"), ("ss10", "statestore", 10, "local[2]"),
            ("ss10x1", "statestore", 10, "local-cluster[1,1,1024]"),
            ("ss10x2", "statestore", 10, "local-cluster[2,1,1024]")]
    if args.only:
        plan = [p for p in plan if p[0] in args.only.split(",")]
    results = []
    try:
        for name, backend, n, master in plan:
            root = work / name
            subprocess.run(["rm", "-rf", str(root)], check=True)
            root.mkdir(parents=True)
            topic = f"bench.{name}.{int(time.time())}"
            create_topics(broker.bootstrap, [topic], partitions=2)
            data = config(root, broker.bootstrap, topic, backend, n, args.rows, master, args.max_offsets)
            path = root / "job.toml"
            path.write_text(dump_toml(data))
            table = parse_config(data).table("t")
            produce(broker.bootstrap, table, args.rows, 0)
            load = os.getloadavg()[0]
            first = run(path)  # inserts: state grows to rows x sketches groups
            f1 = batch_figures(root / "lake", first["t0_utc"])
            produce(broker.bootstrap, table, args.rows, args.updates, seed=2)
            second = run(path)  # a restart, then the updates
            f2 = batch_figures(root / "lake", second["t0_utc"])
            r = {"name": name, "backend": backend, "sketches": n, "master": master, "load": round(load, 1),
                 "insert_batches": f1["batches"], "insert_rec_per_s": round(f1["records"] / max(f1["batch_s"], 1e-9), 1),
                 "insert_after_batch0_rec_per_s": round(f1["steady_records"] / max(f1["steady_s"], 1e-9), 1),
                 "restart_to_first_batch_s": round(f2["to_first_batch_s"] or 0, 1),
                 "update_rec_per_s": round(f2["records"] / max(f2["batch_s"], 1e-9), 1),
                 "driver_py_mb": round(max(first["driver_py"], second["driver_py"])),
                 "driver_jvm_mb": round(max(first["driver_jvm"], second["driver_jvm"])),
                 "executors_mb": round(max(first["executors"], second["executors"]))}
            results.append(r)
            print(r, flush=True)
    finally:
        broker.stop()
    keys = list(results[0]) if results else []
    lines = [f"# statestore vs memory backend (bench/statestore.py --rows {args.rows} --updates {args.updates})", "",
             "One run each on a shared 2-core machine (load average at each run's start in `load`).", "",
             "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in results]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if results:
        plot(results, Path(args.out).with_suffix(".png"))


def plot(results: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.bar(names, [r["driver_py_mb"] for r in results], label="driver Python")
    a.bar(names, [r["driver_jvm_mb"] for r in results], bottom=[r["driver_py_mb"] for r in results],
          label="driver JVM")
    a.set_ylabel("peak RSS (MB)")
    a.set_title("driver memory")
    a.legend()
    b.bar(names, [r["insert_rec_per_s"] for r in results], label="inserts (state grows)")
    b.bar(names, [r["update_rec_per_s"] for r in results], alpha=0.6, label="updates")
    b.legend()
    b.set_ylabel("records per second of batch time")
    b.set_title("throughput, 2 cores shared")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
