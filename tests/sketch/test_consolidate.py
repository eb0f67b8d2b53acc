"""Consolidated deltas (issue 27): identical rows of a batch are netted before the operators run.

Random batches of inserts and deletes (each delete of a live row; re-inserts and deletes of
the same row inside one batch) through aggregate, HAVING, join and top-k queries: the sketch
and the result after every batch are those of the same batch applied unconsolidated.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch.maintainer import consolidated

QUERIES = [
    "select g, sum(x) as s, count(*) as n from t group by g having sum(x) > 4",
    "select t.g, u.name, t.x from t join u on t.g = u.g where t.x > 1",
    "select g, x from t order by x desc limit 3",
]
ROW = st.tuples(st.integers(0, 4), st.integers(0, 9))


def _table(rows, w):
    return pa.table({"g": pa.array([r[0] for r in rows], pa.int64()), "x": pa.array([r[1] for r in rows], pa.int64()),
                     "__weight": pa.array(w, pa.int64())})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), st.lists(ROW, min_size=3, max_size=12), st.lists(st.lists(ROW, max_size=8), min_size=1, max_size=5),
       st.randoms(use_true_random=False))
def test_consolidated_equals_unconsolidated(sql, start, batches, rnd):
    parts = {"t": RangePartition("x", [0, 3, 6])}
    tables = {"t": _table(start, [1] * len(start))}
    if "join u" in sql:
        parts["u"] = RangePartition("g", [0, 2])
        tables["u"] = pa.table({"g": pa.array(range(5), pa.int64()), "name": [f"n{i}" for i in range(5)]})
    a, b = (SketchMaintainer.from_sql(sql, parts) for _ in range(2))
    for m in (a, b):
        m.initialize({k: v.drop_columns(["__weight"]) if "__weight" in v.column_names else v for k, v in tables.items()})
    live = list(start)
    for ins in batches:
        rows, w = [], []
        for r in ins:  # insert, sometimes deleted again in the same batch
            rows.append(r), w.append(1)
            if rnd.random() < 0.4:
                rows.append(r), w.append(-1)
            else:
                live.append(r)
        for _ in range(min(len(live), rnd.randint(0, 3))):  # deletes of live rows, some re-inserted
            r = live.pop(rnd.randrange(len(live)))
            rows.append(r), w.append(-1)
            if rnd.random() < 0.5:
                rows.append(r), w.append(1)
                live.append(r)
        order = list(range(len(rows)))
        rnd.shuffle(order)
        rows, w = [rows[i] for i in order], [w[i] for i in order]
        delta = {"t": _table(rows, w)}
        da = a.apply(delta)
        db = b.apply(delta, consolidate=False)
        assert a.sketch == b.sketch
        ka = sorted(map(repr, a.result().to_pylist()))
        assert ka == sorted(map(repr, b.result().to_pylist()))
        assert (da.added, da.removed) == (db.added, db.removed)


def test_netting():
    v = _table([(1, 2), (1, 2), (3, 4), (1, 2), (5, 6)], [1, -1, 2, 1, -1])
    out, w = consolidated(v, v.column("__weight").to_numpy())
    got = sorted(zip(out.column("g").to_pylist(), out.column("x").to_pylist(), w.tolist()))
    assert got == [(1, 2, 1), (3, 4, 2), (5, 6, -1)] and out.schema == v.schema
    empty, w0 = consolidated(v.slice(0, 2), np.array([1, -1]))
    assert empty.num_rows == 0 and len(w0) == 0


def test_insert_and_delete_of_one_row_does_no_work():
    m = SketchMaintainer.from_sql(QUERIES[0], {"t": RangePartition("x", [0, 3, 6])})
    m.initialize({"t": pa.table({"g": pa.array([1], pa.int64()), "x": pa.array([5], pa.int64())})})
    d = m.apply({"t": _table([(2, 9), (2, 9)], [1, -1])})
    assert not d.added.get("t") and not d.removed.get("t") and m.result().num_rows == 1


@pytest.mark.parametrize("w", [[1], [-1]])
def test_one_row(w):
    v = _table([(1, 2)], w)
    assert consolidated(v, np.array(w))[1].tolist() == w
