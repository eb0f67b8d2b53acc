"""`ivmstream demo --source postgres`: the whole real chain, locally.

PostgreSQL (ours, in var/postgres) -> the Debezium PostgreSQL connector in Kafka Connect (ours,
in var/connect) -> the embedded Kafka broker -> the job -> Delta. Each service is started
unless it already runs, and stopped at the end if the demo started it. The demo database
`ivmstream_demo` is made anew; a seeded history (devstack.pg_history) runs in it while
the job runs; when the job has applied the history's last change, the summary compares every
mirror with its PostgreSQL table value for value and the triangle count with a recount.
"""

from __future__ import annotations

import time
from pathlib import Path

from connectors.connect import connector_properties, rest
from connectors.kafka import reset_topics
from core.config import REPO_ROOT
from devstack.kafka_broker import EmbeddedBroker
from devstack.kafka_connect import EmbeddedConnect
from devstack.pg_history import SKETCH_SQL, TABLES, Workload, job_tables, mirror_mismatches
from devstack.registry import RegistryServer
from streaming_app.preflight import empty_folder, job_folders
from streaming_app.settings import parse_config
from streaming_app.source_demo import run_with_history, start_services, stop_services, summary

VAR = REPO_ROOT / "var"
DATABASE = "ivmstream_demo"
PREFIX = "pgdemo"

def demo_config(pg_port: int, bootstrap: str, connect_url: str, ui: bool, run: str = "",
                password: str = "", registry_url: str | None = None) -> "JobConfig":  # noqa: F821
    """The demo's job; with ``registry_url``, Debezium writes Avro (Confluent wire format) with
    its schemas in that registry, and the job reads it so."""
    avro = {"registry": {"url": registry_url}} if registry_url else {}
    return parse_config({**avro,
        "job": {"name": "pgdemo", "lake_root": str(VAR / "pgdemo" / "lake"),
                "checkpoint_root": str(REPO_ROOT / "checkpoints"), "trigger_interval_s": 1},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 5000},
        "spark": {"master": "local[*]", "ui": ui},
        "debezium": {"port": pg_port, "database": DATABASE, "topic_prefix": PREFIX, "password": password,
                     "connector_name": f"ivmstream-demo{'-' + run if run else ''}", "slot_name": "ivmstream_demo",
                     "publication_name": "ivmstream_demo", "connect_url": connect_url,
                     "encoding": "avro" if registry_url else "json", "properties": {"poll.interval.ms": 100}},
        "tables": job_tables(PREFIX),
        "graphs": [{"name": "g", "table": "edges", "src": "src", "dst": "dst", "mode": "undirected"}],
        "sketches": [{"name": "heavy_orders", "sql": SKETCH_SQL, "partition": "lines.order_id:8"}],
    })

def _drop_slot(pg, slot: str, timeout_s: float = 30.0) -> None:
    """Drop the previous run's replication slot once its (deleted) connector has let it go."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = pg.query("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if not rows:
            return
        if not rows[0][0]:
            pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        time.sleep(0.5)

def run_pg_demo(duration_s: float, broker_port: int, broker_dir: Path, pg_port: int, ui: bool,
                connect_port: int = 8083, ui_port: int = 4040, registry_port: int | None = None) -> int:
    """``registry_port``: the chain in Avro, through a schema registry (ours) on that port."""

    broker = EmbeddedBroker(broker_dir, port=broker_port)
    connect = EmbeddedConnect(VAR / "connect", port=connect_port, bootstrap=broker.bootstrap)
    registry = RegistryServer(VAR / "registry", port=registry_port) if registry_port else None
    # a second demo stops here, before it touches the database, topics or lake of the first
    with job_folders(demo_config(pg_port, broker.bootstrap, connect.url, ui)):
        return _run_pg_demo(duration_s, broker, connect, pg_port, ui, ui_port, registry)

def _run_pg_demo(duration_s: float, broker, connect, pg_port: int, ui: bool, ui_port: int, registry=None) -> int:
    from devstack.postgres import EmbeddedPostgres

    pg = EmbeddedPostgres(VAR / "postgres", port=pg_port)
    started = []
    try:
        services = [("Kafka broker", broker), ("PostgreSQL", pg), ("Kafka Connect", connect)]
        started = start_services(services + ([("schema registry", registry)] if registry else []))
        # a new connector name each run: Connect keeps a connector's source offsets (its LSN) under
        # its name, and this run's database and slot are new
        cfg = demo_config(pg_port, broker.bootstrap, connect.url, ui, run=time.strftime("%Y%m%d%H%M%S"),
                          password=pg.password(), registry_url=registry.url if registry else None)
        cfg = cfg.with_overrides(ui_port=ui_port)
        name = cfg.debezium.connector_name
        for old in rest(connect.url, "GET", "/connectors"):
            if old.startswith("ivmstream-demo"):
                connect.delete(old)
        _drop_slot(pg, cfg.debezium.slot_name)
        pg.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        pg.create_database(DATABASE)
        empty_folder(cfg.lake_root)
        empty_folder(cfg.checkpoint_dir)
        reset_topics(broker.bootstrap, cfg.topics, partitions=1,  # exact order of truncates and key changes
                     replication_factor=cfg.kafka.replication_factor)
        work = Workload(pg, DATABASE, seed=1, pace_s=0.03)
        work.setup()
        connect.register(name, connector_properties(cfg))
        connect.wait_running(name, timeout_s=120)
        print(f"Debezium connector {name!r} running: {DATABASE}.public.{{{', '.join(TABLES)}}} -> "
              f"topics {PREFIX}.public.*" + (f" in Avro, schemas in {registry.url}" if registry else ""), flush=True)
        res = run_with_history(cfg, work, "PostgreSQL", "inserts, updates, key changes, deletes, TRUNCATE, "
                               "ADD/DROP COLUMN, infinity and NaN", duration_s, ui)

        def compare(table: str, mirror: list) -> tuple[str, list]:
            rows, values, bad = mirror_mismatches(pg, DATABASE, table, mirror)
            return f"{rows} rows, {values} values compared with PostgreSQL: {len(bad)} mismatches", bad

        return summary(cfg, res, "PostgreSQL -> Debezium -> Kafka -> ivmstream -> Delta", "PostgreSQL", compare,
                       "values the declared types cannot hold, e.g. 'infinity'",
                       lambda: pg.query("SELECT src, dst FROM edges", database=DATABASE))
    finally:
        stop_services(started)
