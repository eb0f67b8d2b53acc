"""Benchmark of the plain ingest path against the canonical Spark upsert, in one run.

Two variants drain the same Debezium records from the same Kafka topic, alternately, each in
its own process (JVM start included), with the same Spark session settings
(streaming_app.spark_session) and the same ``maxOffsetsPerTrigger``:

  * ours: ``IngestJob`` with no maintainers (decode, quarantine, exactly-once mirror
    MERGE with its change data feed, the ``batches`` row);
  * canonical: what a Spark engineer writes by hand: Spark's Kafka source, ``from_json``
    with the envelope's schema, the last image per key (row_number over the offset), one
    Delta MERGE per table in ``foreachBatch`` (delete on op 'd', update/insert otherwise).

Every figure comes from the streaming checkpoint both variants keep: ``offsets/<n>`` gives
the records of batch n, the modification time of ``commits/<n>`` says when batch n, all its
writes included, was done. Backlog: records/s from the first to the last commit (the first
batch excluded) and the mean time between commits (batch latency) per batch size; launch to
``commits/0`` is the first batch. Trickle: records sent at a fixed rate to a one-partition
topic while the variant runs; a record's freshness is the commit time of the batch holding it
minus its send time.

``--lake s3`` puts both variants' tables on a real S3-API server (S3Proxy, `ivmstream s3`'s code,
started on a free port for the run): ours writes through delta-rs with the same storage options
the job uses, canonical through Spark's S3A; the checkpoints stay on local disk. With
``--with-local`` the same records are also drained with a local lake in the same run, for the
object-store / local figures side by side. No trickle runs on s3.

``--formats`` measures the decode stage alone, in this process (no broker, no Spark): the same
records (RandomUpdates over the orders table, Debezium's default precise decimals) encoded three
ways and decoded by ``decode_batch`` in turn, batch by batch: JSON without schemas
(JsonConverter ``schemas.enable=false``, what the backlog runs produce), JSON with schemas (its
default, Debezium's usual JSON), and Avro in the Confluent wire format (devstack.avro_records:
the schemas a Connect Avro converter derives, told to the decoder by id as a registry would
serve them). The three must decode to the same events. Repetitions alternate the order; the
figure per format is the median over them. ``--quick``: 20,000 records, 3 repetitions.

Usage: python bench/ingest.py [--records 100000] [--batches 1000,5000,20000] [--pairs 2]
       [--trickle-rate 1000 --trickle-s 20] [--quick] [--lake local|s3 [--with-local]]
       python bench/ingest.py --formats [--quick] [--records N] [--reps 5] [--format-batch 5000]
Writes bench/results/ingest.md, ingest.json and ingest.png (``--lake s3``: ingest_s3.*;
``--formats``: ingest_formats.md and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.config import dump_toml  # noqa: E402
from streaming_app.settings import parse_config  # noqa: E402

VARIANTS = ("ours", "canonical")
# ours with the records decoded in the Spark tasks ([job] decode = "executors"; --with-executor-decode)
EXTRA_VARIANTS = ("ours_executors",)
TABLE = {"name": "orders", "topic": "bench.orders", "primary_key": "id", "decimal_handling_mode": "string",
         "columns": {"id": "long", "customer": "long", "status": "string",
                     "amount": "decimal(12,2)", "day": "date", "qty": "int"}}


# -- the two variants, each run in a child process -----------------------------------------------
def run_ours(cfg, available_now: bool) -> None:
    from streaming_app.runner import run_job

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_job(cfg, available_now=available_now, maintainers=[], quiet=True, stop_event=stop)


def run_canonical(cfg, available_now: bool) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from connectors import delta_sink as sink
    from streaming_app.spark_session import SessionOptions, build_session

    from connectors import object_store

    object_store.use(cfg.s3)
    spark = build_session(cfg.spark, SessionOptions(app_name="canonical", ui=False, s3=object_store.lake_s3(cfg)))
    table = cfg.tables[0]
    path = sink.Lake(cfg.lake_root).mirror(table.name)
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({sink.table_ddl(table)}) USING DELTA")
    row = T.StructType([T.StructField("id", T.LongType()), T.StructField("customer", T.LongType()),
                        T.StructField("status", T.StringType()), T.StructField("amount", T.StringType()),
                        T.StructField("day", T.IntegerType()), T.StructField("qty", T.IntegerType())])
    envelope = T.StructType([T.StructField("before", row), T.StructField("after", row),
                             T.StructField("op", T.StringType())])

    def upsert(df, batch_id):
        e = df.select("offset", F.from_json(F.col("value").cast("string"), envelope).alias("e"))
        img = e.select("offset", F.col("e.op").alias("op"),
                       F.coalesce("e.after.id", "e.before.id").alias("id"),
                       F.col("e.after.customer").alias("customer"), F.col("e.after.status").alias("status"),
                       F.col("e.after.amount").cast("decimal(12,2)").alias("amount"),
                       F.expr("date_add(DATE'1970-01-01', e.after.day)").alias("day"),
                       F.col("e.after.qty").alias("qty"))
        last = (img.withColumn("rn", F.row_number().over(Window.partitionBy("id").orderBy(F.col("offset").desc())))
                .where("rn = 1").drop("rn", "offset"))
        cols = {c: f"s.{c}" for c in ("id", "customer", "status", "amount", "day", "qty")}
        (DeltaTable.forPath(spark, path).alias("t").merge(last.alias("s"), "t.id = s.id")
         .whenMatchedDelete(condition="s.op = 'd'")
         .whenMatchedUpdate(condition="s.op <> 'd'", set=cols)
         .whenNotMatchedInsert(condition="s.op <> 'd'", values=cols).execute())

    q = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
         .option("subscribe", table.topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", str(cfg.kafka.max_offsets_per_trigger)).load()
         .writeStream.option("checkpointLocation", str(cfg.checkpoint_dir)).foreachBatch(upsert))
    q = q.trigger(availableNow=True) if available_now else q.trigger(processingTime="0 seconds")
    query = q.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while query.isActive and not stop.is_set():
        query.awaitTermination(0.5)
    if query.isActive:
        query.stop()


def child(args) -> int:
    from streaming_app.settings import load_config

    cfg = load_config(args.config)
    (run_ours if args.variant.startswith("ours") else run_canonical)(cfg, args.available_now)
    return 0


# -- the parent: broker, records, alternating runs, figures ---------------------------------------
def commits(checkpoint: Path) -> list[tuple[int, float, int]]:
    """(batch id, commit mtime, records in the batch) from a streaming checkpoint."""
    out, prev = [], 0
    n = 0
    while (checkpoint / "commits" / str(n)).exists():
        lines = (checkpoint / "offsets" / str(n)).read_text().splitlines()
        end = sum(sum(int(v) for v in parts.values()) for parts in json.loads(lines[-1]).values())
        out.append((n, (checkpoint / "commits" / str(n)).stat().st_mtime, end - prev))
        prev = end
        n += 1
    return out


def job_config(work: Path, variant: str, bootstrap: str, batch: int, topic: str, s3=None) -> Path:
    lake = str(work / "lake") if s3 is None else s3.lake(f"{work.name}/lake")
    data = {"job": {"name": f"bench_{variant}", "lake_root": lake,
                    "checkpoint_root": str(work / "checkpoints"), "trigger_interval_s": 0,
                    "decode": "executors" if variant == "ours_executors" else "driver"},
            "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": batch},
            # keep every batch's offsets and commit files: the figures are read from them
            # (the job's own setting keeps only the last 20)
            "spark": {"master": "local[2]", "ui": False,
                      "conf": {"spark.sql.streaming.minBatchesToRetain": "1000000"}},
            "tables": [{**TABLE, "topic": topic}]}
    if s3 is not None:
        data["s3"] = s3.s3_section()
    parse_config(data)
    f = work / "job.toml"
    f.write_text(dump_toml(data))
    return f


def launch(variant: str, cfg_file: Path, available_now: bool) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--variant", variant, "--config", str(cfg_file)]
    if available_now:
        cmd.append("--available-now")
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def backlog_run(root: Path, variant: str, bootstrap: str, topic: str, batch: int, records: int, s3=None) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    cfg_file = job_config(work, variant, bootstrap, batch, topic, s3)
    t0 = time.time()
    proc = launch(variant, cfg_file, available_now=True)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        print(out[-4000:])
        raise SystemExit(f"{variant} failed with exit code {proc.returncode}")
    cs = commits(work / "checkpoints" / f"bench_{variant}")
    assert sum(c[2] for c in cs) == records, f"{variant}: {sum(c[2] for c in cs)} of {records} records"
    steady = cs[1:]
    span = cs[-1][1] - cs[0][1]
    res = {"variant": variant, "lake": "local" if s3 is None else "s3", "batch": batch, "batches": len(cs), "first_batch_s": round(cs[0][1] - t0, 2),
           "rec_s": round(sum(c[2] for c in steady) / span, 1) if span > 0 else None,
           "batch_s": round(statistics.mean(b[1] - a[1] for a, b in zip(cs, cs[1:])), 3) if len(cs) > 1 else None,
           "console_lines": len(out.splitlines())}
    if variant.startswith("ours"):
        res["steps_ms"] = step_medians(work / "lake" if s3 is None else s3.lake(f"{work.name}/lake"))
    shutil.rmtree(work, ignore_errors=True)
    return res


def step_medians(lake) -> dict:
    """Median milliseconds of each step of our batches after the first (the job's own
    ``batches`` table), to say what dominates a batch."""
    from connectors import object_store

    rows = object_store.rs_table(object_store.join(lake, "batches"))
    steps = [dict(s) for s in rows.to_pyarrow_table(columns=["batch_id", "step_ms"]).sort_by("batch_id")
             .column("step_ms").to_pylist()[1:]]
    keys = sorted({k for s in steps for k in s})
    return {k: round(statistics.median([s.get(k, 0.0) for s in steps]), 1) for k in keys} if steps else {}


def trickle_run(root: Path, variant: str, bootstrap: str, rate: float, seconds: float) -> dict:
    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer, RandomUpdates

    work = Path(tempfile.mkdtemp(prefix=f"trickle-{variant}-", dir=root))
    topic = f"trickle.{variant}.{int(time.time() * 1000)}"
    create_topics(bootstrap, [topic], partitions=1)
    cfg_file = job_config(work, variant, bootstrap, 100_000, topic)
    table = parse_config({"job": {"name": "x"}, "kafka": {"bootstrap_servers": bootstrap},
                          "tables": [{**TABLE, "topic": topic}]}).tables[0]
    gen = RandomUpdates(table, seed=7, domain=100_000)
    prod = CdcProducer(bootstrap)
    warm = 1000
    for _ in range(warm):
        prod.send(table, *gen.next())
    prod.flush()
    proc = launch(variant, cfg_file, available_now=False)
    ck = work / "checkpoints" / f"bench_{variant}"
    while not (ck / "commits" / "0").exists():
        if proc.poll() is not None:
            raise SystemExit(f"{variant} stopped: {proc.stdout.read()[-3000:]}")
        time.sleep(0.05)
    sent = []
    t_start = time.time()
    n = int(rate * seconds)
    for i in range(n):
        due = t_start + i / rate
        while time.time() < due:
            time.sleep(max(0.0, min(0.005, due - time.time())))
        prod.send(table, *gen.next())
        sent.append(time.time())
    prod.flush()
    deadline = time.time() + 120
    while time.time() < deadline:
        cs = commits(ck)
        if sum(c[2] for c in cs) >= warm + n:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    prod.close()
    cs = commits(ck)
    ends, total = [], 0
    for _, mtime, k in cs:
        total += k
        ends.append((total, mtime))
    fresh, missing = [], 0
    for i, ts in enumerate(sent):
        off = warm + i
        mtime = next((m for end, m in ends if end > off), None)
        if mtime is None:  # not committed when the run was stopped: counted, not guessed
            missing += 1
            continue
        fresh.append(mtime - ts)
    fresh.sort()
    shutil.rmtree(work, ignore_errors=True)
    res = {"variant": variant, "rate": rate, "records": n, "batches": len(cs) - 1, "not_committed": missing}
    if fresh:
        res.update(fresh_p50_s=round(fresh[len(fresh) // 2], 2), fresh_p95_s=round(fresh[int(len(fresh) * 0.95)], 2))
    else:
        res.update(fresh_p50_s=float("nan"), fresh_p95_s=float("nan"))
    if missing:
        print(f"  {variant}: {missing} of {n} trickled records not committed within 120 s of the last send")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=VARIANTS + EXTRA_VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--with-executor-decode", action="store_true",
                    help="also run ours with [job] decode = \"executors\" (decoding in the Spark tasks)")
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--available-now", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batches", default="1000,5000,20000", help="maxOffsetsPerTrigger values")
    ap.add_argument("--pairs", type=int, default=2, help="alternating (ours, canonical) pairs per batch size")
    ap.add_argument("--trickle-rate", type=float, default=1000.0)
    ap.add_argument("--trickle-s", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true", help="20k records, batches 1000,5000, one pair")
    ap.add_argument("--rewrite", action="store_true", help="rewrite ingest.md/png from ingest.json")
    ap.add_argument("--lake", choices=["local", "s3"], default="local",
                    help="where both variants' tables live: a local folder or a real S3-API server (S3Proxy)")
    ap.add_argument("--with-local", action="store_true",
                    help="with --lake s3: also drain the records with a local lake in the same run")
    ap.add_argument("--formats", action="store_true",
                    help="the decode stage alone: the same records as JSON, JSON with schemas and Avro")
    ap.add_argument("--reps", type=int, default=5, help="--formats: repetitions (alternating order)")
    ap.add_argument("--format-batch", type=int, default=5000, help="--formats: records per decode_batch call")
    args = ap.parse_args()
    if args.variant:
        return child(args)
    if args.formats:
        if args.quick:
            args.records, args.reps = 20_000, 3
        return formats_run(args)
    if args.rewrite:
        saved = json.loads((REPO / "bench" / "results" / "ingest.json").read_text())
        args.records, args.pairs = saved["records"], saved["pairs"]
        args.trickle_rate, args.trickle_s = saved["trickle_rate"], saved["trickle_s"]
        _write(args, saved["sizes"], saved["runs"], saved["trickles"])
        return 0
    if args.quick:
        args.records, args.batches, args.pairs, args.trickle_s = 20_000, "1000,5000", 1, 10.0
    sizes = [int(x) for x in args.batches.split(",")]

    from connectors.kafka import create_topics
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port
    from devstack.producer import CdcProducer, RandomUpdates

    root = Path(tempfile.mkdtemp(prefix="ivm-bench-ingest-"))
    broker = EmbeddedBroker(root / "kafka", port=free_port())
    print(f"starting Kafka broker on {broker.bootstrap}", flush=True)
    broker.start()
    s3 = None
    if args.lake == "s3":
        import secrets

        from connectors import object_store
        from core.config import S3Config
        from devstack.s3_server import S3Server

        s3 = S3Server(root / "s3", port=free_port(), access_key="bench", secret_key=secrets.token_hex(16))
        print(f"starting the S3 server (S3Proxy) on {s3.endpoint}", flush=True)
        s3.start()
        object_store.use(S3Config(**s3.s3_section()))
    lakes = [s3] + ([None] if s3 is not None and args.with_local else [])
    runs, trickles = [], []
    load = [os.getloadavg()[0]]
    try:
        topic = TABLE["topic"]
        create_topics(broker.bootstrap, [topic], partitions=2)
        table = parse_config({"job": {"name": "x"}, "kafka": {"bootstrap_servers": broker.bootstrap},
                              "tables": [TABLE]}).tables[0]
        print(f"producing {args.records} CDC records (50% insert, 30% update, 20% delete)", flush=True)
        prod = CdcProducer(broker.bootstrap)
        gen = RandomUpdates(table, seed=1, domain=100_000)
        for _ in range(args.records):
            prod.send(table, *gen.next())
        prod.close()
        for batch in sizes:
            for pair in range(args.pairs):
                order = VARIANTS if pair % 2 == 0 else VARIANTS[::-1]
                for lake in lakes:
                    for variant in order + (EXTRA_VARIANTS if args.with_executor_decode else ()):
                        r = backlog_run(root, variant, broker.bootstrap, topic, batch, args.records, lake)
                        r["load_1min"] = round(os.getloadavg()[0], 1)
                        load.append(r["load_1min"])
                        print(json.dumps(r), flush=True)
                        runs.append(r)
        for pair in range(args.pairs if s3 is None else 0):
            for variant in (VARIANTS if pair % 2 == 0 else VARIANTS[::-1]):
                r = trickle_run(root, variant, broker.bootstrap, args.trickle_rate, args.trickle_s)
                print(json.dumps(r), flush=True)
                trickles.append(r)
    finally:
        broker.stop()
        if s3 is not None:
            s3.stop()
        shutil.rmtree(root, ignore_errors=True)
    if s3 is not None:
        _write_s3(args, sizes, runs, load)
    else:
        _write(args, sizes, runs, trickles)
    return 0


FORMATS = ("json", "json_schema", "avro")


def formats_run(args) -> int:
    """Decode the same records as JSON, JSON with schemas and Avro in this process; records/s each."""
    from connectors import avro as AV
    from connectors.debezium import decode_batch
    from devstack.avro_records import AvroEvents
    from devstack.producer import RandomUpdates, envelope, key_of

    url = "http://127.0.0.1:9/bench-formats"  # no registry: the schemas are told to the decoder by id
    table_raw = {k: v for k, v in TABLE.items() if k != "decimal_handling_mode"}  # precise, Debezium's default
    cfg = {"json": parse_config({"tables": [table_raw]}),
           "avro": parse_config({"tables": [{**table_raw, "encoding": "avro"}], "registry": {"url": url}})}
    cfg["json_schema"] = cfg["json"]
    table = cfg["json"].tables[0]
    avro = AvroEvents(table, value_id=1, key_id=2)
    AV.remember(url, 1, avro.value_schema)
    AV.remember(url, 2, avro.key_schema)
    gen = RandomUpdates(table, seed=1, domain=100_000)
    recs: dict[str, list] = {f: [] for f in FORMATS}
    ts = 1_764_000_000_000
    for i in range(args.records):
        op, before, after = gen.next()
        row = after if after is not None else before
        ts += 7  # a new source time every record, as a live stream has
        coords = (table.topic, 0, i)
        recs["json"].append(coords + (key_of(table, row), envelope(table, op, before, after, ts)))
        recs["json_schema"].append(coords + (key_of(table, row, True), envelope(table, op, before, after, ts, True)))
        recs["avro"].append(coords + (avro.key(row), avro.value(op, before, after, ts)))
    size = {f: round(sum(len(r[3]) + len(r[4]) for r in rs) / len(rs), 1) for f, rs in recs.items()}
    uptime = _uptime()
    print(f"{args.records} records, batches of {args.format_batch}, {args.reps} repetitions; bytes per record "
          f"(key + value): " + ", ".join(f"{f} {size[f]}" for f in FORMATS) + f"; {uptime}", flush=True)
    rates: dict[str, list[float]] = {f: [] for f in FORMATS}
    cpu_rates: dict[str, list[float]] = {f: [] for f in FORMATS}  # less moved by other processes than wall time
    events: dict[str, list] = {}
    for rep in range(args.reps):
        for f in (FORMATS if rep % 2 == 0 else FORMATS[::-1]):
            out, t, cpu = [], 0.0, 0.0
            for start in range(0, args.records, args.format_batch):
                chunk = recs[f][start:start + args.format_batch]
                t0, c0 = time.perf_counter(), time.process_time()
                d = decode_batch(cfg[f], chunk)
                t += time.perf_counter() - t0
                cpu += time.process_time() - c0
                if d.rejected:
                    raise SystemExit(f"{f}: {len(d.rejected)} records rejected, e.g. {d.rejected[0]}")
                out.extend(d.events[table.name])
            rates[f].append(args.records / t)
            cpu_rates[f].append(args.records / cpu)
            events.setdefault(f, out)
            print(f"  rep {rep} {f}: {args.records / t:,.0f} records/s ({args.records / cpu:,.0f} per CPU-second)",
                  flush=True)
    for f in FORMATS[1:]:
        if events[f] != events["json"]:
            raise SystemExit(f"{f} decoded to other events than json")
    med = {f: statistics.median(r) for f, r in rates.items()}
    med_cpu = {f: statistics.median(r) for f, r in cpu_rates.items()}
    uptime_after = _uptime()
    res = {"records": args.records, "batch": args.format_batch, "reps": args.reps, "bytes_per_record": size,
           "records_per_s": {f: [round(x) for x in r] for f, r in rates.items()},
           "records_per_cpu_s": {f: [round(x) for x in r] for f, r in cpu_rates.items()},
           "median": {f: round(x) for f, x in med.items()}, "median_cpu": {f: round(x) for f, x in med_cpu.items()},
           "load_before": uptime, "load_after": uptime_after,
           "cpu": os.cpu_count()}
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ingest_formats.json").write_text(json.dumps(res, indent=1))
    lines = ["# Decode stage: the same Debezium records as JSON and as Avro (bench/ingest.py --formats)", "",
             f"{args.records} records (50% inserts, 30% updates, 20% deletes; the orders table: long, long, string, "
             f"decimal(12,2), date, int), decoded by `decode_batch` in batches of {args.format_batch} in this "
             f"process, {args.reps} repetitions in alternating order, median records/s. Machine: "
             f"{os.cpu_count()} cores shared with other sessions; `uptime` before: {uptime}; after: "
             f"{uptime_after}.", "",
             "| format | bytes per record (key + value) | records/s (median, wall) | Avro / this | "
             "records per CPU-second (median) | Avro / this |", "|---|---|---|---|---|---|"]
    for f in FORMATS:
        lines.append(f"| {f} | {size[f]} | {med[f]:,.0f} | {med['avro'] / med[f]:.2f}x | {med_cpu[f]:,.0f} | "
                     f"{med_cpu['avro'] / med_cpu[f]:.2f}x |")
    lines += ["", "Every repetition (wall): " + "; ".join(f"{f} " + ", ".join(f"{x:,.0f}" for x in rates[f])
                                                      for f in FORMATS), ""]
    (out_dir / "ingest_formats.md").write_text("\n".join(lines))
    print("\n".join(lines[4:4 + 2 + len(FORMATS)]))
    return 0


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def _write_s3(args, sizes, runs, load) -> None:
    """ingest_s3.md/json/png: ours against canonical with the lake on the S3 server (and on a
    local folder, in the same run, with --with-local)."""
    import platform

    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest_s3.json").write_text(json.dumps({"records": args.records, "pairs": args.pairs, "sizes": sizes,
                                                    "load_1min": load, "runs": runs}, indent=1))
    lakes = [x for x in ("s3", "local") if any(r["lake"] == x for r in runs)]
    lines = [
        "# Plain ingest on an object store: ours against the canonical Spark upsert (bench/ingest.py --lake s3)",
        "",
        f"{args.records} Debezium records (50% inserts, 30% updates, 20% deletes; one table, one topic of 2 "
        f"partitions), drained with `--available-now` by each variant in turn ({args.pairs} pair(s) per batch "
        "size), Spark local[2]. Lake `s3`: every Delta table on S3Proxy 2.7.0 (filesystem backend, loopback) "
        "started by the run; ours writes through delta-rs, canonical through Spark's S3A. Checkpoints on local "
        f"disk. Machine: {os.cpu_count()} cores, shared with other sessions: 1-minute load "
        f"{min(load):.1f}-{max(load):.1f} during the run ({platform.node()}). One run; medians over the pairs.",
        "",
        "| lake | batch | ours records/s | canonical records/s | ours / canonical | ours s/batch | "
        "canonical s/batch | ours first batch s | canonical first batch s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lake in lakes:
        for b in sizes:
            o = [r for r in runs if r["lake"] == lake and r["batch"] == b and r["variant"] == "ours"]
            c = [r for r in runs if r["lake"] == lake and r["batch"] == b and r["variant"] == "canonical"]
            ro, rc = _med([r["rec_s"] for r in o]), _med([r["rec_s"] for r in c])
            cells = [lake, b, ro, rc, f"{ro / rc:.2f}x" if ro and rc else None, _med([r["batch_s"] for r in o]),
                     _med([r["batch_s"] for r in c]), _med([r["first_batch_s"] for r in o]),
                     _med([r["first_batch_s"] for r in c])]
            lines.append("| " + " | ".join("—" if x is None else str(x) for x in cells) + " |")
    lines += ["", "Our batches' steps (median ms per batch after the first, from the job's `batches` table):", "",
              "| lake | batch | " + " | ".join(STEP_COLUMNS) + " |", "|---|---|" + "---|" * len(STEP_COLUMNS)]
    for lake in lakes:
        for b in sizes:
            meds = [r.get("steps_ms", {}) for r in runs if r["lake"] == lake and r["batch"] == b
                    and r["variant"] == "ours"]
            if meds:
                lines.append(f"| {lake} | {b} | " + " | ".join(str(_med([m.get(k) for m in meds]) or "—")
                                                             for k in STEP_COLUMNS) + " |")
    lines += ["", "Every run: " + "; ".join(f"{r['lake']} {r['variant']} b={r['batch']} {r['rec_s']} rec/s, "
                                           f"{r['batch_s']} s/batch, first {r['first_batch_s']} s, load "
                                           f"{r['load_1min']}" for r in runs), ""]
    (out / "ingest_s3.md").write_text("\n".join(lines))
    print("\n".join(lines[6:6 + 2 + len(lakes) * len(sizes)]))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for lake in lakes:
            for v, style in (("ours", "o-"), ("canonical", "s--")):
                ax.plot(sizes, [_med([r["rec_s"] for r in runs if r["lake"] == lake and r["batch"] == b
                                      and r["variant"] == v]) for b in sizes], style, label=f"{v}, {lake} lake")
        ax.set_xscale("log")
        ax.set_xlabel("records per batch (maxOffsetsPerTrigger)")
        ax.set_ylabel("records/s")
        ax.legend()
        ax.grid(True, alpha=0.3)
        ax.set_title("CDC -> Delta mirror on S3 (S3Proxy) and local, local[2]")
        fig.tight_layout()
        fig.savefig(out / "ingest_s3.png", dpi=110)
    except ImportError:
        pass


STEP_COLUMNS = ("read_decode", "merge", "collect", "decode", "mirror", "quarantine", "batch_record")


def _med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def _write(args, sizes, runs, trickles) -> None:
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest.json").write_text(json.dumps({
        "records": args.records, "pairs": args.pairs, "sizes": sizes, "trickle_rate": args.trickle_rate,
        "trickle_s": args.trickle_s, "runs": runs, "trickles": trickles}, indent=1))
    by = {(v, b): [r for r in runs if r["variant"] == v and r["batch"] == b] for v in VARIANTS for b in sizes}
    lines = [
        "# Plain ingest (ours) against the canonical Spark upsert, measured by bench/ingest.py",
        "",
        f"{args.records} Debezium records (50% inserts, 30% updates, 20% deletes; one table, one topic of "
        f"2 partitions), drained with `--available-now` by each variant in turn ({args.pairs} alternating "
        "pair(s) per batch size), Spark local[2], one shared 2-core machine. Figures from the streaming "
        "checkpoint (commit file times); medians over the runs.",
        "",
        "| batch (maxOffsetsPerTrigger) | ours records/s | canonical records/s | ratio | ours s/batch | "
        "canonical s/batch | ours first batch s | canonical first batch s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in sizes:
        o, c = by[("ours", b)], by[("canonical", b)]
        ro, rc = _med([r["rec_s"] for r in o]), _med([r["rec_s"] for r in c])
        ratio = f"{ro / rc:.2f}x" if ro and rc else None
        cells = [b, ro, rc, ratio, _med([r["batch_s"] for r in o]), _med([r["batch_s"] for r in c]),
                 _med([r["first_batch_s"] for r in o]), _med([r["first_batch_s"] for r in c])]
        # a size that drains the records in one batch gives only the first-batch time
        lines.append("| " + " | ".join("—" if x is None else str(x) for x in cells) + " |")
    lines += ["", f"Trickle: {args.trickle_rate:.0f} records/s for {args.trickle_s:.0f} s to a one-partition "
              "topic while the variant runs (trigger 0 s); freshness = commit time of the batch minus send time.",
              "", "| variant | freshness p50 s | p95 s | batches |", "|---|---|---|---|"]
    for v in VARIANTS:
        ts = [t for t in trickles if t["variant"] == v]
        lines.append(f"| {v} | {_med([t['fresh_p50_s'] for t in ts])} | {_med([t['fresh_p95_s'] for t in ts])} | "
                     f"{_med([t['batches'] for t in ts])} |")
    lines += ["", "Our batches' steps (median ms per batch after the first, from the job's `batches` table):", "",
              "| batch | " + " | ".join(STEP_COLUMNS) + " |", "|---|" + "---|" * len(STEP_COLUMNS)]
    for v in ("ours",) + EXTRA_VARIANTS:
        for b in sizes:
            meds = [r.get("steps_ms", {}) for r in runs if r["variant"] == v and r["batch"] == b]
            if meds:
                lines.append(f"| {b} ({v}) | " + " | ".join(str(_med([m.get(k) for m in meds]) or "—")
                                                        for k in STEP_COLUMNS) + " |")
    drv = [r for r in runs if r["variant"] == "ours_executors"]
    if drv:
        lines += ["", "The same job decoding in the Spark tasks (`[job] decode = \"executors\"`), in the same "
                  "run:", "", "| batch | ours records/s | ours, executor decode records/s | "
                  "executor / driver |", "|---|---|---|---|"]
        for b in sizes:
            ro = _med([r["rec_s"] for r in runs if r["variant"] == "ours" and r["batch"] == b])
            rd = _med([r["rec_s"] for r in drv if r["batch"] == b])
            lines.append(f"| {b} | {ro} | {rd} | {f'{rd / ro:.2f}x' if ro and rd else '—'} |")
    lines += ["", "Every run: " + "; ".join(f"{r['variant']} b={r['batch']} {r['rec_s']} rec/s, "
                                           f"{r['batch_s']} s/batch, first {r['first_batch_s']} s"
                                           for r in runs), ""]
    (out / "ingest.md").write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for v in VARIANTS:
            a1.plot(sizes, [_med([r["rec_s"] for r in by[(v, b)]]) for b in sizes], "o-", label=v)
            a2.plot(sizes, [_med([r["batch_s"] for r in by[(v, b)]]) for b in sizes], "o-", label=v)
        for a, t in ((a1, "records/s"), (a2, "seconds per batch")):
            a.set_xscale("log")
            a.set_xlabel("records per batch (maxOffsetsPerTrigger)")
            a.set_ylabel(t)
            a.legend()
            a.grid(True, alpha=0.3)
        fig.suptitle("CDC -> Delta mirror, local[2]: ours vs canonical Spark MERGE")
        fig.tight_layout()
        fig.savefig(out / "ingest.png", dpi=110)
    except ImportError:
        pass


if __name__ == "__main__":
    raise SystemExit(main())
