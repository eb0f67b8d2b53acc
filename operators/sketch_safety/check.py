"""Public safety API: is a range-partition sketch on (table, attribute) safe for a query?"""

from __future__ import annotations

import datetime as _dt
import decimal
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot

from core.errors import SqlError, UnsafeSketchError, UnsupportedSqlError
from operators.sketch_safety.analyze import Analyzer, Refuted
from operators.sketch_safety.logic import string_literals


@dataclass(frozen=True)
class SafetyResult:
    safe: bool
    reason: str


def parse(sql: str) -> sqlglot.exp.Expression:
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as e:
        raise SqlError(f"cannot parse query: {e}") from None
    if not isinstance(tree, (sqlglot.exp.Select, sqlglot.exp.Union, sqlglot.exp.Subquery)):
        raise UnsupportedSqlError(f"only SELECT queries are supported, got {type(tree).__name__}: {sql[:60]!r}")
    return tree


def schema_of(tables: dict) -> dict:
    """table -> column names, from pyarrow tables."""
    return {t.lower(): list(v.column_names) for t, v in tables.items()}


def stats_of(tables: dict) -> dict:
    """table -> column -> (min, max) for numeric, date and string columns (pred(R) of PBDS §6)."""
    out = {}
    for t, v in tables.items():
        cols = {}
        for name in v.column_names:
            col = v.column(name)
            typ = col.type
            if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
                    or pa.types.is_date(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)):
                continue
            if col.null_count:  # NULLs are outside what the solver models: no bounds for them
                continue
            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is None:
                continue
            if isinstance(lo, decimal.Decimal):
                lo, hi = float(lo), float(hi)
            if isinstance(lo, _dt.datetime):
                continue
            cols[name] = (lo, hi)
        out[t.lower()] = cols
    return out


def nulls_of(tables: dict) -> dict:
    """table -> the columns that hold a NULL."""
    return {t.lower(): {c for c in v.column_names if v.column(c).null_count} for t, v in tables.items()}


def _inputs(schema, stats, tables, nullable=None):
    if tables is not None:
        schema = schema or schema_of(tables)
        stats = stats if stats is not None else stats_of(tables)
        nullable = nullable if nullable is not None else nulls_of(tables)
    if schema is None:
        raise SqlError("the safety check needs the table schemas (schema= or tables=)")
    return schema, stats, nullable or {}


def check_safety(sql: str, table: str, attribute: str, *, schema: dict | None = None,
                 stats: dict | None = None, tables: dict | None = None,
                 nullable: dict | None = None) -> SafetyResult:
    """Whether every sketch on ``table.attribute`` is provably safe for ``sql`` (PBDS Thm. 2).

    ``schema``: table -> column names; ``stats``: table -> column -> (min, max), PBDS's pred(R)
    (e.g. a non-negative column makes SUM monotone); ``nullable``: table -> columns that may
    hold NULL (SQL three-valued logic; without it and without ``tables`` every column is taken
    to be NOT NULL). All three are derived from ``tables`` (name -> pyarrow.Table) when given.
    Sound, not complete: "unsafe" means "not proven safe"."""
    schema, stats, nullable = _inputs(schema, stats, tables, nullable)
    tree = parse(sql)
    if table.lower() not in {t.name.lower() for t in tree.find_all(sqlglot.exp.Table)}:
        return SafetyResult(True, f"{table} is not accessed by the query: its sketch is empty and unused")
    an = Analyzer("safety", schema, stats, sketch=(table, attribute), strings=string_literals(tree),
                  nullable=nullable)
    try:
        an.query(tree)
    except Refuted as e:
        return SafetyResult(False, f"{table}.{attribute} is unsafe: {e}")
    nulls = " (with NULLs in " + ", ".join(sorted(f"{t}.{c}" for t, cs in nullable.items() for c in cs)) + ")" \
        if any(nullable.values()) else ""
    return SafetyResult(True, f"{table}.{attribute} is safe: generalized containment holds (gc){nulls}")


def require_safe(sql: str, table: str, attribute: str, **kw) -> SafetyResult:
    """``check_safety`` that raises ``UnsafeSketchError`` (with the reason) when not proven safe."""
    r = check_safety(sql, table, attribute, **kw)
    if not r.safe:
        raise UnsafeSketchError(f"query {sql[:80]!r}: {r.reason}")
    return r


def safe_attributes(sql: str, schema: dict | None = None, *, stats: dict | None = None,
                    tables: dict | None = None, nullable: dict | None = None) -> dict[str, list[str]]:
    """For each table the query reads, the attributes a sketch may be built on (proven safe)."""
    schema, stats, nullable = _inputs(schema, stats, tables, nullable)
    tree = parse(sql)
    used = sorted({t.name.lower() for t in tree.find_all(sqlglot.exp.Table)})
    out = {}
    for t in used:
        if t not in schema:
            raise SqlError(f"unknown table {t!r}")
        out[t] = [a for a in schema[t]
                  if check_safety(sql, t, a, schema=schema, stats=stats, nullable=nullable).safe]
    return out
