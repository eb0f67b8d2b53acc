"""Each incremental operator against its from-scratch ``reference_*`` twin (hypothesis).

Histories are random batches of inserts and deletes (deletes only of rows that exist,
updates as delete+insert), small value domains so that groups appear and vanish, top-k
ties occur and the current min/max gets deleted.  After every batch the operator's
accumulated output (sum of all emitted deltas) must equal the twin's output on the
current full input.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvariantError
from operators.sketch import aggregate as A
from operators.sketch import join as J
from operators.sketch import topk as T
from operators.sketch.bloom import CountingBloom
from operators.sketch.delta import Delta, consolidate, sketch_keys
from operators.sketch.memory_side import MemoryIndex

NB = 8  # fragments 0..7


def mk(cols, rows, frags, weights, types):
    tbl = pa.table({c: pa.array([r[i] for r in rows], type=types[i]) for i, c in enumerate(cols)})
    return Delta(tbl, np.asarray(weights, np.int64), np.asarray(frags, np.int64).reshape(-1, 1))


def accumulate(acc: Counter, d):
    if d is None:
        return
    for r, k, w in zip(d.rows(), sketch_keys(d.sketch), d.weight.tolist()):
        acc[(r, k)] += w
        if acc[(r, k)] == 0:
            del acc[(r, k)]


def as_counter(bag):
    c = Counter()
    for r, s, m in bag:
        c[(tuple(r), tuple(sorted(s)))] += m
    return +c


# one history step: a list of ("ins", row, frag) / ("del", index) operations
row_st = st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(-5, 5)), st.integers(0, NB - 1))
batch_st = st.lists(st.tuples(st.booleans(), row_st, st.integers(0, 10 ** 6)), min_size=1, max_size=8)
history_st = st.lists(batch_st, min_size=1, max_size=6)


def run_history(history, apply):
    """Drive ``apply(batch rows, frags, weights, current bag)`` over a history of live rows."""
    live: list = []  # (row, frag)
    for batch in history:
        rows, frags, ws = [], [], []
        removed = set()
        for is_del, (g, x, f), pick in batch:
            if is_del and len(live) > len(removed):
                cand = [i for i in range(len(live)) if i not in removed]
                i = cand[pick % len(cand)]
                removed.add(i)
                rows.append(live[i][0])
                frags.append(live[i][1])
                ws.append(-1)
            else:
                rows.append((g, x))
                frags.append(f)
                ws.append(1)
        live = [r for i, r in enumerate(live) if i not in removed] + [
            (r, f) for r, f, w in zip(rows, frags, ws) if w > 0]
        apply(rows, frags, ws, [(r, frozenset({f}), 1) for r, f in live])


AGGS = (A.AggCall("sum", "x", "s"), A.AggCall("count", "x", "c"), A.AggCall("count_star", None, "n"),
        A.AggCall("avg", "x", "a"), A.AggCall("min", "x", "mn"), A.AggCall("max", "x", "mx"))


@pytest.mark.parametrize("grouped", [True, False])
@settings(max_examples=60, deadline=None)
@given(history=history_st)
def test_aggregate_equals_reference(grouped, history):
    spec = A.AggSpec((("g", "g2"),) if grouped else (), AGGS, NB)
    state = A.new_state(spec)
    acc = Counter()
    first = [True]

    def apply(rows, frags, ws, bag):
        nonlocal state
        d = mk(["g", "x"], rows, frags, ws, [pa.int64(), pa.int64()])
        if first[0]:  # capture on an empty input, as initialize() would
            state, out = A.step(spec, state, None)
            accumulate(acc, out)
            first[0] = False
        state, out = A.step(spec, state, d)
        accumulate(acc, out)
        assert acc == as_counter(A.reference_aggregate(spec, ["g", "x"], bag))
        assert all(w == 1 for w in acc.values())

    run_history(history, apply)


def test_aggregate_emits_one_pair_per_changed_group():
    spec = A.AggSpec((("g", "g"),), (A.AggCall("sum", "x", "s"),), NB)
    st_ = A.new_state(spec)
    st_, out = A.step(spec, st_, mk(["g", "x"], [(1, 1), (1, 2), (2, 5)], [0, 1, 2], [1, 1, 1], [pa.int64()] * 2))
    assert sorted(out.rows()) == [(1, 3), (2, 5)]
    st_, out = A.step(spec, st_, mk(["g", "x"], [(1, 10), (1, 20), (1, 1), (3, 1)], [3, 3, 0, 0], [1, 1, -1, 1], [pa.int64()] * 2))
    got = sorted(zip(out.rows(), out.weight.tolist(), sketch_keys(out.sketch)))
    assert got == [((1, 3), -1, (0, 1)), ((1, 32), 1, (1, 3)), ((3, 1), 1, (0,))]
    # a group whose value and sketch are unchanged emits nothing
    st_, out = A.step(spec, st_, mk(["g", "x"], [(2, 0)], [2], [1], [pa.int64()] * 2))
    assert out is None


@settings(max_examples=50, deadline=None)
@given(history=history_st, bound=st.integers(1, 3))
def test_bounded_minmax_is_exact_or_asks_for_recapture(history, bound):
    aggs = (A.AggCall("min", "x", "mn"), A.AggCall("max", "x", "mx"), A.AggCall("count_star", None, "n"))
    spec = A.AggSpec((("g", "g2"),), aggs, NB, bound=bound)
    state = A.new_state(spec)
    acc = Counter()

    class Stop(Exception):
        pass

    def apply(rows, frags, ws, bag):
        nonlocal state
        try:
            state, out = A.step(spec, state, mk(["g", "x"], rows, frags, ws, [pa.int64()] * 2))
        except A.RecaptureRequired:
            # legitimate only if some live group lost every kept value
            raise Stop
        accumulate(acc, out)
        assert acc == as_counter(A.reference_aggregate(spec, ["g", "x"], bag))
        for sl in state.ordered[0].values():
            assert len(sl) <= bound

    try:
        run_history(history, apply)
    except Stop:
        pass


def test_bounded_min_signals_recapture_when_exhausted():
    spec = A.AggSpec((("g", "g"),), (A.AggCall("min", "x", "m"),), NB, bound=2)
    s = A.new_state(spec)
    s, out = A.step(spec, s, mk(["g", "x"], [(1, 5), (1, 3), (1, 9), (1, 7)], [0] * 4, [1] * 4, [pa.int64()] * 2))
    assert out.rows() == [(1, 3)]
    s, out = A.step(spec, s, mk(["g", "x"], [(1, 3)], [0], [-1], [pa.int64()] * 2))
    assert sorted(zip(out.rows(), out.weight.tolist())) == [((1, 3), -1), ((1, 5), 1)]
    with pytest.raises(A.RecaptureRequired):
        A.step(spec, s, mk(["g", "x"], [(1, 5)], [0], [-1], [pa.int64()] * 2))


def test_aggregate_rejects_deleting_absent_rows():
    spec = A.AggSpec((("g", "g"),), (A.AggCall("sum", "x", "s"),), NB)
    s = A.new_state(spec)
    with pytest.raises(InvariantError):
        A.step(spec, s, mk(["g", "x"], [(1, 5)], [0], [-1], [pa.int64()] * 2))


@settings(max_examples=60, deadline=None)
@given(history=history_st, k=st.integers(1, 4), desc=st.booleans(), bound=st.one_of(st.none(), st.integers(1, 6)))
def test_topk_equals_reference_with_ties(history, k, desc, bound):
    spec = T.TopKSpec(((0, desc),), k, ("g", "x"), NB, bound)
    state = T.TopKState()
    acc = Counter()

    class Stop(Exception):
        pass

    def apply(rows, frags, ws, bag):
        nonlocal state
        try:
            state, out = T.step(spec, state, mk(["g", "x"], rows, frags, ws, [pa.int64()] * 2))
        except A.RecaptureRequired:
            assert bound is not None
            raise Stop
        accumulate(acc, out)
        assert acc == as_counter(T.reference_topk(spec, ["g", "x"], bag))

    try:
        run_history(history, apply)
    except Stop:
        pass


@settings(max_examples=60, deadline=None)
@given(lh=history_st, rh=history_st, bloom=st.booleans(), seed=st.integers(0, 3))
def test_join_equals_reference(lh, rh, bloom, seed):
    spec = J.JoinSpec(("g",), ("h",), ("g", "x"), ("h", "y"), NB, bloom)
    state = J.new_state(spec)
    state.left.min_tail = state.right.min_tail = 3  # exercise compaction
    acc = Counter()
    lbag, rbag = [], []
    n = max(len(lh), len(rh))
    lh = lh + [[]] * (n - len(lh))
    rh = rh + [[]] * (n - len(rh))
    batches = {}

    def capture(side):
        def f(rows, frags, ws, bag):
            batches.setdefault(side, []).append((rows, frags, ws, bag))
        return f

    run_history([b for b in lh if b] or [[]], capture("l")) if any(lh) else None
    run_history([b for b in rh if b] or [[]], capture("r")) if any(rh) else None
    L, R = batches.get("l", []), batches.get("r", [])
    for i in range(max(len(L), len(R))):
        dl = dr = None
        if i < len(L):
            rows, frags, ws, lbag = L[i]
            dl = mk(["g", "x"], [(r[0] if (r[0] + seed) % 4 else None, r[1]) for r in rows], frags, ws, [pa.int64()] * 2)
            lbag = [((r[0] if (r[0] + seed) % 4 else None, r[1]), s, m) for r, s, m in lbag]
        if i < len(R):
            rows, frags, ws, rbag = R[i]
            dr = mk(["h", "y"], rows, [f for f in frags], ws, [pa.int64()] * 2)
        state, out = J.step(spec, state, dl, dr)
        accumulate(acc, consolidate(out, NB))
        assert acc == as_counter(J.reference_join(spec, ["g", "x"], lbag, ["h", "y"], rbag))


def test_join_bloom_drops_rows_without_partner_and_survives_deletes():
    spec = J.JoinSpec(("g",), ("h",), ("g",), ("h",), NB, True)
    s = J.new_state(spec)
    s, _ = J.step(spec, s, mk(["g"], [(1,), (2,)], [0, 0], [1, 1], [pa.int64()]),
                  mk(["h"], [(1,), (3,)], [1, 1], [1, 1], [pa.int64()]))
    s, out = J.step(spec, s, mk(["g"], [(7,), (8,), (9,)], [0, 0, 0], [1, 1, 1], [pa.int64()]), None)
    assert out is None and s.bloom_dropped >= 2  # at most one false positive among 3
    # delete h=1 from the right: the left's new key-1 rows find no partner any more
    s, _ = J.step(spec, s, None, mk(["h"], [(1,)], [1], [-1], [pa.int64()]))
    s, out = J.step(spec, s, mk(["g"], [(1,)], [0], [1], [pa.int64()]), None)
    assert out is None or consolidate(out, NB) is None
    # and a key new on both sides in the same batch still joins (ΔL ⋈ ΔR is unfiltered)
    s, out = J.step(spec, s, mk(["g"], [(42,)], [0], [1], [pa.int64()]), mk(["h"], [(42,)], [2], [1], [pa.int64()]))
    assert out.rows() == [(42, 42)] and sketch_keys(out.sketch) == [(0, 2)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 3)), max_size=60), st.integers(0, 2 ** 32))
def test_counting_bloom_has_no_false_negatives_under_deletes(ops, salt):
    hashes = np.asarray([(k * 2654435761 + salt) % 2 ** 64 for k, _ in ops], dtype=np.uint64)
    bf = CountingBloom(capacity=16)
    live = Counter()
    for (k, c), h in zip(ops, hashes):
        bf.update(np.asarray([h], np.uint64), np.asarray([c], np.int64))
        live[int(h)] += c
    # delete roughly half of each key's copies
    for h, c in list(live.items()):
        rm = c // 2
        if rm:
            bf.update(np.asarray([h], np.uint64), np.asarray([-rm], np.int64))
            live[h] -= rm
    present = np.asarray([h for h, c in live.items() if c > 0], dtype=np.uint64)
    assert bf.might_contain(present).all()


def test_memory_index_compaction_cancels_deletes():
    idx = MemoryIndex(NB, ("g",))
    idx.min_tail = 2
    from operators.sketch.joinstore import key_hash
    d = mk(["g"], [(1,), (2,), (3,)], [0, 1, 2], [1, 1, 1], [pa.int64()])
    idx.add(d, key_hash(d.table, ["g"]))
    for _ in range(3):
        x = mk(["g"], [(2,)], [1], [-1], [pa.int64()])
        idx.add(x, key_hash(x.table, ["g"]))
        x = mk(["g"], [(2,)], [1], [1], [pa.int64()])
        idx.add(x, key_hash(x.table, ["g"]))
    x = mk(["g"], [(1,)], [0], [-1], [pa.int64()])
    idx.add(x, key_hash(x.table, ["g"]))
    rows = idx.rows()
    assert sorted(zip(rows.rows(), rows.weight.tolist())) == [((2,), 1), ((3,), 1)]
    assert idx.rows_held() <= 5  # cancelled pairs were compacted away


def test_consolidate_cancels_insert_and_delete_of_same_tuple():
    d = mk(["a"], [(1,), (1,), (1,), (2,)], [0, 0, 1, 0], [1, -1, 1, 1], [pa.int64()])
    c = consolidate(d, NB)
    assert sorted(zip(c.rows(), sketch_keys(c.sketch), c.weight.tolist())) == [((1,), (1,), 1), ((2,), (0,), 1)]
    assert consolidate(mk(["a"], [(1,), (1,)], [0, 0], [1, -1], [pa.int64()]), NB) is None


def test_bloom_is_rebuilt_when_keys_outgrow_it():
    spec = J.JoinSpec(("g",), ("h",), ("g",), ("h",), NB, True)
    s = J.new_state(spec)
    s, _ = J.step(spec, s, mk(["g"], [(0,)], [0], [1], [pa.int64()]), mk(["h"], [(0,)], [0], [1], [pa.int64()]))
    cap0 = s.right_bloom.capacity
    for b in range(3):  # 3 x 1500 new right keys: more than twice the initial capacity
        keys = [(100000 + b * 1500 + i,) for i in range(1500)]
        s, _ = J.step(spec, s, None, mk(["h"], keys, [0] * len(keys), [1] * len(keys), [pa.int64()]))
    assert s.right_bloom.capacity > cap0
    probe = [(100000 + i,) for i in range(0, 4500, 7)]
    s, out = J.step(spec, s, mk(["g"], probe, [1] * len(probe), [1] * len(probe), [pa.int64()]), None)
    assert len(consolidate(out, NB)) == len(probe)  # every key found its partner


def test_decimal_to_float_is_correctly_rounded():
    import decimal

    from operators.sketch.partition import decimal_to_float

    vals = [decimal.Decimal(f"{i / 100:.2f}") for i in range(-3000, 3000)] + [None]
    for t in (pa.decimal128(15, 2), pa.decimal128(38, 2)):
        arr = pa.array(vals, t).slice(5)
        assert decimal_to_float(arr).to_pylist() == [None if v is None else float(v) for v in vals[5:]]


def test_bounded_min_keeps_ties_at_the_minimum():
    """More rows tie at the minimum than the bound: the minimum must stay (distinct values are bounded)."""
    spec = A.AggSpec((("g", "g"),), (A.AggCall("min", "x", "m"),), NB, bound=1)
    s = A.new_state(spec)
    s, out = A.step(spec, s, mk(["g", "x"], [(1, -1), (1, -1), (1, 4)], [0, 0, 1], [1, 1, 1], [pa.int64()] * 2))
    assert out.rows() == [(1, -1)]
    s, out = A.step(spec, s, mk(["g", "x"], [(1, -1)], [0], [1], [pa.int64()] * 2))  # a third tie
    assert out is None  # value and sketch unchanged
    s, out = A.step(spec, s, mk(["g", "x"], [(1, -1), (1, -1)], [0, 0], [-1, -1], [pa.int64()] * 2))
    assert out is None  # one copy of -1 is left
    with pytest.raises(A.RecaptureRequired):  # the last tracked value goes; 4 was dropped
        A.step(spec, s, mk(["g", "x"], [(1, -1)], [0], [-1], [pa.int64()] * 2))


def test_bounded_topk_never_evicts_below_k():
    spec = T.TopKSpec(((0, False),), 2, ("g", "x"), NB, bound=2)
    s = T.TopKState()
    s, out = T.step(spec, s, mk(["g", "x"], [(1, 0), (2, 0), (3, 0)], [0, 0, 0], [1, 5, 1], [pa.int64()] * 2))
    assert sorted(zip(out.rows(), out.weight.tolist())) == [((1, 0), 1), ((2, 0), 1)]
    s, out = T.step(spec, s, mk(["g", "x"], [(1, 0)], [0], [-1], [pa.int64()] * 2))
    assert sorted(zip(out.rows(), out.weight.tolist())) == [((1, 0), -1), ((2, 0), 1)]
