"""The demo's workload drained locally and on a Spark standalone cluster, in one run.

The same Kafka records (the demo's snapshot of `sales`, TPC-H SF 0.01 and the edge graph, then
``--updates`` seeded random changes with a malformed record every 500: ~88,800 records, what
`make demo` reads in its 60 s) are drained with ``--available-now`` twice, each by its own job
(own lake and checkpoint) with the demo's config (two sketches, a triangle count, two views):

  * local: ``ivmstream run`` (``local[*]``, the demo's default);
  * cluster: ``ivmstream submit`` to a standalone master with ``--workers`` workers of
    ``--cores`` cores and ``--memory`` each, started here by `ivmstream cluster`'s code.

Figures: wall time from launching the command to its exit, the first batch's end after launch
(the ``batches`` table's ``finished_at``), the summed ``step_ms`` of every batch per step (the
driver's view: where a batch's time goes), and from Spark's event log (the data behind the
REST API's ``/api/v1/applications/<id>/stages``) the Spark jobs, the stages' wall time and the
executors' run time per step, by the job description each step sets
(``ivmstream batch <id>: <step>``). The ratio printed is cluster wall / local wall.

Also the start-up timeline (seconds after launch: application up, executors registered, the
first Spark job and task, batch 0's start and end), and the CPU seconds of each process while
a run lasts, with the JVMs' JIT compiler threads on their own (each executor JVM compiles
again what the local run's single JVM compiled once); each run's output and event log stay
in the temporary folder printed at the end.

Usage: python bench/cluster.py [--updates 12000] [--snapshot-rows N] [--workers 2] [--cores 1]
       [--memory 1500m] [--decode driver|executors] [--conf KEY=VALUE ...  (the cluster run only)]
``--updates 0 --snapshot-rows 10`` drains 57 records: what the cluster costs whatever the workload.
Writes bench/results/cluster.md and cluster.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from connectors.kafka import create_topics  # noqa: E402
from devstack.kafka_broker import EmbeddedBroker  # noqa: E402
from devstack.process import free_port  # noqa: E402
from devstack.producer import CdcProducer, RandomUpdates, conform, read_rows  # noqa: E402
from streaming_app.cluster import StandaloneCluster  # noqa: E402
from core.config import dump_toml  # noqa: E402
from streaming_app.settings import parse_config  # noqa: E402
from streaming_app.demo_run import DEMO_DIR, DEMO_PARTITIONS, TPCH_TABLES, EdgeChanges, tpch_subset  # noqa: E402

OUT = REPO / "bench" / "results"


def produce(cfg, bootstrap: str, updates: int, snapshot_rows: int = 0) -> int:
    """The demo's records: snapshot (its first ``snapshot_rows`` rows per table if not 0), then
    ``updates`` random changes (as demo_run streams them)."""
    create_topics(bootstrap, cfg.topics, partitions=DEMO_PARTITIONS)
    prod = CdcProducer(bootstrap)
    data = {"sales": conform(cfg.table("sales"), read_rows(DEMO_DIR / "sales.csv"))}
    tpch = tpch_subset()
    for t in TPCH_TABLES:
        data[t] = conform(cfg.table(t), read_rows(tpch / f"{t}.parquet"))
    edges = EdgeChanges(seed=7)
    data["edges"] = list(edges.live.values())
    if snapshot_rows:
        data = {name: rows[:snapshot_rows] for name, rows in data.items()}
    for name, rows in data.items():
        for row in rows:
            prod.send(cfg.table(name), "r", None, row)
    gens = {n: RandomUpdates(cfg.table(n), seed=i, live=data[n])
            for i, n in enumerate(("sales", "customer", "orders", "lineitem"))}
    gens["edges"] = edges
    names = list(gens)
    for i in range(1, updates + 1):
        name = names[(i - 1) % len(names)]
        op, before, after = gens[name].next()
        prod.send(cfg.table(name), op, before, after)
        if i % 500 == 0:
            prod.send_raw(cfg.table("sales").topic, b'{"id": 999999}', b'{"op": "c", "after": {"id": "x"')
    prod.close()
    return prod.sent


def job_config(home: Path, variant: str, bootstrap: str, decode: str, conf: dict | None = None) -> Path:
    data = tomllib.loads((DEMO_DIR / "demo.toml").read_text())
    events = home / f"events-{variant}"
    events.mkdir(parents=True, exist_ok=True)
    data["job"].update(name=f"bench-{variant}", lake_root=str(home / f"lake-{variant}"),
                       checkpoint_root=str(home / "ckpt"), decode=decode)
    data["kafka"]["bootstrap_servers"] = bootstrap
    data["spark"].update(ui=False, conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file:{events}",
                                         **(conf or {})})
    path = home / f"{variant}.toml"
    path.write_text(dump_toml(data))
    parse_config(data)  # the same checks the job makes
    return path


# Which process does what, by its command line (first match wins).
ROLES = (("executor JVMs", b"CoarseGrainedExecutorBackend"), ("driver JVM", b"SparkSubmit"),
         ("master and workers", b"org.apache.spark.deploy."), ("Python workers", b"pyspark."),
         ("Kafka broker", b"kafka.Kafka"), ("driver Python", b"streaming_app"))
JVM_ROLES = ("executor JVMs", "driver JVM")
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_by_pid() -> dict[int, tuple[str, float, float]]:
    """(role, CPU seconds so far, of which the JIT compiler threads') of every process of a
    known role (the JIT share only for JVMs: HotSpot names those threads "C1/C2 CompilerThread")."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read()
            stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = next((name for name, pat in ROLES if pat in cmd), None)
        if role:
            jit = 0
            if role in JVM_ROLES:
                for t in _listdir(f"/proc/{d}/task"):
                    try:
                        ts = open(f"/proc/{d}/task/{t}/stat").read()
                    except OSError:
                        continue
                    if ts[ts.index("(") + 1:].startswith(("C1 CompilerThre", "C2 CompilerThre")):
                        f = ts.rsplit(")", 1)[1].split()
                        jit += int(f[11]) + int(f[12])
            out[int(d)] = (role, (int(stat[11]) + int(stat[12])) / TICK, jit / TICK)
    return out


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, from /proc/stat."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f) - f[3] - f[4]) / TICK, sum(f) / TICK


class CpuMeter:
    """CPU seconds each role used while a run lasted, sampled every 0.2 s (a process that exits
    loses at most its last 0.2 s), and the machine's busy share over the run."""

    def __init__(self):
        self.base = {pid: (cpu, jit) for pid, (_, cpu, jit) in _cpu_by_pid().items()}
        self.last: dict[int, tuple[str, float, float]] = {}
        self.m0 = _machine_busy()
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)
        self._th.start()

    def _loop(self):
        while not self._stop.is_set():
            self.last.update(_cpu_by_pid())
            time.sleep(0.2)

    def stop(self) -> dict:
        self._stop.set()
        self._th.join()
        self.last.update(_cpu_by_pid())
        m1 = _machine_busy()
        roles: dict[str, float] = collections.defaultdict(float)
        jit: dict[str, float] = collections.defaultdict(float)
        for pid, (role, cpu, jit_cpu) in self.last.items():
            base_cpu, base_jit = self.base.get(pid, (0.0, 0.0))
            roles[role] += cpu - base_cpu
            if role in JVM_ROLES:
                jit[role] += jit_cpu - base_jit
        busy, total = m1[0] - self.m0[0], m1[1] - self.m0[1]
        return {"roles_s": {k: round(v, 1) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
                "jit_s": {k: round(v, 1) for k, v in jit.items()},
                "machine_busy_s": round(busy, 1), "machine_busy_share": round(busy / max(total, 1e-9), 3)}


def run_variant(variant: str, cfg_path: Path, master: str | None, log: Path) -> dict:
    cmd = [sys.executable, "-m", "streaming_app"]
    cmd += (["submit", "--master", master] if master else ["run"])
    cmd += ["--config", str(cfg_path), "--available-now", "--no-ui"]
    meter = CpuMeter()
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.time() - t0
    cpu = meter.stop()
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if r.returncode != 0:
        sys.exit(f"{variant} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return {"launched": t0, "wall_s": wall, "stdout_tail": r.stdout.splitlines()[-1:], "cpu": cpu}


def batches_figures(lake: Path, launched: float) -> dict:
    import deltalake

    rows = sorted(deltalake.DeltaTable(str(lake / "batches")).to_pyarrow_table().to_pylist(),
                  key=lambda r: r["batch_id"])
    steps: dict[str, float] = collections.defaultdict(float)
    for r in rows:
        for k, v in r["step_ms"]:
            steps[k.split(":")[0] if k.startswith("maintain:") else k] += v / 1000
        for op in r["operators"] or []:
            steps[f"  {op['name']}"] += op["ms"] / 1000
    return {"batches": len(rows), "records": sum(r["records_in"] for r in rows),
            "first_batch_s": rows[0]["finished_at"].timestamp() - launched if rows else None,
            "first_batch_started_s": rows[0]["started_at"].timestamp() - launched if rows else None,
            "batch_wall_s": sum((r["finished_at"] - r["started_at"]).total_seconds() for r in rows),
            "steps_s": dict(sorted(steps.items(), key=lambda kv: -kv[1]))}


def event_log_figures(events: Path) -> dict:
    """Spark jobs, stage wall time and executor run time per step, from the event log."""
    jobs_of: dict[str, int] = collections.Counter()
    stage_step: dict[int, str] = {}
    wall: dict[str, float] = collections.defaultdict(float)
    run: dict[str, float] = collections.defaultdict(float)
    tasks: dict[str, int] = collections.Counter()
    for ev in _events(events):
        kind = ev.get("Event")
        if kind == "SparkListenerJobStart":
            step = _step((ev.get("Properties") or {}).get("spark.job.description"))
            jobs_of[step] += 1
            for sid in ev.get("Stage IDs", []):
                stage_step[sid] = step
        elif kind == "SparkListenerStageCompleted":
            info = ev["Stage Info"]
            step = stage_step.get(info["Stage ID"], "(other)")
            if info.get("Submission Time") and info.get("Completion Time"):
                wall[step] += (info["Completion Time"] - info["Submission Time"]) / 1000
            for acc in info.get("Accumulables", []):
                if acc.get("Name") == "internal.metrics.executorRunTime":
                    run[step] += float(acc.get("Value") or 0) / 1000
            tasks[step] += int(info.get("Number of Tasks", 0))
    return {step: {"jobs": jobs_of[step], "stage_wall_s": round(wall[step], 1),
                   "executor_run_s": round(run[step], 1), "tasks": tasks[step]}
            for step in sorted(jobs_of, key=lambda s: -wall[s])}


def start_timeline(events: Path, launched: float) -> dict:
    """Seconds after launch at which the application started (SparkContext up), its last
    executor registered, the first batch's read job was submitted, its first task launched
    and that job ended (from the event log)."""
    out: dict[str, float] = {}
    first_job, first_stages = None, set()
    for ev in _events(events):
        kind = ev.get("Event")
        if kind == "SparkListenerApplicationStart":
            out.setdefault("application started", ev["Timestamp"] / 1000 - launched)
        elif kind == "SparkListenerExecutorAdded" and ev.get("Executor ID") != "driver":
            out["executors registered"] = ev["Timestamp"] / 1000 - launched
        elif kind == "SparkListenerJobStart" and first_job is None:
            first_job = ev["Job ID"]
            out["first Spark job submitted"] = ev["Submission Time"] / 1000 - launched
            first_stages = set(ev.get("Stage IDs", []))
        elif kind == "SparkListenerTaskStart" and ev.get("Stage ID") in first_stages and "first task launched" not in out:
            out["first task launched"] = ev["Task Info"]["Launch Time"] / 1000 - launched
        elif kind == "SparkListenerJobEnd" and first_job is not None and ev.get("Job ID") == first_job:
            out.setdefault("first Spark job done", ev["Completion Time"] / 1000 - launched)
    return {k: round(v, 1) for k, v in out.items()}


def _events(events: Path):
    for log in sorted(p for p in events.rglob("events_*") if p.is_file()):
        if log.suffix == ".zstd":
            import pyarrow as pa

            with pa.CompressedInputStream(str(log), "zstd") as f:
                text = f.read().decode()
        else:
            text = log.read_text()
        for line in text.splitlines():
            yield json.loads(line)


def _step(desc: str | None) -> str:
    """A Spark job's step from its description: ``ivmstream batch 3: view.reach - MERGE operation
    - ...`` -> ``view.reach [MERGE]``; Delta prefixes the jobs it starts itself (``Delta: ivmstream
    batch 3: view.reach: Compute snapshot for version: 7`` -> ``view.reach [Delta log/snapshot]``).
    Jobs outside a batch step (the query's start, offsets) fall under ``(outside batch steps)``."""
    desc = desc or ""
    kind = next((k for key, k in (("Compute snapshot", "Delta log/snapshot"), ("Filtering files", "Delta log/snapshot"),
                                  ("MERGE", "MERGE"), ("UPDATE", "UPDATE")) if key in desc), "")
    m = re.search(r"ivmstream batch \d+: ([\w. ]+?)(?::| - |$)", desc, re.M)
    step = m.group(1) if m else "(outside batch steps)"
    return f"{step} [{kind}]" if kind else step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=12_000)
    ap.add_argument("--snapshot-rows", type=int, default=0,
                    help="send only the first N snapshot rows of each table (0: all); with --updates 0, a "
                         "workload of a few records shows the cluster's fixed cost")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="1500m")
    ap.add_argument("--decode", choices=("driver", "executors"), default="driver")
    ap.add_argument("--tag", default="", help="a label for this run in the results")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the cluster run only (repeatable; to measure a setting)")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="ivmstream-bench-cluster-"))
    load = {"before": os.getloadavg()}
    broker = EmbeddedBroker(home / "kafka", port=free_port()).start()
    cluster = StandaloneCluster(home / "spark", port=free_port(), ui_port=free_port(), workers=args.workers,
                                cores=args.cores, memory=args.memory)
    res: dict = {"tag": args.tag, "decode": args.decode, "workers": args.workers, "cores": args.cores,
                 "memory": args.memory}
    try:
        extra = dict(kv.split("=", 1) for kv in args.conf)
        res["conf"] = extra
        paths = {v: job_config(home, v, broker.bootstrap, args.decode, extra if v == "cluster" else None)
                 for v in ("local", "cluster")}
        t = time.time()
        res["records_sent"] = produce(parse_config(tomllib.loads(paths["local"].read_text())), broker.bootstrap,
                                      args.updates, args.snapshot_rows)
        print(f"produced {res['records_sent']} records in {time.time() - t:.0f}s", flush=True)
        for variant in ("local", "cluster"):
            master = None
            if variant == "cluster":
                t = time.time()
                cluster.start()
                print(f"cluster of {args.workers} x {args.cores} core(s) x {args.memory} up in "
                      f"{time.time() - t:.0f}s", flush=True)
                master = cluster.url
            r = run_variant(variant, paths[variant], master, home / f"{variant}.log")
            if variant == "cluster":
                cluster.stop()
            r.update(batches_figures(home / f"lake-{variant}", r["launched"]))
            r["spark"] = event_log_figures(home / f"events-{variant}")
            r["start"] = {**start_timeline(home / f"events-{variant}", r["launched"]),
                          "batch 0 started (batches table)": round(r["first_batch_started_s"], 1),
                          "batch 0 done": round(r["first_batch_s"], 1)}
            res[variant] = r
            print(f"{variant}: {r['wall_s']:.0f}s wall, first batch done {r['first_batch_s']:.0f}s after launch, "
                  f"{r['batches']} batches, {r['records']} records", flush=True)
    finally:
        cluster.stop()
        broker.stop()
    load["after"] = os.getloadavg()
    res["load"] = load
    res["ratio"] = res["cluster"]["wall_s"] / res["local"]["wall_s"]
    report = render(res)
    print(report)
    print(f"logs and event logs in {home}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cluster.json").write_text(json.dumps(res, indent=1, default=str))
    (OUT / "cluster.md").write_text(report)
    plot(res, OUT / "cluster.png")
    return 0


def plot(res: dict, path: Path) -> None:
    """Per-step seconds (summed over batches) and wall time, local beside cluster."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s in dict.fromkeys([*res["local"]["steps_s"], *res["cluster"]["steps_s"]]) if not s.startswith(" ")]
    labels = ["wall", "first batch", *steps]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, variant in enumerate(("local", "cluster")):
        r = res[variant]
        vals = [r["wall_s"], r["first_batch_s"], *(r["steps_s"].get(s, 0) for s in steps)]
        ax.bar([x + 0.4 * i for x in range(len(labels))], vals, width=0.4, label=variant)
    ax.set_xticks([x + 0.2 for x in range(len(labels))], labels, rotation=20)
    ax.set_ylabel("seconds")
    ax.set_title(f"demo workload, {res['records_sent']} records: cluster / local = {res['ratio']:.2f}x "
                 f"(load {res['load']['before'][0]:.0f}-{res['load']['after'][0]:.0f})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def render(res: dict) -> str:
    lo, cl = res["local"], res["cluster"]
    out = [f"# Demo workload: local vs standalone cluster {res['tag']}".rstrip(), "",
           f"{res['records_sent']} records, decode = \"{res['decode']}\"; cluster: {res['workers']} workers x "
           f"{res['cores']} core(s) x {res['memory']}; one run each on a shared 2-core machine, load "
           f"{res['load']['before'][0]:.1f} before, {res['load']['after'][0]:.1f} after."
           + (f" Cluster settings measured: {', '.join(f'{k}={v}' for k, v in res['conf'].items())}."
              if res.get("conf") else ""), "",
           "| | local | cluster |", "|---|---|---|",
           f"| wall time, launch to exit (s) | {lo['wall_s']:.0f} | {cl['wall_s']:.0f} |",
           f"| first batch done after launch (s) | {lo['first_batch_s']:.0f} | {cl['first_batch_s']:.0f} |",
           f"| batches / records | {lo['batches']} / {lo['records']} | {cl['batches']} / {cl['records']} |",
           f"| time inside batches (s) | {lo['batch_wall_s']:.0f} | {cl['batch_wall_s']:.0f} |",
           f"| **cluster / local** | | **{res['ratio']:.2f}x** |", "",
           "Start-up, seconds after launch (event log):", "", "| | local | cluster |", "|---|---|---|",
           *(f"| {k} | {lo['start'].get(k, '-')} | {cl['start'].get(k, '-')} |"
             for k in dict.fromkeys([*lo["start"], *cl["start"]])), "",
           "Where a batch's time goes (sum over batches of `batches.step_ms`, seconds; indented: each "
           "maintainer's `operators.ms`):", "", "| step | local | cluster |", "|---|---|---|"]
    for step in dict.fromkeys([*lo["steps_s"], *cl["steps_s"]]):
        out.append(f"| {step} | {lo['steps_s'].get(step, 0):.1f} | {cl['steps_s'].get(step, 0):.1f} |")
    out += ["", "CPU seconds while each run lasted, by process (sampled from /proc every 0.2 s; the machine's "
            "busy share is over all its cores, other sessions' processes included):", "",
            "| process | local | cluster |", "|---|---|---|"]
    for role in dict.fromkeys([*lo["cpu"]["roles_s"], *cl["cpu"]["roles_s"]]):
        out.append(f"| {role} | {lo['cpu']['roles_s'].get(role, 0):.1f} | {cl['cpu']['roles_s'].get(role, 0):.1f} |")
        if role in JVM_ROLES:
            out.append(f"| &nbsp;&nbsp;of which JIT compiler threads | {lo['cpu'].get('jit_s', {}).get(role, 0):.1f} "
                       f"| {cl['cpu'].get('jit_s', {}).get(role, 0):.1f} |")
    out += [f"| sum | {sum(lo['cpu']['roles_s'].values()):.1f} | {sum(cl['cpu']['roles_s'].values()):.1f} |",
            f"| machine busy (s, share of {os.cpu_count()} cores) | {lo['cpu']['machine_busy_s']} "
            f"({lo['cpu']['machine_busy_share']:.0%}) | {cl['cpu']['machine_busy_s']} "
            f"({cl['cpu']['machine_busy_share']:.0%}) |"]
    out += ["", "Spark per step (event log): jobs, stages' wall time (s), executors' run time (s), tasks:", "",
            "| step | local jobs | local stage s | local run s | cluster jobs | cluster stage s | cluster run s "
            "| cluster tasks |", "|---|---|---|---|---|---|---|---|"]
    for step in dict.fromkeys([*lo["spark"], *cl["spark"]]):
        a, b = lo["spark"].get(step, {}), cl["spark"].get(step, {})
        out.append(f"| {step} | {a.get('jobs', 0)} | {a.get('stage_wall_s', 0)} | {a.get('executor_run_s', 0)} | "
                   f"{b.get('jobs', 0)} | {b.get('stage_wall_s', 0)} | {b.get('executor_run_s', 0)} | "
                   f"{b.get('tasks', 0)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
