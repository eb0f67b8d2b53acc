"""SQL front end: every IMP artifact query plans; unsupported constructs are named."""

from __future__ import annotations

import pytest

from core.errors import SqlError, UnsupportedSqlError
from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch import plan as P

from .artifact_sql import CRIMES, OTHER_SCHEMAS, PBDS, SYNTHETIC, TPCH, TPCH_SCHEMAS

SCHEMAS = {**TPCH_SCHEMAS, **OTHER_SCHEMAS}
LINEITEM = {"lineitem": RangePartition("l_orderkey", [1, 6082, 11904, 6000001])}


def plan(sql, parts=None):
    return SketchMaintainer.from_sql(sql, partitions=parts or {}).prepare(SCHEMAS)


def kinds(m):
    return [type(n).__name__ for n in m.query.root.walk()]


@pytest.mark.parametrize("name", sorted(TPCH))
def test_imp_tpch_queries_build(name):
    m = plan(TPCH[name], LINEITEM)
    assert "lineitem" in m.tables
    scans = [n for n in m.query.root.walk() if isinstance(n, P.ScanNode) and n.table == "lineitem"]
    assert scans and all(n.spec.partition is not None for n in scans)


@pytest.mark.parametrize("name", sorted(CRIMES))
def test_imp_crimes_queries_build(name):
    m = plan(CRIMES[name], {"crimes": RangePartition("beat", [1, 113, 124, 2550])})
    assert "AggNode" in kinds(m)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_imp_synthetic_queries_build(name):
    plan(SYNTHETIC[name])


@pytest.mark.parametrize("name", sorted(PBDS))
def test_pbds_queries_build(name):
    plan(PBDS[name])


def test_output_names_follow_the_select_list():
    m = plan(TPCH["q1"])
    assert m.query.names[:3] == ["l_returnflag", "l_linestatus", "sum_qty"]
    assert plan(TPCH["q3"]).query.limit == 10
    assert plan(PBDS["q18"]).query.names[-1].lower().startswith("sum")


def test_selection_is_pushed_onto_the_scan_and_equalities_become_keys():
    m = plan("select l_orderkey, o_orderdate from lineitem, orders where l_orderkey = o_orderkey and l_quantity < 5 and o_orderpriority = '1-URGENT'")
    scans = {n.table: n for n in m.query.root.walk() if isinstance(n, P.ScanNode)}
    assert scans["lineitem"].pushed is not None and scans["orders"].pushed is not None
    joins = [n for n in m.query.root.walk() if isinstance(n, P.JoinNode)]
    assert len(joins[0].lkeys) == 1
    assert not any(isinstance(n, P.FilterNode) for n in m.query.root.walk())
    # pruning: only the needed lineitem columns are read
    assert sorted(c for c, _ in scans["lineitem"].cols) == ["l_orderkey", "l_quantity"]


def test_having_on_group_column_is_pushed_below_the_aggregate():
    m = plan("select l_orderkey, sum(l_quantity) as q from lineitem group by l_orderkey having l_orderkey > 5 and sum(l_quantity) > 3")
    scans = [n for n in m.query.root.walk() if isinstance(n, P.ScanNode)]
    assert scans[0].pushed is not None
    assert sum(isinstance(n, P.FilterNode) for n in m.query.root.walk()) == 1


@pytest.mark.parametrize("sql, word", [
    ("select * from lineitem left join orders on l_orderkey = o_orderkey", "outer join"),
    ("select * from lineitem full outer join orders on l_orderkey = o_orderkey", "outer join"),
    ("select * from orders where exists (select 1 from lineitem where l_orderkey = o_orderkey)", "subquer"),
    ("select * from orders where o_orderkey in (select l_orderkey from lineitem)", "subquer"),
    ("select o_orderkey, (select max(l_quantity) from lineitem where l_orderkey = o_orderkey) from orders", "subquer"),
    ("select o_orderkey, rank() over (order by o_totalprice) from orders", "window"),
    ("select o_orderkey from orders intersect select l_orderkey from lineitem", "INTERSECT"),
    ("select o_orderkey from orders except select l_orderkey from lineitem", "EXCEPT"),
    ("select o_orderkey from orders order by o_orderkey limit 5 offset 2", "OFFSET"),
    ("select count(distinct o_custkey) from orders", "DISTINCT"),
])
def test_unsupported_constructs_are_named(sql, word):
    with pytest.raises(UnsupportedSqlError) as ei:
        plan(sql)
    assert word.lower() in str(ei.value).lower()


def test_sql_errors():
    with pytest.raises(SqlError):
        SketchMaintainer.from_sql("select from where")
    with pytest.raises(SqlError):
        plan("select nope from lineitem")
    with pytest.raises(SqlError):
        plan("select l_orderkey, sum(l_quantity) from lineitem group by l_partkey")
    with pytest.raises(SqlError):
        plan("select n_name from nation n1, nation n2")  # ambiguous


def test_date_interval_literals_fold():
    import datetime as dt

    import pyarrow as pa

    m = SketchMaintainer.from_sql("select a from t where d >= date '1994-01-31' + interval '1' month "
                                  "and d < date '1994-01-01' + interval '1' year and d <> date '1994-03-01' - interval '2 days'")
    m.initialize({"t": pa.table({"a": [1, 2, 3, 4], "d": [dt.date(1994, 2, 27), dt.date(1994, 2, 28),
                                                          dt.date(1995, 1, 1), dt.date(1994, 2, 28)]})})
    assert sorted(r["a"] for r in m.result().to_pylist()) == [2, 4]
    with pytest.raises(UnsupportedSqlError):
        plan("select l_orderkey from lineitem where l_shipdate > l_commitdate + interval '1' day")
