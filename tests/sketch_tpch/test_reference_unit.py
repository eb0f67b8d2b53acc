"""Unit tests of the oracle (tests.oracles.sketch_reference) on hand-made data with hand-computed sketches."""

from __future__ import annotations

import datetime as dt
import random
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from core.errors import UnsupportedSqlError
from tests.oracles.sketch_reference import fragment_ids, fragment_of, reference_result, reference_sketch
from bench.harness.datasets import apply_delta, random_delta, with_weight

from .compare import diff_tables


def part(attribute, boundaries):
    return SimpleNamespace(attribute=attribute, boundaries=list(boundaries))


# -- fragments ------------------------------------------------------------------------------


def test_fragment_rule_open_ends_and_null():
    b = [10, 20, 30, 40]  # 3 fragments: [10,20) [20,30) [30,40); <10 → 0, ≥40 → 2, NULL → 3
    values = [-5, 9, 10, 19, 20, 29, 30, 39, 40, 1000, None]
    expected = [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    assert fragment_ids(pa.array(values), b).to_pylist() == expected
    assert [fragment_of(v, b) for v in values] == expected


@pytest.mark.parametrize(
    "values, bounds",
    [
        ([random.Random(1).randint(-50, 150) for _ in range(300)] + [None], [0, 7, 33, 34, 90, 100]),
        ([random.Random(2).uniform(-1, 2) for _ in range(300)], [0.0, 0.25, 0.5, 1.0]),
        ([random.Random(3).choice("abcdefghijklmnopqrstuvwxyz") * 2 for _ in range(200)] + [None], ["c", "h", "hh", "q"]),
        ([dt.date(2020, 1, 1) + dt.timedelta(days=random.Random(4).randint(0, 900)) for _ in range(200)], [dt.date(2020, 6, 1), dt.date(2021, 1, 1), dt.date(2021, 3, 15)]),
    ],
)
def test_fragment_ids_vectorised_equals_scalar_rule(values, bounds):
    got = fragment_ids(pa.array(values), bounds).to_pylist()
    assert got == [fragment_of(v, bounds) for v in values]
    n = len(bounds) - 1
    for v, f in zip(values, got):  # and the rule itself, spelled out
        if v is None:
            assert f == n
        elif v < bounds[0]:
            assert f == 0
        elif v >= bounds[-1]:
            assert f == n - 1
        else:
            assert bounds[f] <= v < bounds[f + 1]


# -- the IMP paper's running example (Fig. 1, Ex. 1.1, 1.2, 4.2) ---------------------------

# r1=[1,600] r2=[601,1000] r3=[1001,1500] r4=[1501,10000] as half-open [b_i, b_{i+1}).
# s_6 has numSold 4: the figure's text extraction shows 5, but the paper's totals (HP 4895 < 5000
# before, 6194 after inserting s_8) only add up with 4.
SALES = pa.table(
    {
        "id": [1, 2, 3, 4, 5, 6, 7],
        "brand": ["Lenovo", "Lenovo", "Apple", "Apple", "Dell", "HP", "HP"],
        "productname": ["ThinkPad T14s Gen 2", "ThinkPad T14s Gen 2", "MacBook Air 13-inch", "MacBook Pro 14-inch", "Dell XPS 13 Laptop", "HP ProBook 450 G9", "HP ProBook 550 G9"],
        "price": [349, 449, 1199, 3875, 1345, 999, 899],
        "numsold": [1, 2, 1, 1, 1, 4, 1],
    }
)
S8 = pa.table({"id": [8], "brand": ["HP"], "productname": ["HP ProBook 650 G10"], "price": [1299], "numsold": [1]})
F_PRICE = {"sales": part("price", [1, 601, 1001, 1501, 10001])}
Q_TOP = "SELECT brand, SUM(price * numSold) AS rev FROM sales GROUP BY brand HAVING SUM(price * numSold) > 5000"


def test_paper_fig1_sketch_and_result():
    assert reference_sketch(Q_TOP, {"sales": SALES}, F_PRICE) == {"sales": [2, 3]}  # {r3, r4}
    assert reference_result(Q_TOP, {"sales": SALES}).to_pylist() == [{"brand": "Apple", "rev": 5074}]


def test_paper_ex12_insert_s8_makes_hp_qualify():
    sales = pa.concat_tables([SALES, S8])
    assert reference_sketch(Q_TOP, {"sales": sales}, F_PRICE) == {"sales": [1, 2, 3]}  # {r2, r3, r4}
    res = sorted((r["brand"], r["rev"]) for r in reference_result(Q_TOP, {"sales": sales}).to_pylist())
    assert res == [("Apple", 5074), ("HP", 6194)]


def test_paper_fig1_sketch_instance_is_sufficient():
    """Running Q_Top on the tuples of the sketch's fragments gives the same result (Def. 4.2)."""
    ids = fragment_ids(SALES.column("price"), F_PRICE["sales"].boundaries).to_numpy()
    sketch = reference_sketch(Q_TOP, {"sales": SALES}, F_PRICE)["sales"]
    instance = SALES.filter(pa.array(np.isin(ids, sketch)))
    assert sorted(instance.column("id").to_pylist()) == [3, 4, 5]  # s3, s4, s5 as in Sec. 4.1
    assert reference_result(Q_TOP, {"sales": instance}).to_pylist() == reference_result(Q_TOP, {"sales": SALES}).to_pylist()


# -- operators on a tiny table --------------------------------------------------------------

# fragments on v with boundaries [0, 10, 20, 30]: 0 ← v<10, 1 ← 10≤v<20, 2 ← v≥20, 3 ← NULL
R = pa.table(
    {
        "id": [1, 2, 3, 4, 5, 6, 7, 8],
        "g": ["a", "a", "b", "b", "c", "c", "d", None],
        "v": [1, 12, 25, 3, 14, 15, None, 22],
        "w": [5, 5, 1, 1, 9, 2, 7, 0],
    }
)
S = pa.table({"g": ["a", "b", "b", "e"], "x": [100, 200, 201, 500]})
FR = {"r": part("v", [0, 10, 20, 30])}
T = {"r": R, "s": S}


def sk(sql, tables=T, parts=FR):
    return reference_sketch(sql, tables, parts)


def test_selection_projection():
    assert sk("select id from r where w >= 5") == {"r": [0, 1, 3]}  # ids 1,2,5,7 → v 1,12,14,NULL
    assert sk("select id from r where w > 100") == {"r": []}


def test_join_keeps_only_matched_partitioned_rows():
    # r rows with g in (a, b) join s; 'b' matches twice (still fragments 2 and 0)
    assert sk("select r.id, s.x from r join s on r.g = s.g") == {"r": [0, 1, 2]}
    # only s rows with x > 200 → g='b' → r ids 3, 4 → v 25, 3
    assert sk("select r.id from r join (select g, x from s where x > 200) t on r.g = t.g") == {"r": [0, 2]}


def test_comma_join_and_parenthesised_join_group():
    assert sk("select r.id from r, s where r.g = s.g and s.x = 100") == {"r": [0, 1]}
    assert sk("select id from ((select id, g from r) rr join (select g as sg from s) ss on (g = sg)) j where id > 1") == {"r": [0, 1, 2]}


def test_aggregation_having_all_members_of_surviving_groups():
    # sums of w: a 10, b 2, c 11, d 7, NULL 0 → groups a, c survive → v 1,12,14,15 → 0,1
    assert sk("select g, sum(w) from r group by g having sum(w) > 8") == {"r": [0, 1]}
    # count(v) ignores NULL v but the tuple is still in its group's lineage
    assert sk("select g, count(v) from r where g = 'd' group by g") == {"r": [3]}


def test_min_max_lineage_is_the_whole_group():
    # lineage semantics (not PBDS's argmin rule): all members of a surviving group
    # groups c (14, 15) and the NULL group (22) qualify
    assert sk("select g, min(v) from r group by g having min(v) > 10") == {"r": [1, 2]}
    assert sk("select g, max(v) as m from r where g in ('a','b') group by g") == {"r": [0, 1, 2]}


def test_aggregate_without_group_by():
    assert sk("select sum(w) from r where v >= 20") == {"r": [2]}
    assert sk("select count(*) from r where v > 1000") == {"r": []}  # one result row, empty lineage
    assert sk("select count(*) from r having count(*) > 100") == {"r": []}


def test_topk_ties_broken_by_output_columns():
    # w desc: 9(c,5) 7(d,7) 5(a,1) 5(a,2) 2 1 1 0; top 3 ties at w=5 between ids 1 and 2 → the
    # ORDER BY keys tie, so all output columns ascending decide: (id=1,w=5) before (id=2,w=5)
    assert sk("select id, w from r order by w desc limit 3") == {"r": [0, 1, 3]}  # v 14, NULL, 1
    assert sk("select id, w from r order by w desc limit 3 offset 1") == {"r": [0, 1, 3]}  # ids 7,1,2
    assert sk("select id, w from r order by w desc limit 2 offset 2") == {"r": [0, 1]}  # ids 1,2
    # top-k over groups: sum(w) a 10, c 11, d 7, b 2, NULL 0 → top 2 = c, a
    assert sk("select g, sum(w) s from r group by g order by s desc limit 2") == {"r": [0, 1]}
    # ties among groups: count(*) a 2, b 2, c 2, d 1, NULL 1 → ties broken by g asc → a, b
    assert sk("select g, count(*) c from r group by g order by c desc limit 2") == {"r": [0, 1, 2]}


def test_distinct_unions_duplicates():
    assert sk("select distinct g from r where w = 5") == {"r": [0, 1]}  # both 'a' rows
    assert sk("select distinct w from r where w = 1") == {"r": [0, 2]}


def test_union_all_and_union_with_two_partitioned_tables():
    parts = {"r": FR["r"], "s": part("x", [0, 150, 300])}
    q = "select g from r where w = 9 union all select g from s where x > 400"
    assert sk(q, parts=parts) == {"r": [1], "s": [1]}
    q = "select g from r where w = 9 union select g from s where x < 150"
    assert sk(q, parts=parts) == {"r": [1], "s": [0]}


def test_self_join_both_accesses_count():
    q = "select a.id, b.id from r a join r b on a.g = b.g and a.id < b.id where a.g = 'b'"
    assert sk(q) == {"r": [0, 2]}


def test_nested_aggregation_and_topk_subquery():
    q = "select count(*) from (select g from r group by g having sum(w) > 8) x"
    assert sk(q) == {"r": [0, 1]}
    q = "select sum(w) from (select id, w, v from r order by v limit 2) x"  # v asc: 1, 3 → frag 0
    assert sk(q) == {"r": [0]}


def test_unpartitioned_table_and_unreferenced_partition():
    parts = {"r": FR["r"], "s": part("x", [0, 150, 300])}
    assert sk("select g, sum(x) from s group by g", parts=parts) == {"r": [], "s": [0, 1]}


@pytest.mark.parametrize(
    "sql",
    [
        "select id from r where g in (select g from s)",
        "select id, sum(w) over (partition by g) from r",
        "with q as (select * from r) select * from q",
        "select g from r intersect select g from s",
    ],
)
def test_unsupported_sql_raises(sql):
    with pytest.raises(UnsupportedSqlError):
        sk(sql)


# -- deltas helper --------------------------------------------------------------------------


def test_random_delta_and_apply_delta_agree():
    rng = np.random.default_rng(7)
    for kind in ("insert", "delete", "mix"):
        delta, after = random_delta(R, 4, kind, rng)
        assert delta.num_rows == 4
        w = delta.column("__weight").to_pylist()
        assert w.count(-1) == {"insert": 0, "delete": 4, "mix": 2}[kind]
        again = apply_delta(R, delta)
        assert diff_tables(again, after, ordered=False) is None


def test_apply_delta_rejects_missing_row():
    bad = with_weight(pa.table({"id": [99], "g": ["z"], "v": [1], "w": [1]}), -1)
    with pytest.raises(ValueError):
        apply_delta(R, bad)


def test_topk_identical_rows_ordered_by_their_fragment_ids():
    # two output rows (g=1) tie on every column; the engine's order puts the one whose sorted
    # fragment ids are smaller first (operators/sketch/topk.py), so limit 1 keeps fragment 0
    t = pa.table({"g": [1, 1, 2], "v": [25, 3, 1]})
    parts = {"t": part("v", [0, 10, 20, 30])}
    assert reference_sketch("select g from t order by g limit 1", {"t": t}, parts) == {"t": [0]}
    assert reference_sketch("select g from t order by g desc limit 2", {"t": t}, parts) == {"t": [0]}
    assert reference_sketch("select g from t order by g limit 2", {"t": t}, parts) == {"t": [0, 2]}


def test_left_join_lineage_keeps_unmatched_left_rows_only_their_own():
    parts = {"r": FR["r"], "s": part("x", [0, 150, 300])}
    # every r row survives the LEFT JOIN; only s rows with g in (a, b) are matched (x 100, 200, 201)
    assert sk("select r.id, s.x from r left join s on r.g = s.g", parts=parts) == {"r": [0, 1, 2, 3], "s": [0, 1]}
    # unmatched rows only: their s side is NULL and contributes nothing
    assert sk("select r.id from r left join s on r.g = s.g where s.x is null", parts=parts) == {"r": [1, 2, 3], "s": []}
