"""RangePartition: open-ended ends, the NULL fragment, types, equi-depth, merged predicates."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import IvmError
from operators.sketch import RangePartition


def test_fragments_are_half_open_with_open_ends_and_null():
    p = RangePartition("a", [10, 20, 30])
    assert p.n_fragments == 2 and p.null_fragment == 2
    got = p.fragment_of(pa.array([-5, 10, 19, 20, 29, 30, 1000, None])).tolist()
    assert got == [0, 0, 0, 1, 1, 1, 1, 2]
    assert p.range_of(0) == (10, 20) and p.range_of(1) == (20, 30) and p.range_of(2) == (None, None)


@pytest.mark.parametrize("bounds, values, expected", [
    ([1.5, 2.5, 3.5], [1.0, 2.5, 3.49, 9.0], [0, 1, 1, 1]),
    ([decimal.Decimal("1.00"), decimal.Decimal("2.50"), 4], pa.array([decimal.Decimal("2.49"), decimal.Decimal("2.50")], pa.decimal128(10, 2)), [0, 1]),
    ([dt.date(1994, 1, 1), dt.date(1995, 1, 1), dt.date(1996, 1, 1)], [dt.date(1993, 5, 1), dt.date(1995, 1, 1), None], [0, 1, 2]),
    ([dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2), dt.datetime(2020, 1, 3)],
     pa.array([dt.datetime(2020, 1, 1, 23), dt.datetime(2020, 1, 2)], pa.timestamp("us")), [0, 1]),
    (["AL", "FL", "MN", "OR", "WZ"], ["CA", "IL", "NY", "TX", "AK", "ZZ"], [0, 1, 2, 3, 0, 3]),
])
def test_orderable_types(bounds, values, expected):
    p = RangePartition("a", bounds)
    assert p.fragment_of(values).tolist() == expected


def test_numpy_and_chunked_inputs():
    p = RangePartition("a", [0, 100, 200])
    assert p.fragment_of(np.array([5, 150], np.int32)).tolist() == [0, 1]
    assert p.fragment_of(pa.chunked_array([[5], [150, None]])).tolist() == [0, 1, 2]


def test_bad_boundaries_rejected():
    with pytest.raises(IvmError):
        RangePartition("a", [1])
    with pytest.raises(IvmError):
        RangePartition("a", [1, 1, 2])


def test_predicate_merges_adjacent_ranges():
    p = RangePartition("x", [0, 10, 20, 30, 40])
    assert p.predicate([]) == "FALSE"
    assert p.predicate([0, 1, 2, 3]) == "x IS NOT NULL"
    assert p.predicate([1, 2]) == "x >= 10 AND x < 30"
    assert p.predicate([0, 2, 3]) == "(x < 10) OR (x >= 20)"
    assert p.predicate([1, 4]) == "(x >= 10 AND x < 20) OR (x IS NULL)"
    d = RangePartition("d", [dt.date(1994, 1, 1), dt.date(1995, 1, 1), dt.date(1996, 1, 1)])
    assert d.predicate([1]) == "d >= DATE '1995-01-01'"
    s = RangePartition("s", ["a", "o'k", "z"])
    assert s.predicate([0]) == "s < 'o''k'"


def test_grouped_predicate_guards_groups_of_ranges_by_their_span():
    p = RangePartition("x", list(range(0, 110, 10)))  # 10 value fragments, 10 = NULL
    # up to four ranges the grouped form is the flat one
    assert p.predicate([1, 3, 5, 7], grouped=True) == p.predicate([1, 3, 5, 7])
    # five ranges: groups of ceil(sqrt(5)) = 3 and 2, each behind its span
    assert p.predicate([0, 2, 4, 6, 9, 10], grouped=True) == (
        "(x < 50 AND ((x < 10) OR (x >= 20 AND x < 30) OR (x >= 40 AND x < 50))) OR "
        "(x >= 60 AND ((x >= 60 AND x < 70) OR (x >= 90))) OR (x IS NULL)")
    assert p.runs([4, 0, 2, 3, 10]) == ([(0, 0), (2, 4)], True)


def _selected(predicate: str, column: pa.Array) -> list[bool]:
    import duckdb

    con = duckdb.connect()
    con.register("t", pa.table({"x": column, "i": pa.array(range(len(column)), pa.int64())}))
    hit = {i for (i,) in con.execute(f"SELECT i FROM t WHERE {predicate}").fetchall()}
    return [i in hit for i in range(len(column))]


@settings(max_examples=120, deadline=None)
@given(bounds=st.lists(st.integers(-1000, 1000), min_size=2, max_size=80, unique=True),
       picks=st.lists(st.booleans(), min_size=81, max_size=81),
       values=st.lists(st.one_of(st.none(), st.integers(-1100, 1100)), max_size=60))
def test_flat_and_grouped_predicates_select_exactly_the_sketch(bounds, picks, values):
    """Oracle: a row passes the SQL condition (run by DuckDB) iff fragment_of puts it in the
    sketch, for both forms; boundary values themselves and NULLs are always among the rows."""
    p = RangePartition("x", sorted(bounds))
    frags = [i for i in range(p.n_fragments + 1) if picks[i]]
    col = pa.array(values + list(p.boundaries) + [None], pa.int64())
    want = np.isin(p.fragment_of(col), frags).tolist()
    assert _selected(p.predicate(frags), col) == want
    assert _selected(p.predicate(frags, grouped=True), col) == want


def test_grouped_predicate_on_dates():
    days = [dt.date(1992, 1, 1) + dt.timedelta(days=30 * i) for i in range(30)]
    p = RangePartition("x", days)
    frags = list(range(0, 29, 3)) + [29]  # 29 value fragments, 29 = NULL
    col = pa.array([dt.date(1991, 6, 1)] + [d + dt.timedelta(days=k) for d in days for k in (0, 15)] + [None])
    want = np.isin(p.fragment_of(col), frags).tolist()
    assert _selected(p.predicate(frags, grouped=True), col) == want == _selected(p.predicate(frags), col)


def test_equi_depth():
    vals = list(range(1, 1001))
    p = RangePartition.equi_depth("a", vals, 10)
    assert p.n_fragments == 10 and p.boundaries[0] == 1 and p.boundaries[-1] == 1001
    counts = np.bincount(p.fragment_of(vals), minlength=11)
    assert counts[:10].tolist() == [100] * 10
    few = RangePartition.equi_depth("a", [3, 3, 3, 7, 7, None], 10)
    assert few.boundaries == (3, 7, 8)
    one = RangePartition.equi_depth("a", ["x", "x"], 4)
    assert one.fragment_of(["x"]).tolist() == [0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=2, max_size=8, unique=True),
       st.lists(st.one_of(st.none(), st.integers(-100, 100)), max_size=40))
def test_fragment_of_matches_a_linear_walk(bounds, values):
    bounds = sorted(bounds)
    p = RangePartition("a", bounds)
    expected = []
    for v in values:
        if v is None:
            expected.append(len(bounds) - 1)
            continue
        i = 0
        while i + 1 < len(bounds) - 1 and v >= bounds[i + 1]:
            i += 1
        expected.append(i)
    assert p.fragment_of(pa.array(values, pa.int64())).tolist() == expected
