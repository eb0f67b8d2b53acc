"""The views' default engine (``onenode.py``): equal to DRed batch by batch, consolidated or not.

Random batches over small graphs with deletes and re-inserts of the same arc in one batch (same
cost and another cost), expiring inserts and inserts replaced within the batch: the default
views (batches consolidated), the same views applying every arc change as the front emits it,
and DRed return the same deltas and rows after every batch (hypothesis). An older snapshot
(method ``absorption``, the provenance engine's state) restores into the default view. Deletions
that cut a deep shortest-path tree (a cheap backbone with side chains, dear bypasses) move whole
subtrees several levels deep: rows and deltas equal to DRed, costs to networkx, witnesses the paths.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.recursive_research import DRedReachabilityView, DRedShortestPathView
from operators.recursive import ReachabilityView, ShortestPathView
from tests.recursive.test_examples import witnesses
from tests.recursive.test_properties import Model, cheapest

vertex = st.integers(0, 6)
arc = st.tuples(vertex, vertex, st.integers(1, 4), st.sampled_from([None, None, None, 1, 2]))
batch = st.tuples(st.lists(arc, max_size=8), st.lists(st.tuples(vertex, vertex), max_size=4), st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch, min_size=1, max_size=10), st.booleans())
def test_consolidated_equals_arc_by_arc_and_dred(batches, weighted):
    cls, dred_cls = (ShortestPathView, DRedShortestPathView) if weighted else (ReachabilityView, DRedReachabilityView)
    net, each, dred = cls(), cls(), dred_cls()
    each._impl.consolidate = False
    for now, (ins, dels, churn) in enumerate(batches, start=1):
        ins = [(u, v, c, None if e is None else now + e) for u, v, c, e in ins]
        if churn:  # delete and re-insert the same arcs in this batch
            dels = dels + [a[:2] for a in ins]
            ins = ins + [(u, v, c) for u, v, c, _ in ins[:2]] + [(u, v, c + 1) for u, v, c, _ in ins[2:3]]
        d1, d2, d3 = (v.apply(ins, dels, now=now) for v in (net, each, dred))
        assert d1 == d2 == d3
        assert net.rows() == each.rows() == dred.rows()


def test_delete_and_reinsert_in_one_batch_does_no_work():
    v = ShortestPathView()
    v.apply([(1, 2, 3), (2, 3, 1), (3, 1, 1)])
    before = v.stats()
    d = v.apply([(1, 2, 3)], [(1, 2)])
    s = v.stats()
    assert not d and s["derivations"] == before["derivations"] and s.get("overdeleted", 0) == before.get("overdeleted", 0)
    assert s["arcs_netted_out"] - before.get("arcs_netted_out", 0) == 1
    assert v.explain((1, 3)) == "1→2 ∧ 2→3"


def test_older_snapshot_restores_from_its_front():
    a = ReachabilityView()
    a.apply([(1, 2), (2, 3), (3, 1), (4, 1, 1, 5)], now=0)
    doc = json.loads(a.snapshot())
    doc["method"], doc["state"] = "absorption", {"stats": {}, "nodes": [], "channels": []}
    b = ReachabilityView()
    b.restore(json.dumps(doc).encode())
    assert b.rows() == a.rows()
    assert b.apply(now=5) == a.apply(now=5) and (4, 2) not in b.rows()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_deletions_that_move_deep_subtrees(data):
    depth = data.draw(st.integers(6, 10))
    n = depth + 1 + data.draw(st.integers(0, 6))
    tree = {(i, i + 1): 1 for i in range(depth)}  # backbone 0 -> 1 -> ... -> depth
    for x in range(depth + 1, n):  # side chains hanging anywhere (cost 1 too)
        tree[(data.draw(st.integers(0, x - 1)), x)] = 1
    dear = st.integers(depth + 2, 3 * depth)  # dearer than any tree path: the tree holds until cut
    bypass = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), dear), min_size=3, max_size=20))
    arcs = dict(tree)
    arcs.update({(u, v): c for u, v, c in bypass if u != v and (u, v) not in tree})  # arcs into 0 too: cycle rows
    sp, dred, model = ShortestPathView(), DRedShortestPathView(), Model()
    cut = data.draw(st.integers(0, depth - 4))  # first batch: the subtree of 0 below cut+1 is >= 3 levels deep
    batches = [([(u, v, c, None) for (u, v), c in sorted(arcs.items())], [], 0), ([], [(cut, cut + 1)], 1)]
    for now in range(2, data.draw(st.integers(2, 6))):
        live = sorted(model.live) if model.live else [(cut, cut + 1)]
        dels = data.draw(st.lists(st.sampled_from(sorted(set(live) & set(tree)) or live), max_size=2))
        back = data.draw(st.lists(st.sampled_from(sorted(tree)), max_size=1))  # re-inserted, maybe dearer
        batches.append(([(u, v, data.draw(st.integers(1, 3)), None) for u, v in back], dels, now))
    for i, (ins, dels, now) in enumerate(batches):
        before = sp.stats().get("overdeleted", 0)
        model.apply(ins, dels, now, True)
        assert sp.apply(ins, dels, now=now) == dred.apply(ins, dels, now=now)
        rows = sp.rows()
        assert rows == dred.rows()
        assert {k: c for k, (c, _) in rows.items()} == cheapest(model.graph())
        if i == 1:
            assert sp.stats()["overdeleted"] - before >= depth - cut  # 0's rows cut+1 .. depth at least
        for key, (_, path) in rows.items():
            assert witnesses(sp.explain(key)) == {frozenset(f"{a}→{b}" for a, b in zip(path, path[1:]))}
