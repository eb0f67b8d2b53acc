"""Table maintenance inside the running job: a SIGKILL in the middle of a VACUUM and of a
compaction, then restarts: the mirrors equal the history, every batch is recorded once, and the
lake holds the live files plus what the retention keeps (here none: retention 0, a snapshot-free
job), with log checkpoints on the tables the job writes."""

from __future__ import annotations

import signal
from pathlib import Path

import deltalake
import pytest

from connectors import delta_sink as sink
from connectors.kafka import create_topics
from core.config import dump_toml
from devstack.producer import CdcProducer
from tests.jobproc import run_job_process
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _next_batch(lake: Path) -> int:
    ids = deltalake.DeltaTable(str(lake / "batches")).to_pyarrow_table(columns=["batch_id"]).column(0).to_pylist()
    return max(ids) + 1


@pytest.mark.parametrize("layout", ["copy-on-write", "merge-on-read"])
def test_sigkill_inside_vacuum_and_compaction_loses_nothing(kafka_broker, spark, tmp_path, layout):
    prefix = "maint" if layout == "copy-on-write" else "maintmor"
    data, cfg = job_config(tmp_path, kafka_broker.bootstrap, name=prefix, max_offsets=30, topic_prefix=prefix)
    data["job"]["mirrors"] = layout
    data["maintenance"] = {"every_batches": 1, "retention_hours": 0, "compact_min_files": 2, "checkpoint_every": 2}
    cfg_file = tmp_path / "job.toml"
    cfg_file.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics)
    lake = tmp_path / "lake"
    hist = History(cfg, seed=11)
    prod = CdcProducer(kafka_broker.bootstrap)

    hist.send(prod, 150)
    code, out = run_job_process(cfg_file, None)
    assert code == 0, out[-3000:]
    assert "maintenance: compact" in out and "maintenance: vacuum" in out and "maintenance: checkpoint" in out

    hist.send(prod, 120)
    # the first batch of a run maintains the first table in path order: lake/batches, which has
    # small files from every batch since the last turn, so its compaction is due too
    assert run_job_process(cfg_file, f"maintenance.vacuum:{_next_batch(lake)}@5")[0] == -signal.SIGKILL
    assert run_job_process(cfg_file, f"maintenance.compact:{_next_batch(lake)}@20")[0] == -signal.SIGKILL
    code, out = run_job_process(cfg_file, None)
    assert code == 0, out[-3000:]
    prod.close()

    def mirror(t, key):
        return [r.asDict() for r in spark.read.format("delta").load(str(lake / "mirrors" / t)).orderBy(*key).collect()]

    def norm(rows):
        return [{k: (v.replace(tzinfo=None) if k == "ts" and v is not None else v) for k, v in r.items()} for r in rows]

    assert sink.merge_on_read(str(lake / "mirrors" / "items")) == (layout == "merge-on-read")
    assert norm(mirror("items", ["id"])) == norm(hist.expected_rows("items"))
    assert norm(mirror("pairs", ["a", "b"])) == norm(hist.expected_rows("pairs"))
    batches = [r.asDict() for r in spark.read.format("delta").load(str(lake / "batches")).collect()]
    ids = [b["batch_id"] for b in batches]
    assert len(ids) == len(set(ids))
    assert sum(b["records_in"] for b in batches) == prod.sent  # nothing lost, nothing twice
    quarantine = spark.read.format("delta").load(str(lake / "quarantine")).collect()
    assert sorted(r.error_code for r in quarantine) == sorted(hist.bad)

    # bounded: a table holds its live files and, past the retention (0 h here), nothing else
    # once its turn has come after the last change; each table the job wrote has a checkpoint
    for t in ("mirrors/items", "mirrors/pairs", "batches", "quarantine"):
        live = {u.rsplit("/", 1)[-1] for u in sink.file_actions(str(lake / t))["path"]}
        on_disk = {p.name for p in (lake / t).glob("*.parquet")}
        assert live <= on_disk and len(on_disk) <= len(live) + 2 * 4, (t, len(live), len(on_disk))
        assert (lake / t / "_delta_log" / "_last_checkpoint").exists(), t
