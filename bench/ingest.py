"""Benchmark of the plain ingest path: Kafka CDC -> decode -> Delta mirror (no maintainers).

Measures, on this machine, in one run:
  * start-up: seconds from launching `ivmstream run` to the first committed batch;
  * sustained throughput: CDC records/s over a backlog drained in batches of
    ``--batch`` records (time from the first batch's start to the last batch's end);
  * per-step milliseconds per batch (collect, decode, mirror MERGE, batch record).

This throughput is the baseline the maintainers (sketches, triangles, views) are compared
with. Usage: python bench/ingest.py [--records 200000] [--batch 20000] [--quick]
Writes bench/results/ingest.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from connectors.kafka_broker import EmbeddedBroker, create_topics, free_port  # noqa: E402
from connectors.producer import CdcProducer, RandomUpdates  # noqa: E402
from streaming_app.config import dump_toml, parse_config  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--quick", action="store_true", help="20k records, 5k per batch")
    args = ap.parse_args()
    if args.quick:
        args.records, args.batch = 20_000, 5_000

    work = Path(tempfile.mkdtemp(prefix="ivm-bench-ingest-"))
    broker = EmbeddedBroker(work / "kafka", port=free_port())
    print(f"[1/4] starting Kafka broker on {broker.bootstrap}", flush=True)
    broker.start()
    try:
        data = {
            "job": {"name": "bench_ingest", "lake_root": str(work / "lake"),
                    "checkpoint_root": str(work / "checkpoints"), "trigger_interval_s": 0},
            "kafka": {"bootstrap_servers": broker.bootstrap, "max_offsets_per_trigger": args.batch},
            "spark": {"master": "local[2]", "ui": False},
            "tables": [{"name": "orders", "topic": "bench.orders", "primary_key": "id",
                        "columns": {"id": "long", "customer": "long", "status": "string",
                                    "amount": "decimal(12,2)", "day": "date", "qty": "int"}}],
        }
        cfg = parse_config(data)
        table = cfg.table("orders")
        create_topics(broker.bootstrap, [table.topic], partitions=2)
        print(f"[2/4] producing {args.records} CDC records (50% insert, 30% update, 20% delete)", flush=True)
        prod = CdcProducer(broker.bootstrap)
        gen = RandomUpdates(table, seed=1, domain=100_000)
        t = time.perf_counter()
        for i in range(args.records):
            op, before, after = gen.next()
            prod.send(table, op, before, after)
            if i % 50_000 == 49_999:
                print(f"      {i + 1} sent", flush=True)
        prod.close()
        produce_s = time.perf_counter() - t

        cfg_file = work / "job.toml"
        cfg_file.write_text(dump_toml(data))
        print(f"[3/4] running `ivmstream run --available-now` over the backlog", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(cfg_file),
                                 "--available-now", "--no-ui"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
        first_batch_s = None
        import deltalake

        batches_path = str(work / "lake" / "batches")
        while proc.poll() is None:
            if first_batch_s is None:
                try:
                    if deltalake.DeltaTable(batches_path).to_pyarrow_table().num_rows > 0:
                        first_batch_s = time.perf_counter() - t0
                        print(f"      first batch committed after {first_batch_s:.1f}s", flush=True)
                except Exception:  # noqa: BLE001 - table not created yet
                    pass
            time.sleep(0.2)
        total_s = time.perf_counter() - t0
        out = proc.stdout.read()
        if proc.returncode != 0:
            print(out[-4000:])
            raise SystemExit(f"job failed with exit code {proc.returncode}")

        print("[4/4] reading the batches table", flush=True)
        rows = deltalake.DeltaTable(batches_path).to_pyarrow_table().sort_by("batch_id").to_pylist()
        records = sum(r["records_in"] for r in rows)
        span = (rows[-1]["finished_at"] - rows[0]["started_at"]).total_seconds()
        steady = rows[1:] or rows
        steady_span = (steady[-1]["finished_at"] - steady[0]["started_at"]).total_seconds()
        steady_records = sum(r["records_in"] for r in steady)
        steps: dict[str, list[float]] = {}
        for r in rows:
            for k, v in r["step_ms"]:
                steps.setdefault(k, []).append(v)
        mirror_rows = deltalake.DeltaTable(str(work / "lake" / "mirrors" / "orders")).to_pyarrow_table().num_rows
        res = {
            "records": records, "batches": len(rows), "batch_size": args.batch,
            "startup_to_first_batch_s": round(first_batch_s or float("nan"), 2),
            "total_run_s": round(total_s, 2),
            "throughput_all_rec_s": round(records / span, 1),
            "throughput_steady_rec_s": round(steady_records / steady_span, 1),
            "mean_step_ms": {k: round(sum(v) / len(v), 1) for k, v in steps.items()},
            "mirror_rows": mirror_rows, "produce_rec_s": round(args.records / produce_s, 1),
        }
        assert records == args.records, f"batches counted {records} of {args.records} records"
        print(json.dumps(res, indent=2))
        _write(res)
        return 0
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def _write(res: dict) -> None:
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Plain ingest path (Kafka CDC -> Delta mirror), measured by bench/ingest.py",
        "",
        f"{res['records']} Debezium records (50% inserts, 30% updates, 20% deletes) on one topic with "
        f"2 partitions, drained by `ivmstream run --available-now` in {res['batches']} batches of "
        f"{res['batch_size']} records, Spark local[2], one 2-core machine.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| launch -> first committed batch | {res['startup_to_first_batch_s']} s |",
        f"| sustained throughput (all batches) | {res['throughput_all_rec_s']} records/s |",
        f"| sustained throughput (after the first batch) | {res['throughput_steady_rec_s']} records/s |",
        f"| whole run incl. JVM start | {res['total_run_s']} s |",
        "",
        "Mean milliseconds per batch by step: " + ", ".join(f"{k} {v}" for k, v in res["mean_step_ms"].items()),
        "",
    ]
    (out / "ingest.md").write_text("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
