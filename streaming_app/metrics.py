"""The job's figures in Prometheus' text format, served by the job itself (``[metrics]``).

Each batch's record (the row the job appends to ``batches``) goes to ``JobMetrics.observe``;
a scrape renders: the last batch's figures (records, events, keys changed, quarantined, each
step's and each maintainer's milliseconds, rows and state size), totals since the job started
(counters, for ``rate()``), the time of the last committed batch, and the lag per topic and
partition: the latest offset on the broker minus the offset the job has processed. Spark keeps
the processed offsets in its checkpoint and no consumer group commits them, so the usual lag
tools see nothing; here they come from each batch's records and from the streaming query's
last progress (partitions that brought no records), the latest offsets from a Kafka consumer
of the job's own options, asked at most once per ``LATEST_TTL_S``.

The server is ``http.server`` in one daemon thread (one request at a time: a scrape takes
milliseconds), on loopback unless the config says otherwise; ``/metrics`` answers, anything
else is 404. Spark's own metrics (executors, JVM, streaming rates) come from Spark's
Prometheus servlet on the UI's port (``spark_conf``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable

import pyarrow.compute as pc

from connectors import object_store
from core.config import JobConfig
from core.errors import IvmError

LATEST_TTL_S = 2.0  # a burst of scrapes asks the broker once
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COUNTERS = (("batches", None), ("records", "records_in"), ("events", "events"),
            ("quarantined", "quarantined"), ("tombstones", "tombstones"), ("keys_changed", "keys_changed"))
BATCH_GAUGES = ("records_in", "events", "keys_changed", "quarantined", "tombstones")
OPERATOR_FIGURES = ("rows_in", "deltas_out", "state_size")


def spark_conf() -> dict[str, str]:
    """Spark's own metrics in Prometheus' format on the UI: executors at
    ``/metrics/executors/prometheus``, the driver's sources (JVM, block manager, the streaming
    query's rates and latency with ``spark.sql.streaming.metricsEnabled``) at
    ``/metrics/prometheus``."""
    return {"spark.ui.prometheus.enabled": "true",
            "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
            "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
            "spark.sql.streaming.metricsEnabled": "true"}


def _label(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v) -> str:
    f = float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    return repr(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)


class Exposition:
    """Lines of Prometheus' text format, one HELP/TYPE header per metric name."""

    def __init__(self, query: str):
        self.query, self.lines, self.seen = query, [], set()

    def add(self, name: str, kind: str, help_: str, value, **labels) -> None:
        if value is None:
            return
        name = f"ivmstream_{name}"
        if name not in self.seen:
            self.seen.add(name)
            self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        pairs = ",".join(f'{k}="{_label(v)}"' for k, v in {"query": self.query, **labels}.items())
        self.lines.append(f"{name}{{{pairs}}} {_num(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class JobMetrics:
    """What a scrape shows, fed by ``observe`` (each batch's record, on the batch's thread) and
    read by ``render`` (on the server's thread)."""

    def __init__(self, cfg: JobConfig, latest: Callable[[list[str]], dict] | None = None,
                 progress: Callable[[], dict] | None = None, clock: Callable[[], float] = time.time):
        self.cfg, self.latest_fn, self.progress_fn, self.clock = cfg, latest, progress, clock
        self.lock = threading.Lock()
        self.started = clock()
        self.last: dict | None = None
        self.last_at: float | None = None  # epoch seconds the last batch committed (its finished_at)
        self.totals: dict[str, float] = defaultdict(float)
        self.step_ms_total: dict[str, float] = defaultdict(float)
        self.operator_ms_total: dict[str, float] = defaultdict(float)
        self.processed: dict[tuple[str, int], int] = {}
        self._latest: tuple[float, dict, str | None] = (-1e18, {}, None)

    def observe(self, row: dict) -> None:
        """One committed batch: its record as the job wrote it to ``batches``."""
        offsets = json.loads(row.get("kafka_offsets") or "{}")
        finished = row.get("finished_at")
        at = finished.timestamp() if hasattr(finished, "timestamp") else self.clock()
        with self.lock:
            self.last, self.last_at = row, at
            for name, key in COUNTERS:
                self.totals[name] += 1 if key is None else (row.get(key) or 0)
            for step, ms in (row.get("step_ms") or {}).items():
                self.step_ms_total[step] += ms or 0.0
            for op in row.get("operators") or []:
                self.operator_ms_total[op["name"]] += op.get("ms") or 0.0
            for topic, parts in offsets.items():
                for part, (_, hi) in parts.items():
                    key = (topic, int(part))
                    self.processed[key] = max(self.processed.get(key, 0), int(hi) + 1)

    def seed_last_commit(self, at: float | None) -> None:
        """The time of the newest batch in the lake before this run (a restart), until this run commits one."""
        with self.lock:
            if self.last_at is None and at is not None:
                self.last_at = at

    def _processed(self) -> dict[tuple[str, int], int]:
        done = {}
        if self.progress_fn is not None:
            try:
                done = self.progress_fn()
            except Exception:  # noqa: BLE001 - the query may be starting or gone: the batches' own offsets stay
                done = {}
        with self.lock:
            for key, off in self.processed.items():
                done[key] = max(done.get(key, 0), off)
        return done

    def _latest_offsets(self) -> tuple[dict, str | None]:
        now = time.monotonic()
        at, offsets, err = self._latest
        if now - at < LATEST_TTL_S or self.latest_fn is None:
            return offsets, err
        try:
            offsets, err = self.latest_fn(list(self.cfg.topics)), None
        except Exception as e:  # noqa: BLE001 - a broker away is a figure (kafka_up 0), not a failed scrape
            offsets, err = {}, f"{type(e).__name__}: {e}"
        self._latest = (now, offsets, err)
        return offsets, err

    def render(self) -> str:
        out = Exposition(self.cfg.name)
        now = self.clock()
        out.add("up", "gauge", "1 while the job runs", 1)
        out.add("start_time_seconds", "gauge", "when this run of the job started (epoch seconds)", self.started)
        with self.lock:
            last, last_at = self.last, self.last_at
            totals, steps_total = dict(self.totals), dict(self.step_ms_total)
            ops_total = dict(self.operator_ms_total)
        for name, _ in COUNTERS:
            out.add(f"{name}_total", "counter", f"{name.replace('_', ' ')} since this run started",
                    totals.get(name, 0))
        for step, ms in sorted(steps_total.items()):
            out.add("step_ms_total", "counter", "milliseconds spent in each step of a batch, since this run started",
                    ms, step=step)
        for op, ms in sorted(ops_total.items()):
            out.add("operator_ms_total", "counter", "milliseconds each maintainer spent, since this run started",
                    ms, operator=op)
        if last_at is not None:
            out.add("last_batch_timestamp_seconds", "gauge", "when the last batch committed (epoch seconds)", last_at)
            out.add("last_batch_age_seconds", "gauge", "seconds since the last batch committed",
                    max(0.0, now - last_at))
        if last is not None:
            out.add("last_batch_id", "gauge", "id of the last committed batch", last["batch_id"])
            for key in BATCH_GAUGES:
                out.add(f"batch_{key}", "gauge", f"{key.replace('_', ' ')} of the last batch", last.get(key))
            for step, ms in sorted((last.get("step_ms") or {}).items()):
                out.add("batch_step_ms", "gauge", "milliseconds of each step of the last batch", ms, step=step)
            for op in last.get("operators") or []:
                out.add("operator_ms", "gauge", "milliseconds of each maintainer in the last batch", op.get("ms"),
                        operator=op["name"])
                for fig in OPERATOR_FIGURES:
                    out.add(f"operator_{fig}", "gauge", f"{fig.replace('_', ' ')} of each maintainer in the last batch",
                            op.get(fig), operator=op["name"])
        done = self._processed()
        latest, err = self._latest_offsets()
        out.add("kafka_up", "gauge", "1 if the broker answered the last ask for its latest offsets",
                0 if err else 1)
        for (topic, part), end in sorted(latest.items()):
            out.add("kafka_latest_offset", "gauge", "the next offset the broker will write", end,
                    topic=topic, partition=part)
            got = done.get((topic, part))
            if got is None:  # no batch or progress of this run has read it yet: no figure rather than a guess
                continue
            out.add("kafka_processed_offset", "gauge", "the next offset the job will read", got,
                    topic=topic, partition=part)
            out.add("kafka_lag", "gauge", "records on the broker the job has not processed yet",
                    max(0, end - got), topic=topic, partition=part)
        return out.text()


def progress_offsets(query) -> dict[tuple[str, int], int]:
    """The end offsets of the streaming query's last progress (Spark's Kafka source: one JSON
    object of topic -> partition -> next offset), for partitions no batch of this run read."""
    prog = query.lastProgress
    if not prog:
        return {}
    out = {}
    for src in prog.get("sources") or []:
        end = src.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        for topic, parts in (end or {}).items():
            if isinstance(parts, dict):
                for part, off in parts.items():
                    out[(topic, int(part))] = int(off)
    return out


class JvmLatestOffsets:
    """Latest offsets per (topic, partition) from a Kafka consumer in the driver's JVM, made with
    the job's ``[kafka] options`` (security settings included) as Spark's source is; one consumer,
    kept, used by one thread at a time."""

    def __init__(self, spark, cfg: JobConfig):
        self.jvm = jvm = spark._jvm
        props = jvm.java.util.Properties()
        deser = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
        for k, v in cfg.kafka.extra_options:
            if k.startswith("kafka.") and k != "kafka.group.id":
                props.put(k.removeprefix("kafka."), v)
        for k, v in {"bootstrap.servers": cfg.kafka.bootstrap_servers, "key.deserializer": deser,
                     "value.deserializer": deser, "enable.auto.commit": "false",
                     "client.id": f"ivmstream-metrics-{cfg.name}"}.items():
            props.put(k, v)
        self.consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
        self.lock = threading.Lock()

    def __call__(self, topics: list[str]) -> dict:
        jvm = self.jvm
        with self.lock:
            timeout = jvm.java.time.Duration.ofSeconds(3)
            parts = jvm.java.util.ArrayList()
            for t in topics:
                for info in self.consumer.partitionsFor(t, timeout) or []:
                    parts.add(jvm.org.apache.kafka.common.TopicPartition(t, info.partition()))
            ends = self.consumer.endOffsets(parts, timeout)
            return {(p.topic(), int(p.partition())): int(ends.get(p)) for p in parts if ends.get(p) is not None}

    def close(self) -> None:
        with self.lock:
            self.consumer.close(self.jvm.java.time.Duration.ofMillis(0))


def last_commit_in_lake(cfg: JobConfig) -> float | None:
    """When this job's newest batch in the lake committed (epoch seconds), None without one: the
    age a restarted job shows until it commits a batch of its own."""
    path = object_store.join(cfg.lake_root, "batches")
    try:
        if not object_store.rs_is_table(path):
            return None
        t = object_store.rs_table(path).to_pyarrow_dataset().to_table(
            columns=["finished_at"], filter=pc.field("job") == cfg.name)
    except OSError:
        return None
    newest = pc.max(t.column("finished_at")).as_py()
    return None if newest is None else newest.replace(tzinfo=newest.tzinfo or dt.timezone.utc).timestamp()


def serve(cfg: JobConfig, spark, say: Callable[[str], None]) -> tuple[JobMetrics, "MetricsServer"]:
    """The job's metrics and their server, started (``[metrics]`` enabled); ``say`` prints its URL."""
    try:
        latest = JvmLatestOffsets(spark, cfg)
    except Exception as e:  # noqa: BLE001 - no consumer: the batch figures still serve, lag does not
        say(f"metrics: no Kafka consumer for the latest offsets ({type(e).__name__}); lag is not shown")
        latest = None
    metrics = JobMetrics(cfg, latest=latest)
    metrics.seed_last_commit(last_commit_in_lake(cfg))
    try:
        server = MetricsServer(metrics, cfg.metrics.host, cfg.metrics.port).start()
    except OSError as e:
        raise MetricsError(f"[metrics] cannot listen on {cfg.metrics.host}:{cfg.metrics.port} "
                           f"({e.strerror or e}); choose another port (port = 0 takes a free one)") from None
    say(f"metrics: {server.url} (Prometheus text format)")
    return metrics, server


class MetricsError(IvmError):
    code = "IVM130"


class MetricsServer:
    """``/metrics`` of a ``JobMetrics`` over HTTP, from a daemon thread."""

    def __init__(self, metrics: JobMetrics, host: str, port: int):
        self.metrics = metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                try:
                    body = metrics.render().encode()
                except Exception as e:  # noqa: BLE001 - a scrape that fails says why, the job goes on
                    self.send_error(500, f"{type(e).__name__}: {e}"[:200])
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # no line per scrape on the job's console
                pass

        self.httpd = HTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="ivmstream-metrics", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def start(self) -> "MetricsServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        close = getattr(self.metrics.latest_fn, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - the JVM may be stopping with the job
                pass
