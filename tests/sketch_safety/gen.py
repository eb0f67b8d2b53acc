"""Random small tables and random queries of the shapes the safety check supports.

``case(pick)`` builds one case from a chooser ``pick(options)`` (hypothesis ``data.draw`` of
``sampled_from`` or a seeded ``random.Random.choice``), so the same generator serves the
property test (shrinking) and the seeded coverage loop. ``case(pick, nulls=True)`` (or the
chooser's pick when ``nulls`` is None) puts NULLs in about one value in five of some columns,
the partition attribute included.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from operators.sketch import RangePartition

R_COLS = ("a", "b", "c", "d")
DOMAIN = {"a": range(0, 4), "b": range(0, 8), "c": range(-3, 10), "d": range(0, 20)}
AGGS = ("sum", "count", "avg", "min", "max")
OPS = (">", ">=", "<", "<=")


@dataclass
class Case:
    sql: str
    tables: dict
    attribute: str
    partition: RangePartition


def _table(pick, cols, n_max, nonneg_c, nulls=False):
    n = pick(range(1, n_max + 1))
    data = {}
    for c in cols:
        dom = list(DOMAIN[c] if c in DOMAIN else range(0, 6))
        if c == "c" and nonneg_c:
            dom = list(range(0, 10))
        if nulls and pick((True, False)):  # this column holds NULLs (~1 value in 5)
            dom = dom + [None] * max(1, len(dom) // 4)
        data[c] = [pick(dom) for _ in range(n)]
    return pa.table({c: pa.array(v, type=pa.int64()) for c, v in data.items()})


def _agg(pick, x_cols=("b", "c", "d"), prefix=""):
    f = pick(AGGS)
    if f == "count" and pick((True, False)):
        return f, "count(*)"
    return f, f"{f}({prefix}{pick(x_cols)})"


def _having(pick, agg_sql):
    if not pick((True, True, False)):
        return ""
    if agg_sql.startswith("count"):
        const = range(0, 6)
    elif agg_sql.startswith("sum"):
        const = range(-3, 40, 2)
    else:
        const = range(-2, 12)
    return f" HAVING {agg_sql} {pick(OPS)} {pick(const)}"


def _topk(pick, key="v"):
    if not pick((True, False)):
        return ""
    return f" ORDER BY {key} {pick(('ASC', 'DESC'))} LIMIT {pick((1, 2, 3))}"


def _where(pick, prefix=""):
    if not pick((True, False)):
        return ""
    col = pick(R_COLS)
    return f" WHERE {prefix}{col} {pick(OPS)} {pick(DOMAIN[col])}"


def query(pick) -> str:
    shape = pick(("agg", "agg", "agg", "agg", "join", "join", "nested", "nested", "distinct", "union", "aggjoin", "plain",
                  "count", "case"))
    if shape == "count":  # COUNT(col) skips NULLs: a partial group can count 0 where the whole one does not
        col = pick(("b", "c", "d"))
        return (f"SELECT a, count({col}) AS v FROM r{_where(pick)} GROUP BY a "
                f"HAVING count({col}) {pick(OPS)} {pick(range(0, 4))}{_topk(pick)}")
    if shape == "case":  # CASE WHEN over an aggregate that is NULL over a partial group
        f, agg = _agg(pick)
        return (f"SELECT a, {agg} AS v FROM r GROUP BY a HAVING CASE WHEN {agg} {pick(OPS)} "
                f"{pick(range(-2, 12))} THEN 0 ELSE 1 END = {pick((0, 1))}")
    if shape == "agg":
        g = pick(("a", "b", "a, b"))
        f, agg = _agg(pick)
        return f"SELECT {g}, {agg} AS v FROM r{_where(pick)} GROUP BY {g}{_having(pick, agg)}{_topk(pick)}"
    if shape == "join":
        g = pick(("r.a", "r.b", "s.f"))
        f, agg = _agg(pick, ("r.c", "s.f", "r.d"))
        return (f"SELECT {g}, {agg} AS v FROM r JOIN s ON r.a = s.e{_where(pick, 'r.')} GROUP BY {g}"
                f"{_having(pick, agg)}{_topk(pick)}")
    if shape == "nested":
        f, agg = _agg(pick)
        g2 = pick(("a", "b"))
        f2 = pick(AGGS)
        outer = f"{f2}(v)"
        return (f"SELECT {g2}, {outer} AS w FROM (SELECT a, b, {agg} AS v FROM r{_where(pick)} GROUP BY a, b"
                f"{_having(pick, agg)}) t GROUP BY {g2}{_having(pick, outer)}{_topk(pick, 'w')}")
    if shape == "distinct":
        if pick((True, False)):
            return f"SELECT DISTINCT {pick(('a', 'b', 'a, b'))} FROM r{_where(pick)}"
        f, agg = _agg(pick)
        return f"SELECT DISTINCT v FROM (SELECT a, {agg} AS v FROM r GROUP BY a) t"
    if shape == "union":
        kind = pick(("UNION", "UNION ALL"))
        return f"SELECT a, b FROM r{_where(pick)} {kind} SELECT a, d FROM r{_where(pick)}"
    if shape == "aggjoin":
        f, agg = _agg(pick)
        return (f"SELECT r.b, t.v FROM r JOIN (SELECT a, {agg} AS v FROM r GROUP BY a) t ON r.a = t.a"
                f" WHERE t.v {pick(OPS)} {pick(range(0, 20))}")
    cols = pick(("a, b", "b, c", "c, d"))
    return f"SELECT {cols} FROM r{_where(pick)}{_topk(pick, cols.split(', ')[0])}"


def case(pick, nulls: bool | None = False) -> Case:
    nonneg = pick((True, False))
    if nulls is None:
        nulls = pick((True, False))
    r = _table(pick, R_COLS, 14, nonneg, nulls)
    s = _table(pick, ("e", "f"), 6, True, nulls)
    attr = pick(R_COLS)
    dom = list(DOMAIN[attr])
    n_bounds = pick((3, 5, 8, 12))
    bounds = sorted({pick(dom) for _ in range(n_bounds)} | {dom[0]})
    if len(bounds) < 2:
        bounds.append(bounds[-1] + 1)
    return Case(query(pick), {"r": r, "s": s}, attr, RangePartition(attr, bounds))
