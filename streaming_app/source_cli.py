"""`ivmstream postgres`, `ivmstream mariadb` and `ivmstream connect`: the real CDC chain.

``postgres start|stop|status`` runs a PostgreSQL server of our own (Debian's binaries,
loopback, ``wal_level=logical``) in ``var/postgres``; ``mariadb start|stop|status`` a MariaDB
server (ROW binlog, FULL row image) in ``var/mariadb``; ``connect start|stop|status`` runs one
Kafka Connect worker with the Debezium PostgreSQL and MySQL connectors against a Kafka broker, in
``var/connect``; ``connect register --config job.toml`` turns the job's ``[debezium]`` section
and tables into that connector and waits until its task runs. ``add_commands(sub, common)``
is the one call cli.py makes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from connectors.connect import connector_properties, rest, wait_running
from connectors.kafka_client import masked, python_options, security_properties
from core.config import ENV, REPO_ROOT, KafkaConfig, env
from core.errors import ConfigError
from devstack.kafka_connect import EmbeddedConnect
from streaming_app.settings import load_config

DEFAULT_PG_DIR = REPO_ROOT / "var" / "postgres"
DEFAULT_CONNECT_DIR = REPO_ROOT / "var" / "connect"
DEFAULT_MARIADB_DIR = REPO_ROOT / "var" / "mariadb"

def _env_help(text: str, key: str) -> str:
    return f"{text} [env {ENV[key]}]"

def _port(value: str | None, default: int, key: str) -> int:
    raw = value if value is not None else str(default)
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{ENV[key]}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{ENV[key]}={raw!r} is not a port number (1..65535)")
    return port

def _port_flag(raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port number (1..65535)")
    return port

def _print_status(st: dict) -> int:
    print(json.dumps(st, indent=2))
    return 0 if st["running"] else 1

def cmd_postgres(args) -> int:
    from devstack.postgres import EmbeddedPostgres

    port = args.port if args.port is not None else _port(env("pg_port"), 5432, "pg_port")
    pg = EmbeddedPostgres(Path(args.dir), port=port)
    if args.action == "start":
        t0 = time.monotonic()
        pg.start()
        print(f"PostgreSQL {pg.server_version().split()[0]} ready on 127.0.0.1:{pg.port} "
              f"(pid {pg.pid()}, {time.monotonic() - t0:.1f}s); cluster in {pg.data_dir}, "
              f"log {pg.log_file}; user postgres, its password in {pg.password_file} (mode 0600): "
              "put it in [debezium] password")
    elif args.action == "stop":
        print("stopped" if pg.stop() else "no PostgreSQL was running")
    else:
        return _print_status(pg.status())
    return 0

def cmd_mariadb(args) -> int:
    from devstack.mariadb import EmbeddedMariaDb

    port = args.port if args.port is not None else _port(env("mariadb_port"), 3306, "mariadb_port")
    db = EmbeddedMariaDb(Path(args.dir), port=port)
    if args.action == "start":
        t0 = time.monotonic()
        db.start()
        print(f"MariaDB {db.server_version()} ready on 127.0.0.1:{db.port} (pid {db.pid()}, "
              f"{time.monotonic() - t0:.1f}s; ROW binlog, FULL row image); data in {db.data_dir}, log {db.log_file}")
    elif args.action == "stop":
        print("stopped" if db.stop() else "no MariaDB was running")
    else:
        return _print_status(db.status())
    return 0

def _bootstrap(args, kafka: KafkaConfig | None = None) -> str:
    """--bootstrap-servers, else the --config job's broker, else the embedded one's port."""
    if args.bootstrap_servers:
        return args.bootstrap_servers
    if kafka is not None:
        return kafka.bootstrap_servers
    return f"127.0.0.1:{_port(env('broker_port'), 9092, 'broker_port')}"

def cmd_connect(args) -> int:

    if args.action == "register":
        return _register(args)
    if args.action == "properties":

        if not args.config:
            raise ConfigError("connect properties needs --config (the job whose [debezium] section and "
                              "tables name the connector)")
        cfg = load_config(args.config)
        print(json.dumps({"name": cfg.debezium.connector_name, "config": masked(connector_properties(cfg))},
                         indent=2))  # the database password never prints
        return 0
    port = args.port if args.port is not None else _port(env("connect_port"), 8083, "connect_port")
    # with --config, the worker reaches the broker as that job does ([kafka] options and login)
    # and makes its internal topics with the job's replication factor
    job_kafka = load_config(args.config).kafka if args.config else None
    kafka = job_kafka or KafkaConfig()
    w = EmbeddedConnect(Path(args.dir), port=port, bootstrap=_bootstrap(args, job_kafka),
                        client=security_properties(kafka), replication_factor=kafka.replication_factor)
    if args.action == "start":
        from connectors.kafka import check_cluster_replication, unreachable

        if not unreachable(w.bootstrap):  # else the worker's start says the broker is missing
            # its internal topics need that many brokers; the worker would only retry and time out
            check_cluster_replication(w.bootstrap, w.replication_factor, python_options(kafka))
        t0 = time.monotonic()
        w.start()
        print(f"Kafka Connect ready on {w.url} (pid {w.pid()}, {time.monotonic() - t0:.1f}s), "
              f"broker {w.bootstrap}; log {w.log_file}")
    elif args.action == "stop":
        print("stopped" if w.stop() else "no Kafka Connect worker was running")
    else:
        return _print_status(w.status())
    return 0

def _register(args) -> int:
    from connectors.kafka import create_topics

    if not args.config:
        raise ConfigError("connect register needs --config (the job whose [debezium] section and "
                          "tables name the connector)")
    cfg = load_config(args.config)
    props = connector_properties(cfg)
    d = cfg.debezium
    url = args.connect_url or d.connect_url
    bootstrap = args.bootstrap_servers or cfg.kafka.bootstrap_servers
    # The tables' topics with one partition each (see connector_properties); topics that
    # exist keep theirs, and one with more partitions is named, since truncate ordering
    # is exact only within one partition.
    client = python_options(cfg.kafka)
    create_topics(bootstrap, cfg.topics, partitions=1, client=client, replication_factor=cfg.kafka.replication_factor)
    wide = _multi_partition(bootstrap, cfg.topics, client)
    t0 = time.monotonic()
    rest(url, "PUT", f"/connectors/{d.connector_name}/config", props)
    st = wait_running(url, d.connector_name, timeout_s=args.timeout)
    print(f"connector {d.connector_name!r} RUNNING on {url} ({len(st['tasks'])} task, "
          f"{time.monotonic() - t0:.1f}s): {d.user}@{d.host}:{d.port}/{d.database} "
          f"tables {props['table.include.list']} -> {', '.join(cfg.topics)}")
    for topic, n in wide:
        print(f"warning: topic {topic} has {n} partitions; a TRUNCATE is ordered with that table's "
              "rows only within one partition")
    return 0

def _multi_partition(bootstrap: str, topics: list[str], client: dict) -> list[tuple[str, int]]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="ivmstream-register", **client)
    try:
        out = []
        for t in topics:
            parts = c.partitions_for_topic(t) or set()
            if len(parts) > 1:
                out.append((t, len(parts)))
        return out
    finally:
        c.close()

def add_commands(sub, common) -> None:
    """Register ``postgres``, ``mariadb`` and ``connect`` on the top-level parser."""
    pg = sub.add_parser("postgres", help="run a PostgreSQL server for the real CDC chain "
                                         "(loopback, wal_level=logical)")
    pg.add_argument("action", choices=["start", "stop", "status"])
    pg.add_argument("--port", type=_port_flag, default=None,
                    help=_env_help("listen port on 127.0.0.1 (default 5432)", "pg_port"))
    pg.add_argument("--dir", default=env("pg_dir", str(DEFAULT_PG_DIR)),
                    help=_env_help("server home: cluster, log, pid (default var/postgres)", "pg_dir"))
    pg.set_defaults(fn=cmd_postgres)

    my = sub.add_parser("mariadb", help="run a MariaDB server for the real CDC chain "
                                        "(loopback, ROW binlog, FULL row image)")
    my.add_argument("action", choices=["start", "stop", "status"])
    my.add_argument("--port", type=_port_flag, default=None,
                    help=_env_help("listen port on 127.0.0.1 (default 3306)", "mariadb_port"))
    my.add_argument("--dir", default=env("mariadb_dir", str(DEFAULT_MARIADB_DIR)),
                    help=_env_help("server home: data, binlog, log, pid (default var/mariadb)", "mariadb_dir"))
    my.set_defaults(fn=cmd_mariadb)

    c = sub.add_parser("connect", help="run a Kafka Connect worker with the Debezium PostgreSQL and "
                                       "MySQL connectors; register the job's connector")
    c.add_argument("action", choices=["start", "stop", "status", "register", "properties"],
                   help="start|stop|status the worker; register the connector of --config "
                        "and wait until its task runs; properties: print that connector's JSON "
                        "(to register it on a Connect cluster of your own)")
    c.add_argument("--port", type=_port_flag, default=None,
                   help=_env_help("REST port on 127.0.0.1 (default 8083)", "connect_port"))
    c.add_argument("--dir", default=env("connect_dir", str(DEFAULT_CONNECT_DIR)),
                   help=_env_help("worker home: properties, log, pid (default var/connect)", "connect_dir"))
    c.add_argument("--bootstrap-servers", default=env("bootstrap_servers"),
                   help=_env_help("Kafka bootstrap servers (start: default --config's, else 127.0.0.1:<broker port>; "
                                  "register: overrides the config)", "bootstrap_servers"))
    c.add_argument("--config", default=env("config"),
                   help=_env_help("job config (TOML) whose [debezium] section and tables define the "
                                  "connector (register)", "config"))
    c.add_argument("--connect-url", default=None,
                   help="Kafka Connect REST URL for register (default: [debezium] connect_url)")
    c.add_argument("--timeout", type=float, default=120.0,
                   help="register: seconds to wait for the task to be RUNNING (default 120)")
    c.set_defaults(fn=cmd_connect)
