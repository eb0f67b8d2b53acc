"""Running the job in the foreground: start, print a line per batch, stop cleanly.

Shared by `ivmstream run` and `ivmstream demo`. A stop (end of --duration, Ctrl-C or
SIGTERM) waits for the running micro-batch to finish before stopping the query, so a
normal stop leaves no batch to replay; a hard kill is covered by the checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from connectors import object_store
from core.config import JobConfig
from core.errors import RegistryRefused
from state.backends import MemoryBackend, StateBackend
from streaming_app import metrics
from streaming_app import preflight
from streaming_app.catalog import CatalogRegistrar
from streaming_app.job import IngestJob, Maintainer
from streaming_app.maintainers import maintainers_for
from streaming_app.spark_session import SessionOptions, build_session


@dataclass
class RunResult:
    totals: dict
    seconds: float
    ui_url: str | None

def batch_line(row: dict) -> str:
    steps = row.get("step_ms", {})
    slowest = ", ".join(f"{k} {v:.0f}ms" for k, v in sorted(steps.items(), key=lambda kv: -kv[1])[:3])
    line = (f"batch {row['batch_id']:>5}: {row['records_in']:>6} records, {row['events']:>6} events, "
            f"{row['keys_changed']:>6} keys, {row['quarantined']} quarantined "
            f"({slowest})")
    ops = [_operator_part(op) for op in row.get("operators") or []]
    line += "\n             " + "; ".join(ops) if ops else ""
    try:
        per = (json.loads(row.get("metrics") or "{}").get("sketches") or {}).get("per_query") or {}
    except (TypeError, ValueError):
        per = {}
    if per:  # each sketched query the batch brought forward
        line += "\n             sketches: " + "; ".join(
            f"{q} {v['delta_rows']} rows +{v['added']}/-{v['removed']} fragments {v['ms']:.0f} ms"
            for q, v in per.items())
    return line

def _operator_part(op: dict) -> str:
    """``triangles.social: 24 in, 1 out, 12 ms, state 121``; figures it did not report are left out."""
    parts = [f"{op[k]} {label}" for k, label in (("rows_in", "in"), ("deltas_out", "out")) if op.get(k) is not None]
    parts.append(f"{op['ms']:.0f} ms")
    if op.get("state_size") is not None:
        parts.append(f"state {op['state_size']}")
    return f"{op['name']}: {', '.join(parts)}"

def state_backend(cfg: JobConfig) -> StateBackend:
    """The state backend ``[state] backend`` names, for the job (state.backends)."""
    if cfg.state.backend == "statestore":
        # here, not at the top: its stateful processors import pyspark's streaming API
        from state.statestore.backend import StatestoreBackend
        from streaming_app.sketches.keyed import KeyedSketchTables

        return StatestoreBackend(cfg, KeyedSketchTables(cfg))
    return MemoryBackend()

def run_job(cfg: JobConfig, *, duration_s: float | None = None, available_now: bool = False,
            ui: bool | None = None, maintainers: list[Maintainer] | None = None,
            stop_event: threading.Event | None = None, quiet: bool = False,
            spark=None, observer: Callable[[dict], None] | None = None) -> RunResult:
    """Run until the duration ends, the stop event is set, a signal arrives, or (with
    ``available_now``) everything on the topics so far has been processed. Before Spark
    starts: the lake and checkpoint must be writable and free (preflight), the broker must
    answer (a line every few seconds until it does) and the topics must exist."""

    t0 = time.monotonic()
    with preflight.job_folders(cfg):
        say = (lambda line: None) if quiet else (lambda line: print(f"[{cfg.name}] {line}", flush=True))
        preflight.wait_for_broker(cfg.kafka.bootstrap_servers, say=say,
                                  give_up_at=None if duration_s is None else t0 + duration_s)
        preflight.check_topics(cfg, say=say)
        preflight.check_registry(cfg, say=say)
        left = None if duration_s is None else max(1.0, duration_s - (time.monotonic() - t0))
        return _run(cfg, duration_s=left, available_now=available_now, ui=ui, maintainers=maintainers,
                    stop_event=stop_event, quiet=quiet, spark=spark, say=say, observer=observer)

def _run(cfg: JobConfig, *, duration_s, available_now, ui, maintainers, stop_event, quiet, spark,
         say, observer) -> RunResult:
    show_ui = cfg.spark.ui if ui is None else ui
    spark_cfg = cfg.spark
    if cfg.metrics.enabled and cfg.metrics.spark:  # Spark's Prometheus servlet on the UI
        spark_cfg = dataclasses.replace(spark_cfg, extra_conf=(*metrics.spark_conf().items(), *spark_cfg.extra_conf))
    spark = spark or build_session(spark_cfg, SessionOptions(app_name=f"ivmstream:{cfg.name}", ui=show_ui,
                                                             s3=object_store.lake_s3(cfg)))
    url = spark.sparkContext.uiWebUrl if show_ui else None
    if url and not quiet:
        print(f"Spark UI: {url}  (Structured Streaming tab: query '{cfg.name}')", flush=True)
    if maintainers is None:

        maintainers = maintainers_for(cfg)
    served, server = metrics.serve(cfg, spark, say) if cfg.metrics.enabled else (None, None)
    names = CatalogRegistrar(cfg, spark, say) if cfg.catalog.database else None

    def on_batch(row: dict) -> None:
        if not quiet:
            print(batch_line(row), flush=True)
        if served is not None:
            served.observe(row)
        if names is not None:  # a table the batch opened for the first time (a maintainer's outputs)
            names.register_new(spark)
        if observer is not None:
            observer(row)

    job = IngestJob(cfg, spark, maintainers=maintainers, on_batch=on_batch, backend=state_backend(cfg))
    stop = stop_event or threading.Event()
    previous = {}
    signalled: list[tuple[str, int | None, int | None]] = []

    def on_signal(signum, _frame):
        # Refuse the next batch at once, not at the loop's next poll: a batch that starts
        # between the signal and the poll would otherwise run too.
        signalled.append((signal.Signals(signum).name, *job.request_stop()))
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    t0 = time.monotonic()
    query = job.start(available_now=available_now)
    if served is not None:
        served.progress_fn = lambda: metrics.progress_offsets(query)
    if names is not None:
        names.register_new(spark)
    watch = BrokerWatch(cfg.kafka.bootstrap_servers, say)
    totals: dict = {}
    try:
        while True:
            while query.isActive and not stop.is_set() and not job.backend.restart_wanted:
                if duration_s is not None and time.monotonic() - t0 >= duration_s:
                    break
                watch.poll()
                try:
                    query.awaitTermination(0.5)
                except Exception:  # noqa: BLE001 - the query ended with an error: judged below by query.exception()
                    break
            if signalled and not quiet:
                name, running, finished = signalled[0]
                if running is not None:
                    print(f"[{cfg.name}] {name}: finishing batch {running}, then stopping", flush=True)
                elif finished is not None:
                    print(f"[{cfg.name}] {name}: stopping after batch {finished} (no batch running)", flush=True)
                else:
                    print(f"[{cfg.name}] {name}: stopping before this run's first batch", flush=True)
            # the backend asked for a new start between two batches (it refuses the next one)
            again = job.backend.restart_wanted and not stop.is_set() and \
                (duration_s is None or time.monotonic() - t0 < duration_s)
            stopped = query.isActive or stop.is_set() or job.backend.restart_wanted
            if query.isActive:
                job.stop_between_batches(query)
            exc = query.exception()
            # A batch refused because a stop was requested ends the query with StopRequested:
            # that is the clean stop itself (the refused batch runs again on restart).
            if exc is not None and not (stopped and "StopRequested" in str(exc)):
                refused = re.search(r"(?m)RegistryRefused: (.+)$", str(exc))
                if refused:  # credentials the registry stopped taking mid-run: its one line, not Spark's trace
                    raise RegistryRefused(refused.group(1).strip())
                raise RuntimeError(f"streaming query '{cfg.name}' failed: {exc}")
            if not again:
                break
            for k, v in job.totals.items():
                totals[k] = totals.get(k, 0) + v
            job = job.restarted()
            query = job.start(available_now=available_now)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.stop()
    for k, v in job.totals.items():
        totals[k] = totals.get(k, 0) + v
    return RunResult(totals=totals, seconds=time.monotonic() - t0, ui_url=url)

class BrokerWatch:
    """While the job runs, a line when the broker stops answering and one when it is back
    (Spark's Kafka source retries on its own, silently)."""

    def __init__(self, bootstrap: str, say, every_s: float = 5.0):
        self.bootstrap, self.say, self.every_s = bootstrap, say, every_s
        self.next = time.monotonic() + every_s
        self.down_since: float | None = None
        self.said = 0.0

    def poll(self) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + self.every_s
        from connectors.kafka import unreachable

        why = unreachable(self.bootstrap, timeout_s=1.0)
        if why and self.down_since is None:
            self.down_since = self.said = now
            self.say(f"the Kafka broker at {self.bootstrap} does not answer ({why}); the job keeps retrying")
        elif why:
            if now - self.said >= 30:
                self.said = now
                self.say(f"still no Kafka broker at {self.bootstrap} after {now - self.down_since:.0f} s; "
                         "retrying")
        elif self.down_since is not None:
            self.say(f"the Kafka broker at {self.bootstrap} answers again (down {now - self.down_since:.0f} s)")
            self.down_since = None
