"""`ivmstream demo`: the embedded default, end to end on built-in data.

Starts the Kafka broker if none is running (and stops it at the end if it started it),
recreates the demo topics, loads the IMP paper's `sales` table and a small generated TPC-H
subset as Debezium snapshot records, then runs the job while a background producer streams
seeded random inserts, updates and deletes, plus a few malformed records that must land in
the quarantine. Prints a line per batch, the Spark UI URL and a summary.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading
import time
from pathlib import Path

from connectors.kafka_broker import EmbeddedBroker, reset_topics
from connectors.producer import CdcProducer, RandomUpdates, conform, read_rows
from streaming_app.config import REPO_ROOT, load_config

DEMO_DIR = Path(__file__).resolve().parent / "demo"
VAR = REPO_ROOT / "var"
TPCH_TABLES = ("nation", "customer", "orders", "lineitem")


def tpch_subset(scale: float = 0.01) -> Path:
    """Generate (once) a small TPC-H database as Parquet with the tpchgen-cli package."""
    out = VAR / "data" / f"tpch-sf{scale}"
    if not all((out / f"{t}.parquet").exists() for t in TPCH_TABLES):
        out.mkdir(parents=True, exist_ok=True)
        exe = Path(shutil.which("tpchgen-cli") or (Path(__file__).resolve().parent.parent / ".venv/bin/tpchgen-cli"))
        subprocess.run([str(exe), "parquet", "-s", str(scale), f"--tables={','.join(TPCH_TABLES)}",
                        f"--output-dir={out}"], check=True, capture_output=True)
    return out


def _stream_updates(cfg, prod: CdcProducer, gens: dict, rate: float, stop: threading.Event) -> None:
    tables = list(gens)
    i = 0
    interval = 1.0 / rate if rate > 0 else 0.0
    t0 = time.monotonic()
    while not stop.is_set():
        name = tables[i % len(tables)]
        op, before, after = gens[name].next()
        prod.send(cfg.table(name), op, before, after)
        i += 1
        if i % 500 == 0:  # a few malformed records, which must be quarantined, not lost
            prod.send_raw(cfg.table("sales").topic, b'{"id": 999999}', b'{"op": "c", "after": {"id": "x"')
        if interval:
            delay = t0 + i * interval - time.monotonic()
            if delay > 0:
                stop.wait(delay)
    prod.flush()


def _print_sketches(cfg) -> None:
    """One line per kept sketch and table: fragments in the sketch, the batch it reflects."""
    from connectors.delta_sink import Lake

    try:
        import deltalake

        rows = deltalake.DeltaTable(Lake(cfg.lake_root).output("sketches")).to_pyarrow_table().to_pylist()
    except Exception:  # noqa: BLE001 - no sketch captured (no batch brought rows)
        return
    for r in sorted(rows, key=lambda r: (r["query"], r["table_name"])):
        print(f"sketch            {r['query']} on {r['table_name']}.{r['attribute']}: {len(r['fragments'])} of "
              f"{r['n_fragments'] + 1} fragments, as of batch {r['batch_id']}")


def run_demo(duration_s: float = 60.0, port: int = 9092, broker_dir: Path = VAR / "kafka",
             rate: float = 200.0, ui: bool = True) -> int:
    from streaming_app.runner import run_job

    broker = EmbeddedBroker(broker_dir, port=port)
    started_broker = broker.pid() is None
    print(f"{'starting' if started_broker else 'using running'} Kafka broker on {broker.bootstrap} ...", flush=True)
    broker.start()
    try:
        cfg = load_config(DEMO_DIR / "demo.toml")
        cfg = dataclasses.replace(cfg, lake_root=VAR / "demo" / "lake",
                                  checkpoint_root=REPO_ROOT / "checkpoints")
        cfg = cfg.with_overrides(bootstrap_servers=broker.bootstrap, ui=ui)
        shutil.rmtree(cfg.lake_root, ignore_errors=True)
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)
        reset_topics(broker.bootstrap, cfg.topics)

        tpch = tpch_subset()
        prod = CdcProducer(broker.bootstrap)
        data = {"sales": conform(cfg.table("sales"), read_rows(DEMO_DIR / "sales.csv"))}
        for t in TPCH_TABLES:
            data[t] = conform(cfg.table(t), read_rows(tpch / f"{t}.parquet"))
        for name, rows in data.items():
            for row in rows:
                prod.send(cfg.table(name), "r", None, row)
            print(f"loaded {len(rows):>6} rows of {name} as snapshot records", flush=True)
        prod.flush()
        gens = {n: RandomUpdates(cfg.table(n), seed=i, live=data[n])
                for i, n in enumerate(("sales", "customer", "orders", "lineitem"))}
        stop = threading.Event()
        feeder = threading.Thread(target=_stream_updates, args=(cfg, prod, gens, rate, stop), daemon=True)
        feeder.start()
        print(f"streaming random changes at {rate:.0f}/s for {duration_s:.0f}s ...", flush=True)
        try:
            res = run_job(cfg, duration_s=duration_s, ui=ui)
        finally:
            stop.set()
            feeder.join(timeout=10)
            prod.close()
        t = res.totals
        print("\n=== demo summary ===")
        print(f"batches           {t['batches']}")
        print(f"records read      {t['records']}")
        print(f"rows applied      {t['events']}  (events applied to the Delta mirrors)")
        print(f"quarantined       {t['quarantined']}")
        print(f"tombstones        {t['tombstones']}")
        print(f"records produced  {prod.sent}")
        print(f"lake              {cfg.lake_root}  (mirrors/, quarantine, batches, sketches)")
        _print_sketches(cfg)
        return 0
    finally:
        if started_broker:
            broker.stop()
            print("stopped the Kafka broker the demo started")
