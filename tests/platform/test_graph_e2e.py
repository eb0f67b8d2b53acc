"""End to end for graphs: edge CDC through the real broker and job into triangle counts and
recursive views in Delta, checked against networkx on the final graph."""

from __future__ import annotations

import json
import random

import networkx as nx
import pytest

from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from core import errors as E
from streaming_app.settings import parse_config
from streaming_app.runner import run_job

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _config(tmp_path, bootstrap):
    return parse_config({
        "job": {"name": "graphs", "lake_root": str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 150},
        "tables": [{"name": "edges", "topic": "g.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long", "cost": "double"}}],
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected", "epsilon": 0.5}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"},
                  {"name": "sp", "table": "edges", "kind": "shortest_paths", "cost": "cost"}],
    })


def _send(prod, table, live, rng, n, self_loops):
    for _ in range(n):
        x = rng.random()
        if x < 0.6 or not live:
            u, v = rng.randrange(12), rng.randrange(12)
            if u == v:
                self_loops.append((u, v))
            row = {"src": u, "dst": v, "cost": float(rng.randrange(1, 9))}
            prod.send(table, "c", None, row)
            live[(u, v)] = row
        elif x < 0.75:
            k = rng.choice(sorted(live))
            after = dict(live[k], cost=float(rng.randrange(1, 9)))
            prod.send(table, "u", live[k], after)
            live[k] = after
        else:
            k = rng.choice(sorted(live))
            prod.send(table, "d", live.pop(k), None)
    prod.flush()


def test_triangles_and_views_equal_networkx(kafka_broker, spark, tmp_path):
    cfg = _config(tmp_path, kafka_broker.bootstrap)
    table = cfg.table("edges")
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    rng, live, loops = random.Random(3), {}, []
    prod = CdcProducer(kafka_broker.bootstrap)
    _send(prod, table, live, rng, 250, loops)
    run_job(cfg, available_now=True, spark=spark, quiet=True)
    # a second run restores the engines' state from the mirror, then goes on with deltas
    _send(prod, table, live, rng, 150, loops)
    run_job(cfg, available_now=True, spark=spark, quiet=True)
    prod.close()

    undirected = nx.Graph()
    undirected.add_edges_from((u, v) for (u, v) in live if u != v)
    expected_triangles = sum(nx.triangles(undirected).values()) // 3
    counts = spark.read.format("delta").load(str(cfg.lake_root / "triangle_counts")).orderBy("batch_id").collect()
    assert counts[-1].triangles == expected_triangles
    assert counts[-1].edges == len([k for k in live if k[0] != k[1]])
    assert len({c.batch_id for c in counts}) == len(counts)

    directed = nx.DiGraph()
    for (u, v), row in live.items():
        directed.add_edge(u, v, weight=row["cost"])
    closure = set()
    for x in directed.nodes:
        for s in directed.successors(x):
            closure.add((x, s))
            closure |= {(x, y) for y in nx.descendants(directed, s)}
    reach = spark.read.format("delta").load(str(cfg.lake_root / "reachability")).where("view = 'reach'").collect()
    assert {(int(r.src), int(r.dst)) for r in reach} == closure
    assert len(reach) == len(closure)  # no duplicate rows from replays or restarts

    cheapest = {}
    for x in directed.nodes:
        dist = nx.single_source_dijkstra_path_length(directed, x)
        cheapest.update({(x, y): d for y, d in dist.items() if y != x})
        loops_back = [dist[w] + directed[w][x]["weight"] for w in directed.predecessors(x) if w in dist]
        if loops_back:
            cheapest[(x, x)] = min(loops_back)
    sp = spark.read.format("delta").load(str(cfg.lake_root / "shortest_paths")).where("view = 'sp'").collect()
    assert {(int(r.src), int(r.dst)): r.cost for r in sp} == pytest.approx(cheapest)
    for r in sp:  # each stored path is a real path of that cost
        path = json.loads(r.path)
        assert path[0] == int(r.src) and path[-1] == int(r.dst)
        assert sum(directed[a][b]["weight"] for a, b in zip(path, path[1:])) == pytest.approx(r.cost)

    if loops:  # self-loops cannot be triangle edges: quarantined for the triangle graph
        q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
        assert any(r.error_code == E.DATA_BAD_EDGE for r in q)

    # per-operator figures in the batches table: every maintainer, every batch, the rows it
    # read from the change feed adding up to the edge mirror's changes
    batches = spark.read.format("delta").load(str(cfg.lake_root / "batches")).orderBy("batch_id").collect()
    names = {m for b in batches for m in (op.name for op in b.operators)}
    assert names == {"sketches", "triangles.g", "view.reach", "view.sp"}, names
    for b in batches:
        if not b.keys_changed:
            continue
        for op in (op for op in b.operators if op.name != "sketches"):  # no query registered
            assert op.ms >= 0 and op.rows_in is not None and op.deltas_out is not None
            assert op.state_size is not None and op.state_size > 0
    tri_in = sum(op.rows_in for b in batches for op in b.operators if op.name == "triangles.g")
    reach_in = sum(op.rows_in for b in batches for op in b.operators if op.name == "view.reach")
    assert tri_in == reach_in > 0  # both read the same change feed of the edge mirror
