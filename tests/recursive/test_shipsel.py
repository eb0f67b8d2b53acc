"""Lazy shortest paths: channels keep their best per group only, alternatives are restricted lazily.

Streams over connected graphs against networkx with a sweep after every deletion (so the swept
state is checked) and without (so stale alternatives are met and skipped), and the invariant the
receivers rely on: a channel's best is the best join of its sender's edges and current rows.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.recursive_research import DRedShortestPathView, ShortestPathView
from bench.recursive_research.engine import Engine
from bench.recursive_research.workloads import strongly_connected, transit_stub
from tests.recursive.test_connected import _stream
from tests.recursive.test_examples import witnesses
from tests.recursive.test_properties import Model, cheapest


def _channel_bests_are_join_minima(view) -> None:
    eng = view._impl.engine
    spec = eng.spec
    ranks = (spec.rank,) + spec.extra_ranks
    for (src, dst), ch in eng.channels.items():
        nd = eng.nodes[src]
        want = {}
        for e in nd.s.keys():
            x = spec.o(e)
            if eng.node_of(x) != dst:
                continue
            for r in nd.r_by_key.get(spec.j(e), ()):
                out = spec.combine(e, r)
                if out is None:
                    continue
                for i, rank in enumerate(ranks):
                    k = (spec.gkey(out), i)
                    if k not in want or rank(out) < rank(want[k]):
                        want[k] = out
        # a best may also be an older join that stays because its better successor is not a
        # simple path (then no current join is left, or a worse one): never worse, always live
        live = _live_vars(view)
        for k, b in ch.sel.best.items():
            assert ch.sel.best_pv[k] <= live, (k, b)
            assert b[3][0] == k[0][0] and b[3][-1] == k[0][1]
            if k in want:
                assert not ranks[k[1]](want[k]) < ranks[k[1]](b), (k, b, want[k])
        assert set(want) <= set(ch.sel.best), set(want) - set(ch.sel.best)


def _live_vars(view) -> set:
    return set(view._impl.prov.labels)


def _run(seed, nodes, sweep_always, aggregates, monkeypatch, n=14, m=50, batches=6):
    if sweep_always:
        monkeypatch.setattr(Engine, "_lazy_entries", lambda self: 0)
    rng = random.Random(seed)
    g = strongly_connected(n, m, seed=seed)
    v = ShortestPathView(nodes=nodes, aggregates=aggregates)
    model = Model()
    start = [(a, b, c, None) for a, b, c in g.edges]
    for ins, dels, now in [(start, [], 0)] + _stream(rng, n, g.edges, batches, 5, 4):
        model.apply(ins, dels, now, True)
        v.apply(ins, dels, now=now)
        rows = v.rows()
        assert {k: c for k, (c, _) in rows.items()} == cheapest(model.graph())
        for key, (c, path) in rows.items():
            assert witnesses(v.explain(key)) == {frozenset(f"{a}→{b}" for a, b in zip(path, path[1:]))}
        _channel_bests_are_join_minima(v)
        eng = v._impl.engine
        if sweep_always and dels:  # swept at the deletion: nothing kept holds a dead variable
            live = _live_vars(v)
            for nd in eng.nodes.values():
                assert all(pv <= live for pv in nd.agg.h.f.values())
            for ch in eng.channels.values():
                assert all(pv <= live for pv in ch.sel.shipped.f.values())
    return v


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.sampled_from([2, 3, "vertex"]), st.booleans(),
       st.sampled_from([("cost",), ("cost", "hops")]))
def test_lazy_channels_match_dijkstra(seed, nodes, sweep_always, aggregates):
    with pytest.MonkeyPatch.context() as mp:
        _run(seed, nodes, sweep_always, aggregates, mp)


def test_lazy_mode_keeps_no_channel_history_and_eager_keeps_alg4():
    """Same rows; lazy channels hold one best per group, eager keeps Alg. 4's H in every channel."""
    g = transit_stub(100, seed=3)
    lazy, eager = ShortestPathView(nodes=6), ShortestPathView(nodes=6, ship="eager")
    for v in (lazy, eager):
        v.apply(g.edges, now=0)
    for e in g.edges[:10]:
        lazy.apply(deletes=[e[:2]])
        eager.apply(deletes=[e[:2]])
        assert lazy.rows() == eager.rows()
    le, ee = lazy._impl.engine, eager._impl.engine
    assert all(ch.agg is None and ch.sel is not None for ch in le.channels.values())
    assert all(ch.agg is not None and ch.sel is None for ch in ee.channels.values())
    assert le.state_tuples() < ee.state_tuples()
    _channel_bests_are_join_minima(lazy)


@pytest.mark.parametrize("nodes", [2, 5])
@pytest.mark.parametrize("aggregates", [("cost",), ("cost", "hops")])
def test_snapshot_of_lazy_state_is_swept(aggregates, nodes):
    g = transit_stub(100, seed=4)
    v = ShortestPathView(nodes=nodes, aggregates=aggregates)
    v.apply(g.edges, now=0)
    for e in g.edges[:6]:
        v.apply(deletes=[e[:2]])
    blob = v.snapshot()  # sweeps first: only live entries are written
    live = _live_vars(v)
    eng = v._impl.engine
    assert not eng._dead_recent
    assert all(pv <= live for nd in eng.nodes.values() for pv in nd.agg.h.f.values())
    w = ShortestPathView(nodes=nodes, aggregates=aggregates)
    w.restore(blob)
    for e in g.edges[6:12]:
        assert v.apply(deletes=[e[:2]]) == w.apply(deletes=[e[:2]])
    assert v.rows() == w.rows()
    _channel_bests_are_join_minima(w)


def _on_off_dred(**off_settings):
    """transit-stub 150 on 6 nodes, loaded: the default view, one with engine settings changed, DRed."""
    g = transit_stub(150, seed=5)
    on, off, dred = ShortestPathView(nodes=6), ShortestPathView(nodes=6), DRedShortestPathView(nodes=6)
    for k, val in off_settings.items():
        setattr(off._impl.engine, k, val)
    for v in (on, off, dred):
        v.apply(g.edges, now=0)
    return g, on, off, dred, (on.stats()["tuples_shipped"], off.stats()["tuples_shipped"])


def test_covers_hold_ships_the_receiver_does_not_need():
    """A sender holding a live path (via the reverse link) that beats its candidate holds it."""
    g, on, off, dred, s0 = _on_off_dred(covers=False)
    for e in g.edges[::7][:20]:
        for v in (on, off, dred):
            v.apply(deletes=[e[:2]])
        assert on.rows() == off.rows() == dred.rows()
        _channel_bests_are_join_minima(on)
    st_on, st_off = on.stats(), off.stats()
    assert st_on["held_by_cover"] > 0
    assert st_on["tuples_shipped"] - s0[0] < st_off["tuples_shipped"] - s0[1]
    _held_are_beaten(on)  # what is held is a best not shipped: the receiver holds a better live path


@pytest.mark.parametrize("aggregates", [("cost", "hops")])  # ("cost",) on one node: onenode.py
def test_one_node_keeps_the_bests_only_and_rederives(aggregates):
    """One node ships nothing: no alternatives are kept, a removed row is re-derived like DRed's."""
    g = transit_stub(100, seed=5)
    v, dred = ShortestPathView(aggregates=aggregates), DRedShortestPathView()
    v.apply(g.edges, now=0)
    dred.apply(g.edges, now=0)
    eng = v._impl.engine
    assert eng.local and not eng.channels
    for e in g.edges[:25]:
        v.apply(deletes=[e[:2]])
        dred.apply(deletes=[e[:2]])
        if aggregates == ("cost",):
            assert {k: r for k, r in v.rows().items()} == dred.rows()
        nd = eng.nodes[0]
        assert set(nd.agg.h.f) == set(nd.fix.keys())  # the bests, nothing else
        assert not eng._dead_recent
        live = _live_vars(v)
        assert all(pv <= live for bs in nd.bases.values() for pv in bs.values())
    assert eng.stats["rederivations"] > 0


def _held_are_beaten(view) -> None:
    eng = view._impl.engine
    for (src, dst), ch in eng.channels.items():
        for t in ch.sel.held:
            assert ch.sel.is_best(t) and t not in ch.sel.shipped
            r = eng.current((t[0], t[1]))
            assert r is not None and eng.spec.rank(r) < eng.spec.rank(t)


def test_ship_clock_and_ghosts_ship_less_and_change_nothing():
    """Deletions with the ship clock, ghost and two-hop covers (default) against no clock and DRed.

    Links are deleted one direction at a time (the tail's paths through a deleted link leave
    ghosts at its node), then re-inserted with other costs and expiring, so ghosts of dead
    suffixes and re-born links meet.
    """
    g, on, off, dred, s0 = _on_off_dred(clock_period=None)
    rng = random.Random(3)
    gone = []
    for i, e in enumerate(g.edges[::5][:30]):
        for v in (on, off, dred):
            v.apply(deletes=[e[:2]], now=1 + i)
        gone.append(e)
        assert on.rows() == off.rows() == dred.rows()
        if i % 4 == 0:
            _channel_bests_are_join_minima(on)
            _held_are_beaten(on)
    st_on, st_off = on.stats(), off.stats()
    assert st_on["held_by_ghost"] > 0 and st_on["held_by_two_hop"] > 0 and st_on["link_copies"] > 0
    assert st_on["idle_rounds"] > 0 and not off.stats().get("idle_rounds")
    assert st_on["tuples_shipped"] - s0[0] < st_off["tuples_shipped"] - s0[1]
    for i, (u, w, c) in enumerate(gone):  # back, cheaper or dearer, some expiring, some deleted again
        item = (u, w, c + rng.choice((-1, 1, 3)) if c > 1 else c + 1, rng.choice((None, 40 + i, 45)))
        for v in (on, off, dred):
            v.apply(inserts=[item], deletes=[gone[(i * 7) % len(gone)][:2]] if i % 3 == 0 else [], now=31 + i)
        assert on.rows() == off.rows() == dred.rows()
        if i % 4 == 0:
            _channel_bests_are_join_minima(on)
            _held_are_beaten(on)
