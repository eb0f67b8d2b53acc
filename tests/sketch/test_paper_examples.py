"""The IMP paper's worked examples (Fig. 1, Ex. 1.1, 1.2, 4.2, 5.1, Fig. 4) and PBDS's cities example.

Fragment ids are 0-based: IMP's r1..r4 are fragments 0..3.  IMP writes closed ranges
r1=[1,600], r2=[601,1000], r3=[1001,1500], r4=[1501,10000]; over integer prices these are
the half-open ranges of boundaries 1, 601, 1001, 1501, 10001.
Fig. 1 as extracted reads numSold 5 for s6, but the paper's totals (HP below 5000 before
s8, 6194 after) need numSold 4 (4*999 + 899 = 4895; + 1299 = 6194); we use 4.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch import join as J
from operators.sketch import merge as M
from operators.sketch import scan as S
from operators.sketch.delta import Delta, bits_from_ids, consolidate, sketch_keys

Q_TOP = "SELECT brand, SUM(price * numSold) AS rev FROM sales GROUP BY brand HAVING SUM(price * numSold) > 5000"
R_PRICE = RangePartition("price", [1, 601, 1001, 1501, 10001])


def sales():
    return pa.table({
        "id": [1, 2, 3, 4, 5, 6, 7],
        "brand": ["Lenovo", "Lenovo", "Apple", "Apple", "Dell", "HP", "HP"],
        "productName": ["ThinkPad T14s Gen 2", "ThinkPad T14s Gen 2", "MacBook Air 13-inch",
                        "MacBook Pro 14-inch", "Dell XPS 13 Laptop", "HP ProBook 450 G9", "HP ProBook 550 G9"],
        "price": [349, 449, 1199, 3875, 1345, 999, 899],
        "numSold": [1, 2, 1, 1, 1, 4, 1],
    })


def s8(weight=1):
    return pa.table({"id": [8], "brand": ["HP"], "productName": ["HP ProBook 650 G10"], "price": [1299],
                     "numSold": [1], "__weight": [weight]})


def test_fig1_fragments_of_sales():
    # Fig. 1 shows f1 f1 f3 f4 f3 f2 f2 next to s1..s7
    assert R_PRICE.fragment_of(sales().column("price")).tolist() == [0, 0, 2, 3, 2, 1, 1]


def test_ex_1_1_capture():
    m = SketchMaintainer.from_sql(Q_TOP, {"sales": R_PRICE})
    d = m.initialize({"sales": sales()})
    assert m.result().to_pylist() == [{"brand": "Apple", "rev": 5074}]
    assert m.sketch == {"sales": [2, 3]}  # {r3, r4}
    assert d.added == {"sales": {2, 3}}
    # footnote 2: adjacent ranges merge into one condition
    assert m.predicate("sales") == "price >= 1001"


def test_ex_1_2_insert_s8_makes_hp_relevant():
    m = SketchMaintainer.from_sql(Q_TOP, {"sales": R_PRICE})
    m.initialize({"sales": sales()})
    d = m.apply({"sales": s8()})
    rows = sorted((r["brand"], r["rev"]) for r in m.result().to_pylist())
    assert rows == [("Apple", 5074), ("HP", 6194)]
    assert d.added == {"sales": {1}} and d.removed == {"sales": set()}  # r2 joins the sketch
    assert m.sketch == {"sales": [1, 2, 3]}
    # and deleting s8 again undoes it
    d = m.apply({"sales": s8(-1)})
    assert d.removed == {"sales": {1}} and m.sketch == {"sales": [2, 3]}


def test_ex_4_2_annotate_s8():
    spec = S.ScanSpec("sales", (("id", "id"), ("price", "price")), R_PRICE, 0, None, 5)
    st = S.ScanState()
    st, _ = S.step(spec, st, sales(), np.ones(7, np.int64), learn=True)
    st, d = S.step(spec, st, s8())
    assert d.weight.tolist() == [1]
    assert sketch_keys(d.sketch) == [(2,)]  # {r3}


def test_ex_5_1_merge_counters():
    # t1, t2 annotated {r2}; t3 annotated {r1, r2}; then t3 is deleted
    nb = 5
    def delta(rows, sks, w):
        sk = np.empty(len(sks), dtype=object)
        for i, s in enumerate(sks):
            sk[i] = bits_from_ids(s, nb)
        return Delta(pa.table({"t": rows}), np.asarray(w, np.int64), sk)

    st = M.MergeState()
    st, added, removed = M.step(st, delta(["t1", "t2", "t3"], [{1}, {1}, {0, 1}], [1, 1, 1]), ["t"])
    assert st.counts == {0: 1, 1: 3} and added == {0, 1}
    st, added, removed = M.step(st, delta(["t3"], [{0, 1}], [-1]), ["t"])
    assert st.counts == {1: 2}
    assert removed == {0} and added == set()


def test_fig4_cross_product_delta():
    # R: 1{f1}, 7{f2}; S: 1{g1}, 8{g2}; ΔR = -1, +10{f2}; ΔS = -8, +10{g2}
    f = {1: 0, 7: 1, 10: 1}
    g = {1: 3, 8: 4, 10: 4}
    def d(col, vals, w, frag):
        return Delta(pa.table({col: vals}), np.asarray(w, np.int64),
                     np.asarray([[frag[v]] for v in vals], np.int64).reshape(-1, 1))

    spec = J.JoinSpec((), (), ("r",), ("s",), nbits=6, use_bloom=False)
    st = J.new_state(spec)
    st, init = J.step(spec, st, d("r", [1, 7], [1, 1], f), d("s", [1, 8], [1, 1], g))
    got0 = Counter({(r, k): w for r, k, w in zip(init.rows(), sketch_keys(init.sketch), init.weight.tolist())})
    assert got0 == Counter({((1, 1), (0, 3)): 1, ((1, 8), (0, 4)): 1, ((7, 1), (1, 3)): 1, ((7, 8), (1, 4)): 1})
    st, out = J.step(spec, st, d("r", [1, 10], [-1, 1], f), d("s", [8, 10], [-1, 1], g))
    out = consolidate(out, 6)
    got = {(r, k): w for r, k, w in zip(out.rows(), sketch_keys(out.sketch), out.weight.tolist())}
    assert got == {
        ((1, 1), (0, 3)): -1,   # ⟨(1,1), {f1,g1}⟩ deleted
        ((1, 8), (0, 4)): -1,   # ⟨(1,8), {f1,g2}⟩ deleted
        ((7, 8), (1, 4)): -1,   # ⟨(7,8), {f2,g2}⟩ deleted
        ((7, 10), (1, 4)): 1,   # ⟨(7,10), {f2,g2}⟩ inserted
        ((10, 1), (1, 3)): 1,   # ⟨(10,1), {f2,g1}⟩ inserted
        ((10, 10), (1, 4)): 1,  # ⟨(10,10), {f2,g2}⟩ inserted (ΔR ⋈ ΔS)
    }


def test_fig4_through_the_maintainer():
    sql = "select r, s from rt, st"
    parts = {"rt": RangePartition("r", [1, 5, 20]), "st": RangePartition("s", [1, 5, 20])}
    m = SketchMaintainer.from_sql(sql, parts)
    m.initialize({"rt": pa.table({"r": [1, 7]}), "st": pa.table({"s": [1, 8]})})
    assert m.sketch == {"rt": [0, 1], "st": [0, 1]}
    d = m.apply({"rt": pa.table({"r": [1, 10], "__weight": [-1, 1]}),
                 "st": pa.table({"s": [8, 10], "__weight": [-1, 1]})})
    assert sorted(tuple(r.values()) for r in m.result().to_pylist()) == [(7, 1), (7, 10), (10, 1), (10, 10)]
    assert m.sketch == {"rt": [1], "st": [0, 1]} and d.removed == {"rt": {0}, "st": set()}


# -- PBDS §8: the cities example ---------------------------------------------------------------

CITIES = pa.table({
    "popden": [4600, 6000, 5000, 7000, 2000, 3000, 1500],
    "city": ["Chicago", "San Diego", "Sacramento", "New York", "Buffalo", "Austin", "Houston"],
    "state": ["IL", "CA", "CA", "NY", "NY", "TX", "TX"],
})
# f1=[AL,DE], f2=[FL,MI], f3=[MN,OK], f4=[OR,WY] as half-open string ranges
F_STATE = RangePartition("state", ["AL", "FL", "MN", "OR", "WZ"])
F_POPDEN = RangePartition("popden", [1000, 4001, 9001])
Q2 = "SELECT state, avg(popden) AS avgden FROM cities GROUP BY state ORDER BY avgden DESC LIMIT 1"


def test_pbds_cities_q2_on_state_and_popden():
    m = SketchMaintainer.from_sql(Q2, {"cities": F_STATE})
    m.initialize({"cities": CITIES})
    assert m.result().to_pylist() == [{"state": "CA", "avgden": 5500.0}]
    assert m.sketch == {"cities": [0]}  # bitset 1000
    m2 = SketchMaintainer.from_sql(Q2, {"cities": F_POPDEN})
    m2.initialize({"cities": CITIES})
    assert m2.sketch == {"cities": [1]}  # bitset 01: g2 (accurate, though unsafe for avg)
    # merging {f1, f2}: state in [AL, MI]
    assert F_STATE.predicate([0, 1]) == "state < 'MN'"


def test_pbds_cities_deleting_t5_makes_ny_the_top_state():
    m = SketchMaintainer.from_sql(Q2, {"cities": F_STATE})
    m.initialize({"cities": CITIES})
    t5 = CITIES.slice(4, 1).append_column("__weight", pa.array([-1], pa.int64()))
    d = m.apply({"cities": t5})
    assert m.result().to_pylist() == [{"state": "NY", "avgden": 7000.0}]
    assert d.added == {"cities": {2}} and d.removed == {"cities": {0}}


def test_pbds_cities_q_total():
    sql = "SELECT state, sum(popden) AS total FROM cities GROUP BY state ORDER BY total DESC LIMIT 1"
    m = SketchMaintainer.from_sql(sql, {"cities": F_POPDEN})
    m.initialize({"cities": CITIES})
    assert m.result().to_pylist() == [{"state": "CA", "total": 11000}]
    assert m.sketch == {"cities": [1]}
