"""The streaming job: Kafka CDC -> decode -> Delta mirrors -> maintainers -> batch record.

One Structured Streaming query reads every configured topic with Spark's Kafka source and
hands each micro-batch to ``IngestJob.process_batch`` through ``foreachBatch``:

  1. the state backend the job is given (state.backends) reads the batch: the memory backend
     collects the Kafka records (bounded by ``max_offsets_per_trigger``) and decodes them on
     the driver (connectors.debezium), or with ``[job] decode = "executors"`` in the Spark
     tasks that read them (connectors.decode_stage); the statestore backend runs its keyed
     operators in the query (state.statestore.backend); bad records become ``quarantine`` rows;
  2. reduce each table's events to the final image per primary key and MERGE them into the
     table's Delta mirror, one commit per table per batch;
  3. run the registered maintainers (sketches, triangles, recursive views) on what changed;
  4. append the ``batches`` row last.

Exactly once: Spark replays an uncommitted batch with the same id and offsets; every Delta
write carries (app id, batch id) so the replay skips what was already committed, and a batch
whose ``batches`` row exists is skipped whole. The app id is the job name plus the
streaming query id, which lives in the checkpoint: a fresh checkpoint is a fresh writer.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import pyarrow as pa

from connectors import delta_sink as sink
from connectors import object_store
from connectors import spark_labels
from connectors.debezium import DecodedBatch, Rejected, quarantine_text
from connectors.decode_stage import KAFKA_COLUMNS
from connectors.maintenance import Maintenance
from core.config import JobConfig
from core.errors import ConfigError
from core.faults import kill_point
from state.backends import MemoryBackend, StateBackend
from state.snapshot_store import SnapshotStore

QUARANTINE_DDL = ("job STRING, batch_id BIGINT, topic STRING, `partition` INT, `offset` BIGINT, "
                  "key STRING, value STRING, error_code STRING, reason STRING, quarantined_at TIMESTAMP")
# One entry per maintainer and batch: what it read from the mirrors' change feeds, the rows
# it changed in its outputs, its time, and its state's size (entries; see each maintainer).
OPERATORS_TYPE = "ARRAY<STRUCT<name: STRING, rows_in: BIGINT, deltas_out: BIGINT, ms: DOUBLE, state_size: BIGINT>>"
OPERATOR_FIGURES = ("rows_in", "deltas_out", "state_size")
BATCHES_DDL = ("job STRING, app_id STRING, batch_id BIGINT, started_at TIMESTAMP, finished_at TIMESTAMP, "
               "kafka_offsets STRING, mirror_versions MAP<STRING, BIGINT>, records_in BIGINT, "
               "events BIGINT, keys_changed BIGINT, quarantined BIGINT, tombstones BIGINT, "
               "step_ms MAP<STRING, DOUBLE>, metrics STRING, "
               f"operators {OPERATORS_TYPE}")
# The consumer in Spark's tasks fetches 1 MB per partition and hands out 500 records per poll by
# default: a 20,000-record batch took ~1 s to collect, ~0.6 s with these (mean of four
# steady batches, two runs each, load ~6).
# fetch.max.wait.ms: a new consumer's first poll (one per topic-partition and executor, in the
# first batch) waited out the broker's default 500 ms even with the records there: 518-876 ms
# to read 2 records, 137-173 ms with 20 ms (executor logs of bench/cluster.py).
KAFKA_READ_OPTIONS = {"kafka.max.partition.fetch.bytes": str(16 * 2**20), "kafka.max.poll.records": "20000",
                      "kafka.fetch.max.wait.ms": "20"}
WARM_UP_WAIT_S = 10.0  # the longest the query's start waits for the Kafka warm-up read
WARM_UP_RECORDS = 2000  # read per topic-partition by the warm-up (partition 0 of a topic per core)
SCHEMA_CHANGES_DDL = ("job STRING, `table` STRING, `column` STRING, change STRING, batch_id BIGINT, "
                      "topic STRING, `partition` INT, `offset` BIGINT, detected_at TIMESTAMP")


@dataclass
class BatchContext:
    """What one micro-batch did so far; maintainers read it and add their metrics."""

    batch_id: int
    app_id: str
    decoded: DecodedBatch
    changed_tables: dict[str, int] = field(default_factory=dict)  # table -> new mirror version
    previous_versions: dict[str, int] = field(default_factory=dict)  # table -> version before
    mirror_versions: dict[str, int] = field(default_factory=dict)  # all mirrors after the batch
    step_ms: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, object] = field(default_factory=dict)
    rejected: list = field(default_factory=list)  # maintainers' bad rows -> quarantine


def _await_spark_commit(query, batch_id: int, timeout_s: float = 60.0) -> None:
    """Wait until Spark has written ``batch_id`` to its commit log (its progress event comes
    right after), so that stopping the query now leaves nothing for the restart to replay."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        progress = query.lastProgress
        done = None if progress is None else (progress["batchId"] if isinstance(progress, dict)
                                              else getattr(progress, "batchId", None))
        if done is not None and int(done) >= batch_id:
            return
        time.sleep(0.05)


class StopRequested(Exception):
    """A batch that began after a stop was requested: refused, so that it stays uncommitted."""


class Maintainer(Protocol):
    """A consumer of mirror changes (sketch, triangle or view maintainer).

    ``setup`` creates its output tables. ``start`` runs once per process, at the first batch
    and before that batch touches any mirror: the maintainer builds its state from the
    mirrors as committed (``job.versions``) and remembers those versions. ``on_batch`` then
    reads each changed mirror's change data feed from its remembered version to the new
    one, so a batch replayed after a crash is neither lost nor applied twice.
    """

    name: str

    def setup(self, spark, job: "IngestJob") -> None: ...

    def start(self, spark, job: "IngestJob") -> None: ...

    def on_batch(self, spark, job: "IngestJob", ctx: BatchContext) -> None: ...


class IngestJob:
    def __init__(self, cfg: JobConfig, spark, maintainers: list[Maintainer] | None = None,
                 on_batch: Callable[[dict], None] | None = None, backend: StateBackend | None = None):
        if backend is None and cfg.state.backend != MemoryBackend.name:
            raise ConfigError(f"[state] backend = {cfg.state.backend!r}: the job needs that backend "
                              "(streaming_app.runner.state_backend builds it from the config)")
        self.cfg = cfg
        self.backend = backend or MemoryBackend()
        self.spark = spark
        if object_store.lake_s3(cfg) is not None:  # delta-rs and Spark's S3A reach the bucket
            object_store.use(cfg.s3)
            object_store.apply_to_spark(spark, cfg.s3)
        self.lake = sink.Lake(cfg.lake_root)
        self.maintainers = self.backend.maintainers(list(maintainers or []))
        # compaction, VACUUM and log checkpoints of the tables the job writes, one table a turn
        self.maintenance = Maintenance(cfg.maintenance, spark, needed=self._needed_version,
                                       say=lambda line: print(line, flush=True), root=str(self.lake.root))
        self.on_batch = on_batch
        self.app_id: str | None = None
        self._app_ready = threading.Event()
        self.last_done: int | None = None  # loaded at the first batch, once app_id is known
        self.versions: dict[str, int] = {}
        self.totals = {"batches": 0, "records": 0, "events": 0, "quarantined": 0, "tombstones": 0}
        self.schema_changes_seen: set[tuple[str, str, str]] | None = None  # (table, column, change)
        self._warned: set[str] = set()  # tables already warned about a multi-partition truncate
        self._batch_lock = threading.Lock()  # held while a batch runs
        self._stopping = False
        self._running: int | None = None  # the batch inside process_batch, if any
        self._finished: int | None = None  # the last batch this process finished
        # where the streaming query resumes and whose writes it makes (the statestore backend's
        # checkpoint generations change these: state/statestore/generations.py)
        self.checkpoint_location = cfg.checkpoint_dir
        self.starting_offsets = cfg.kafka.starting_offsets
        self.writer_id: str | None = None  # None: the job name and the streaming query id
        self.trigger_once = False  # run one batch (a pending one first) and stop
        self.query = None  # the streaming query, once started

    # -- set-up -----------------------------------------------------------------------------
    def setup(self) -> None:
        spark = self.spark
        for t in self.cfg.tables:
            path = sink.ensure_mirror(spark, self.lake, t, self.cfg.mirrors)
            self.versions.setdefault(t.name, sink.latest_version(spark, path))
        sink.ensure_table(spark, self.lake.output("quarantine"), QUARANTINE_DDL)
        sink.ensure_table(spark, self.lake.output("batches"), BATCHES_DDL)
        sink.ensure_columns(spark, self.lake.output("batches"), {"operators": OPERATORS_TYPE})
        sink.ensure_table(spark, self.lake.output("schema_changes"), SCHEMA_CHANGES_DDL)
        for m in self.maintainers:
            m.setup(spark, self)
        self.backend.setup(self)

    def _needed_version(self, path: str) -> int | None:
        """The oldest version of the mirror at ``path`` that a restart may read the change feed
        from (a kept state snapshot reflects it); None for any other table."""
        for t in self.cfg.tables:
            if str(self.lake.mirror(t.name)) == str(path):
                return SnapshotStore(self.lake.root, self.spark).oldest_versions().get(t.name)
        return None

    def with_backend(self, backend: StateBackend) -> "IngestJob":
        """A job like this one (config, session, maintainers, batch callback) over ``backend``."""
        return IngestJob(self.cfg, self.spark, self.maintainers, self.on_batch, backend=backend)

    def restarted(self) -> "IngestJob":
        """The job for the streaming query's next start when the backend asked for one
        (``restart_wanted``), after this job's query stopped."""
        return self.with_backend(self.backend.restarted(self))

    def last_batch_of(self, spark, app_id: str) -> tuple[int, dict[str, int]]:
        """The last batch writer ``app_id`` completed in this lake (-1: none) and the mirror versions it left."""
        return last_batch(spark, self.lake, app_id)

    def _load_last_batch(self, spark) -> None:
        """The last batch this writer (app id) completed, and the mirror versions it left."""
        self.last_done, versions = last_batch(spark, self.lake, self.app_id)
        self.versions.update(versions)

    # -- the micro-batch ---------------------------------------------------------------------
    def process_batch(self, batch_df, batch_id: int) -> None:
        """foreachBatch: one micro-batch, never overlapping a requested stop (see stop_between_batches)."""
        with self._batch_lock:
            if self._stopping:
                # Raising leaves the batch uncommitted: Spark replays it after the restart.
                raise StopRequested(f"batch {batch_id} not started: the job is stopping (it runs again on restart)")
            self._running = batch_id
            try:
                self._process_batch(batch_df, batch_id)
                self._finished = batch_id
            finally:
                self._running = None

    def request_stop(self) -> tuple[int | None, int | None]:
        """Refuse every batch that has not begun yet (safe from a signal handler: no lock).
        Returns (the batch running now, the last batch finished) at the moment of the request."""
        self._stopping = True
        return self._running, self._finished

    def stop_between_batches(self, query, timeout_s: float = 600.0) -> None:
        """Stop the streaming query between two batches: wait for the running batch to finish,
        refuse every later one, then stop. A stop in the middle of a batch would leave its
        mirror commits ahead of its ``batches`` row until the restart replays it."""
        if self._batch_lock.acquire(timeout=timeout_s):
            self._stopping = True
            finished = self._finished
            self._batch_lock.release()
            if finished is not None:
                _await_spark_commit(query, finished)
        else:
            self._stopping = True
        query.stop()

    def _process_batch(self, batch_df, batch_id: int) -> None:
        batch_id = self.backend.begin_batch(self, batch_df, batch_id)
        try:
            self._run_batch(batch_df, batch_id)
        finally:
            self.backend.end_batch(self)

    def _run_batch(self, batch_df, batch_id: int) -> None:
        spark = batch_df.sparkSession
        self._app_ready.wait(timeout=120)
        if self.last_done is None:
            self._load_last_batch(spark)
            self.versions.update({t.name: sink.latest_version(spark, self.lake.mirror(t.name))
                                  for t in self.cfg.tables})
            for m in self.maintainers:
                t = time.perf_counter()
                m.start(spark, self)
                print(f"[{self.cfg.name}] {m.name}: ready in {_ms(t):.0f} ms", flush=True)
        if batch_id <= self.last_done:
            print(f"[{self.cfg.name}] batch {batch_id}: already committed before a restart; skipped", flush=True)
            return
        started = sink.utcnow()
        steps: dict[str, float] = {}
        spark_labels.label(spark, f"ivmstream batch {batch_id}: read and decode")
        decoded, offsets, raw_of = self.backend.read(self, batch_df, batch_id, steps)
        self._apply(spark, batch_id, started, steps, decoded, offsets, raw_of)

    def _apply(self, spark, batch_id: int, started, steps: dict, decoded: DecodedBatch, offsets: dict,
               raw_of) -> None:
        ctx = BatchContext(batch_id=batch_id, app_id=self.app_id or self.cfg.name, decoded=decoded)
        if decoded.before_ignored:  # the changes were applied: they need only the key of that image
            ctx.metrics["decoder"] = {"before_values_ignored": decoded.before_ignored}

        t = time.perf_counter()
        keys_changed = 0
        for table in self.cfg.tables:
            path = self.lake.mirror(table.name)
            before = self.versions.get(table.name, 0)
            spark_labels.label(spark, f"ivmstream batch {batch_id}: mirror {table.name}")  # its lookups and MERGE
            plan = self.backend.plan(self, spark, table, decoded, before)
            if plan is None:
                continue
            events = decoded.events.get(table.name) or []
            if plan.rejected:
                raw = raw_of({(table.topic, ev.partition, ev.offset) for ev, _, _ in plan.rejected})
                ctx.rejected.extend(_rejection(table.topic, raw, ev, code, reason, table.encoding == "avro")
                                    for ev, code, reason in plan.rejected)
            if not plan.final and not plan.truncate:
                continue
            keys_changed += len(plan.final)
            kill_point(f"mirror.begin.{table.name}", batch_id)
            sink.merge_mirror(spark, path, table, sink.mirror_changes_frame(table, plan.final), ctx.app_id,
                              batch_id, truncate=plan.truncate)
            ctx.previous_versions[table.name] = before
            ctx.changed_tables[table.name] = sink.latest_version(spark, path)
            if plan.truncate and len({ev.partition for ev in events}) > 1 and table.name not in self._warned:
                self._warned.add(table.name)
                print(f"[{self.cfg.name}] {table.name}: a TRUNCATE arrived on topic {table.topic} with changes from "
                      "several partitions in one batch; it is exact only on a one-partition topic (README: "
                      "Capturing PostgreSQL with Debezium, ordering)", flush=True)
            if plan.truncate or plan.toast_filled:
                ctx.metrics.setdefault("mirror", {})[table.name] = {
                    "truncated": plan.truncate, "toast_values_kept": plan.toast_filled}
            kill_point(f"mirror.{table.name}", batch_id)
        steps["mirror"] = _ms(t)
        self._record_schema_changes(spark, decoded, ctx)
        ctx.mirror_versions = {**self.versions, **ctx.changed_tables}

        ctx.step_ms = steps
        operators = []
        for m in self.maintainers:
            t = time.perf_counter()
            # Every Spark job the maintainer starts shows under this label in the Spark UI.
            spark_labels.label(spark, f"ivmstream batch {batch_id}: {m.name}")
            m.on_batch(spark, self, ctx)
            steps[f"maintain:{m.name}"] = _ms(t)
            operators.append(_operator_figures(m, ctx, steps[f"maintain:{m.name}"]))
            kill_point(f"maintain.{m.name}", batch_id)
        self.backend.after_maintainers(self, spark, ctx)
        rejected = list(decoded.rejected) + list(ctx.rejected)
        spark_labels.label(spark, f"ivmstream batch {batch_id}: quarantine {len(rejected)} and batch record")

        t = time.perf_counter()
        if rejected:
            kill_point("quarantine.begin", batch_id)
            sink.append_small(spark, self.lake.output("quarantine"), self._quarantine_rows(rejected, batch_id),
                              ctx.app_id, batch_id)
        steps["quarantine"] = _ms(t)
        kill_point("quarantine", batch_id)

        row = {
            "job": self.cfg.name, "app_id": ctx.app_id, "batch_id": batch_id, "started_at": started,
            "finished_at": sink.utcnow(), "kafka_offsets": json.dumps(offsets),
            "mirror_versions": ctx.mirror_versions, "records_in": decoded.records,
            "events": self.backend.events_in(decoded), "keys_changed": keys_changed,
            "quarantined": len(rejected), "tombstones": decoded.tombstones,
            "step_ms": steps, "metrics": json.dumps(ctx.metrics, default=str),
            "operators": operators,
        }
        t = time.perf_counter()
        kill_point("batch_record.begin", batch_id)
        sink.append_small(spark, self.lake.output("batches"), _batches_frame(row), ctx.app_id, batch_id)
        steps["batch_record"] = _ms(t)
        kill_point("batch_record", batch_id)
        t = time.perf_counter()
        if self.maintenance.after_batch(batch_id):  # the batch is committed: the next one waits for this
            steps["maintenance"] = _ms(t)

        self.versions = ctx.mirror_versions
        self.last_done = batch_id
        for k, key in (("batches", None), ("records", "records_in"), ("events", "events"),
                       ("quarantined", "quarantined"), ("tombstones", "tombstones")):
            self.totals[k] += 1 if key is None else row[key]
        spark_labels.summary(spark, batch_summary(batch_id, decoded.records, rejected, steps))
        spark_labels.label(spark, None)
        if self.on_batch:
            self.on_batch({**row, "step_ms": dict(steps)})

    def _record_schema_changes(self, spark, decoded: DecodedBatch, ctx: BatchContext) -> None:
        """Note each column the source dropped once in ``schema_changes`` (idempotent on the batch)."""
        changes = decoded.schema_changes
        if not changes:
            return
        path = self.lake.output("schema_changes")
        if self.schema_changes_seen is None:
            rows = spark.read.format("delta").load(path).select("table", "column", "change").collect()
            self.schema_changes_seen = {(r["table"], r["column"], r["change"]) for r in rows}
        new = []
        for ch in changes:
            table, column, change = ch[:3]
            if (table, column, change) not in self.schema_changes_seen:
                self.schema_changes_seen.add((table, column, change))
                new.append((table, column, change))
        if not new:
            return
        now = sink.utcnow()
        topics = {t.name: t.topic for t in self.cfg.tables}
        data = pa.table({
            "job": pa.array([self.cfg.name] * len(new), pa.string()),
            "table": pa.array([n[0] for n in new], pa.string()),
            "column": pa.array([n[1] for n in new], pa.string()),
            "change": pa.array([n[2] for n in new], pa.string()),
            "batch_id": pa.array([ctx.batch_id] * len(new), pa.int64()),
            "topic": pa.array([topics.get(n[0]) for n in new], pa.string()),
            "partition": pa.array([None] * len(new), pa.int32()),
            "offset": pa.array([None] * len(new), pa.int64()),
            "detected_at": pa.array([now] * len(new), pa.timestamp("us", tz="UTC")),
        })
        sink.append_small(spark, path, data, ctx.app_id, ctx.batch_id)
        for table, column, change in new:
            print(f"[{self.cfg.name}] {table}: column {column!r} {change} in the source; "
                  "it reads as NULL from now on (recorded in schema_changes)", flush=True)

    def _quarantine_rows(self, rs: list, batch_id: int) -> pa.Table:
        now = sink.utcnow()
        return pa.table({
            "job": pa.array([self.cfg.name] * len(rs), pa.string()),
            "batch_id": pa.array([batch_id] * len(rs), pa.int64()),
            "topic": pa.array([r.topic for r in rs], pa.string()),
            "partition": pa.array([r.partition for r in rs], pa.int32()),
            "offset": pa.array([r.offset for r in rs], pa.int64()),
            "key": pa.array([r.key for r in rs], pa.string()),
            "value": pa.array([r.value for r in rs], pa.string()),
            "error_code": pa.array([r.code for r in rs], pa.string()),
            "reason": pa.array([r.reason for r in rs], pa.string()),
            "quarantined_at": pa.array([now] * len(rs), pa.timestamp("us", tz="UTC")),
        })

    # -- the streaming query -----------------------------------------------------------------
    def start(self, available_now: bool = False):
        """Start the streaming query; returns the StreamingQuery."""
        try:
            self.query = self._start(available_now)
        finally:
            self.backend.started(self)
        return self.query

    def _start(self, available_now: bool):
        cfg = self.cfg
        warm_up = None
        if self.spark.sparkContext.master.startswith("local"):
            # Beside the set-up, and batch 0 waits for it (a few seconds at most): batch 0 then
            # starts with what every batch reuses already loaded and compiled.
            warm_up = threading.Thread(target=_warm_kafka_read, args=(self.spark, cfg), daemon=True,
                                       name="ivmstream-kafka-warm-up")
            warm_up.start()
        self.setup()
        reader = (self.spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
                  .option("includeHeaders", "true")
                  .option("subscribe", ",".join(cfg.topics))
                  .option("startingOffsets", self.starting_offsets)
                  .option("maxOffsetsPerTrigger", str(cfg.kafka.max_offsets_per_trigger)))
        if cfg.decode == "executors" and "minPartitions" not in dict(cfg.kafka.extra_options):
            # Decoding runs in the tasks that read Kafka: split a batch over every core even
            # when the topics have fewer partitions (slices are merged back in log order).
            reader = reader.option("minPartitions", str(self.spark.sparkContext.defaultParallelism))
        for k, v in KAFKA_READ_OPTIONS.items():  # the config's [kafka] options, set next, win
            reader = reader.option(k, v)
        for k, v in cfg.kafka.extra_options:
            reader = reader.option(k, v)
        writer = (self.backend.stream(self, reader.load()).writeStream.queryName(cfg.name)
                  .option("checkpointLocation", str(self.checkpoint_location))
                  .foreachBatch(self.process_batch))
        writer = (writer.trigger(once=True) if self.trigger_once else writer.trigger(availableNow=True) if available_now
                  else writer.trigger(processingTime=f"{cfg.trigger_interval_s} seconds"))
        if warm_up is not None:
            warm_up.join(timeout=WARM_UP_WAIT_S)
        query = writer.start()
        # The query id persists in the checkpoint across restarts: it names this writer.
        self.app_id = self.writer_id or f"{cfg.name}:{query.id}"
        self._app_ready.set()
        return query


def last_batch(spark, lake, app_id: str) -> tuple[int, dict[str, int]]:
    """The last batch writer ``app_id`` completed (-1: none) and the mirror versions it left.

    The batches table carries the writer's txn action: its version is the last batch id, read
    from the log without a Spark job; Spark reads the row only when there is one."""
    from pyspark.sql import functions as F

    path = lake.output("batches")
    if not sink.maybe_written_by(path, app_id):
        return -1, {}
    row = (spark.read.format("delta").load(path)
           .where(F.col("app_id") == app_id).orderBy(F.col("batch_id").desc()).limit(1)).first()
    if row is None:
        return -1, {}
    return int(row["batch_id"]), {k: int(v) for k, v in (row["mirror_versions"] or {}).items()}


def _warm_kafka_read(spark, cfg: JobConfig) -> None:
    """Read a few Kafka records through Spark, as every batch will, before batch 0.

    The first Kafka read of a Spark application pays once for what every later one reuses:
    the Kafka client's loading and first fetches, the generated code of the record converter
    (the first task compiles it while the other waits on the code cache), interpreted code
    before the JIT, and the Arrow path back to Python. Measured with `make demo`'s job
    (local[2], 20,000-record batch 0, two runs each, other work at lower priority): batch 0's
    collect 2.3-2.5 s without a warm-up, 1.3 s after one record, 1.1 s after 2,000 from each
    of two topics, for 0.4-1.8 s more before the first batch. The read is the batch's own
    selection with the job's Kafka options, over the first ``WARM_UP_RECORDS`` of partition 0
    of the first topics that have records, one per core (offsets from a plain consumer, which
    also loads the client's classes). It writes and commits nothing; a failure here changes
    nothing (the query's own reads report it)."""
    try:
        jvm = spark._jvm
        props = jvm.java.util.Properties()
        deser = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
        options = [(k, v) for k, v in (*KAFKA_READ_OPTIONS.items(), *cfg.kafka.extra_options)
                   if k.startswith("kafka.") and k != "kafka.group.id"]
        settings = {k.removeprefix("kafka."): v for k, v in options}
        settings.update({"bootstrap.servers": cfg.kafka.bootstrap_servers, "key.deserializer": deser,
                         "value.deserializer": deser, "enable.auto.commit": "false"})
        for k, v in settings.items():
            props.put(k, v)
        consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
        try:
            parts = jvm.java.util.ArrayList()
            for topic in cfg.topics:
                parts.add(jvm.org.apache.kafka.common.TopicPartition(topic, 0))
            timeout = jvm.java.time.Duration.ofSeconds(5)
            firsts, ends = consumer.beginningOffsets(parts, timeout), consumer.endOffsets(parts, timeout)
            spans = [(p.topic(), int(firsts.get(p)), min(int(ends.get(p)), int(firsts.get(p)) + WARM_UP_RECORDS))
                     for p in parts
                     if firsts.get(p) is not None and ends.get(p) is not None and ends.get(p) > firsts.get(p)]
            spans = spans[:max(1, spark.sparkContext.defaultParallelism)]  # a task per core
        finally:
            consumer.close(jvm.java.time.Duration.ofMillis(0))
        if not spans:
            return
        spark_labels.label(spark, "ivmstream: warm-up read of a few Kafka records")
        reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
                  .option("includeHeaders", "true").option("assign", json.dumps({t: [0] for t, _, _ in spans}))
                  .option("startingOffsets", json.dumps({t: {"0": a} for t, a, _ in spans}))
                  .option("endingOffsets", json.dumps({t: {"0": b} for t, _, b in spans})))
        for k, v in options:
            reader = reader.option(k, v)
        reader.load().select(*KAFKA_COLUMNS).toArrow()
    except Exception:  # noqa: BLE001 - an optimization only
        pass


def _rejection(topic: str, raw: dict, ev, code: str, reason: str, avro: bool = False) -> Rejected:
    key, value = raw.get((topic, ev.partition, ev.offset), (None, None))
    return Rejected(topic, ev.partition, ev.offset, quarantine_text(key, avro), quarantine_text(value, avro), code, reason)


def batch_summary(batch_id: int, records: int, rejected: list, steps: dict[str, float]) -> str:
    """The batch's line in the Spark UI's Jobs table: records, quarantined by code, step times."""
    codes = collections.Counter(r.code for r in rejected)
    why = f" ({', '.join(f'{c} {n}' for c, n in sorted(codes.items()))})" if codes else ""
    took = ", ".join(f"{k.removeprefix('maintain:')} {v:.0f}" for k, v in steps.items()
                     if isinstance(v, (int, float)))  # the statestore's per-operator dict is on the metrics
    return f"ivmstream batch {batch_id}: {records} records, {len(rejected)} quarantined{why}; ms: {took}"


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def _operator_figures(m, ctx: BatchContext, ms: float) -> dict:
    """The maintainer's entry of the ``operators`` column. Maintainers report ``rows_in``,
    ``deltas_out`` and ``state_size`` under their name in ``ctx.metrics``; a figure a
    maintainer does not report stays null rather than a made-up zero."""
    reported = ctx.metrics.get(m.name)
    reported = reported if isinstance(reported, dict) else {}
    out = {"name": m.name, "ms": round(ms, 1)}
    for k in OPERATOR_FIGURES:
        v = reported.get(k)
        out[k] = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return out


def _batches_frame(row: dict) -> pa.Table:
    return pa.table({
        "job": pa.array([row["job"]], pa.string()),
        "app_id": pa.array([row["app_id"]], pa.string()),
        "batch_id": pa.array([row["batch_id"]], pa.int64()),
        "started_at": pa.array([row["started_at"]], pa.timestamp("us", tz="UTC")),
        "finished_at": pa.array([row["finished_at"]], pa.timestamp("us", tz="UTC")),
        "kafka_offsets": pa.array([row["kafka_offsets"]], pa.string()),
        "mirror_versions": pa.array([list(row["mirror_versions"].items())], pa.map_(pa.string(), pa.int64())),
        "records_in": pa.array([row["records_in"]], pa.int64()),
        "events": pa.array([row["events"]], pa.int64()),
        "keys_changed": pa.array([row["keys_changed"]], pa.int64()),
        "quarantined": pa.array([row["quarantined"]], pa.int64()),
        "tombstones": pa.array([row["tombstones"]], pa.int64()),
        "step_ms": pa.array([list(row["step_ms"].items())], pa.map_(pa.string(), pa.float64())),
        "metrics": pa.array([row["metrics"]], pa.string()),
        "operators": pa.array([row["operators"]], _OPERATORS_ARROW),
    })


_OPERATORS_ARROW = pa.list_(pa.struct([("name", pa.string()), ("rows_in", pa.int64()), ("deltas_out", pa.int64()),
                                       ("ms", pa.float64()), ("state_size", pa.int64())]))
