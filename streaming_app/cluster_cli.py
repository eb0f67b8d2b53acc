"""`ivmstream cluster start|stop|status` and `ivmstream submit`: the job on a Spark cluster.

``cluster`` runs a standalone master and workers of our own on loopback (streaming_app.cluster);
``submit`` hands the job to a master with spark-submit and everything it needs
(streaming_app.submit). ``add_commands(sub, common)`` is the one call cli.py makes.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from core.config import ENV, REPO_ROOT, env
from streaming_app import submit
from streaming_app.cluster import StandaloneCluster
from streaming_app.flags import int_in, non_empty, port, positive_seconds
from streaming_app.settings import load_config

DEFAULT_CLUSTER_DIR = REPO_ROOT / "var" / "spark"
_MEMORY = re.compile(r"[1-9][0-9]*[kmgt]", re.IGNORECASE)

def _env_help(text: str, key: str) -> str:
    return f"{text} [env {ENV[key]}]"

def memory(text: str) -> str:
    if not _MEMORY.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"must be an amount such as 512m or 2g, got {text!r}")
    return text.strip().lower()

def _cluster(args):

    return StandaloneCluster(Path(args.dir), port=args.port, ui_port=args.ui_port, workers=args.workers,
                             cores=args.cores, memory=args.memory)

def cmd_cluster(args) -> int:
    c = _cluster(args)
    if args.action in ("start", "stop"):
        for note in c.check_pid_files():  # a pid that is not this cluster's daemon is never signalled
            print(note)
    if args.action == "start":
        t0 = time.monotonic()
        c.start()
        st = c.status()
        print(f"Spark master ready at {c.url} with {st['workers_alive']} workers ({st['cores']} cores, "
              f"{st['memory_mb']} MB) in {time.monotonic() - t0:.1f}s; UI {c.ui_url}, logs in {c.home}")
    elif args.action == "stop":
        stopped = c.stop()
        print(f"stopped {', '.join(stopped)}" if stopped else "no cluster was running")
    else:
        st = c.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    return 0

def cmd_submit(args) -> int:

    cfg = load_config(args.config).with_overrides(bootstrap_servers=args.bootstrap_servers, lake_root=args.lake_root,
                                                  checkpoint_root=args.checkpoint_root, ui_port=args.ui_port)
    master = args.master or cfg.spark.master
    submit.check_master(master)
    run_args = []
    if args.available_now:
        run_args.append("--available-now")
    if args.duration is not None:
        run_args += ["--duration", str(args.duration)]
    if args.no_ui:
        run_args.append("--no-ui")
    if args.verbose:
        run_args.append("--verbose")
    for flag, value in (("--bootstrap-servers", args.bootstrap_servers), ("--lake-root", args.lake_root),
                        ("--checkpoint-root", args.checkpoint_root), ("--ui-port", args.ui_port)):
        if value is not None:  # the submitted `run` applies them as the local one would
            run_args += [flag, str(value)]
    argv, extra_env = submit.submit_command(cfg, args.config, master, run_args)
    if submit.build_py_files():
        print(f"built {submit.PY_FILES} (the project's packages for the executors)", flush=True)
    if args.print:
        print(submit.shell_line(argv, extra_env))
        return 0
    submit.exec_submit(argv, extra_env)
    return 0  # not reached

def add_commands(sub, common) -> None:
    """Register ``cluster`` and ``submit`` on the top-level parser."""
    c = sub.add_parser("cluster", help="run a Spark standalone master and workers (loopback, from the pyspark wheel)")
    c.add_argument("action", choices=["start", "stop", "status"])
    c.add_argument("--dir", type=non_empty, default=env("cluster_dir", str(DEFAULT_CLUSTER_DIR)),
                   help=_env_help("cluster home: pid files, logs, workers' work dirs (default var/spark)",
                                  "cluster_dir"))
    c.add_argument("--port", type=port, default=env("cluster_port", "7177"),
                   help=_env_help("master port on 127.0.0.1 (default 7177)", "cluster_port"))
    c.add_argument("--ui-port", type=port, default=env("cluster_ui_port", "8180"),
                   help=_env_help("master web UI port (default 8180); worker i serves its UI on this + i",
                                  "cluster_ui_port"))
    c.add_argument("--workers", type=int_in(1, 64), default=env("cluster_workers", "2"),
                   help=_env_help("number of workers (default 2)", "cluster_workers"))
    c.add_argument("--cores", type=int_in(1, 1024), default=env("cluster_cores", "1"),
                   help=_env_help("cores each worker offers (default 1)", "cluster_cores"))
    c.add_argument("--memory", type=memory, default=env("cluster_memory", "1g"),
                   help=_env_help("memory each worker offers its executors (default 1g)", "cluster_memory"))
    c.set_defaults(fn=cmd_cluster)

    s = sub.add_parser("submit", help="run the streaming job on a Spark cluster through spark-submit")
    common(s)
    s.add_argument("--duration", type=positive_seconds, default=None,
                   help="stop after S seconds (default: run until stopped)")
    s.add_argument("--available-now", action="store_true",
                   help="process everything on the topics now, then stop")
    s.add_argument("--verbose", action="store_true", help="show Spark's own log lines (WARN and up)")
    s.add_argument("--print", action="store_true",
                   help="print the spark-submit command (with its environment) instead of running it")
    s.set_defaults(fn=cmd_submit)
