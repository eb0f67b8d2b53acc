"""The digest's worked examples (§9) and the paper's special cases as fixed-oracle tests.

Views are stored by their second key: ``views[i][z][x]`` is V_i(x, z).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from operators.triangles import ClassicalCounter, TriangleCounter
from operators.triangles.engine import IvmEpsState, thresholds
from operators.triangles.reference import check_invariants, tuples_of


def three(rows):
    """(src, dst, weight, relation) arrays from [(rel, a, b, m), ...]."""
    rel, a, b, m = zip(*rows)
    return np.array(a), np.array(b), np.array(m), np.array(rel)


# ---- example 1: multiplicities -------------------------------------------------------------
def test_example1_multiplicities():
    s, d, w, r = three([("R", 1, 2, 2), ("S", 2, 3, 3), ("T", 3, 1, 1)])
    tc, bad = TriangleCounter.from_edges(s, d, w, r, mode="three_relation")
    assert bad == []
    assert (tc.count, tc.stats()["N"], tc.stats()["D"]) == (6, 7, 3)
    tc.update(2, 3, -3, relation="S")
    assert (tc.count, tc.stats()["D"], tc.stats()["N"]) == (0, 2, 7)
    check_invariants(tc)


# ---- example 2: growth from empty ----------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0])
def test_example2_growth_from_empty(eps):
    tc = TriangleCounter(eps, mode="three_relation")
    for k in range(1, 40):
        tc.update(k, k + 1, 1, relation="RST"[k % 3])
        st = tc.stats()
        assert st["N"] == 2 ** (int(math.log2(k)) + 1)
        assert st["major_rebalances"] == int(math.log2(k)) + 1  # at k = 1, 2, 4, 8, ...
        check_invariants(tc)


# ---- example 3: halving --------------------------------------------------------------------
def test_example3_halving():
    tc = TriangleCounter(0.5, mode="directed")
    edges = [(i, i + 100) for i in range(8)]
    for u, v in edges:
        tc.update(u, v)
    assert (tc.stats()["N"], tc.stats()["D"]) == (16, 8)
    seen = []
    for u, v in edges[:5]:
        tc.update(u, v, -1)
        seen.append((tc.stats()["D"], tc.stats()["N"]))
        check_invariants(tc)
    assert seen == [(7, 16), (6, 16), (5, 16), (4, 16), (3, 7)]


# ---- example 4: thresholds at ε = ½, N = 64 ------------------------------------------------
def test_example4_thresholds():
    assert thresholds(64, 0.5) == (8, 12, 4)
    # exact integer tests near perfect squares: θ = √N
    for n in range(1, 3000):
        h, up, down = thresholds(n, 0.5)
        assert h * h >= n > (h - 1) * (h - 1)
        assert 4 * up * up >= 9 * n > 4 * (up - 1) * (up - 1)
        assert 4 * down * down >= n and (down == 0 or 4 * (down - 1) ** 2 < n)
    # exact powers: float error must not push ⌈N^ε⌉ up by one
    assert thresholds(64, 1 / 3) == (4, 6, 2)
    assert thresholds(4096, 0.75) == (512, 768, 256)
    assert thresholds(16, 0.25) == (2, 3, 1)
    assert thresholds(1000, 0.0) == (1, 2, 1)
    assert thresholds(1000, 1.0) == (1000, 1500, 500)


# ---- example 5: the full trace at ε = ½ ----------------------------------------------------
def test_example5_full_trace():
    rows = [("R", 0, b, 1) for b in range(1, 7)] + [("R", 1, 1, 1)]
    rows += [("S", b, 7, 1) for b in range(1, 7)] + [("T", 7, 0, 1), ("T", 7, 1, 1)]
    tc, _ = TriangleCounter.from_edges(*three(rows), mode="three_relation")
    core = tc._core
    assert (core.size, core.n) == (15, 31)
    assert core.heavy == [{0}, set(), set()]
    assert tc.count == 7
    assert core.views[0] == {7: {0: 6}} and core.views[1] == {} and core.views[2] == {}
    tc.update(0, 1, -1, relation="R")
    assert (tc.count, core.views[0], core.size) == (6, {7: {0: 5}}, 14)
    tc.update(0, 2, -1, relation="R")
    assert (tc.count, core.views[0][7][0]) == (5, 4)
    tc.update(0, 3, -1, relation="R")
    assert (tc.count, core.views[0][7][0]) == (4, 3)
    tc.update(0, 4, -1, relation="R")  # heavy degree 2 < ½√31 → minor move to R_l
    assert tc.count == 3 and tc.stats()["minor_rebalances"] == 1
    assert core.heavy[0] == set()
    assert tuples_of(core, 0) == {(0, 5): 1, (0, 6): 1, (1, 1): 1}
    assert all(v == {} for v in core.views) and core.size == 11
    for a in range(2, 9):
        tc.update(7, a, 1, relation="T")
        check_invariants(tc)
    assert tc.count == 3 and core.heavy[2] == {7}
    assert tc.stats()["minor_rebalances"] == 2
    assert core.views[2] == {1: {7: 1}, 5: {7: 1}, 6: {7: 1}}
    assert (core.size, core.n) == (18, 31)


# ---- example 6: self-join graphs -----------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("graph,q,tri", [
    (nx.complete_graph(4), 24, 4),
    (nx.complete_graph(4).copy(), 12, 2),
    (nx.complete_graph(5), 60, 10),
])
def test_example6_undirected(eps, graph, q, tri):
    g = graph.copy()
    if q == 12:
        g.remove_edge(0, 1)
    tc = TriangleCounter(eps, mode="undirected")
    for u, v in g.edges():
        assert tc.update(u, v) is None
    assert (tc.q, tc.count) == (q, tri)
    assert tc.count == sum(nx.triangles(g).values()) // 3
    check_invariants(tc)


def test_example6_directed_cycle_and_self_loops():
    tc = TriangleCounter(0.5, mode="directed")
    for u, v in [(1, 2), (2, 3), (3, 1)]:
        tc.update(u, v)
    assert (tc.q, tc.count) == (3, 1)
    tc.update(1, 3)  # the reverse chord forms no new 3-cycle
    assert tc.count == 1
    # the engine itself handles self-loops with the m², m³ terms (lines 7-9 of Figure 5)
    for eps in (0.0, 0.5, 1.0):
        core = IvmEpsState(eps, 1)
        core.update_self(1, 1, 1)
        assert core.q == 1
        core.update_self(1, 1, 1)
        assert core.q == 8
        core.update_self(1, 1, 1)
        assert core.q == 27
        core.update_self(1, 1, -2)
        assert core.q == 1


# ---- special cases of Section 7 ------------------------------------------------------------
def _random_graph_counter(eps, seed=0, n=400):
    rng = np.random.default_rng(seed)
    tc = TriangleCounter(eps, mode="undirected")
    hub = rng.integers(0, 3, n)
    other = rng.integers(3, 60, n)
    tc.apply_batch(np.where(rng.random(n) < 0.5, hub, rng.integers(0, 60, n)), other)
    return tc


def test_eps1_all_light_views_empty():
    tc = _random_graph_counter(1.0)
    assert tc.stats()["heavy_values"] == {"E": 0} and tc.stats()["view_entries"] == {"V": 0}
    check_invariants(tc)


def test_eps0_all_heavy_views_empty():
    tc = _random_graph_counter(0.0)
    core = tc._core
    assert core.heavy[0] == set(core.rows[0]) and tc.stats()["view_entries"] == {"V": 0}
    check_invariants(tc)


def test_eps_half_has_heavy_and_views():
    tc = _random_graph_counter(0.5)
    st = tc.stats()
    assert st["heavy_values"]["E"] > 0 and st["view_entries"]["V"] > 0
    check_invariants(tc)


def test_from_edges_matches_streaming():
    rng = np.random.default_rng(5)
    s, d = rng.integers(0, 40, 500), rng.integers(0, 40, 500)
    for mode in ("undirected", "directed"):
        bulk, bad1 = TriangleCounter.from_edges(s, d, mode=mode)
        streamed = ClassicalCounter(mode=mode)
        bad2 = streamed.apply_batch(s, d)
        assert bulk.count == streamed.count
        assert [b.index for b in bad1] == [b.index for b in bad2]
        check_invariants(bulk)
        assert bulk.stats()["N"] == 2 * bulk.stats()["D"] + 1
