"""Random streams of inserts, deletes and expirations: every view, every method, after every batch,
against networkx (transitive closure, Dijkstra, BFS for regions) and the from-scratch provenance."""

from __future__ import annotations

import math

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.recursive_research import (
    DRedReachabilityView,
    DRedRegionView,
    DRedShortestPathView,
    ReachabilityView,
    RecomputeReachabilityView,
    RecomputeShortestPathView,
    RegionView,
    ShortestPathView,
)
from bench.recursive_research.provenance_reference import reference_provenance
from operators.recursive.reference import reference_view
from operators.recursive.spec import REACH, SHORTEST
from tests.recursive.test_examples import witnesses

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

V = st.integers(0, 5)
EDGE = st.tuples(V, V, st.integers(1, 4), st.one_of(st.none(), st.integers(1, 8)))
BATCH = st.tuples(st.lists(EDGE, max_size=5), st.lists(st.tuples(V, V), max_size=3))
STREAM = st.lists(BATCH, min_size=1, max_size=6)


class Model:
    """The documented base-tuple semantics, written independently of the fronts."""

    def __init__(self) -> None:
        self.live = {}  # (u, v) -> [cost, expires_at]

    def apply(self, inserts, deletes, now, weighted):
        for u, v in deletes:
            self.live.pop((u, v), None)
        for u, v, c, exp in inserts:
            c = c if weighted else None
            cur = self.live.get((u, v))
            if cur is not None and cur[0] == c:
                cur[1] = None if cur[1] is None or exp is None else max(cur[1], exp)
            else:
                self.live[(u, v)] = [c, exp]
        for k, (_, exp) in list(self.live.items()):
            if exp is not None and exp <= now:
                del self.live[k]

    def graph(self):
        g = nx.DiGraph()
        for (u, v), (c, _) in self.live.items():
            g.add_edge(u, v, weight=c)
        return g


def closure(g) -> set:
    out = set()
    for x in g.nodes:
        for s in g.successors(x):
            out.add((x, s))
            out |= {(x, y) for y in nx.descendants(g, s)}
    return out


def cheapest(g) -> dict:
    out = {}
    for x in g.nodes:
        dist = nx.single_source_dijkstra_path_length(g, x)
        for y, d in dist.items():
            if y != x:
                out[(x, y)] = d
        loops = [dist[w] + g[w][x]["weight"] for w in g.predecessors(x) if w in dist]
        if loops:
            out[(x, x)] = min(loops)
    return out


def run_stream(views, stream, weighted, check):
    model = Model()
    before = [v.rows() for v in views]
    for now, (ins, dels) in enumerate(stream, start=1):
        model.apply(ins, dels, now, weighted)
        for i, v in enumerate(views):
            delta = v.apply(ins, dels, now=now)
            rows = v.rows()
            check(v, rows, model)
            if isinstance(rows, dict):
                old = before[i]
                assert set(delta.removed) == {k for k in old if old[k] != rows.get(k)}
                assert set(delta.added) == {k for k in rows if old.get(k) != rows[k]}
                assert all(delta.added[k] == rows[k] for k in delta.added)
                assert all(delta.removed[k] == old[k] for k in delta.removed)
            else:
                assert delta.added == rows - before[i] and delta.removed == before[i] - rows
            before[i] = rows


@SETTINGS
@given(STREAM, st.sampled_from([("lazy", None), ("eager", None), ("eager", 2), ("plain", None)]),
       st.sampled_from([1, 3, "vertex"]))
def test_reachability_matches_transitive_closure(stream, mode, nodes):
    ship, flush_every = mode
    views = [ReachabilityView(nodes=nodes, ship=ship, flush_every=flush_every),
             DRedReachabilityView(nodes=nodes),
             RecomputeReachabilityView(nodes=nodes)]
    run_stream(views, stream, False, lambda v, rows, m: _check_closure(rows, m))


def _check_closure(rows, model):
    assert rows == closure(model.graph())


@SETTINGS
@given(STREAM, st.sampled_from([("lazy", None), ("eager", None), ("eager", 3), ("plain", None)]))
def test_provenance_equals_from_scratch(stream, mode):
    """After every batch each row's explain() is the PosBool provenance over live edges."""
    v = ReachabilityView(nodes=2, ship=mode[0], flush_every=mode[1])
    model = Model()
    for now, (ins, dels) in enumerate(stream, start=1):
        model.apply(ins, dels, now, False)
        v.apply(ins, dels, now=now)
        links = [((a, b), (f"{a}→{b}",)) for (a, b) in model.live]
        prov, P = reference_provenance(REACH, {}, links, links)
        assert set(P) == v.rows()
        for row, f in P.items():
            full = {frozenset(c) for c in prov.cubes(f)}
            assert witnesses(v.explain(row, complete=True)) == full
            kept = witnesses(v.explain(row))
            if mode[0] == "lazy":  # a non-empty subset of witnesses, each containing a minimal one
                assert kept and all(any(m <= w for m in full) for w in kept)
            else:
                assert kept == full


@SETTINGS
@given(STREAM, st.sampled_from(["lazy", "eager"]), st.sampled_from([1, 3, "vertex"]))
def test_shortest_paths_match_dijkstra(stream, ship, nodes):
    views = [ShortestPathView(nodes=nodes, ship=ship), DRedShortestPathView(nodes=nodes),
             RecomputeShortestPathView(nodes=nodes)]
    run_stream(views, stream, True, _check_sp)


@SETTINGS
@given(STREAM, st.sampled_from(["lazy", "eager"]), st.sampled_from([1, 3, "vertex"]))
def test_multi_aggsel_matches_dijkstra_and_bfs(stream, ship, nodes):
    def check(view, rows, model):
        _check_sp(view, rows, model)
        g = model.graph()
        hops = view.fewest_hops()
        want = {}
        for x in g.nodes:
            dist = nx.single_source_shortest_path_length(g, x)
            want.update({(x, y): d for y, d in dist.items() if y != x})
            loops = [dist[w] + 1 for w in g.predecessors(x) if w in dist]
            if loops:
                want[(x, x)] = min(loops)
        assert {k: h for k, (h, _) in hops.items()} == want
        for (x, y), (h, path) in hops.items():
            assert path[0] == x and path[-1] == y and len(path) == h + 1
            assert all(g.has_edge(a, b) for a, b in zip(path, path[1:]))

    run_stream([ShortestPathView(nodes=nodes, ship=ship, aggregates=("cost", "hops"))], stream, True, check)


def _check_sp(view, rows, model):
    g = model.graph()
    assert {k: c for k, (c, _) in rows.items()} == cheapest(g)
    for (x, y), (c, path) in rows.items():
        assert path[0] == x and path[-1] == y
        assert sum(g[a][b]["weight"] for a, b in zip(path, path[1:])) == c
    # the tie-break (cost, hops, path) is total: the chosen path is the reference's
    links = [((a, b, w[0], (a, b)), ()) for (a, b), w in model.live.items()]
    edges = [((a, b, w[0]), ()) for (a, b), w in model.live.items()]
    ref = reference_view(SHORTEST, links, edges)
    assert rows == {k: (r[2], r[3]) for k, r in ref.items()}


POS = st.integers(0, 6)
REGION_IN = st.one_of(
    st.tuples(st.just("sensor"), st.integers(0, 5), st.tuples(POS, POS)),
    st.tuples(st.just("trigger"), st.integers(0, 5)),
    st.tuples(st.just("seed"), st.sampled_from(["r1", "r2"]), st.integers(0, 5)),
    st.tuples(st.just("trigger"), st.integers(0, 5), st.integers(1, 6)),
)
REGION_DEL = st.one_of(
    st.tuples(st.just("sensor"), st.integers(0, 5)),
    st.tuples(st.just("trigger"), st.integers(0, 5)),
    st.tuples(st.just("seed"), st.sampled_from(["r1", "r2"]), st.integers(0, 5)),
)
REGION_STREAM = st.lists(st.tuples(st.lists(REGION_IN, max_size=6), st.lists(REGION_DEL, max_size=2)),
                         min_size=1, max_size=5)


def _region_oracle(state, k, reading):
    sensors, trig, seeds = state
    g = nx.DiGraph()
    for x, px in sensors.items():
        for y, py in sensors.items():
            if x != y and x in trig and math.dist(px, py) < k and (reading == "literal" or y in trig):
                g.add_edge(x, y)
    rows = set()
    for rid, s in seeds:
        if s in sensors and s in trig:
            rows.add((rid, s))
            if s in g:
                rows |= {(rid, y) for y in nx.descendants(g, s)}
    return rows


@SETTINGS
@given(REGION_STREAM, st.sampled_from(["literal", "triggered"]), st.sampled_from(["lazy", "eager"]))
def test_region_matches_bfs(stream, reading, ship):
    k = 2.5
    views = [RegionView(k=k, reading=reading, nodes=3, ship=ship), DRedRegionView(k=k, reading=reading)]
    sensors, trig, seeds = {}, {}, set()
    for now, (ins, dels) in enumerate(stream, start=1):
        for d in dels:
            if d[0] == "sensor":
                sensors.pop(d[1], None)
            elif d[0] == "trigger":
                trig.pop(d[1], None)
            else:
                seeds.discard((d[1], d[2]))
        for i in ins:
            if i[0] == "sensor":
                sensors[i[1]] = i[2]
            elif i[0] == "trigger":
                exp = i[2] if len(i) > 2 else None
                cur = trig.get(i[1], "absent")
                trig[i[1]] = exp if cur == "absent" else (None if cur is None or exp is None else max(cur, exp))
            else:
                seeds.add((i[1], i[2]))
        trig = {s: e for s, e in trig.items() if e is None or e > now}
        want = _region_oracle((sensors, trig, seeds), k, reading)
        for v in views:
            v.apply(ins, dels, now=now)
            assert v.rows() == want
            sizes = {}
            for rid, _ in want:
                sizes[rid] = sizes.get(rid, 0) + 1
            assert v.sizes() == sizes


@SETTINGS
@given(STREAM, st.sampled_from([ReachabilityView, ShortestPathView]), st.data())
def test_same_result_whatever_the_batch_boundaries(stream, cls, data):
    """Insert-only prefixes split at random points give the same rows and provenance."""
    inserts = [e[:3] for ins, _ in stream for e in ins]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(inserts)), max_size=4)))
    whole, split = cls(nodes=3), cls(nodes=2, ship="eager")
    whole.apply(inserts)
    last = 0
    for c in cuts + [len(inserts)]:
        split.apply(inserts[last:c])
        last = c
    assert whole.rows() == split.rows()
    for row in whole.rows():
        assert whole.explain(row, complete=True) == split.explain(row)
