"""The `ivmstream` command line: broker, s3, registry, run, produce, demo (and the commands of sketches/cli.py,
source_cli.py and cluster_cli.py).

Every flag that has an environment variable shows it in ``--help``; bad input ends with a
one-line error and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from connectors.kafka_client import python_options
from core.config import ENV, REPO_ROOT, dump_toml, env
from core.errors import ConfigError, IvmError
from devstack import s3_server
from devstack.broker_security import BrokerSecurity
from devstack.producer import CdcProducer, RandomUpdates, conform, edge_events, read_edge_list, read_rows
from devstack.registry import RegistryServer
from devstack.s3_server import DEFAULT_PORT as S3_DEFAULT_PORT
from operators.triangles import workloads as w
from streaming_app.cluster_cli import add_commands as add_cluster_commands
from streaming_app.flags import bucket_name, int_in, non_empty, non_negative_number, port, positive_seconds
from streaming_app.settings import load_config
from streaming_app.source_cli import add_commands as add_source_commands

DEFAULT_BROKER_DIR = REPO_ROOT / "var" / "kafka"
DEFAULT_S3_DIR = REPO_ROOT / "var" / "s3"
DEFAULT_REGISTRY_DIR = REPO_ROOT / "var" / "registry"

def _env_help(text: str, key: str) -> str:
    return f"{text} [env {ENV[key]}]"

class Parser(argparse.ArgumentParser):
    """argparse that ends a bad command line with the one-line error every other mistake gets
    (``ivmstream: error: [IVM100] ...``, exit 2) instead of a usage block. Subcommand parsers
    are made with the same class (add_subparsers uses the parent's type)."""

    def error(self, message: str):
        raise ConfigError(f"{self.prog}: {message} (see '{self.prog} --help')")

def _broker(args):
    from devstack.kafka_broker import EmbeddedBroker

    security = None
    if getattr(args, "sasl_user", None):
        password = env("kafka_password")
        if not password:
            raise ConfigError("broker --sasl-user needs the user's password in IVMSTREAM_KAFKA_PASSWORD")
        security = BrokerSecurity(args.sasl_user, password)
    return EmbeddedBroker(Path(args.dir), port=args.port, security=security)

def cmd_broker(args) -> int:
    b = _broker(args)
    if args.action in ("start", "stop"):
        stale = b.check_pid_file()  # a pid that is not our broker is never signalled
        if stale:
            print(stale)
    if args.action == "start":
        t0 = time.monotonic()
        b.start()
        print(f"Kafka broker ready on {b.bootstrap} (pid {b.pid()}, {time.monotonic() - t0:.1f}s); "
              f"data in {b.data_dir}")
        if b.security is not None:  # what a job's [kafka] section says to reach it (the password stays in the env)
            section = b.security.client_section(b.home, b.bootstrap)
            print("SASL_SSL (SCRAM-SHA-512); the job's [kafka]: " + json.dumps(section))
            # the same as TOML to paste into job.toml, with where the password comes from
            print(dump_toml({"kafka": section}).rstrip()
                  + '\npassword_file = "kafka.pw"          # or export IVMSTREAM_KAFKA_PASSWORD')
    elif args.action == "stop":
        print("stopped" if b.stop() else "no broker was running")
    else:
        st = b.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    return 0

def cmd_s3(args) -> int:

    srv = s3_server.S3Server(Path(args.dir), port=args.port, bucket=args.bucket,
                             access_key=env("aws_access_key_id", s3_server.LOCAL_ACCESS_KEY),
                             secret_key=env("aws_secret_access_key", s3_server.LOCAL_SECRET_KEY))
    if args.action in ("start", "stop"):
        stale = srv.check_pid_file()  # a pid that is not our server is never signalled
        if stale:
            print(stale)
    if args.action == "start":
        t0 = time.monotonic()
        srv.start()
        print(f"S3 server ready on {srv.endpoint} (pid {srv.pid()}, {time.monotonic() - t0:.1f}s); bucket "
              f"{srv.bucket!r} in {srv.data_dir / srv.bucket}; a lake there: lake_root = \"{srv.lake('<path>')}\"")
    elif args.action == "stop":
        print("stopped" if srv.stop() else "no S3 server was running")
    else:
        st = srv.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    return 0

def cmd_registry(args) -> int:

    srv = RegistryServer(Path(args.dir), port=args.port)
    if args.action in ("start", "stop"):
        stale = srv.check_pid_file()  # a pid that is not our registry is never signalled
        if stale:
            print(stale)
    if args.action == "start":
        t0 = time.monotonic()
        srv.start()
        print(f"schema registry ready (pid {srv.pid()}, {time.monotonic() - t0:.1f}s, schemas in memory); "
              f"for Avro tables: [registry] url = \"{srv.url}\"")
    elif args.action == "stop":
        print("stopped" if srv.stop() else "no schema registry was running")
    else:
        st = srv.status()
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    return 0

def _job_config(args):
    cfg = load_config(args.config)
    return cfg.with_overrides(bootstrap_servers=args.bootstrap_servers, master=args.master,
                              lake_root=args.lake_root, checkpoint_root=args.checkpoint_root,
                              ui_port=getattr(args, "ui_port", None),
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

    cfg = load_config(args.config).with_overrides(bootstrap_servers=args.bootstrap_servers)
    table = cfg.table(args.table)
    # Everything that can be wrong with the input is found before Kafka is contacted: a
    # missing or unreadable file would otherwise end in a traceback after the broker timeouts.
    rows = live = edges = None
    if args.file and Path(args.file).suffix.lower() in (".edges", ".el"):

        _readable(args.file, "--file")
        if len(table.column_names) < 2:
            raise ConfigError(f"--file {args.file}: an edge list needs a table of two columns or more")
        src, dst = table.column_names[:2]
        edges = _read(lambda: read_edge_list(args.file, src, dst).to_pylist(), args.file)
    elif args.file:
        _readable(args.file, "--file")
        rows = _read(lambda: conform(table, read_rows(args.file)), args.file)
    elif not args.edges_workload and args.seed_file:
        _readable(args.seed_file, "--seed-file")
        live = _read(lambda: conform(table, read_rows(args.seed_file)), args.seed_file)
    from connectors.kafka import BrokerError, create_topics, unreachable

    why = unreachable(cfg.kafka.bootstrap_servers)
    if why:
        raise BrokerError(f"no Kafka broker answers at {cfg.kafka.bootstrap_servers} ({why}); start one with "
                          "`ivmstream broker start` or give --bootstrap-servers")
    client = python_options(cfg.kafka)
    create_topics(cfg.kafka.bootstrap_servers, [table.topic], partitions=1, client=client,  # README: Ordering
                  replication_factor=cfg.kafka.replication_factor)
    prod = CdcProducer(cfg.kafka.bootstrap_servers, client)
    if args.edges_workload:
        events = _edge_workload(args, table)
        for op, before, after in tqdm(events, desc=f"{args.edges_workload} edges", unit="ev"):
            prod.send(table, op, before, after)
    elif edges is not None:
        for row in tqdm(edges, desc=f"edge list {table.name}", unit="edge"):
            prod.send(table, "r", None, {**{c: None for c in table.column_names}, **row})
    elif rows is not None:
        for row in tqdm(rows, desc=f"load {table.name}", unit="rec"):
            prod.send(table, "r", None, row)
    else:
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

def _readable(path: str, flag: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{flag} {path}: {'is a directory, not a file' if p.is_dir() else 'no such file'}")
    try:
        with open(p, "rb"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot be read ({e.strerror})") from None

def _read(load, path: str):
    """Read an input file; a file the readers reject (bad CSV, not Parquet) is a one-line error."""
    try:
        return load()
    except IvmError:
        raise
    except (OSError, ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{path}: cannot be loaded: {first}") from None

def _edge_workload(args, table):
    """Signed edge stream of a triangle workload, as Debezium events on the edge table."""

    if args.edges_workload == "powerlaw":
        src, dst, wt = w.power_law_edges(args.edges, seed=args.seed)
        if args.updates:
            us, ud, uw = w.churn_updates(src, dst, args.updates, seed=args.seed)
            src, dst, wt = (np.concatenate(p) for p in ((src, us), (dst, ud), (wt, uw)))
    else:
        src, dst, wt = w.adversarial_stream(args.edges, args.updates or args.edges)
    s_col, d_col = table.column_names[:2]
    return list(edge_events(table, src, dst, wt, s_col, d_col))

DEMO_DURATION_S = {"builtin": 60.0, "postgres": 180.0, "mariadb": 180.0}  # what the Makefile's demos pass

def cmd_demo(args) -> int:
    duration = args.duration or DEMO_DURATION_S[args.source]
    if args.format == "avro" and args.source == "builtin":
        raise ConfigError("demo --format avro runs with --source postgres or mariadb (Debezium writes the Avro)")
    if args.source == "postgres":
        from streaming_app.pg_demo import run_pg_demo

        return run_pg_demo(duration_s=duration, broker_port=args.port, broker_dir=Path(args.broker_dir),
                           pg_port=args.pg_port, connect_port=args.connect_port, ui=not args.no_ui,
                           ui_port=args.ui_port, registry_port=args.registry_port if args.format == "avro" else None)
    if args.source == "mariadb":
        from streaming_app.mariadb_demo import run_mariadb_demo

        return run_mariadb_demo(duration_s=duration, broker_port=args.port, broker_dir=Path(args.broker_dir),
                                port=args.mariadb_port, connect_port=args.connect_port, ui=not args.no_ui,
                                ui_port=args.ui_port,
                                registry_port=args.registry_port if args.format == "avro" else None)
    from streaming_app.demo_run import run_demo

    return run_demo(duration_s=duration, port=args.port, broker_dir=Path(args.broker_dir),
                    rate=args.rate, ui=not args.no_ui, ui_port=args.ui_port)

def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ivmstream", description=(
        "Incremental, exactly-once maintenance of provenance sketches, triangle counts and "
        "recursive views from Kafka CDC into Delta tables."))
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run the embedded Apache Kafka broker (KRaft, loopback)")
    b.add_argument("action", choices=["start", "stop", "status"])
    b.add_argument("--port", type=port, default=env("broker_port", "9092"),
                   help=_env_help("listener port (default 9092)", "broker_port"))
    b.add_argument("--dir", type=non_empty, default=env("broker_dir", str(DEFAULT_BROKER_DIR)),
                   help=_env_help("broker home: config, data, log, pid", "broker_dir"))
    b.add_argument("--sasl-user", default=None,
                   help="start: SASL_SSL only (SCRAM-SHA-512 over TLS, certificates made with keytool) for this "
                        "user, its password from IVMSTREAM_KAFKA_PASSWORD; set at the broker's first start "
                        "(a new --dir)")
    b.set_defaults(fn=cmd_broker)

    s3 = sub.add_parser("s3", help="run the local S3-API server (S3Proxy, filesystem backend, loopback)")
    s3.add_argument("action", choices=["start", "stop", "status"])
    s3.add_argument("--port", type=port, default=env("s3_port", str(S3_DEFAULT_PORT)),
                    help=_env_help(f"listener port (default {S3_DEFAULT_PORT})", "s3_port"))
    s3.add_argument("--dir", type=non_empty, default=env("s3_dir", str(DEFAULT_S3_DIR)),
                    help=_env_help("server home: properties, data (a folder per bucket), log, pid", "s3_dir"))
    s3.add_argument("--bucket", type=bucket_name, default=env("s3_bucket", "lake"),
                    help=_env_help("bucket to create (default lake)", "s3_bucket"))
    s3.set_defaults(fn=cmd_s3)

    rg = sub.add_parser("registry", help="run the local schema registry for Avro (Apicurio, in memory, loopback)")
    rg.add_argument("action", choices=["start", "stop", "status"])
    rg.add_argument("--port", type=port, default=env("registry_port", "8081"),
                    help=_env_help("listener port (default 8081)", "registry_port"))
    rg.add_argument("--dir", type=non_empty, default=env("registry_dir", str(DEFAULT_REGISTRY_DIR)),
                    help=_env_help("registry home: log, pid", "registry_dir"))
    rg.set_defaults(fn=cmd_registry)

    def common(sp, ui: bool = True, lake: bool = True):
        sp.add_argument("--config", type=non_empty, default=env("config"), required=env("config") is None,
                        help=_env_help("job config (TOML)", "config"))
        sp.add_argument("--bootstrap-servers", default=env("bootstrap_servers"),
                        help=_env_help("Kafka bootstrap servers (overrides the config)", "bootstrap_servers"))
        sp.add_argument("--master", default=env("master"),
                        help=_env_help("Spark master (overrides the config)", "master"))
        if lake:
            sp.add_argument("--lake-root", default=env("lake_root"),
                            help=_env_help("folder of the Delta tables (overrides [job] lake_root)", "lake_root"))
            sp.add_argument("--checkpoint-root", default=env("checkpoint_root"),
                            help=_env_help("folder of the job's checkpoints (overrides [job] checkpoint_root)",
                                           "checkpoint_root"))
        if ui:
            sp.add_argument("--no-ui", action="store_true", help="do not start the Spark UI")
            sp.add_argument("--ui-port", type=port, default=env("ui_port"),
                            help=_env_help("Spark UI port (overrides [spark] ui_port)", "ui_port"))

    r = sub.add_parser("run", help="run the streaming job")
    common(r)
    r.add_argument("--duration", type=positive_seconds, default=None,
                   help="stop after S seconds (default: run until stopped)")
    r.add_argument("--available-now", action="store_true",
                   help="process everything on the topics now, then stop")
    r.add_argument("--verbose", action="store_true", help="show Spark's own log lines (WARN and up)")
    r.set_defaults(fn=cmd_run)

    pr = sub.add_parser("produce", help="send Debezium records for a declared table to Kafka")
    common(pr, ui=False, lake=False)
    pr.add_argument("--table", type=non_empty, required=True, help="table name declared in the config")
    src = pr.add_mutually_exclusive_group()
    src.add_argument("--file", help="CSV/TBL/Parquet file (or a .edges 'u v' edge list) to load as "
                                    "snapshot ('r') records")
    src.add_argument("--edges-workload", choices=["powerlaw", "adversarial"],
                     help="generate an edge stream into the table's first two columns: a power-law "
                          "graph (then --updates delete/re-insert churn) or updates that hit heavy hubs")
    pr.add_argument("--edges", type=int_in(1, 10**9), default=10_000,
                    help="edges of the generated graph (default 10000)")
    pr.add_argument("--updates", type=int_in(0, 10**9), default=0, help="updates after the generated graph")
    pr.add_argument("--count", type=int_in(0, 10**9), default=1000, help="random changes to generate (default 1000)")
    pr.add_argument("--rate", type=non_negative_number, default=0.0,
                    help="changes per second (0 = as fast as possible)")
    pr.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="random seed (default 0)")
    pr.add_argument("--seed-file", help="file whose rows are the live rows the random stream updates")
    pr.set_defaults(fn=cmd_produce)

    d = sub.add_parser("demo", help="start the broker, load built-in data, stream updates, run the job")
    d.add_argument("--duration", type=positive_seconds, default=None,
                   help="seconds of changes to stream; the job then runs until it has read them all "
                        "(default 60, with --source postgres 180)")
    d.add_argument("--port", type=port, default=env("broker_port", "9092"),
                   help=_env_help("embedded broker port", "broker_port"))
    d.add_argument("--broker-dir", type=non_empty, default=env("broker_dir", str(DEFAULT_BROKER_DIR)),
                   help=_env_help("embedded broker home", "broker_dir"))
    d.add_argument("--rate", type=non_negative_number, default=200.0,
                   help="random changes per second (default 200)")
    d.add_argument("--no-ui", action="store_true", help="do not start the Spark UI")
    d.add_argument("--ui-port", type=port, default=env("ui_port", "4040"),
                   help=_env_help("Spark UI port (Spark takes the next free one if it is taken)", "ui_port"))
    d.add_argument("--verbose", action="store_true", help="show Spark's own log lines (WARN and up)")
    d.add_argument("--source", choices=["builtin", "postgres", "mariadb"], default="builtin",
                   help="builtin: our producer writes Debezium records (default); postgres: the real chain, "
                        "PostgreSQL -> Debezium in Kafka Connect -> Kafka, all started locally; mariadb: the "
                        "same from MariaDB through Debezium's MySQL connector")
    d.add_argument("--format", choices=["json", "avro"], default="json",
                   help="with --source postgres or mariadb: how Debezium writes the records; avro also starts the schema "
                        "registry (Apicurio) and the job reads the Confluent wire format")
    d.add_argument("--registry-port", type=port, default=env("registry_port", "8081"),
                   help=_env_help("schema registry port for --format avro", "registry_port"))
    d.add_argument("--pg-port", type=port, default=env("pg_port", "5432"),
                   help=_env_help("PostgreSQL port for --source postgres", "pg_port"))
    d.add_argument("--mariadb-port", type=port, default=env("mariadb_port", "3306"),
                   help=_env_help("MariaDB port for --source mariadb", "mariadb_port"))
    d.add_argument("--connect-port", type=port, default=env("connect_port", "8083"),
                   help=_env_help("Kafka Connect REST port for --source postgres or mariadb", "connect_port"))
    d.set_defaults(fn=cmd_demo)

    from streaming_app.sketches.cli import add_commands

    add_commands(sub, common)
    add_source_commands(sub, common)
    add_cluster_commands(sub, common)
    return p

def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "verbose", False):
            from streaming_app.spark_session import set_verbose

            set_verbose(True)
        return args.fn(args)
    except IvmError as e:
        # one line, whatever the message holds (a parser's caret, a path with a newline)
        print(f"ivmstream: error: {' '.join(str(e).split())}", file=sys.stderr)
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
