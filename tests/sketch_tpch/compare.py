"""Result comparison for engine vs DuckDB: numbers with a relative tolerance, bags unordered unless LIMIT.

Both sides are turned into lists of row tuples by position (column names are checked
separately, case-insensitively). Decimals, ints and floats compare as floats within
``rel``/``abs``; dates, strings and booleans exactly. Without ``ordered`` rows are matched as a
bag: grouped by their exact (non-float) columns, then the float columns compared in sorted
order inside each group.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math

import pyarrow as pa


def _norm(v):
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return float(v)
    return v


def rows_of(table: pa.Table) -> list[tuple]:
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [tuple(_norm(c[i]) for c in cols) for i in range(table.num_rows)]


def _close(a, b, rel: float, abs_: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)
    if isinstance(a, _dt.datetime) and isinstance(b, _dt.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    return a == b


def _exact_key(row: tuple) -> tuple:
    return tuple("<num>" if isinstance(v, float) else (type(v).__name__, v) for v in row)


def _sort_key(row: tuple) -> tuple:
    return tuple((0, v) if isinstance(v, float) else (1, 0) if v is None else (2, 0) for v in row)


def diff_tables(got: pa.Table, expected: pa.Table, *, ordered: bool, rel: float = 1e-6, abs_: float = 1e-6, names: bool = True) -> str | None:
    """None if equal, else a short human-readable description of the first difference."""
    if got.num_columns != expected.num_columns:
        return f"column count {got.num_columns} != {expected.num_columns}: {got.column_names} vs {expected.column_names}"
    if names and [c.lower() for c in got.column_names] != [c.lower() for c in expected.column_names]:
        return f"column names {got.column_names} != {expected.column_names}"
    g, e = rows_of(got), rows_of(expected)
    if len(g) != len(e):
        return f"row count {len(g)} != {len(e)}; got {g[:5]}... expected {e[:5]}..."
    if ordered:
        for i, (a, b) in enumerate(zip(g, e)):
            if not all(_close(x, y, rel, abs_) for x, y in zip(a, b)):
                return f"row {i}: got {a} expected {b}"
        return None
    buckets: dict[tuple, list[list[tuple]]] = {}
    for side, rows in ((0, g), (1, e)):
        for r in rows:
            buckets.setdefault(_exact_key(r), [[], []])[side].append(r)
    for key, (gs, es) in buckets.items():
        if len(gs) != len(es):
            return f"rows with key {key}: got {len(gs)} expected {len(es)}; e.g. got {gs[:2]} expected {es[:2]}"
        gs, es = sorted(gs, key=_sort_key), sorted(es, key=_sort_key)
        for a, b in zip(gs, es):
            if not all(_close(x, y, rel, abs_) for x, y in zip(a, b)):
                return f"got {a} expected {b}"
    return None
