"""The views' default engine (``onenode.py``): equal to DRed batch by batch, consolidated or not.

Random batches over small graphs with deletes and re-inserts of the same arc in one batch (same
cost and another cost), expiring inserts and inserts replaced within the batch: the default
views (batches consolidated), the same views applying every arc change as the front emits it,
and DRed return the same deltas and rows after every batch (hypothesis). An older snapshot
(method ``absorption``, the provenance engine's state) restores into the default view.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.recursive import DRedReachabilityView, DRedShortestPathView, ReachabilityView, ShortestPathView

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
