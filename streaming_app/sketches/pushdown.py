"""Selection push-down into the change-feed reads of the sketch maintainer.

The engine's planner pushes each query's WHERE conjuncts down to its table scans
(``ScanNode.pushed``).  ``pushdown(engine)`` turns them into one Spark SQL condition per table
that is *never stricter* than the engine's: a conjunct is translated only when Spark's
meaning is the same (column compared with a literal of a matching kind, IN lists, IS NULL,
LIKE, AND/OR/NOT of such) or weaker (``<`` on a DECIMAL/DOUBLE column becomes ``<=``, because
the engine compares such columns as float64); anything else is left out, which only lets more
rows through.  Several scans of one table are OR-ed (a scan without a condition means no
filter).  The engine applies its own selection again to whatever arrives, so a push-down can
only save work, never change a sketch.  Which columns each table needs is returned as well.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

from operators.sketch import plan as P
from operators.sketch.expr import Call, Cast, Col, InList, IsNull, Like, Lit, conjuncts

_NUMERIC = ("long", "int", "bigint", "integer", "short", "smallint", "byte", "tinyint")
_FLOATING = ("double", "float", "decimal")
# -- push-down ------------------------------------------------------------------------------

def column_kind(spark_type: str) -> str:
    t = spark_type.lower()
    if t.startswith(_FLOATING):
        return "float"
    if t in _NUMERIC:
        return "int"
    if t == "date":
        return "date"
    if t.startswith("timestamp"):
        return "timestamp"
    if t in ("string", "varchar") or t.startswith(("varchar", "char")):
        return "string"
    if t in ("boolean", "bool"):
        return "bool"
    return "other"


def sql_literal(v, kind: str) -> str | None:
    """SQL text of a literal compared with a column of ``kind``; None when the pair is not
    one whose meaning is certain to agree with the engine's."""
    if v is None:
        return None
    if kind == "date":
        if isinstance(v, dt.datetime):
            return None
        if isinstance(v, dt.date):
            return f"DATE '{v.isoformat()}'"
        if isinstance(v, str):
            try:
                return f"DATE '{dt.date.fromisoformat(v.strip()).isoformat()}'"
            except ValueError:
                return None
        return None
    if kind == "timestamp":
        if isinstance(v, dt.datetime):
            return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
        return None
    if kind == "string":
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" if isinstance(v, str) else None
    if kind == "bool":
        return ("TRUE" if v else "FALSE") if isinstance(v, bool) else None
    if isinstance(v, bool):
        return None
    if kind == "int":
        return str(int(v)) if isinstance(v, int) else None
    if kind == "float":
        if isinstance(v, (int, Decimal)):
            return str(v)
        if isinstance(v, float) and math.isfinite(v):
            return repr(v)
    return None


def _value(e):
    """A literal's value (DATE '...' arrives as a cast of a string literal)."""
    if isinstance(e, Lit):
        return True, e.value
    if isinstance(e, Cast) and isinstance(e.arg, Lit) and e.to == "date" and isinstance(e.arg.value, str):
        try:
            return True, dt.date.fromisoformat(e.arg.value.strip())
        except ValueError:
            return False, None
    return False, None


_FLIP = {"lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte", "eq": "eq", "neq": "neq"}
_OPS = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">=", "eq": "=", "neq": "<>"}


def spark_condition(e, names: dict, kinds: dict) -> str | None:
    """Spark SQL for expression ``e`` over column ids (``names``: id -> column, ``kinds``:
    column -> kind) that keeps every row ``e`` keeps; None when no such condition is known."""
    if isinstance(e, Call) and e.op == "and":
        parts = [p for p in (spark_condition(c, names, kinds) for c in e.args) if p is not None]
        return " AND ".join(f"({p})" for p in parts) if parts else None
    if isinstance(e, Call) and e.op == "or":
        parts = [spark_condition(c, names, kinds) for c in e.args]
        return None if any(p is None for p in parts) else " OR ".join(f"({p})" for p in parts)
    if isinstance(e, Call) and e.op == "not":
        inner = _exact(e.args[0], names, kinds)
        return None if inner is None else f"NOT ({inner})"
    return _exact(e, names, kinds, weaken=True)


def _exact(e, names, kinds, weaken: bool = False) -> str | None:
    """A condition equivalent to ``e`` (with ``weaken``: possibly weaker)."""
    if isinstance(e, Call) and e.op in _OPS and len(e.args) == 2:
        a, b = e.args
        op = e.op
        if not isinstance(a, Col):
            a, b, op = b, a, _FLIP[op]
        ok, v = _value(b)
        if not isinstance(a, Col) or not ok or a.id not in names:
            return None
        col = names[a.id]
        kind = kinds.get(col, "other")
        lit = sql_literal(v, kind)
        if lit is None:
            return None
        if kind == "float":  # the engine compares floats; only a weaker form is certain
            if not weaken or op in ("eq", "neq"):
                return None
            op = {"lt": "lte", "gt": "gte"}.get(op, op)
        return f"`{col}` {_OPS[op]} {lit}"
    if isinstance(e, IsNull) and isinstance(e.arg, Col) and e.arg.id in names:
        return f"`{names[e.arg.id]}` IS {'NOT ' if e.negate else ''}NULL"
    if isinstance(e, InList) and isinstance(e.arg, Col) and e.arg.id in names and e.values:
        col = names[e.arg.id]
        kind = kinds.get(col, "other")
        if kind == "float" or (e.negate and any(v is None for v in e.values)):
            return None
        lits = [sql_literal(v, kind) for v in e.values if v is not None]
        if any(x is None for x in lits) or not lits:
            return None
        return f"`{col}` {'NOT ' if e.negate else ''}IN ({', '.join(lits)})"
    if isinstance(e, Like) and isinstance(e.arg, Col) and e.arg.id in names and not e.ignore_case:
        col = names[e.arg.id]
        if kinds.get(col) != "string":
            return None
        return f"`{col}` {'NOT ' if e.negate else ''}LIKE {sql_literal(e.pattern, 'string')}"
    return None


def pushdown(engine, column_types: dict) -> dict:
    """table -> (Spark condition or None, sorted column names the query's scans read).

    ``column_types``: table -> {column: spark type} (the config's declared types)."""
    per: dict = {}
    for node in engine.query.root.walk():
        if isinstance(node, P.ScanNode):
            per.setdefault(node.table, []).append(
                pushdown_for_scan(node, column_types.get(node.table, {}), engine.partitions))
    return {t: union_pushdown(items) for t, items in per.items()}


def union_pushdown(items: list) -> tuple:
    """Combine several queries' (condition, columns) for one table: OR of the conditions
    (None if any query needs every row), union of the columns."""
    conds, cols = [], set()
    for cond, c in items:
        conds.append(cond)
        cols |= set(c)
    if not conds or any(c is None for c in conds):
        return None, sorted(cols)
    uniq = list(dict.fromkeys(conds))
    return (uniq[0] if len(uniq) == 1 else " OR ".join(f"({c})" for c in uniq)), sorted(cols)


def pushdown_for_scan(scan, column_types: dict, partitions: dict) -> tuple:
    """(Spark condition or None, sorted columns) for one scan node."""
    kinds = {c: column_kind(ty) for c, ty in column_types.items()}
    names = {cid: name for name, cid in scan.cols}
    cond = None
    if scan.pushed is not None:
        parts = [p for p in (spark_condition(c, names, kinds) for c in conjuncts(scan.pushed)) if p]
        cond = " AND ".join(f"({p})" for p in parts) if parts else None
    cols = {name for name, _ in scan.cols}
    p = partitions.get(scan.table)
    if p is not None:
        cols.add(p.attribute)
    return cond, sorted(cols)
