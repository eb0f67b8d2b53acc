"""Listing: triangles of an edge / vertex equal brute force in every mode, ε and view form.

Random insert/delete streams over small hub-biased domains (so both heavy and light values
occur, and heavy–heavy edges with light thirds), applied in random batches.  Also checks
that the witness view matches its definition and that a heavy–heavy edge is answered from
it without scanning rows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from operators.triangles import TriangleCounter
from operators.triangles.reference import check_invariants

EPS = [0.0, 0.25, 0.5, 0.75, 1.0]
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
V = 16
vertex = st.one_of(st.just(0), st.just(1), st.just(2), st.integers(0, V - 1))
row = st.tuples(vertex, vertex, st.sampled_from([1, 1, 1, 1, -1, -1, 2, -2]),
                st.sampled_from("RST"))
stream = st.lists(row, min_size=30, max_size=140)


def graph_model(rows, directed):
    """Final edge set under reference-count semantics (rejected rows change nothing)."""
    refs: dict = {}
    for u, v, w, _ in rows:
        if u == v:
            continue
        key = (u, v) if directed else (min(u, v), max(u, v))
        new = refs.get(key, 0) + w
        if new >= 0:
            refs[key] = new
    return {k for k, r in refs.items() if r > 0}


def relation_model(rows):
    rels = [{}, {}, {}]
    for u, v, w, r in rows:
        k = rels["RST".index(r)]
        k[(u, v)] = k.get((u, v), 0) + w
        if not k[(u, v)]:
            del k[(u, v)]
    return rels


def apply_in_batches(tc, rows, cuts, mode):
    cuts = sorted(set(c for c in cuts if 0 < c < len(rows)))
    for a, b in zip([0] + cuts, cuts + [len(rows)]):
        s, d, w, r = (np.array(c) for c in zip(*rows[a:b]))
        tc.apply_batch(s, d, w, r if mode == "three_relation" else None)


@pytest.mark.parametrize("witnesses", [False, True])
@SETTINGS
@given(rows=stream, eps=st.sampled_from(EPS), cuts=st.lists(st.integers(0, 140), max_size=4))
def test_undirected_listing(rows, eps, cuts, witnesses):
    tc = TriangleCounter(eps, mode="undirected", witnesses=witnesses)
    apply_in_batches(tc, rows, cuts, "undirected")
    check_invariants(tc)
    e = graph_model(rows, directed=False)
    adj = {x: set() for x in range(V)}
    for a, b in e:
        adj[a].add(b)
        adj[b].add(a)
    tris = {frozenset((a, b, c)) for a, b in e for c in adj[a] & adj[b]}
    assert len(tris) == tc.count
    for x, y in itertools.product(range(V), repeat=2):
        got = list(tc.triangles_of_edge(x, y))
        assert all(t[:2] == (x, y) for t in got)
        assert len(got) == len(set(got))
        want = {frozenset(t) for t in tris if {x, y} <= t} if x != y else set()
        assert {frozenset(t) for t in got} == want
    for x in range(V):
        got = list(tc.triangles_of_vertex(x))
        assert len(got) == len({frozenset(t) for t in got})
        assert {frozenset(t) for t in got} == {t for t in tris if x in t}


@SETTINGS
@given(rows=stream, eps=st.sampled_from(EPS), cuts=st.lists(st.integers(0, 140), max_size=4))
def test_directed_listing(rows, eps, cuts):
    tc = TriangleCounter(eps, mode="directed")
    apply_in_batches(tc, rows, cuts, "directed")
    e = graph_model(rows, directed=True)
    cycles = {min(t, t[1:] + t[:1], t[2:] + t[:2])
              for a, b in e for c in range(V) if (b, c) in e and (c, a) in e
              for t in [(a, b, c)]}
    assert len(cycles) == tc.count
    rot = lambda t: min(t, t[1:] + t[:1], t[2:] + t[:2])  # noqa: E731
    for x, y in itertools.product(range(V), repeat=2):
        got = list(tc.triangles_of_edge(x, y))
        assert len(got) == len(set(got)) and all(t[:2] == (x, y) for t in got)
        assert {rot(t) for t in got} == {c for c in cycles if (x, y) in
                                         {(c[0], c[1]), (c[1], c[2]), (c[2], c[0])}}
    for x in range(V):
        got = list(tc.triangles_of_vertex(x))
        assert len(got) == len(set(got)) and all(t[0] == x for t in got)
        assert {rot(t) for t in got} == {c for c in cycles if x in c}


@SETTINGS
@given(rows=stream, eps=st.sampled_from(EPS), cuts=st.lists(st.integers(0, 140), max_size=4))
def test_three_relation_listing_every_relation_and_attribute(rows, eps, cuts):
    # signed multiplicities: view entries can cancel to 0 while witnesses exist
    tc = TriangleCounter(eps, mode="three_relation")
    apply_in_batches(tc, rows, cuts, "three_relation")
    R, S, T = relation_model(rows)
    want = {(a, b, c): m * S[(b, c)] * T[(c, a)] for (a, b), m in R.items()
            for c in range(V) if (b, c) in S and (c, a) in T}
    assert sum(want.values()) == tc.count
    for attr, pos in zip("ABC", range(3)):
        got = {}
        for x in range(V):
            for t, m in tc.triangles_of_vertex(x, attribute=attr):
                assert t[pos] == x and t not in got
                got[t] = m
        assert got == want
    for rel, (p, q) in zip("RST", [(0, 1), (1, 2), (2, 0)]):
        for x, y in itertools.product(range(V), repeat=2):
            got = dict(tc.triangles_of_edge(x, y, relation=rel))
            assert got == {t: m for t, m in want.items() if (t[p], t[q]) == (x, y)}


def test_heavy_heavy_edge_is_answered_from_the_witness_view():
    # hubs 0 and 1 share 40 light leaves and 2 heavy common neighbours (2, 3)
    tc = TriangleCounter(0.5, mode="undirected", witnesses=True)
    edges = [(h, leaf) for h in (0, 1) for leaf in range(10, 50)]
    edges += [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    edges += [(h, x) for h in (2, 3) for x in range(50, 90)]
    s, d = (np.array(c) for c in zip(*edges))
    tc.apply_batch(s, d)
    core = tc._core
    assert {0, 1, 2, 3} <= core.heavy[0]
    parts = core.third_vertices(0, 1)
    assert parts[1] is core.views[0][0][1]  # the witness set itself, no row scan
    assert set(parts[0]) == {2, 3} and set(parts[1]) == set(range(10, 50))
    assert sorted(w for _, _, w in tc.triangles_of_edge(0, 1)) == [2, 3] + list(range(10, 50))
    check_invariants(tc)
    # deleting a leaf edge removes the leaf from the witness set
    tc.update(0, 10, -1)
    assert 10 not in core.views[0][0][1] and len(core.views[0][0][1]) == 39
    check_invariants(tc)


def test_witnesses_only_for_undirected_and_survive_snapshots():
    with pytest.raises(ConfigError):
        TriangleCounter(mode="directed", witnesses=True)
    tc = TriangleCounter(0.5, mode="undirected", witnesses=True)
    rng = np.random.default_rng(3)
    s = rng.integers(0, 6, 400)
    d = rng.integers(0, 60, 400)
    tc.apply_batch(s, d)
    back = TriangleCounter.restore(tc.snapshot())
    assert back.stats()["witnesses"] and back._core.views == tc._core.views
    check_invariants(back)
    assert sorted(back.triangles_of_vertex(0)) == sorted(tc.triangles_of_vertex(0))
