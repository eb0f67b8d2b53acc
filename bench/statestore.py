"""Memory backend vs statestore backend: driver memory while sketch state grows, throughput,
2 executors vs 1, restart time. One run of each, side by side.

Workload: one CDC table t(id, g, v, p) through the real broker, ``--rows`` inserts then
``--updates`` random updates/deletes; 1 and 10 registered sketches, each an aggregation
``GROUP BY id`` (one group per row: state grows with the table) with its own HAVING
threshold, partitioned on ``id`` with fixed boundaries. Every run is the job as its own
process (``ivmstream run --available-now``), on ``local[2]`` for the side-by-side runs and on
``local-cluster[E,1,1024]`` (E = 1, 2 executor JVMs) for the scaling pair; sampled every 0.2 s:
RSS of the driver's Python process, of the driver JVM, and of the executor JVMs.

    .venv/bin/python -m bench.statestore --rows 20000 --updates 5000

Figures go to bench/results/statestore.md (with the machine's load average: it is shared).
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

from connectors.kafka_broker import EmbeddedBroker, create_topics, free_port  # noqa: E402
from connectors.producer import CdcProducer  # noqa: E402
from streaming_app.config import dump_toml, parse_config  # noqa: E402

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


def _children(pid: int) -> list[int]:
    """Every process below ``pid`` (a JVM starts its children from any of its threads, so
    /proc/<pid>/task/<pid>/children alone misses them: read each process's parent instead)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


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


def run(config_path: Path) -> dict:
    """One job run to the end of the topic: seconds, first-batch seconds, RSS peaks (MB)."""
    t0, t0_utc = time.monotonic(), time.time()
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(config_path),
                             "--available-now", "--no-ui"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"driver_py": 0.0, "driver_jvm": 0.0, "executors": 0.0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak["driver_py"] = max(peak["driver_py"], _rss_mb(proc.pid))
            ex, jvm = 0.0, 0.0
            for c in _children(proc.pid):
                cmd = _cmd(c)
                if b"CoarseGrainedExecutorBackend" in cmd:
                    ex += _rss_mb(c)
                elif b"java" in cmd and b"SparkSubmit" in cmd:
                    jvm = max(jvm, _rss_mb(c))
            peak["executors"] = max(peak["executors"], ex)
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
    busy = sum((r["finished_at"] - r["started_at"]).total_seconds() for r in rows)
    return {"records": sum(r["records_in"] for r in rows), "batch_s": busy, "batches": len(rows),
            "to_first_batch_s": rows[0]["started_at"].timestamp() - after_utc if rows else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--updates", type=int, default=5000)
    ap.add_argument("--max-offsets", type=int, default=5000)
    ap.add_argument("--only", default=None, help="comma list of run names (mem1, mem10, ss1, ss10, ss10x1)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "statestore.md"))
    args = ap.parse_args()
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
