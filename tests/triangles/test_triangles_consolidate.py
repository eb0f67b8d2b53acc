"""Consolidated batches (issue 27): ``apply_batch`` nets rows per edge before the core works.

Against in-order application (``consolidate=False`` and one ``update()`` per row), on random
batches with deletes and re-inserts of the same edge, repeated references, deletes of absent
edges and self-loops: the same count, triangles, references and rejected rows after every batch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.triangles import ClassicalCounter, TriangleCounter

vertex = st.one_of(st.just(0), st.just(1), st.integers(0, 11))
row = st.tuples(vertex, vertex, st.sampled_from([1, 1, -1, -1, 2, -2, 0]), st.sampled_from("RSTX"))
batches = st.lists(st.lists(row, min_size=1, max_size=40), min_size=1, max_size=6)


def _state(c):
    rows = {u: dict(vs) for u, vs in c._core.rows[0].items() if vs}
    return c.count, rows, dict(c._extra)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.sampled_from(["undirected", "directed", "three_relation"]), st.sampled_from([0.0, 0.5, 1.0]))
def test_consolidated_equals_in_order(bs, mode, eps):
    net, in_order, rows = (TriangleCounter(eps, mode=mode) for _ in range(3))
    for b in bs:
        s = np.array([r[0] for r in b], dtype=np.int64)
        d = np.array([r[1] for r in b], dtype=np.int64)
        w = np.array([r[2] for r in b], dtype=np.int64)
        rel = np.array([r[3] for r in b]) if mode == "three_relation" else None
        bad = net.apply_batch(s, d, w, rel)
        bad_in_order = in_order.apply_batch(s, d, w, rel, consolidate=False)
        bad_rows = []
        for i, (u, v, m, r) in enumerate(b):
            if mode == "three_relation" and r not in "RST":
                bad_rows.append(i)  # update() raises on an unknown relation: the batch rejects it
                continue
            if rows.update(u, v, m, r if mode == "three_relation" else None) is not None:
                bad_rows.append(i)
        assert [(x.index, x.reason) for x in bad] == [(x.index, x.reason) for x in bad_in_order]
        assert [x.index for x in bad] == bad_rows
        assert _state(net) == _state(in_order) == _state(rows)
        assert net.rejected == in_order.rejected


def test_delete_and_reinsert_in_one_batch_costs_no_core_update():
    c = ClassicalCounter()
    c.apply_batch([1, 2, 1], [2, 3, 3])
    calls = []
    apply = c._apply  # the frontend's one call into the core per edge whose presence changes
    c._apply = lambda *a: calls.append(a) or apply(*a)
    bad = c.apply_batch([1, 1, 2, 2, 5], [2, 2, 3, 3, 5], [-1, 1, -1, 1, 1])
    assert [b.reason for b in bad] == ["self-loop"] and c.count == 1 and calls == []
    assert c.cancelled == 2
    c.apply_batch([1, 1], [2, 2], [-1, -1])  # the second delete has nothing left
    assert c.count == 0 and calls == [(1, 2, -1)]


@pytest.mark.parametrize("mode", ["undirected", "directed"])
def test_rejection_depends_on_the_references_at_that_row(mode):
    c = TriangleCounter(0.5, mode=mode)
    bad = c.apply_batch([1, 1, 1, 1], [2, 2, 2, 2], [-1, 1, -2, 1])
    # the first delete and the over-delete are rejected as they would be one row at a time
    assert [(b.index, b.reason) for b in bad] == [(0, "delete of an absent edge"),
                                                  (2, "delete of 2 references, edge has 1")]
    assert set(c._core.rows[0].get(1)) == {2} and c._extra.get((1, 2)) == 1  # two references
