"""Formula back ends: CUDD and dd.autoref behind one Provenance API; cubes for one-derivation views."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bench.recursive_research.provenance as provenance
from core.errors import ConfigError, InvariantError
from bench.recursive_research import ReachabilityView, ShortestPathView
from bench.recursive_research.provenance import CUBE_FALSE, Cube, CubeProvenance, Provenance, ProvTable
from tests.recursive.test_connected import _run

BACKENDS = ["autoref"] + (["cudd"] if provenance._cudd is not None else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_absorption_witness_and_restriction_on_each_backend(backend):
    prov = Provenance(backend)
    assert prov.backend == backend
    for i in range(1, 6):
        prov.declare(f"p{i}", f"p{i}")
    p = {i: prov.var(f"p{i}") for i in range(1, 6)}
    t = ProvTable(prov)
    assert t.merge("BB", p[2] & p[4])
    assert not t.merge("BB", p[2] & p[4] & p[5])  # absorbed
    assert t.merge("BB", p[1] & p[2] & p[3])
    assert prov.cubes(t.get("BB")) == [frozenset({"p2", "p4"}), frozenset({"p1", "p2", "p3"})]
    assert prov.render(t.get("BB")) == "(p2 ∧ p4) ∨ (p1 ∧ p2 ∧ p3)"
    changed, removed = t.kill({"p4"})
    assert changed == ["BB"] and not removed and prov.cubes(t.get("BB")) == [frozenset({"p1", "p2", "p3"})]
    changed, removed = t.kill({"p2"})
    assert removed == ["BB"] and "BB" not in t
    with pytest.raises(InvariantError):
        prov.witness(prov.false)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=4), min_size=1, max_size=6))
def test_witness_is_a_cube_of_the_formula(backend, terms):
    """A monotone DNF, also under complemented edges: the witness implies it and is a prime-free pick."""
    prov = Provenance(backend)
    for i in range(8):
        prov.declare(f"p{i}", f"p{i}")
    f = prov.from_cubes([[f"p{i}" for i in c] for c in terms])
    w = prov.witness(f)
    assert (w & f) == w  # w implies f
    names = prov.support(w)
    assert any(frozenset(f"p{i}" for i in c) <= names for c in terms)


def test_unknown_backend():
    with pytest.raises(ConfigError):
        Provenance("sylvan")


def test_autoref_fallback_when_cudd_is_missing(monkeypatch):
    """Without dd.cudd the views run on dd.autoref with the same results (networkx oracle)."""
    monkeypatch.setattr(provenance, "_cudd", None)
    assert ReachabilityView(nodes=2)._impl.prov.backend == "autoref"
    _run(n=9, m=30, seed=5, batches=4, ins=4, dels=3, nodes=3, sample=40)


def test_cube_algebra():
    a, b = Cube({"p1"}), Cube({"p1", "p2"})
    assert (a & b) == b and (a | b) == a and (b | a) == a  # absorption
    assert (a & CUBE_FALSE) is CUBE_FALSE and (CUBE_FALSE | b) == b and (b | CUBE_FALSE) == b
    with pytest.raises(InvariantError, match="two derivations"):
        _ = Cube({"p1"}) | Cube({"p2"})
    prov = CubeProvenance()
    assert prov.kill(b, {"p2"}) is CUBE_FALSE and prov.kill(b, {"p3"}) == b
    assert prov.cubes(b) == [frozenset({"p1", "p2"})] and prov.cubes(CUBE_FALSE) == []


def test_shortest_paths_keep_cubes_and_explain_the_path():
    v = ShortestPathView(nodes=2)
    assert isinstance(v._impl.prov, CubeProvenance)
    v.apply([("A", "B", 1), ("B", "C", 1), ("A", "C", 5), ("C", "A", 1)])
    assert v.rows()[("A", "C")] == (2, ("A", "B", "C"))
    assert v.explain(("A", "C")) == "A→B ∧ B→C"
    v.apply(deletes=[("B", "C")])
    assert v.rows()[("A", "C")] == (5, ("A", "C")) and v.explain(("A", "C")) == "A→C"
    assert v.stats()["bdd_nodes"] == 0


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
def test_dense_stream_same_rows_on_both_backends(seed):
    """CUDD and dd.autoref views agree row for row and witness for witness (lazy picks the same)."""
    rng = random.Random(seed)
    from bench.recursive_research.workloads import strongly_connected

    g = strongly_connected(10, 35, seed=seed)
    views = {}
    for b in BACKENDS:
        v = ReachabilityView(nodes=2)
        v._impl.prov = Provenance(b)
        v._impl.engine.prov = v._impl.prov
        views[b] = v
    live = [(u, w) for u, w, _ in g.edges]
    batches = [(g.edges, [], 0)]
    for now in range(1, 4):
        dels = rng.sample(live, 3)
        live = [e for e in live if e not in dels]
        batches.append(([], dels, now))
    for ins, dels, now in batches:
        for v in views.values():
            v.apply(ins, dels, now=now)
        rows = [v.rows() for v in views.values()]
        assert all(r == rows[0] for r in rows)
        for row in sorted(rows[0])[:30]:
            assert len({v.explain(row) for v in views.values()}) == 1
