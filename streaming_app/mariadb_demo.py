"""`ivmstream demo --source mariadb`: the whole real chain from MariaDB, locally.

MariaDB (ours, in var/mariadb) -> Debezium's MySQL connector in Kafka Connect (ours, in
var/connect) -> the embedded Kafka broker -> the job -> Delta. Services are started unless they
run, and stopped at the end if the demo started them. The database `ivmstream_demo` is made
anew; a seeded history (devstack.mariadb_history) runs in it while the job runs; when the
job has applied the history's last change, the summary compares every mirror with its MariaDB
table value for value (differences Debezium itself introduces are counted under their names)
and the triangle count with a recount. With ``--format avro`` Debezium writes Avro in the
Confluent wire format through the schema registry (ours, in var/registry), and the job reads it.
"""

from __future__ import annotations

import time
from pathlib import Path

from connectors.connect import connector_properties, rest
from connectors.kafka import reset_topics
from core.config import REPO_ROOT
from devstack.kafka_broker import EmbeddedBroker
from devstack.kafka_connect import EmbeddedConnect
from devstack.mariadb_history import SKETCH_SQL, TABLES, Workload, job_tables, mirror_mismatches
from devstack.registry import RegistryServer
from streaming_app.preflight import empty_folder, job_folders
from streaming_app.settings import parse_config
from streaming_app.source_demo import run_with_history, start_services, stop_services, summary

VAR = REPO_ROOT / "var"
DATABASE = "ivmstream_demo"
PREFIX = "mydemo"

def demo_config(port: int, bootstrap: str, connect_url: str, ui: bool, run: str = "",
                password: str = "", registry_url: str | None = None) -> "JobConfig":  # noqa: F821
    """The demo's job; with ``registry_url``, Debezium writes Avro (Confluent wire format) with
    its schemas in that registry, and the job reads it so."""
    avro = {"registry": {"url": registry_url}} if registry_url else {}
    return parse_config({**avro,
        "job": {"name": "mydemo", "lake_root": str(VAR / "mydemo" / "lake"),
                "checkpoint_root": str(REPO_ROOT / "checkpoints"), "trigger_interval_s": 1},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 5000},
        "spark": {"master": "local[*]", "ui": ui},
        "debezium": {"connector": "mysql", "port": port, "database": DATABASE, "user": "root", "password": password,
                     "topic_prefix": PREFIX, "connector_name": f"ivmstream-mydemo{'-' + run if run else ''}",
                     "server_id": 5400, "connect_url": connect_url, "encoding": "avro" if registry_url else "json",
                     "properties": {"poll.interval.ms": 100,
                                    # a new schema history per run: this run's database is new
                                    "schema.history.internal.kafka.topic": f"schemahistory.{PREFIX}.{run}"}},
        "tables": job_tables(PREFIX, DATABASE),
        "graphs": [{"name": "g", "table": "edges", "src": "src", "dst": "dst", "mode": "undirected"}],
        "sketches": [{"name": "heavy_orders", "sql": SKETCH_SQL, "partition": "order_lines.order_id:8"}],
    })

def run_mariadb_demo(duration_s: float, broker_port: int, broker_dir: Path, port: int, ui: bool,
                     connect_port: int = 8083, ui_port: int = 4040, registry_port: int | None = None) -> int:
    """``registry_port``: the chain in Avro, through a schema registry (ours) on that port."""

    broker = EmbeddedBroker(broker_dir, port=broker_port)
    connect = EmbeddedConnect(VAR / "connect", port=connect_port, bootstrap=broker.bootstrap)
    registry = RegistryServer(VAR / "registry", port=registry_port) if registry_port else None
    # a second demo stops here, before it touches the database, topics or lake of the first
    with job_folders(demo_config(port, broker.bootstrap, connect.url, ui)):
        return _run_mariadb_demo(duration_s, broker, connect, port, ui, ui_port, registry)

def _run_mariadb_demo(duration_s: float, broker, connect, port: int, ui: bool, ui_port: int, registry=None) -> int:
    from devstack.mariadb import EmbeddedMariaDb

    db = EmbeddedMariaDb(VAR / "mariadb", port=port)
    started = []
    try:
        services = [("Kafka broker", broker), ("MariaDB", db), ("Kafka Connect", connect)]
        started = start_services(services + ([("schema registry", registry)] if registry else []))
        # a new connector name each run: Connect keeps a connector's binlog position under its name
        cfg = demo_config(port, broker.bootstrap, connect.url, ui, run=time.strftime("%Y%m%d%H%M%S"),
                          password=db.password(), registry_url=registry.url if registry else None)
        cfg = cfg.with_overrides(ui_port=ui_port)
        name = cfg.debezium.connector_name
        for old in rest(connect.url, "GET", "/connectors"):
            if old.startswith("ivmstream-mydemo"):
                connect.delete(old)
        db.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        db.create_database(DATABASE)
        empty_folder(cfg.lake_root)
        empty_folder(cfg.checkpoint_dir)
        reset_topics(broker.bootstrap, cfg.topics, partitions=1,  # exact order of truncates and key changes
                     replication_factor=cfg.kafka.replication_factor)
        work = Workload(db, DATABASE, seed=1, pace_s=0.03)
        work.setup()
        connect.register(name, connector_properties(cfg))
        st = connect.wait_running(name, timeout_s=120)
        db.wait_binlog_clients(1)  # its snapshot is done: the history's DDL cannot race it
        print(f"Debezium MySQL connector {name!r} {st['connector'].get('version', '')} running on MariaDB "
              f"{db.server_version()}: {DATABASE}.{{{', '.join(TABLES)}}} -> topics {PREFIX}.{DATABASE}.*"
              + (f" in Avro, schemas in {registry.url}" if registry else ""), flush=True)
        res = run_with_history(cfg, work, "MariaDB", "inserts, updates, key changes, deletes, TRUNCATE, "
                               "ADD/DROP COLUMN, TIME beyond 24 h, BIGINT UNSIGNED 2^64-1, zero dates", duration_s, ui)

        def compare(table: str, mirror: list) -> tuple[str, list]:
            rows, values, causes, bad = mirror_mismatches(db, DATABASE, table, mirror)
            named = f"; as Debezium sends them: {causes}" if causes else ""
            return f"{rows} rows, {values} values compared with MariaDB: {len(bad)} mismatches{named}", bad

        return summary(cfg, res, "MariaDB -> Debezium MySQL connector -> Kafka -> ivmstream -> Delta", "MariaDB",
                       compare, "a TINYINT(1) set to 2 is not a boolean",
                       lambda: db.query("SELECT src, dst FROM edges", database=DATABASE))
    finally:
        stop_services(started)
