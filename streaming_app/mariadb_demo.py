"""`ivmstream demo --source mariadb`: the whole real chain from MariaDB, locally.

MariaDB (ours, in var/mariadb) -> Debezium's MySQL connector in Kafka Connect (ours, in
var/connect) -> the embedded Kafka broker -> the job -> Delta. Services are started unless they
run, and stopped at the end if the demo started them. The database `ivmstream_demo` is made
anew; a seeded history (streaming_app.mariadb_history) runs in it while the job runs; when the
job has applied the history's last change, the summary compares every mirror with its MariaDB
table value for value (differences Debezium itself introduces are counted under their names)
and the triangle count with a recount.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from connectors.kafka_broker import EmbeddedBroker, reset_topics
from streaming_app.config import REPO_ROOT, env, parse_config
from streaming_app.mariadb_history import SKETCH_SQL, TABLES, Workload, job_tables, mirror_mismatches
from streaming_app.pg_demo import _markers_applied

VAR = REPO_ROOT / "var"
DATABASE = "ivmstream_demo"
PREFIX = "mydemo"


def demo_config(port: int, bootstrap: str, connect_url: str, ui: bool, run: str = "") -> "JobConfig":  # noqa: F821
    return parse_config({
        "job": {"name": "mydemo", "lake_root": str(VAR / "mydemo" / "lake"),
                "checkpoint_root": str(REPO_ROOT / "checkpoints"), "trigger_interval_s": 1},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 5000},
        "spark": {"master": "local[*]", "ui": ui},
        "debezium": {"connector": "mysql", "port": port, "database": DATABASE, "user": "root", "password": "",
                     "topic_prefix": PREFIX, "connector_name": f"ivmstream-mydemo{'-' + run if run else ''}",
                     "server_id": 5400, "connect_url": connect_url,
                     "properties": {"poll.interval.ms": 100,
                                    # a new schema history per run: this run's database is new
                                    "schema.history.internal.kafka.topic": f"schemahistory.{PREFIX}.{run}"}},
        "tables": job_tables(PREFIX, DATABASE),
        "graphs": [{"name": "g", "table": "edges", "src": "src", "dst": "dst", "mode": "undirected"}],
        "sketches": [{"name": "heavy_orders", "sql": SKETCH_SQL, "partition": "order_lines.order_id:8"}],
    })


def run_mariadb_demo(duration_s: float, broker_port: int, broker_dir: Path, port: int, ui: bool) -> int:
    from connectors.kafka_connect import EmbeddedConnect, connector_properties, rest
    from connectors.mariadb import EmbeddedMariaDb
    from streaming_app.runner import run_job

    broker = EmbeddedBroker(broker_dir, port=broker_port)
    db = EmbeddedMariaDb(VAR / "mariadb", port=port)
    connect = EmbeddedConnect(VAR / "connect", port=int(env("connect_port", "8083")), bootstrap=broker.bootstrap)
    started = []
    try:
        for name, svc in (("Kafka broker", broker), ("MariaDB", db), ("Kafka Connect", connect)):
            if svc.pid() is None:
                print(f"starting {name} ...", flush=True)
                t0 = time.monotonic()
                svc.start()
                started.append((name, svc))
                print(f"  {name} ready in {time.monotonic() - t0:.1f}s", flush=True)
            else:
                print(f"using the running {name}", flush=True)
        # a new connector name each run: Connect keeps a connector's binlog position under its name
        cfg = demo_config(port, broker.bootstrap, connect.url, ui, run=time.strftime("%Y%m%d%H%M%S"))
        name = cfg.debezium.connector_name
        for old in rest(connect.url, "GET", "/connectors"):
            if old.startswith("ivmstream-mydemo"):
                connect.delete(old)
        db.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        db.create_database(DATABASE)
        shutil.rmtree(cfg.lake_root, ignore_errors=True)
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)
        reset_topics(broker.bootstrap, cfg.topics, partitions=1)  # exact order of truncates and key changes
        work = Workload(db, DATABASE, seed=1, pace_s=0.03)
        work.setup()
        connect.register(name, connector_properties(cfg))
        st = connect.wait_running(name, timeout_s=120)
        db.wait_binlog_clients(1)  # its snapshot is done: the history's DDL cannot race it
        print(f"Debezium MySQL connector {name!r} {st['connector'].get('version', '')} running on MariaDB "
              f"{db.server_version()}: {DATABASE}.{{{', '.join(TABLES)}}} -> topics {PREFIX}.{DATABASE}.*", flush=True)

        stop = threading.Event()
        history: dict = {}

        def feed() -> None:
            print("running the history in MariaDB (inserts, updates, key changes, deletes, TRUNCATE, "
                  "ADD/DROP COLUMN, TIME beyond 24 h, BIGINT UNSIGNED 2^64-1, zero dates) ...", flush=True)
            history.update(work.run())
            print(f"history done in MariaDB: {history}", flush=True)
            deadline = time.monotonic() + duration_s
            while not stop.is_set() and time.monotonic() < deadline:
                if _markers_applied(cfg):
                    print("the job has applied the history's last change", flush=True)
                    break
                stop.wait(2)
            stop.set()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        res = run_job(cfg, duration_s=duration_s, ui=ui, stop_event=stop)
        stop.set()
        feeder.join(timeout=30)
        return _summary(cfg, db, res)
    finally:
        for name, svc in reversed(started):
            svc.stop()
            print(f"stopped the {name} the demo started", flush=True)


def _summary(cfg, db, res) -> int:
    import deltalake
    import networkx as nx

    t = res.totals
    print("\n=== demo summary (MariaDB -> Debezium MySQL connector -> Kafka -> ivmstream -> Delta) ===")
    print(f"batches           {t['batches']}")
    print(f"records read      {t['records']}  (tombstones {t['tombstones']}, quarantined {t['quarantined']})")
    failed = 0
    for table in TABLES:
        mirror = deltalake.DeltaTable(str(cfg.lake_root / "mirrors" / table)).to_pyarrow_table().to_pylist()
        rows, values, causes, bad = mirror_mismatches(db, DATABASE, table, mirror)
        failed += len(bad)
        named = f"; as Debezium sends them: {causes}" if causes else ""
        print(f"mirror {table:<10} {rows} rows, {values} values compared with MariaDB: "
              f"{len(bad)} mismatches{named}" + (f" e.g. {bad[:2]}" if bad else ""))
    lake = Path(cfg.lake_root)
    q = deltalake.DeltaTable(str(lake / "quarantine")).to_pyarrow_table().to_pylist()
    codes: dict = {}
    for r in q:
        codes[r["error_code"]] = codes.get(r["error_code"], 0) + 1
    print(f"quarantine        {codes or 'empty'}  (a TINYINT(1) set to 2 is not a boolean)")
    sc = deltalake.DeltaTable(str(lake / "schema_changes")).to_pyarrow_table().to_pylist()
    print(f"schema changes    {[(r['table'], r['column'], r['change']) for r in sc]}")
    g = nx.Graph()
    g.add_edges_from(db.query("SELECT src, dst FROM edges", database=DATABASE))
    want = sum(nx.triangles(g).values()) // 3
    counts = deltalake.DeltaTable(str(lake / "triangle_counts")).to_pyarrow_table().to_pylist()
    got = max(counts, key=lambda r: r["batch_id"])["triangles"] if counts else None
    print(f"triangles         {got} (recount from MariaDB's edges: {want})")
    failed += got != want
    print(f"lake              {lake}")
    return 0 if failed == 0 else 1
