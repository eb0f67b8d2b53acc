"""Workload generators: deterministic by seed, shapes as documented, streams consistent."""

from __future__ import annotations

from collections import Counter

from bench.recursive_research import DRedReachabilityView, ReachabilityView
from bench.recursive_research.workloads import random_components, scale_free_dag, update_stream


def test_deterministic_by_seed():
    for gen in (random_components, scale_free_dag):
        a, b, c = gen(2000, 5), gen(2000, 5), gen(2000, 6)
        assert a.edges == b.edges and a.edges != c.edges
        assert update_stream(a, 50, 1) == update_stream(b, 50, 1) != update_stream(a, 50, 2)


def test_shapes():
    g = random_components(1000, 1, comp_size=8, comp_edges=10)
    assert len(g.edges) == 1000 and len({(u, v) for u, v, _ in g.edges}) == 1000
    assert all(u // 8 == v // 8 and u != v for u, v, _ in g.edges)  # arcs stay in their component
    s = scale_free_dag(3000, 1, layers=4, out_deg=2)
    width = s.n_vertices // 4
    assert all(v // width == u // width + 1 for u, v, _ in s.edges)  # layered DAG
    indeg = Counter(v for _, v, _ in s.edges)
    assert max(indeg.values()) >= 5 * (len(s.edges) / len(indeg))  # hubs: heavy-tailed in-degree


def test_stream_mixes_deletes_inserts_and_expirations():
    g = random_components(500, 3)
    stream = update_stream(g, 200, 4)
    assert [now for _, _, now in stream] == list(range(1, 201))
    dels = sum(1 for _, d, _ in stream if d)
    expiring = sum(1 for i, _, _ in stream if i and i[0][3] is not None)
    assert 50 < dels < 110 and 20 < expiring < 70
    v = ReachabilityView(nodes=4)
    d = DRedReachabilityView(nodes=4)
    v.apply(g.edges, now=0)
    d.apply(g.edges, now=0)
    deleted_live = 0
    for ins, dels, now in stream:
        live = set(v._front.store.live)
        deleted_live += sum(1 for e in dels if e in live)
        v.apply(ins, dels, now=now)
        d.apply(ins, dels, now=now)
    assert deleted_live == sum(1 for _, d_, _ in stream if d_)  # deletions always hit live edges
    assert v.rows() == d.rows()
    assert v.stats()["deleted_vars"] > deleted_live  # some expirations fired too
