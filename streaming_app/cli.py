"""The `ivmstream` command line: broker, run, produce, demo.

Every flag that has an environment variable shows it in ``--help``; bad input ends with a
one-line error and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import sys
import time
from pathlib import Path

from operators.errors import IvmError
from streaming_app.config import ENV, REPO_ROOT, env, load_config

DEFAULT_BROKER_DIR = REPO_ROOT / "var" / "kafka"


def _env_help(text: str, key: str) -> str:
    return f"{text} [env {ENV[key]}]"


def _broker(args):
    from connectors.kafka_broker import EmbeddedBroker

    return EmbeddedBroker(Path(args.dir), port=args.port)


def cmd_broker(args) -> int:
    b = _broker(args)
    if args.action == "start":
        t0 = time.monotonic()
        b.start()
        print(f"Kafka broker ready on {b.bootstrap} (pid {b.pid()}, {time.monotonic() - t0:.1f}s); "
              f"data in {b.data_dir}")
    elif args.action == "stop":
        print("stopped" if b.stop() else "no broker was running")
    else:
        st = b.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    return 0


def _job_config(args):
    cfg = load_config(args.config)
    return cfg.with_overrides(bootstrap_servers=args.bootstrap_servers, master=args.master,
                              ui=False if getattr(args, "no_ui", False) else None)


def cmd_run(args) -> int:
    from streaming_app.runner import run_job

    cfg = _job_config(args)
    res = run_job(cfg, duration_s=args.duration, available_now=args.available_now)
    t = res.totals
    print(f"stopped after {res.seconds:.0f}s: {t['batches']} batches, {t['records']} records, "
          f"{t['events']} events applied, {t['quarantined']} quarantined, {t['tombstones']} tombstones")
    return 0


def cmd_produce(args) -> int:
    from tqdm import tqdm

    from connectors.producer import CdcProducer, RandomUpdates, conform, read_rows

    cfg = load_config(args.config).with_overrides(bootstrap_servers=args.bootstrap_servers)
    table = cfg.table(args.table)
    from connectors.kafka_broker import create_topics

    create_topics(cfg.kafka.bootstrap_servers, [table.topic])
    prod = CdcProducer(cfg.kafka.bootstrap_servers)
    if args.edges_workload:
        events = _edge_workload(args, table)
        for op, before, after in tqdm(events, desc=f"{args.edges_workload} edges", unit="ev"):
            prod.send(table, op, before, after)
    elif args.file and Path(args.file).suffix.lower() in (".edges", ".el"):
        from connectors.producer import read_edge_list

        src, dst = table.column_names[:2]
        data = read_edge_list(args.file, src, dst)
        for row in tqdm(data.to_pylist(), desc=f"edge list {table.name}", unit="edge"):
            prod.send(table, "r", None, {**{c: None for c in table.column_names}, **row})
    elif args.file:
        rows = conform(table, read_rows(args.file))
        for row in tqdm(rows, desc=f"load {table.name}", unit="rec"):
            prod.send(table, "r", None, row)
    else:
        live = conform(table, read_rows(args.seed_file)) if args.seed_file else None
        gen = RandomUpdates(table, seed=args.seed, live=live)
        interval = 1.0 / args.rate if args.rate > 0 else 0.0
        t0 = time.monotonic()
        for i in tqdm(range(args.count), desc=f"updates {table.name}", unit="ev"):
            op, before, after = gen.next()
            prod.send(table, op, before, after)
            if interval:
                delay = t0 + (i + 1) * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
    prod.close()
    print(f"sent {prod.sent} records to {table.topic}")
    return 0


def _edge_workload(args, table):
    """Signed edge stream of a triangle workload, as Debezium events on the edge table."""
    from connectors.producer import edge_events
    from operators.triangles import workloads as w

    if args.edges_workload == "powerlaw":
        src, dst, wt = w.power_law_edges(args.edges, seed=args.seed)
        if args.updates:
            us, ud, uw = w.churn_updates(src, dst, args.updates, seed=args.seed)
            src, dst, wt = (np.concatenate(p) for p in ((src, us), (dst, ud), (wt, uw)))
    else:
        src, dst, wt = w.adversarial_stream(args.edges, args.updates or args.edges)
    s_col, d_col = table.column_names[:2]
    return list(edge_events(table, src, dst, wt, s_col, d_col))


def cmd_demo(args) -> int:
    from streaming_app.demo_run import run_demo

    return run_demo(duration_s=args.duration, port=args.port, broker_dir=Path(args.broker_dir),
                    rate=args.rate, ui=not args.no_ui)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ivmstream", description=(
        "Incremental, exactly-once maintenance of provenance sketches, triangle counts and "
        "recursive views from Kafka CDC into Delta tables."))
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run the embedded Apache Kafka broker (KRaft, loopback)")
    b.add_argument("action", choices=["start", "stop", "status"])
    b.add_argument("--port", type=int, default=int(env("broker_port", "9092")),
                   help=_env_help("listener port (default 9092)", "broker_port"))
    b.add_argument("--dir", default=env("broker_dir", str(DEFAULT_BROKER_DIR)),
                   help=_env_help("broker home: config, data, log, pid", "broker_dir"))
    b.set_defaults(fn=cmd_broker)

    def common(sp, ui: bool = True):
        sp.add_argument("--config", default=env("config"), required=env("config") is None,
                        help=_env_help("job config (TOML)", "config"))
        sp.add_argument("--bootstrap-servers", default=env("bootstrap_servers"),
                        help=_env_help("Kafka bootstrap servers (overrides the config)", "bootstrap_servers"))
        sp.add_argument("--master", default=env("master"),
                        help=_env_help("Spark master (overrides the config)", "master"))
        if ui:
            sp.add_argument("--no-ui", action="store_true", help="do not start the Spark UI")

    r = sub.add_parser("run", help="run the streaming job")
    common(r)
    r.add_argument("--duration", type=float, default=None, help="stop after S seconds (default: run until stopped)")
    r.add_argument("--available-now", action="store_true",
                   help="process everything on the topics now, then stop")
    r.set_defaults(fn=cmd_run)

    pr = sub.add_parser("produce", help="send Debezium records for a declared table to Kafka")
    common(pr, ui=False)
    pr.add_argument("--table", required=True, help="table name declared in the config")
    src = pr.add_mutually_exclusive_group()
    src.add_argument("--file", help="CSV/TBL/Parquet file (or a .edges 'u v' edge list) to load as "
                                    "snapshot ('r') records")
    src.add_argument("--edges-workload", choices=["powerlaw", "adversarial"],
                     help="generate an edge stream into the table's first two columns: a power-law "
                          "graph (then --updates delete/re-insert churn) or updates that hit heavy hubs")
    pr.add_argument("--edges", type=int, default=10_000, help="edges of the generated graph (default 10000)")
    pr.add_argument("--updates", type=int, default=0, help="updates after the generated graph")
    pr.add_argument("--count", type=int, default=1000, help="random changes to generate (default 1000)")
    pr.add_argument("--rate", type=float, default=0.0, help="changes per second (0 = as fast as possible)")
    pr.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    pr.add_argument("--seed-file", help="file whose rows are the live rows the random stream updates")
    pr.set_defaults(fn=cmd_produce)

    d = sub.add_parser("demo", help="start the broker, load built-in data, stream updates, run the job")
    d.add_argument("--duration", type=float, default=60.0, help="seconds to run (default 60)")
    d.add_argument("--port", type=int, default=int(env("broker_port", "9092")),
                   help=_env_help("embedded broker port", "broker_port"))
    d.add_argument("--broker-dir", default=env("broker_dir", str(DEFAULT_BROKER_DIR)),
                   help=_env_help("embedded broker home", "broker_dir"))
    d.add_argument("--rate", type=float, default=200.0, help="random changes per second (default 200)")
    d.add_argument("--no-ui", action="store_true", help="do not start the Spark UI")
    d.set_defaults(fn=cmd_demo)

    from streaming_app.sketch_cli import add_commands
    from streaming_app.source_cli import add_commands as add_source_commands

    add_commands(sub, common)
    add_source_commands(sub, common)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except IvmError as e:
        print(f"ivmstream: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """Process entry point (console script and ``python -m streaming_app``).

    After the command has finished and printed, leave with ``os._exit``: native libraries
    (delta-rs, duckdb, z3) can abort while their threads are torn down at interpreter exit
    ("terminate called without an active exception"), turning a successful command into a
    SIGABRT. Spark, if it was started, is stopped first so its JVM goes too.
    """
    import os

    rc = main()
    if "pyspark" in sys.modules:
        try:
            from pyspark import SparkContext

            if SparkContext._active_spark_context is not None:
                SparkContext._active_spark_context.stop()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    run()
