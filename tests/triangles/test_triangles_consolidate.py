"""Consolidated batches (issue 27): ``apply_batch`` nets rows per edge before the core works.

Against in-order application (``consolidate=False`` and one ``update()`` per row), on random
batches with deletes and re-inserts of the same edge, repeated references, deletes of absent
edges and self-loops: the same count, triangles, references and rejected rows after every batch.
Vertex ids include ones outside [0, 2^31), so batches take both the ``EdgeIndex`` path and the
path that asks the core's rows; a fourth counter mixes the entry points batch by batch (and
restores from its snapshot) so the index must follow every presence change.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.triangles import ClassicalCounter, TriangleCounter
from operators.triangles.edgeindex import EdgeIndex, pack

vertex = st.one_of(st.just(0), st.just(1), st.integers(0, 11))
row = st.tuples(vertex, vertex, st.sampled_from([1, 1, -1, -1, 2, -2, 0]), st.sampled_from("RSTX"))
WIDE = {9: -5, 10: 2 ** 31, 11: 2 ** 40}  # ids the EdgeIndex cannot pack


def _widen(b):
    return [(WIDE.get(u, u), WIDE.get(v, v), m, r) for u, v, m, r in b]


batch = st.lists(row, min_size=1, max_size=40)
batches = st.lists(st.one_of(batch, batch.map(_widen)), min_size=1, max_size=6)
how = st.sampled_from(["batch", "in_order", "rows", "restore"])


def _state(c):
    rows = {u: dict(vs) for u, vs in c._core.rows[0].items() if vs}
    return c.count, rows, dict(c._extra)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.sampled_from(["undirected", "directed", "three_relation"]), st.sampled_from([0.0, 0.5, 1.0]),
       st.lists(how, min_size=6, max_size=6))
def test_consolidated_equals_in_order(bs, mode, eps, hows):
    net, in_order, rows, mixed = (TriangleCounter(eps, mode=mode) for _ in range(4))
    for b, h in zip(bs, hows):
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
        if h == "restore":
            mixed = TriangleCounter.restore(mixed.snapshot())
        if h in ("batch", "restore"):
            mixed.apply_batch(s, d, w, rel)
        elif h == "in_order":
            mixed.apply_batch(s, d, w, rel, consolidate=False)
        else:
            for u, v, m, r in b:
                if mode != "three_relation" or r in "RST":
                    mixed.update(u, v, m, r if mode == "three_relation" else None)
        assert _state(net) == _state(in_order) == _state(rows) == _state(mixed)
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


@pytest.mark.parametrize("mode", ["undirected", "directed"])
def test_presence_index_follows_every_entry_point(mode):
    # edge (3, 4) changes presence outside the consolidated path, then a batch relies on it
    c = TriangleCounter(0.5, mode=mode)
    assert not c.apply_batch([1], [2])  # builds the index
    for flip in ("in_order", "update", "wide", "restore"):
        if flip == "in_order":
            assert not c.apply_batch([3], [4], [1], consolidate=False)
        elif flip == "update":
            assert c.update(3, 4, 1) is None
        elif flip == "wide":  # an id the index cannot pack: the batch asks the rows
            assert not c.apply_batch([3, 2 ** 40], [4, 5], [1, 1])
        else:
            c.apply_batch([3], [4], [1])
            c = TriangleCounter.restore(c.snapshot())
        # a delete / re-insert (settled by the index alone) and then a delete must see the edge
        assert not c.apply_batch([3, 3], [4, 4], [-1, 1]) and set(c._core.rows[0][3]) == {4}
        assert not c.apply_batch([3], [4], [-1]) and 3 not in c._core.rows[0]
        bad = c.apply_batch([3], [4], [-1])
        assert [b.reason for b in bad] == ["delete of an absent edge"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(-2, 6), st.integers(-2, 6), st.booleans()), max_size=12), max_size=5),
       st.booleans())
def test_edge_index_equals_a_set(rounds, directed):
    # notes in any order (repeats, toggles, ids it cannot pack), merged and asked between rounds
    index, present = EdgeIndex({}, directed), set()
    for notes in rounds:
        for u, v, on in notes:
            index.note(u, v, on)
            e = (u, v) if directed or u <= v else (v, u)
            (present.add if on else present.discard)(e)
        q = [(u, v) for u in range(7) for v in range(7) if directed or u <= v]
        got = index.contains(pack(np.array([u for u, _ in q]), np.array([v for _, v in q])))
        assert [e for e, g in zip(q, got) if g] == [e for e in q if e in present]


@pytest.mark.parametrize("mode", ["undirected", "directed"])
def test_weights_whose_sums_overflow_int64_are_applied_in_order(mode):
    big = 2 ** 62
    a, b = TriangleCounter(0.5, mode=mode), TriangleCounter(0.5, mode=mode)
    for rows in (([1, 1, 1, 2, 1], [2, 2, 2, 3, 3], [big, big, big, 1, 1]),  # (1, 2) holds 3 * 2^62 references
                 ([1, 1], [2, 2], [big, big]),  # 5 * 2^62: more than an int64 holds
                 ([1] * 6, [2] * 6, [-big] * 5 + [1]),  # gone after the fifth row, back with the last
                 ([1], [2], [-big])):
        arrays = [np.array(x, dtype=np.int64) for x in rows]
        bad, bad_in_order = a.apply_batch(*arrays), b.apply_batch(*arrays, consolidate=False)
        assert [(x.index, x.reason) for x in bad] == [(x.index, x.reason) for x in bad_in_order]
        assert _state(a) == _state(b)
    assert [x.reason for x in bad] == [f"delete of {big} references, edge has 1"] and _state(a)[2] == {}
    assert _state(a)[0] == (1 if mode == "undirected" else 0)
