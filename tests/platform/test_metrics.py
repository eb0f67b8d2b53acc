"""Issue 42, metrics and lag: the job's Prometheus endpoint (``[metrics]``). The fast tests feed
batch records to ``JobMetrics`` and read its text; the slow one scrapes a running job with an
HTTP client while it drains a topic, and Spark's own servlet beside it."""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from devstack.process import free_port
from core.config import dump_toml
from streaming_app.metrics import JobMetrics, MetricsServer
from streaming_app.settings import parse_config

TABLES = [{"name": "t", "topic": "m.t", "primary_key": "id", "columns": {"id": "long", "v": "string"}},
          {"name": "u", "topic": "m.u", "primary_key": "id", "columns": {"id": "long"}}]
SAMPLE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def parse(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text -> {(name, ((label, value), ...)): value}; every line is a comment or a sample."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE"), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2))))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples: dict, name: str, **labels) -> float | None:
    want = {"query": "mjob", **{k: str(v) for k, v in labels.items()}}
    hits = [v for (n, ls), v in samples.items() if n == name and dict(ls) == want]
    return hits[0] if hits else None


def _row(batch_id: int, offsets: dict, finished: dt.datetime, **kw) -> dict:
    return {"batch_id": batch_id, "kafka_offsets": json.dumps(offsets), "finished_at": finished,
            "records_in": 10, "events": 9, "keys_changed": 7, "quarantined": 1, "tombstones": 0,
            "step_ms": {"decode": 12.5, "mirror": 30.0},
            "operators": [{"name": "triangles.g", "rows_in": 4, "deltas_out": 1, "ms": 3.0, "state_size": 17}], **kw}


def test_batch_figures_totals_age_and_lag_per_partition():
    cfg = parse_config({"job": {"name": "mjob"}, "tables": TABLES})
    now = [1_000_000.0]
    latest = {("m.t", 0): 25, ("m.t", 1): 4, ("m.u", 0): 3}
    m = JobMetrics(cfg, latest=lambda topics: {k: v for k, v in latest.items() if k[0] in topics},
                   clock=lambda: now[0])
    text = m.render()
    s = parse(text)
    assert value(s, "ivmstream_up") == 1 and value(s, "ivmstream_batches_total") == 0
    assert value(s, "ivmstream_kafka_lag", topic="m.t", partition=0) is None  # nothing processed: no guess
    t0 = dt.datetime.fromtimestamp(now[0] - 30, dt.timezone.utc)
    m.observe(_row(0, {"m.t": {"0": [0, 9], "1": [0, 3]}}, t0))
    m.observe(_row(1, {"m.t": {"0": [10, 19]}}, t0 + dt.timedelta(seconds=10)))
    m.progress_fn = lambda: {("m.u", 0): 1}  # the query's last progress: a partition no batch read
    s = parse(m.render())
    assert value(s, "ivmstream_batches_total") == 2 and value(s, "ivmstream_records_total") == 20
    assert value(s, "ivmstream_quarantined_total") == 2 and value(s, "ivmstream_last_batch_id") == 1
    assert value(s, "ivmstream_batch_records_in") == 10 and value(s, "ivmstream_batch_step_ms", step="mirror") == 30
    assert value(s, "ivmstream_step_ms_total", step="decode") == 25
    assert value(s, "ivmstream_operator_state_size", operator="triangles.g") == 17
    assert value(s, "ivmstream_operator_ms_total", operator="triangles.g") == 6
    assert value(s, "ivmstream_last_batch_age_seconds") == 20
    assert value(s, "ivmstream_kafka_up") == 1
    assert value(s, "ivmstream_kafka_processed_offset", topic="m.t", partition=0) == 20
    assert value(s, "ivmstream_kafka_lag", topic="m.t", partition=0) == 5
    assert value(s, "ivmstream_kafka_lag", topic="m.t", partition=1) == 0
    assert value(s, "ivmstream_kafka_lag", topic="m.u", partition=0) == 2


def test_a_broker_away_is_a_figure_and_the_server_answers_metrics_only():
    cfg = parse_config({"job": {"name": "mjob"}, "tables": TABLES})

    def away(topics):
        raise OSError("connection refused")

    server = MetricsServer(JobMetrics(cfg, latest=away), "127.0.0.1", 0).start()
    try:
        with urllib.request.urlopen(server.url, timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            s = parse(r.read().decode())
        assert value(s, "ivmstream_kafka_up") == 0 and value(s, "ivmstream_up") == 1
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(server.url.replace("/metrics", "/other"), timeout=10)
        assert e.value.code == 404
    finally:
        server.stop()


def test_metrics_config_is_off_by_default_and_on_loopback():
    cfg = parse_config({"tables": TABLES})
    assert (cfg.metrics.enabled, cfg.metrics.host, cfg.metrics.port) == (False, "127.0.0.1", 9464)
    from core.errors import ConfigError

    for bad, says in (({"port": 70000}, "port"), ({"enabled": "yes"}, "enabled"), ({"host": "a b"}, "host"),
                      ({"other": 1}, "unknown key")):
        with pytest.raises(ConfigError, match=says):
            parse_config({"tables": TABLES, "metrics": bad})


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return parse(r.read().decode())


@pytest.mark.kafka
@pytest.mark.spark
def test_scraped_while_the_job_drains_a_topic(kafka_broker, tmp_path):
    """`ivmstream run` with [metrics] on: scraped over HTTP while it drains 600 records in batches
    of 100, the lag per partition falls to 0 as records_total reaches what was sent, the age of
    the last batch is a few seconds, and Spark's own servlet answers on the UI's port."""
    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer

    port, ui_port = free_port(), free_port()
    topic = f"m.{tmp_path.name[-10:]}"
    data = {"job": {"name": "mjob", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ck"),
                    "trigger_interval_s": 1.0},
            "kafka": {"bootstrap_servers": kafka_broker.bootstrap, "max_offsets_per_trigger": 100},
            "spark": {"master": "local[1]", "ui": True, "ui_port": ui_port},
            "metrics": {"enabled": True, "port": port},
            "tables": [{"name": "t", "topic": topic, "primary_key": "id", "columns": {"id": "long", "v": "string"}}]}
    cfg = parse_config(data)
    (tmp_path / "job.toml").write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=1)
    prod = CdcProducer(kafka_broker.bootstrap)
    for i in range(600):
        prod.send(cfg.table("t"), "c", None, {"id": i, "v": f"v{i}"})
    prod.close()
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(tmp_path / "job.toml"),
                             "--duration", "240"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"
    seen: list[tuple[float, float]] = []  # (records_total, lag) per scrape
    try:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            try:
                s = scrape(url)
            except OSError:
                time.sleep(0.5)
                continue
            lag = value(s, "ivmstream_kafka_lag", topic=topic, partition=0)
            seen.append((value(s, "ivmstream_records_total"), lag))
            if lag == 0 and value(s, "ivmstream_records_total") == 600:
                break
            time.sleep(0.3)
        assert seen and seen[-1] == (600, 0), seen
        assert any(lag is not None and lag > 0 for _, lag in seen), seen  # it was behind while it drained
        assert value(s, "ivmstream_kafka_latest_offset", topic=topic, partition=0) == 600
        assert value(s, "ivmstream_batches_total") >= 6 and value(s, "ivmstream_batch_records_in") > 0
        assert 0 <= value(s, "ivmstream_last_batch_age_seconds") < 60
        assert value(s, "ivmstream_batch_step_ms", step="mirror") is not None
        spark_text = urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/metrics/prometheus", timeout=10).read().decode()
        assert "metrics_" in spark_text and "_driver_" in spark_text, spark_text[:500]
        executors = urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/metrics/executors/prometheus",
                                           timeout=10).read().decode()
        assert "spark_info" in executors or "metrics_executor_" in executors, executors[:500]
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # the job's clean stop
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert f"metrics: {url}" in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]


@pytest.mark.spark  # the spark-submit line names the jars `make setup` resolves
def test_submit_turns_on_sparks_prometheus_servlet_with_metrics(tmp_path):
    from streaming_app.submit import submit_command

    on = parse_config({"job": {"lake_root": str(tmp_path / "l"), "checkpoint_root": str(tmp_path / "c")},
                       "metrics": {"enabled": True}, "tables": TABLES})
    off = parse_config({"job": {"lake_root": str(tmp_path / "l"), "checkpoint_root": str(tmp_path / "c")},
                        "tables": TABLES})
    argv, _ = submit_command(on, tmp_path / "job.toml", "spark://127.0.0.1:7177", [])
    assert "spark.ui.prometheus.enabled=true" in argv and "spark.sql.streaming.metricsEnabled=true" in argv
    argv, _ = submit_command(off, tmp_path / "job.toml", "spark://127.0.0.1:7177", [])
    assert not any("prometheus" in a for a in argv)


@pytest.mark.kafka
@pytest.mark.spark
def test_spark_jobs_of_a_batch_are_labelled_by_their_step(kafka_broker, spark, tmp_path):
    """Issue 42, the Spark UI: each Spark job a batch starts shows its step as description and
    as call site (not a path into the virtualenv), the mirror's lookups included; each batch ends
    with a job whose description holds its records, quarantined count by code and step times."""
    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer
    from streaming_app.runner import run_job

    topic = f"lbl.{tmp_path.name[-10:]}"
    cfg = parse_config({"job": {"name": "labels", "lake_root": str(tmp_path / "lake"),
                                "checkpoint_root": str(tmp_path / "ck")},
                        "kafka": {"bootstrap_servers": kafka_broker.bootstrap},
                        "spark": {"master": "local[2]", "ui": False},
                        "tables": [{"name": "t", "topic": topic, "primary_key": "id",
                                    "columns": {"id": "long", "v": "string"}}]})
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=1)
    prod = CdcProducer(kafka_broker.bootstrap)
    for i in range(20):
        prod.send(cfg.table("t"), "c", None, {"id": i, "v": "x"})
    for junk in (b"not json", b"[1, 2]", b"{oops"):  # three records the decoder rejects
        prod.send_raw(topic, b'{"id": 99}', junk)
    prod.close()
    store = spark._jsc.sc().statusStore()
    listed = lambda: spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(store.jobsList(None))  # noqa: E731
    before = {int(j.jobId()) for j in listed()}
    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    assert res.totals["quarantined"] == 3, res.totals
    codes = collections.Counter(r.error_code for r in spark.read.format("delta")
                                .load(str(tmp_path / "lake" / "quarantine")).collect())
    deadline = time.monotonic() + 10  # the listener bus delivers to the status store asynchronously
    while True:
        jobs = [(j.name(), j.description().getOrElse(None) if j.description().isDefined() else None)
                for j in listed() if int(j.jobId()) not in before]
        summaries = [desc for _, desc in jobs if desc and re.match(r"ivmstream batch \d+: \d+ records", desc)]
        if summaries or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    by_code = ", ".join(f"{c} {n}" for c, n in sorted(codes.items()))
    assert len(summaries) == res.totals["batches"], (summaries, jobs)
    assert summaries[0].startswith(f"ivmstream batch 0: 23 records, 3 quarantined ({by_code}); ms: "), summaries
    assert re.search(r"; ms: collect \d+, decode \d+, mirror \d+, sketches \d+, quarantine \d+, batch_record \d+$",
                     summaries[0]), summaries
    ours = [(name, desc) for name, desc in jobs if desc and desc.startswith("ivmstream batch 0:")]
    assert any(desc == "ivmstream batch 0: read and decode" for _, desc in ours), jobs
    # the call site is the step (the summary's job has no stage, hence no name of its own)
    assert all(name == desc for name, desc in ours if desc not in summaries), ours
    assert not any(".venv" in (name or "") for name, desc in jobs if desc and desc.startswith("ivmstream")), jobs


def test_the_batch_summary_the_spark_ui_shows():
    from connectors.debezium import Rejected
    from streaming_app.job import batch_summary

    rej = [Rejected("t", 0, i, None, "x", code, "why") for i, code in enumerate(["DATA_NULL", "BAD_JSON", "DATA_NULL"])]
    steps = {"collect": 3.4, "decode": 12.6, "mirror": 40.0, "maintain:sketch big": 7.2, "operators": {"agg": 1.0}}
    assert batch_summary(7, 1000, rej, steps) == ("ivmstream batch 7: 1000 records, 3 quarantined (BAD_JSON 1, "
                                                  "DATA_NULL 2); ms: collect 3, decode 13, mirror 40, sketch big 7")
    assert batch_summary(8, 5, [], {"decode": 1.0}) == "ivmstream batch 8: 5 records, 0 quarantined; ms: decode 1"
