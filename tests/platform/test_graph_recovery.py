"""Exactly once for graph outputs: the job is SIGKILLed inside the triangle and view
maintainers (after the mirror commit, before or after their own Delta writes) and restarted;
the final counts and views equal networkx and no batch row is written twice."""

from __future__ import annotations

import random
import signal

import networkx as nx
import pytest

from connectors.kafka_broker import create_topics
from connectors.producer import CdcProducer
from streaming_app.config import dump_toml, parse_config
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
    create_topics(kafka_broker.bootstrap, cfg.topics)
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
