"""PBDS safety oracles: the cities example (Ex. 4 / Ex. 7) and per-operator rules."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from core.errors import SqlError, UnsafeSketchError, UnsupportedSqlError
from operators.sketch import RangePartition
from tests.oracles.sketch_reference import reference_result, reference_sketch
from operators.sketch_safety import check_safety, require_safe, safe_attributes

Q2 = "SELECT state, avg(popden) AS avgden FROM cities GROUP BY state ORDER BY avgden DESC LIMIT 1"
Q_TOTAL = "SELECT state, sum(popden) AS sd FROM cities GROUP BY state ORDER BY sd DESC LIMIT 1"
F_POPDEN = RangePartition("popden", [1000, 4001, 9001])  # g1 = [1000, 4000], g2 = [4001, 9000]
F_STATE = RangePartition("state", ["AL", "FL", "MN", "OR", "WZ"])  # f1..f4 as in the paper


def _over_sketch(sql, tables, table, part):
    ids = reference_sketch(sql, tables, {table: part})[table]
    frag = pa.array(part.fragment_of(tables[table].column(part.attribute)))
    sub = tables[table].filter(pc.is_in(frag, pa.array(ids, type=frag.type)))
    return ids, reference_result(sql, {**tables, table: sub}).to_pylist()


def test_q2_avg_popden_is_unsafe_and_really_is(cities):
    r = check_safety(Q2, "cities", "popden", tables=cities)
    assert not r.safe and "ORDER BY" in r.reason
    # the refusal is justified on the data: the accurate popden sketch {g2} gives (NY, 7000)
    assert reference_result(Q2, cities).to_pylist() == [{"state": "CA", "avgden": 5500.0}]
    ids, over = _over_sketch(Q2, cities, "cities", F_POPDEN)
    assert ids == [1] and over == [{"state": "NY", "avgden": 7000.0}]


def test_q2_state_is_safe(cities):
    assert check_safety(Q2, "cities", "state", tables=cities).safe
    ids, over = _over_sketch(Q2, cities, "cities", F_STATE)
    assert ids == [0] and over == [{"state": "CA", "avgden": 5500.0}]
    # merging adjacent fragments: {f1, f2} is one range (fragment 0 is open below)
    assert F_STATE.predicate([0, 1]) == "state < 'MN'"


def test_q_total_sum_popden_is_safe(cities):
    r = check_safety(Q_TOTAL, "cities", "popden", tables=cities)
    assert r.safe, r.reason
    ids, over = _over_sketch(Q_TOTAL, cities, "cities", F_POPDEN)
    assert ids == [1] and over == [{"state": "CA", "sd": 11000}]


def test_sum_needs_the_sign_from_statistics():
    # popden may be negative: partial sums could grow, so SUM is no longer safe
    neg = {"cities": pa.table({"popden": [-5, 6000], "city": ["a", "b"], "state": ["CA", "NY"]})}
    assert not check_safety(Q_TOTAL, "cities", "popden", tables=neg).safe
    # and without statistics nothing is known about the sign either
    assert not check_safety(Q_TOTAL, "cities", "popden", schema={"cities": ["popden", "city", "state"]}).safe
    # a WHERE condition can supply the sign instead
    q = "SELECT state, sum(popden) AS sd FROM cities WHERE popden > 0 GROUP BY state ORDER BY sd DESC LIMIT 1"
    assert check_safety(q, "cities", "popden", schema={"cities": ["popden", "city", "state"]}).safe


def test_require_safe_raises_with_reason(cities):
    with pytest.raises(UnsafeSketchError) as e:
        require_safe(Q2, "cities", "popden", tables=cities)
    assert "popden" in str(e.value) and "IVM300" in str(e.value)
    assert require_safe(Q2, "cities", "state", tables=cities).safe


@pytest.mark.parametrize(
    "sql,safe",
    [
        # HAVING: monotone conditions over a partial group are safe, anti-monotone ones are not
        ("SELECT state, count(*) AS c FROM cities GROUP BY state HAVING count(*) > 1", True),
        ("SELECT state, count(*) AS c FROM cities GROUP BY state HAVING count(*) < 2", False),
        ("SELECT state, sum(popden) AS s FROM cities GROUP BY state HAVING sum(popden) >= 8000", True),
        ("SELECT state, sum(popden) AS s FROM cities GROUP BY state HAVING sum(popden) <= 8000", False),
        ("SELECT state, avg(popden) AS s FROM cities GROUP BY state HAVING avg(popden) > 3000", False),
        ("SELECT state, max(popden) AS m FROM cities GROUP BY state HAVING max(popden) > 5000", True),
        ("SELECT state, min(popden) AS m FROM cities GROUP BY state HAVING min(popden) < 2500", True),
        ("SELECT state, min(popden) AS m FROM cities GROUP BY state HAVING min(popden) > 2500", False),
        # top-k ascending on a count: partial groups rank *better*, unsafe
        ("SELECT state, count(*) AS c FROM cities GROUP BY state ORDER BY c LIMIT 1", False),
        ("SELECT state, count(*) AS c FROM cities GROUP BY state ORDER BY c DESC LIMIT 1", True),
        # monotone queries: any attribute
        ("SELECT city, popden FROM cities WHERE popden > 3000", True),
        ("SELECT DISTINCT state FROM cities WHERE popden > 3000", True),
        ("SELECT state FROM cities WHERE popden > 5000 UNION SELECT state FROM cities WHERE popden < 2000", True),
        # a global aggregate without HAVING: the sketch holds every contributing tuple
        ("SELECT sum(popden) AS s FROM cities", True),
        ("SELECT count(*) AS c FROM cities HAVING count(*) < 5", False),
        # aggregate then join: partial groups change the join partners
        ("SELECT c.city FROM cities c JOIN (SELECT state, count(*) AS n FROM cities GROUP BY state) s "
         "ON c.state = s.state WHERE s.n = 2", False),
        # DISTINCT over an aggregate that may shrink
        ("SELECT DISTINCT n FROM (SELECT state, count(*) AS n FROM cities GROUP BY state) x", False),
    ],
)
def test_operator_rules_popden(cities, sql, safe):
    r = check_safety(sql, "cities", "popden", tables=cities)
    assert r.safe is safe, r.reason


def test_group_by_attribute_is_always_safe(cities):
    for sql in (
        "SELECT state, avg(popden) AS a FROM cities GROUP BY state HAVING avg(popden) < 3000",
        "SELECT state, count(*) AS c FROM cities GROUP BY state ORDER BY c LIMIT 2",
        "SELECT state, min(popden) AS m FROM cities GROUP BY state HAVING min(popden) > 2500",
    ):
        assert check_safety(sql, "cities", "state", tables=cities).safe, sql


def test_nested_aggregation_case_rules(crimes):
    # inner sums over positive values shrink on partial groups; the outer sum of them too
    q = ("SELECT year, sum(s) AS t FROM (SELECT pid, year, sum(numcrimes) AS s FROM crimes GROUP BY pid, year) x "
         "GROUP BY year HAVING sum(s) > 100")
    assert check_safety(q, "crimes", "month", tables=crimes).safe
    assert check_safety(q, "crimes", "pid", tables=crimes).safe
    q_avg = ("SELECT year, avg(s) AS t FROM (SELECT pid, year, sum(numcrimes) AS s FROM crimes GROUP BY pid, year) x "
             "GROUP BY year HAVING avg(s) > 100")
    assert not check_safety(q_avg, "crimes", "pid", tables=crimes).safe
    assert check_safety(q_avg, "crimes", "year", tables=crimes).safe


def test_safe_attributes_running_example(crimes):
    q = "SELECT sum(numcrimes) AS s, pid, month, year FROM crimes GROUP BY pid, month, year HAVING sum(numcrimes) >= 100"
    assert safe_attributes(q, tables=crimes) == {"crimes": ["pid", "month", "year", "numcrimes"]}
    q_lt = q.replace(">= 100", "< 100")
    assert safe_attributes(q_lt, tables=crimes) == {"crimes": ["pid", "month", "year"]}


def test_errors(cities):
    with pytest.raises(SqlError):
        check_safety("SELECT nope FROM cities", "cities", "popden", tables=cities)
    with pytest.raises(SqlError):
        check_safety("SELEC x", "cities", "popden", tables=cities)
    with pytest.raises(UnsupportedSqlError):
        check_safety("SELECT c.state FROM cities c LEFT JOIN cities d ON c.state = d.state", "cities", "popden",
                     tables=cities)
    with pytest.raises(SqlError):
        check_safety(Q2, "cities", "population", tables=cities)
