"""NULLs in the safety check: regressions where a NULL-blind proof says "safe" and the sketch
changes the result (DuckDB as the oracle), and cases that stay safe with NULLs."""

from __future__ import annotations

import pyarrow as pa
import pytest

from operators.sketch import RangePartition
from tests.oracles.sketch_reference import reference_result
from operators.sketch_safety import check_safety, nulls_of
from tests.sketch_safety.gen import Case
from tests.sketch_safety.test_differential import _rows, _sketch_rows, run

S = pa.table({"e": [0], "f": [0]})
PART_D = RangePartition("d", [0, 3, 6])  # fragments (-inf, 3), [3, +inf), NULL


def r_table(c: list) -> pa.Table:
    """Group a=0 has a NULL c in fragment 0 and a non-NULL c in fragment 1; group a=1 one row."""
    return pa.table({"a": [0, 0, 1], "b": [0, 0, 0], "c": pa.array(c, pa.int64()), "d": [0, 5, 1]})


BLIND = [  # (query, c values): safe if NULLs are ignored, wrong over the accurate sketch
    # COUNT(c) is 0 over the sketch's part of group 0 (its only row there has c NULL), 1 in full
    ("SELECT a, count(c) AS v FROM r GROUP BY a HAVING count(c) < 1", [None, 5, None]),
    # MIN(c) is NULL over the partial group: CASE WHEN unknown takes ELSE
    ("SELECT a, min(c) AS v FROM r GROUP BY a HAVING CASE WHEN min(c) >= 2 THEN 0 ELSE 1 END = 1", [None, 5, 1]),
]


@pytest.mark.parametrize("sql,c", BLIND)
def test_null_blind_proof_is_refused(sql, c):
    case = Case(sql, {"r": r_table(c), "s": S}, "d", PART_D)
    # the sketch really changes the result: a NULL-blind "safe" would be wrong
    assert _rows(reference_result(sql, {**case.tables, "r": _sketch_rows(case)})) != _rows(
        reference_result(sql, case.tables))
    assert check_safety(sql, "r", "d", tables=case.tables, nullable={}).safe  # NULLs ignored: "safe"
    verdict = check_safety(sql, "r", "d", tables=case.tables)  # NULLs taken from the data
    assert not verdict.safe and "r.d is unsafe" in verdict.reason
    # the same query on data without NULLs keeps its proof
    assert check_safety(sql, "r", "d", tables={"r": r_table([1, 5, 1]), "s": S}).safe


def test_declared_nullable_column_without_data():
    schema = {"r": ["a", "b", "c", "d"], "s": ["e", "f"]}
    sql = BLIND[0][0]
    assert check_safety(sql, "r", "d", schema=schema).safe  # no NULLs declared: NOT NULL columns
    assert not check_safety(sql, "r", "d", schema=schema, nullable={"r": {"c"}}).safe


def test_topk_on_a_key_that_may_be_null_is_refused():
    sql = "SELECT a, min(c) AS v FROM r GROUP BY a ORDER BY v LIMIT 1"
    tables = {"r": r_table([None, 5, 1]), "s": S}
    assert check_safety(sql, "r", "d", tables=tables, nullable={}).safe
    r = check_safety(sql, "r", "d", tables=tables)
    assert not r.safe and "NULL" in r.reason


@pytest.mark.parametrize("sql,attr", [
    # whole groups: the sketch attribute is the group-by column, NULL group included
    ("SELECT d, sum(c) AS v, count(c) AS n, count(*) AS m FROM r GROUP BY d HAVING sum(c) > 2", "d"),
    ("SELECT a, avg(c) AS v FROM r GROUP BY a HAVING avg(c) > 1", "a"),
    ("SELECT a, min(c) AS v FROM r GROUP BY a HAVING CASE WHEN min(c) >= 2 THEN 0 ELSE 1 END = 1", "a"),
    # monotone: COUNT(*) counts NULL rows too, so a partial group counts no more than the whole
    ("SELECT a, count(*) AS v FROM r GROUP BY a HAVING count(*) > 1", "d"),
    # a WHERE on a nullable column keeps its rows on both sides alike
    ("SELECT a, b FROM r WHERE c > 2 OR d < 1", "d"),
])
def test_safe_with_nulls_and_equal(sql, attr):
    r = pa.table({"a": pa.array([0, 0, 1, None, 2, 2], pa.int64()), "b": [0, 1, 0, 1, 0, 1],
                  "c": pa.array([None, 5, 1, 3, None, None], pa.int64()),
                  "d": pa.array([0, 5, None, 1, 7, None], pa.int64())})
    tables = {"r": r, "s": S}
    assert nulls_of(tables)["r"] == {"a", "c", "d"}
    for bounds in ([0, 3, 6], [0, 1, 2, 5, 7], [0, 6]):
        case = Case(sql, tables, attr, RangePartition(attr, bounds))
        assert run(case), check_safety(sql, "r", attr, tables=tables).reason  # safe, and the results equal
