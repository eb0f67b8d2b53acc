"""A requested stop (duration over, SIGTERM, Ctrl-C) lands between two batches: no mirror is
ahead of the last `batches` row, and a restart finishes the backlog with nothing lost or
doubled. Real broker, Spark and Delta."""

from __future__ import annotations

import threading
import time

import deltalake
import pytest

from connectors.delta_sink import latest_version
from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from streaming_app.runner import run_job
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_stop_is_between_batches_and_restart_finishes(kafka_broker, spark, tmp_path):
    _, cfg = job_config(tmp_path, kafka_broker.bootstrap, name="stopper", max_offsets=50, topic_prefix="stopper")
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    hist = History(cfg, seed=9)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 320, with_bad=False)
    prod.close()

    stop = threading.Event()

    def stop_after_two_batches():  # as a SIGTERM would, while batches keep coming
        while not stop.is_set():
            try:
                if deltalake.DeltaTable(str(cfg.lake_root / "batches")).to_pyarrow_table().num_rows >= 2:
                    stop.set()
            except Exception:  # noqa: BLE001 - not created yet
                pass
            time.sleep(0.3)

    threading.Thread(target=stop_after_two_batches, daemon=True).start()
    first = run_job(cfg, duration_s=300, stop_event=stop, spark=spark, quiet=True)  # a backlog is left
    assert 0 < first.totals["records"] < prod.sent
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).orderBy("batch_id").collect()
    last = dict(batches[-1].mirror_versions)
    for t in cfg.tables:  # nothing written after the last recorded batch
        assert latest_version(spark, str(cfg.lake_root / "mirrors" / t.name)) == last[t.name]

    run_job(cfg, available_now=True, spark=spark, quiet=True)
    for table, pk in (("items", ["id"]), ("pairs", ["a", "b"])):
        got = spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / table)).select(*pk).collect()
        assert sorted(tuple(r) for r in got) == sorted(
            (k,) if table == "items" else k for k in hist.expected[table])
    all_batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()
    assert sum(b.records_in for b in all_batches) == prod.sent
    assert len({b.batch_id for b in all_batches}) == len(all_batches)

