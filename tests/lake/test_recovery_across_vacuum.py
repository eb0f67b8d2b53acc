"""Sketch and view recovery across a VACUUM: maintenance runs after every batch with a retention
of 0 hours, so every file a table no longer references goes at its next turn, except what a
restart needs (the change data after the mirror versions the kept state snapshots reflect).
A run that takes no snapshot leaves the kept ones several mirror versions behind; maintenance
vacuums the mirrors; the next run restores from the snapshots and reads the change feed across
the vacuumed versions: the sketch equals its recapture, the view and the triangle
count equal networkx, and no batch is recorded twice."""

from __future__ import annotations

import random

from pathlib import Path

import networkx as nx
import pytest

from connectors import delta_sink as sink
from connectors.kafka import create_topics
from connectors.maintenance import Maintenance
from core.config import MaintenanceConfig, dump_toml
from devstack.producer import CdcProducer
from state.snapshot_store import SnapshotStore
from streaming_app.settings import parse_config
from tests.jobproc import run_job_process
from tests.platform.test_graph_e2e import _send
from tests.sketch_stream.test_sketch_e2e import check_sketches, config_data, send_snapshot, send_updates, tpch_rows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _recounts(spark, cfg, live) -> None:
    check_sketches(spark, cfg, ["top_revenue"])
    d = nx.DiGraph()
    d.add_edges_from(live)
    closure = {(x, y) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = spark.read.format("delta").load(str(cfg.lake_root / "reachability")).collect()
    assert sorted((int(r.src), int(r.dst)) for r in reach) == sorted(closure)
    g = nx.Graph()
    g.add_edges_from((u, v) for (u, v) in live if u != v)
    counts = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).collect()]
    assert max(counts, key=lambda c: c["batch_id"])["triangles"] == sum(nx.triangles(g).values()) // 3
    ids = [r.batch_id for r in spark.read.format("delta").load(str(cfg.lake_root / "batches")).collect()]
    assert len(ids) == len(set(ids))


def test_sketch_and_view_recover_across_a_vacuum(kafka_broker, spark, tmp_path):
    data = config_data(tmp_path, kafka_broker.bootstrap, max_offsets=40, name="rav")
    data["tables"].append({"name": "edges", "topic": "rav.edges", "primary_key": ["src", "dst"],
                           "columns": {"src": "long", "dst": "long", "cost": "double"}})
    data["graphs"] = [{"name": "g", "table": "edges", "mode": "undirected"}]
    data["views"] = [{"name": "reach", "table": "edges", "kind": "reachability"}]
    data["state"] = {"snapshot_every": 2}
    data["maintenance"] = {"enabled": False}
    cfg = parse_config(data)
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics)
    rows = tpch_rows(cfg, n_orders=40)
    rng, live, loops = random.Random(5), {}, []
    prod = CdcProducer(kafka_broker.bootstrap)
    send_snapshot(prod, cfg, rows)
    _send(prod, cfg.table("edges"), live, rng, 120, loops)
    code, out = run_job_process(path, None)
    assert code == 0, out[-3000:]

    # a second run that takes no snapshot: the kept ones are several mirror versions behind
    data["state"] = {"snapshot_every": 100_000}
    data["sketch"]["snapshot_every"] = 100_000
    path.write_text(dump_toml(data))
    send_updates(prod, cfg, rows, 240, seed=3)
    _send(prod, cfg.table("edges"), live, rng, 120, loops)
    code, out = run_job_process(path, None)
    assert code == 0, out[-3000:]

    # maintenance as the job runs it, retention 0 h: every file out of a table goes, except what
    # the versions after the oldest kept snapshot read
    store = SnapshotStore(cfg.lake_root)
    # (no compaction: a commit without data change would leave the sketch rows one version behind
    # the mirror, which check_sketches does not allow)
    m = Maintenance(MaintenanceConfig(retention_hours=0, compact_min_files=10**6, purge_share=1.0),
                    needed=lambda p: store.oldest_versions().get(Path(p).name), say=lambda line: None)
    kinds = []
    for t in ("orders", "lineitem", "edges"):
        mirror = str(cfg.lake_root / "mirrors" / t)
        need, latest = store.oldest_versions()[t], sink.latest_version(None, mirror)
        assert latest - need >= 3, (t, need, latest)  # the restart reads the feed over several versions
        kinds += [a.kind for a in m.maintain(mirror)]
        assert sink.read_changes(None, mirror, need, latest) is not None
    assert "vacuum" in kinds, kinds  # files the versions before the snapshots alone read went

    data["state"] = {"snapshot_every": 2}
    data["sketch"]["snapshot_every"] = 2
    path.write_text(dump_toml(data))
    prod = CdcProducer(kafka_broker.bootstrap)
    _send(prod, cfg.table("edges"), live, rng, 20, loops)
    prod.close()
    code, out = run_job_process(path, None)
    assert code == 0, out[-3000:]
    # the restart restored the sketch and the view from those snapshots and read the feed after them
    assert "top_revenue: restored from snapshot of batch" in out, out[-3000:]
    assert "reach: restored from snapshot of batch" in out, out[-3000:]
    _recounts(spark, cfg, live)
