"""What two executors cost before they do any of the job's work: start-up and a first job.

`bench/cluster.py` times the demo workload locally and on the 2-worker cluster; with
``--updates 0 --snapshot-rows 10`` it times a workload of a few records, the cluster's fixed
cost. This bench splits the executors' share of that cost. It starts a standalone cluster of
``--workers`` x 1 core x 1500m and submits, ``--reps`` times per variant, a driver that does
nothing but wait for every executor to register, wait 3 s more, then run the same small job
twice (200,000 rows to Arrow, one task per executor). Printed per run: the seconds from the
session's start to the last executor's registration, the executors' CPU seconds until 3 s
after it (start-up) and during the first job (cold code), the JIT compiler threads' part of
each, and both jobs' wall time (the second is warm).

Variants: ``submit`` (the flags `ivmstream submit` passes for the demo's job),
``no-jars`` (without ``--jars`` and ``--py-files``: what fetching them costs), ``c1`` (HotSpot's
C1 compiler only, ``-XX:TieredStopAtLevel=1``: the cheapest JIT a JVM can start with).

Usage: python bench/cluster_boot.py [--reps 2] [--variants submit,no-jars,c1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

MARK = "CLUSTER_BOOT "


def _executors() -> tuple[float, float]:
    """(CPU seconds, of which JIT threads') of every executor JVM on this machine."""
    from cluster import _cpu_by_pid  # bench/cluster.py: CPU by process role, JIT threads apart

    rows = [(cpu, jit) for role, cpu, jit in _cpu_by_pid().values() if role == "executor JVMs"]
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def app(executors: int) -> None:
    """The submitted driver."""
    from pyspark.sql import SparkSession

    t0 = time.time()
    spark = SparkSession.builder.getOrCreate()
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < executors + 1:  # + the driver
        time.sleep(0.05)
    registered = time.time() - t0
    time.sleep(3)
    boot = _executors()
    jobs = []
    for k in (7, 5):
        t = time.time()
        spark.range(0, 200_000, 1, executors).selectExpr("id", f"id % {k} AS k", "CAST(id AS STRING) AS s").toArrow()
        jobs.append(time.time() - t)
        if k == 7:
            first = _executors()
    print(MARK + json.dumps({"registered_s": registered, "boot": boot, "first": first, "jobs_s": jobs}), flush=True)
    spark.stop()


def submit(cluster, variant: str, workers: int) -> dict:
    """Submit ``app`` with the flags `ivmstream submit` gives the demo's job (submit_command),
    changed as ``variant`` says."""
    from streaming_app.settings import load_config
    from streaming_app.demo_run import DEMO_DIR
    from streaming_app.submit import MAIN, build_py_files, submit_command

    build_py_files()
    cmd, env = submit_command(load_config(DEMO_DIR / "demo.toml"), DEMO_DIR / "demo.toml", cluster.url, [])
    argv = cmd[:cmd.index(str(MAIN))]  # spark-submit and its flags, without the job's script and arguments
    if variant == "no-jars":
        for flag in ("--jars", "--py-files"):
            at = argv.index(flag)
            del argv[at:at + 2]
    if variant == "c1":
        argv = [a + " -XX:TieredStopAtLevel=1" if a.startswith("spark.executor.extraJavaOptions=") else a
                for a in argv]
    argv += ["--conf", "spark.ui.enabled=false", __file__, "--app", str(workers)]
    env = {**os.environ, **env}
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        sys.exit(f"{variant}: the submitted driver failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(line[len(MARK):])


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--app":
        app(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--variants", default="submit,no-jars,c1")
    args = ap.parse_args()
    from devstack.process import free_port
    from streaming_app.cluster import StandaloneCluster

    home = Path(tempfile.mkdtemp(prefix="ivmstream-bench-boot-"))
    cluster = StandaloneCluster(home, port=free_port(), ui_port=free_port(), workers=args.workers, cores=1,
                                memory="1500m").start()
    print(f"{args.workers} executors; CPU seconds of all executor JVMs (JIT compiler threads in brackets)")
    print("| variant | registered after (s) | start-up CPU s | first job CPU s | first job s | second job s |")
    print("|---|---|---|---|---|---|")
    try:
        for _ in range(args.reps):
            for variant in args.variants.split(","):
                d = submit(cluster, variant, args.workers)
                (b, bj), (f, fj) = d["boot"], d["first"]
                print(f"| {variant} | {d['registered_s']:.1f} | {b:.1f} ({bj:.1f}) | {f - b:.1f} ({fj - bj:.1f}) | "
                      f"{d['jobs_s'][0]:.1f} | {d['jobs_s'][1]:.1f} |", flush=True)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
