"""Sketch maintenance across SIGKILL: the `ivmstream run` process is killed inside batches (in
the sketch maintainer between its Delta writes and inside its snapshot writes, between mirror
commits, after the batch record) and restarted; it restores each query's engine from its
newest consistent snapshot in the one snapshot store (`state_snapshots`, maintainer
`sketch.<query>`) and the change feed. At the end every sketch equals a fresh capture on the
final mirrors, no `sketch_deltas` or snapshot row is duplicated, and the `batches` table's
`operators` column carries the sketch maintainer's state size."""

from __future__ import annotations

import signal

import pytest

from connectors.kafka import create_topics
from tests.jobproc import run_job_process
from devstack.producer import CdcProducer
from operators.sketch import RangePartition, SketchMaintainer
from tests.oracles.sketch_reference import reference_sketch
from core.config import dump_toml
from streaming_app.settings import parse_config
from tests.sketch_stream.test_sketch_e2e import (QUERIES, config_data, mirrors, partition_spec, send_snapshot,
                                                 send_updates, tpch_rows)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

# sketch.state.begin:2@5: the restarted process's second batch (2) is a snapshot batch
# ([sketch] snapshot_every = 2); the kill lands 5 ms into the per-query snapshot appends
KILLS = ["sketch.deltas:1", "sketch.state.begin:2@5", "sketch.merge:2", "mirror.lineitem:3", "maintain.sketches:4",
         "batch_record:5"]


def _run(config_path, kill_at: str | None, timeout=400) -> str:
    code, out = run_job_process(config_path, kill_at, timeout)
    if kill_at:
        assert code == -signal.SIGKILL, f"expected a kill at {kill_at}:\n{out[-3000:]}"
    else:
        assert code == 0, out[-3000:]
    return out


def test_sketches_survive_sigkill(kafka_broker, spark, tmp_path):
    data = config_data(tmp_path, kafka_broker.bootstrap, max_offsets=60, name="skr")
    data["sketches"] = [
        {"name": n, "sql": QUERIES[n][0], "partition": partition_spec(n)} for n in ("big_orders", "top_revenue")]
    cfg = parse_config(data)
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    rows = tpch_rows(cfg, n_orders=30)
    rows["customer"] = rows["customer"][:30]
    prod = CdcProducer(kafka_broker.bootstrap)
    send_snapshot(prod, cfg, rows)
    send_updates(prod, cfg, rows, 300, seed=11)
    prod.close()

    outputs = [_run(path, k) for k in KILLS]
    outputs.append(_run(path, None))
    # restarts restored state from a snapshot (or recaptured) and went on
    assert sum(o.count("sketches: ready in") for o in outputs) >= len(KILLS)
    restored = [o.count("restored from snapshot of batch") for o in outputs[1:]]
    assert sum(restored) >= len(KILLS), outputs[-1][-3000:]  # both queries, most restarts

    final = mirrors(spark, cfg)
    regs = {(r.name, r.partition_table): r
            for r in spark.read.format("delta").load(str(cfg.lake_root / "registered_queries")).collect()}
    sk = {(r.query, r.table_name): r for r in spark.read.format("delta").load(str(cfg.lake_root / "sketches")).collect()}
    import json

    for name in ("big_orders", "top_revenue"):
        sql, parts, _ = QUERIES[name]
        part = {t: RangePartition(a, json.loads(regs[name, t].boundaries)["values"]) for t, a in parts}
        fresh = SketchMaintainer.from_sql(sql, part)
        fresh.initialize(final)
        want = reference_sketch(sql, final, part)
        for table in part:
            assert list(sk[name, table].fragments) == fresh.sketch[table], (name, table)
            assert list(sk[name, table].fragments) == want[table], (name, table)

    deltas = spark.read.format("delta").load(str(cfg.lake_root / "sketch_deltas"))
    assert deltas.count() == deltas.dropDuplicates(["query", "batch_id", "table_name", "fragment", "change"]).count()
    snaps = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "state_snapshots"))
             .select("maintainer", "batch_id", "encoding").collect()]
    for name in ("big_orders", "top_revenue"):
        mine = [r["batch_id"] for r in snaps if r["maintainer"] == f"sketch.{name}"]
        assert 1 <= len(mine) <= 3 and len(mine) == len(set(mine)), (name, mine)  # keep 2 (+1 between prunes)
    assert {r["encoding"] for r in snaps} == {"sketch.maintainer.v1"}
    assert not (cfg.lake_root / "sketch_state").exists()
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches"))
    assert batches.count() >= 6 and batches.count() == batches.dropDuplicates(["batch_id"]).count()
    sizes = [op.state_size for r in batches.collect() for op in r.operators if op.name == "sketches"]
    assert sizes and all(s is not None and s > 0 for s in sizes), sizes
