"""SketchMaintainer API edges: typed partitions, bounded state, errors, result ordering."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from core.errors import InvariantError, IvmError, StateError
from operators.sketch import RangePartition, RecaptureRequired, SketchDelta, SketchMaintainer
from operators.sketch.memory_side import MemoryIndex


def orders():
    return pa.table({
        "id": pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        "cust": ["ann", "bob", "ann", "cid", "bob", "dan"],
        "price": pa.array([decimal.Decimal(x) for x in ("10.50", "3.25", "7.00", "99.99", "0.75", "12.00")], pa.decimal128(10, 2)),
        "ts": pa.array([dt.datetime(2024, 1, d, 12) for d in (1, 2, 3, 4, 5, 6)], pa.timestamp("us")),
        "day": pa.array([dt.date(2024, 1, d) for d in (1, 2, 3, 4, 5, 6)], pa.date32()),
    })


def with_weight(t, w):
    return t.append_column("__weight", pa.array(w, pa.int64()))


@pytest.mark.parametrize("part", [
    RangePartition("cust", ["a", "b", "c", "d"]),
    RangePartition("price", [0, 5, 10.5, 50]),
    RangePartition("ts", [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 3), dt.datetime(2024, 1, 5)]),
    RangePartition("day", [dt.date(2024, 1, 2), dt.date(2024, 1, 4)]),
])
def test_partitions_of_any_orderable_type(part):
    sql = "select cust, sum(price) as total, count(*) as n from orders where day >= '2024-01-02' group by cust having sum(price) > 3"
    m = SketchMaintainer.from_sql(sql, {"orders": part})
    m.initialize({"orders": orders()})
    res = sorted((r["cust"], r["total"], r["n"]) for r in m.result().to_pylist())
    assert [(c, n) for c, _, n in res] == [("ann", 1), ("bob", 2), ("cid", 1), ("dan", 1)]
    assert [t for _, t, _ in res] == pytest.approx([7.0, 4.0, 99.99, 12.0])
    # the sketch holds exactly the fragments of rows 2..6 (row 1 fails the WHERE clause)
    frags = sorted(set(part.fragment_of(orders().slice(1).column(part.attribute)).tolist()))
    assert m.sketch == {"orders": frags}
    assert part.attribute in m.predicate("orders")


def test_bounded_topk_asks_for_recapture_and_recovers():
    t = pa.table({"a": list(range(10)), "b": list(range(10))})
    m = SketchMaintainer.from_sql("select a from t order by b desc limit 2", {"t": RangePartition("a", [0, 5, 10])},
                                  topk_bound=3)
    m.initialize({"t": t})
    assert [r["a"] for r in m.result().to_pylist()] == [9, 8]
    m.apply({"t": with_weight(t.slice(9, 1), [-1])})
    assert [r["a"] for r in m.result().to_pylist()] == [8, 7]
    with pytest.raises(RecaptureRequired):
        m.apply({"t": with_weight(t.slice(7, 2), [-1, -1])})
    with pytest.raises(RecaptureRequired):  # refuses until recaptured
        m.apply({"t": with_weight(t.slice(0, 1), [-1])})
    m.initialize({"t": t.slice(0, 7)})
    assert [r["a"] for r in m.result().to_pylist()] == [6, 5] and m.sketch == {"t": [1]}


def test_bounded_minmax_through_the_maintainer():
    t = pa.table({"g": [1] * 6, "x": [5, 1, 9, 3, 7, 2]})
    m = SketchMaintainer.from_sql("select g, min(x) as mn from t group by g", {"t": RangePartition("x", [0, 4, 8])},
                                  minmax_bound=2)
    m.initialize({"t": t})
    m.apply({"t": with_weight(pa.table({"g": [1], "x": [1]}), [-1])})
    assert m.result().to_pylist() == [{"g": 1, "mn": 2}]
    assert m.sketch == {"t": [0, 1]}  # lineage: every member of the group (9 is in the open last fragment)
    with pytest.raises(RecaptureRequired):
        m.apply({"t": with_weight(pa.table({"g": [1, 1], "x": [2, 3]}), [-1, -1])})


def test_errors():
    m = SketchMaintainer.from_sql("select a from t", {"t": RangePartition("a", [0, 5])})
    with pytest.raises(StateError):
        m.apply({"t": pa.table({"a": [1], "__weight": [1]})})
    with pytest.raises(IvmError):
        m.initialize({"u": pa.table({"a": [1]})})  # table t missing
    m.initialize({"t": pa.table({"a": [1, 2]})})
    with pytest.raises(IvmError):
        m.apply({"t": pa.table({"a": [1]})})  # no __weight
    with pytest.raises(IvmError):
        SketchMaintainer.from_sql("select a from t", {"t": RangePartition("zz", [0, 5])}).initialize({"t": pa.table({"a": [1]})})
    m2 = SketchMaintainer.from_sql("select a, count(*) as n from t group by a", {"t": RangePartition("a", [0, 5])})
    m2.initialize({"t": pa.table({"a": [1, 2]})})
    with pytest.raises(InvariantError):
        m2.apply({"t": pa.table({"a": [3], "__weight": [-1]})})  # deleting a row that is not there


def test_empty_batch_and_unrelated_tables():
    m = SketchMaintainer.from_sql("select a from t where a > 1", {"t": RangePartition("a", [0, 5, 6])})
    d = m.initialize({"t": pa.table({"a": [1, 2]})})
    assert d == SketchDelta({"t": {0}}, {"t": set()})
    d = m.apply({"t": pa.table({"a": pa.array([], pa.int64()), "__weight": pa.array([], pa.int64())}),
                 "other": pa.table({"x": [1], "__weight": [1]})})
    assert d.is_empty() and m.sketch == {"t": [0]}
    d = m.apply({"t": pa.table({"a": [0], "__weight": [1]})})  # filtered out by the WHERE clause
    assert d.is_empty()
    d = m.apply({"t": pa.table({"a": [7, None], "__weight": [1, 1]})})
    assert d.added == {"t": {1}} and m.sketch == {"t": [0, 1]}  # 7 lands in the open last fragment


def test_null_partition_values_use_the_null_fragment():
    m = SketchMaintainer.from_sql("select b, count(*) as n from t group by b", {"t": RangePartition("a", [0, 5, 10])})
    m.initialize({"t": pa.table({"a": pa.array([1, None], pa.int64()), "b": [1, 2]})})
    assert m.sketch == {"t": [0, 2]}
    assert m.predicate("t") == "(a < 5) OR (a IS NULL)"


def test_order_by_hidden_columns_and_positions():
    r = pa.table({"a": [1, 2, 3, 4, 1], "b": [5, 9, 1, 7, 3]})
    p = {"r": RangePartition("b", [0, 4, 8])}
    cases = {
        "select a from r order by b desc limit 2": [{"a": 2}, {"a": 4}],
        "select a from r group by a order by sum(b) desc limit 2": [{"a": 2}, {"a": 1}],
        "select a, sum(b) as s from r group by a order by 2": [{"a": 3, "s": 1}, {"a": 4, "s": 7}, {"a": 1, "s": 8}, {"a": 2, "s": 9}],
        "select a as x from r order by x desc": [{"x": 4}, {"x": 3}, {"x": 2}, {"x": 1}, {"x": 1}],
    }
    for sql, want in cases.items():
        m = SketchMaintainer.from_sql(sql, p)
        m.initialize({"r": r})
        assert m.result().to_pylist() == want, sql
    m = SketchMaintainer.from_sql("select a from r order by b desc limit 2", p)
    m.initialize({"r": r})
    assert m.sketch == {"r": [1]}  # only the two top rows (b = 9, 7; both in the open last fragment)


class CountingStore(MemoryIndex):
    """A join-side store that counts probes (module level, so snapshots can pickle it)."""

    probes = 0

    def probe(self, hashes, keys):
        CountingStore.probes += 1
        return super().probe(hashes, keys)


def test_join_inputs_can_live_in_another_store():
    made = []

    def factory(nbits, keys, side, tables, node=None, ctx=None):
        made.append((side, tables))
        return CountingStore(nbits, keys)

    sql = "select a, w from r join s on a = k"
    m = SketchMaintainer.from_sql(sql, {"r": RangePartition("a", [0, 2, 4])}, store_factory=factory)
    m.initialize({"r": pa.table({"a": [1, 3]}), "s": pa.table({"k": [1, 3], "w": ["x", "y"]})})
    assert sorted(made) == [("left", ("r",)), ("right", ("s",))]
    m.apply({"s": pa.table({"k": [3], "w": ["z"], "__weight": [1]})})
    assert CountingStore.probes >= 1
    assert sorted((r["a"], r["w"]) for r in m.result().to_pylist()) == [(1, "x"), (3, "y"), (3, "z")]
    m2 = SketchMaintainer.restore(m.snapshot(), store_factory=factory)
    assert m2.sketch == m.sketch == {"r": [0, 1]}
