"""Exactly once for graph outputs: the job is SIGKILLed inside the triangle and view
maintainers (after the mirror commit, before or after their own Delta writes) and restarted;
the final counts and views equal networkx and no batch row is written twice."""

from __future__ import annotations

import random
import signal

import networkx as nx
import pytest

from connectors.kafka import create_topics
from core.config import dump_toml
from devstack.producer import CdcProducer
from streaming_app.settings import parse_config
from tests.platform.test_graph_e2e import _send
from tests.platform.test_recovery import _run

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_sigkill_inside_graph_maintainers(kafka_broker, spark, tmp_path):
    data = {
        "job": {"name": "graphs_kill", "lake_root": str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": kafka_broker.bootstrap, "max_offsets_per_trigger": 60},
        "spark": {"master": "local[2]", "ui": False},
        "tables": [{"name": "edges", "topic": "gk.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long", "cost": "double"}}],
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected"}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
    }
    cfg = parse_config(data)
    (tmp_path / "job.toml").write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    rng, live, loops = random.Random(11), {}, []
    prod = CdcProducer(kafka_broker.bootstrap)
    _send(prod, cfg.table("edges"), live, rng, 200, loops)
    prod.close()

    for kill_at in ("maintain.triangles.g:0", "maintain.view.reach:1", "batch_record:2"):
        assert _run(tmp_path / "job.toml", kill_at) == -signal.SIGKILL
    assert _run(tmp_path / "job.toml", None) == 0

    g = nx.Graph()
    g.add_edges_from((u, v) for (u, v) in live if u != v)
    counts = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).collect()]
    ids = [c["batch_id"] for c in counts]
    assert len(ids) == len(set(ids))
    last = max(counts, key=lambda c: c["batch_id"])
    assert last["triangles"] == sum(nx.triangles(g).values()) // 3

    d = nx.DiGraph()
    d.add_edges_from(live)
    closure = {(x, y) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = spark.read.format("delta").load(str(cfg.lake_root / "reachability")).collect()
    assert sorted((int(r.src), int(r.dst)) for r in reach) == sorted(closure)


def test_sigkill_inside_snapshot_writes_then_restore(kafka_broker, spark, tmp_path):
    """Snapshots every batch ([state] snapshot_every = 1); the job is killed inside the
    triangle snapshot write (encoded, not committed) and while the view's is being written
    (timer 20 ms after its start). Each restart restores the newest consistent snapshot and
    catches up from the change feed; the counts and the view still equal networkx, no output
    or snapshot row is written twice, and at most keep + 1 snapshots per maintainer stay."""
    from tests.jobproc import run_job_process

    data = {
        "job": {"name": "graphs_snap", "lake_root": str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": kafka_broker.bootstrap, "max_offsets_per_trigger": 50},
        "spark": {"master": "local[2]", "ui": False},
        "state": {"snapshot_every": 1},
        "tables": [{"name": "edges", "topic": "gs.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long", "cost": "double"}}],
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected"}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
    }
    cfg = parse_config(data)
    (tmp_path / "job.toml").write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    rng, live, loops = random.Random(5), {}, []
    prod = CdcProducer(kafka_broker.bootstrap)
    _send(prod, cfg.table("edges"), live, rng, 200, loops)
    prod.close()

    outs = []
    for kill_at in ("snapshot.begin.triangles.g:1", "snapshot.begin.view.reach:2@20", None):
        rc, out = run_job_process(tmp_path / "job.toml", kill_at)
        assert rc == (-signal.SIGKILL if kill_at else 0), out[-3000:]
        outs.append(out)
    assert "triangles.g: restored from snapshot of batch 0" in outs[1], outs[1][-3000:]
    assert "view.reach: restored from snapshot of batch" in outs[2], outs[2][-3000:]

    g = nx.Graph()
    g.add_edges_from((u, v) for (u, v) in live if u != v)
    counts = [r.asDict() for r in spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).collect()]
    ids = [c["batch_id"] for c in counts]
    assert len(ids) == len(set(ids))
    last = max(counts, key=lambda c: c["batch_id"])
    assert last["triangles"] == sum(nx.triangles(g).values()) // 3
    assert last["edges"] == len([k for k in live if k[0] != k[1]])

    d = nx.DiGraph()
    d.add_edges_from(live)
    closure = {(x, y) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = spark.read.format("delta").load(str(cfg.lake_root / "reachability")).collect()
    assert sorted((int(r.src), int(r.dst)) for r in reach) == sorted(closure)

    snaps = spark.read.format("delta").load(str(cfg.lake_root / "state_snapshots")).select(
        "maintainer", "batch_id", "bytes").collect()
    for name in ("triangles.g", "view.reach"):
        mine = [r.batch_id for r in snaps if r.maintainer == name]
        assert 1 <= len(mine) <= 3 and len(mine) == len(set(mine)), mine
