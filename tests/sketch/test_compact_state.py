"""The compact operator state: single-fragment groups, derived emitted rows, flat top-k keys.

Aggregation keeps F_g of a group in one fragment in two numpy entries and spills to a dict
only while the group spans several; these tests walk a group through single -> several ->
single fragments and out of existence, across a pickle round trip, and check the flat
top-k keys order exactly as the nested ones they replaced.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from core.errors import StateError
from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch import aggregate as A
from operators.sketch import topk as T
from operators.sketch.delta import Delta, sketch_keys
from operators.sketch import codec as sketch_codec

NB = 8


def mk(rows, frags, weights):
    tbl = pa.table({"g": pa.array([r[0] for r in rows], pa.int64()), "x": pa.array([r[1] for r in rows], pa.int64())})
    return Delta(tbl, np.asarray(weights, np.int64), np.asarray(frags, np.int64).reshape(-1, 1))


def out(d):
    if d is None:
        return []
    return sorted(zip(d.rows(), d.weight.tolist(), sketch_keys(d.sketch)))


def test_group_moves_between_one_and_several_fragments_and_vanishes():
    spec = A.AggSpec((("g", "g"),), (A.AggCall("sum", "x", "s"),), NB)
    s = A.new_state(spec)
    s, d = A.step(spec, s, mk([(1, 2), (1, 3), (2, 7)], [4, 4, 6], [1, 1, 1]))
    assert out(d) == [((1, 5), 1, (4,)), ((2, 7), 1, (6,))]
    assert s.frag_multi == {}  # both groups single-fragment: no dict
    s, d = A.step(spec, s, mk([(1, 10)], [2], [1]))  # group 1 gains fragment 2
    assert out(d) == [((1, 5), -1, (4,)), ((1, 15), 1, (2, 4))]
    assert list(s.frag_multi.values()) == [{4: 2, 2: 1}]
    s = pickle.loads(pickle.dumps(s))  # the spilled form survives a snapshot
    s, d = A.step(spec, s, mk([(1, 10)], [2], [-1]))  # ... and loses it again
    assert out(d) == [((1, 5), 1, (4,)), ((1, 15), -1, (2, 4))]
    assert s.frag_multi == {}
    s, d = A.step(spec, s, mk([(1, 2)], [4], [-1]))  # fragment count 2 -> 1: same sketch
    assert out(d) == [((1, 3), 1, (4,)), ((1, 5), -1, (4,))]
    s, d = A.step(spec, s, mk([(1, 3), (2, 7), (2, 7)], [4, 6, 3], [-1, -1, 1]))  # 1 vanishes, 2 moves
    assert out(d) == [((1, 3), -1, (4,)), ((2, 7), -1, (6,)), ((2, 7), 1, (3,))]
    assert list(s.slot_of) == [2]
    s, d = A.step(spec, s, mk([(1, 9)], [5], [1]))  # 1 comes back, in a reused slot, fresh
    assert out(d) == [((1, 9), 1, (5,))]
    s, d = A.step(spec, s, mk([(1, 9), (1, 9)], [5, 7], [-1, 1]))  # several fragments in one batch
    assert out(d) == [((1, 9), -1, (5,)), ((1, 9), 1, (7,))]
    assert s.frag_multi == {}


def test_new_groups_after_frees_fit_the_slots():
    spec = A.AggSpec((("g", "g"),), (A.AggCall("sum", "x", "s"),), NB)
    s = A.new_state(spec)
    s, _ = A.step(spec, s, mk([(g, 1) for g in range(16)], [g % NB for g in range(16)], [1] * 16))
    assert len(s.cnt) == 16
    s, _ = A.step(spec, s, mk([(0, 1), (1, 1)], [0, 1], [-1, -1]))  # two slots free
    s, d = A.step(spec, s, mk([(g, 2) for g in range(100, 105)], [3] * 5, [1] * 5))  # five new groups
    assert out(d) == [((g, 2), 1, (3,)) for g in range(100, 105)]
    assert sorted(s.slot_of.values()) == list(range(19))


def test_a_spilled_group_that_vanishes_is_freed():
    spec = A.AggSpec((("g", "g"), ("x", "x")), (A.AggCall("count_star", None, "n"),), NB)
    s = A.new_state(spec)
    s, d = A.step(spec, s, mk([(1, 1), (1, 1), (1, 1)], [0, 1, 2], [1, 1, 1]))
    assert out(d) == [((1, 1, 3), 1, (0, 1, 2))]
    s, d = A.step(spec, s, mk([(1, 1), (1, 1), (1, 1)], [0, 1, 2], [-1, -1, -1]))
    assert out(d) == [((1, 1, 3), -1, (0, 1, 2))]
    assert s.frag_multi == {} and s.slot_of == {} and s.frag_n.sum() == 0


class _OldRev:
    """The v1 key's reversed pair (topk.ordered.v1), kept here as the reference order."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return self.v == o.v

    def __lt__(self, o):
        return o.v < self.v


def _old_key(order, row, ids):
    nk = [(1, 0) if v is None else (0, v) for v in row]
    return tuple(_OldRev(nk[i]) if desc else nk[i] for i, desc in order) + tuple(nk) + (tuple(ids),)


def test_flat_topk_keys_order_like_the_nested_pairs_they_replace():
    rows = [(None, "b", 1.5, True), (3, None, 2.0, False), (3, "a", None, None), (-1, "a", -0.5, True),
            (3, "a", 2.0, True), (None, None, None, None), (0, "c", 2.0, False), (3, "b", 2.0, None),
            (0, "c", -0.0, False), (7, "b", 1.5, False)]
    ids = [(i % 3,) for i in range(len(rows))]
    items = list(zip(rows, ids)) + [(rows[0], (5,)), (rows[4], ())]
    for order in (((0, False),), ((0, True),), ((2, True), (1, False)), ((1, True), (0, True)), ((3, True),), ()):
        got = sorted(items, key=lambda it: T.order_key(order, it[0], it[1]))
        ref = sorted(items, key=lambda it: _old_key(order, it[0], it[1]))
        assert got == ref, order
        keys = [T.order_key(order, r, i) for r, i in items]
        assert [T._from_key(T.TopKSpec(order, 1, ("a", "b", "c", "d"), NB), k)[0] for k in keys] == [r for r, _ in items]


def test_topk_state_pickles_and_continues():
    spec = T.TopKSpec(((1, True),), 2, ("g", "x"), NB)
    s = T.TopKState()
    tbl = pa.table({"g": pa.array([1, 2, 3, 4], pa.int64()), "x": pa.array([5, None, 5, 1], pa.int64())})
    s, d = T.step(spec, s, Delta(tbl, np.ones(4, np.int64), np.asarray([[0], [1], [2], [3]], np.int64)))
    assert out(d) == [((1, 5), 1, (0,)), ((2, None), 1, (1,))]  # DESC: NULL first
    s = pickle.loads(pickle.dumps(s))
    assert all(k[1] is T._LAST or isinstance(k[1], int) for k in s.entries)  # NULL stays the singleton
    tbl = pa.table({"g": pa.array([2], pa.int64()), "x": pa.array([None], pa.int64())})
    s, d = T.step(spec, s, Delta(tbl, -np.ones(1, np.int64), np.asarray([[1]], np.int64)))
    assert out(d) == [((2, None), -1, (1,)), ((3, 5), 1, (2,))]
    assert Counter(s.entries.values()) == Counter({1: 3})


def test_restore_refuses_the_previous_encodings():
    parts = {"r": RangePartition("b", [0, 5, 10])}
    m = SketchMaintainer.from_sql("select a, sum(b) as s from r group by a order by s desc limit 2", parts)
    m.initialize({"r": pa.table({"a": pa.array([1, 2, 2], pa.int64()), "b": pa.array([1, 7, 12], pa.int64()),
                                 "d": pa.array([dt.date(1995, 1, 1)] * 3)})})
    m2 = SketchMaintainer.restore(m.snapshot())
    assert m2.sketch == m.sketch
    for old in ("aggregate.groups.v2", "topk.ordered.v1"):
        payload = sketch_codec.decode(m.snapshot())
        i = next(i for i, (_, enc, _) in enumerate(payload["nodes"]) if (enc or "").split(".")[0] == old.split(".")[0])
        kind, _, st = payload["nodes"][i]
        payload["nodes"][i] = (kind, old, st)
        with pytest.raises(StateError):
            SketchMaintainer.restore(sketch_codec.encode(payload))
