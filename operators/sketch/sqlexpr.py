"""SQL scalar expressions (sqlglot, Postgres dialect) -> the engine's ``Expr`` trees.

Covers column references, literals, arithmetic, comparisons, AND/OR/NOT, BETWEEN, IN
lists, LIKE/ILIKE, IS [NOT] NULL, CASE (searched and simple), casts (``::float``,
``CAST``), ``to_date``, ``DATE '...'`` and date +/- ``INTERVAL`` literals (folded),
``extract``/``date_part`` year and month, ``||`` and a few scalar functions.  Inside an
aggregation, aggregate calls and GROUP BY expressions become references to the
aggregate's output columns.  Anything else raises ``UnsupportedSqlError`` naming it.
"""

from __future__ import annotations

import calendar
import datetime as _dt
from dataclasses import dataclass

from sqlglot import exp

from core.errors import SqlError, UnsupportedSqlError
from operators.sketch.expr import Call, Case, Cast, Col, InList, IsNull, Like, Lit

_BIN = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div", exp.Mod: "mod",
        exp.EQ: "eq", exp.NEQ: "neq", exp.LT: "lt", exp.LTE: "lte", exp.GT: "gt", exp.GTE: "gte",
        exp.And: "and", exp.Or: "or", exp.DPipe: "concat"}
_FUNCS = {exp.Abs: "abs", exp.Round: "round", exp.Upper: "upper", exp.Lower: "lower",
          exp.Length: "length", exp.Coalesce: "coalesce"}


@dataclass(frozen=True)
class Star:
    """A select item expanded from ``*``: an already resolved column id."""

    id: str

    def walk(self):
        return iter(())

    def sql(self, **_):
        return self.id


def translate(e, rel, agg=None):
    """sqlglot expression -> engine ``Expr``; ``rel.resolve`` names columns, ``agg`` maps
    aggregate calls / GROUP BY expressions / grouped columns to the aggregate's outputs."""
    if isinstance(e, Star):
        if agg is not None:
            if e.id not in agg[2]:
                raise SqlError("SELECT * with GROUP BY needs every column grouped")
            return Col(agg[2][e.id])
        return Col(e.id)
    if agg is not None:
        by_sql, gsql, col_group = agg
        key = e.sql(dialect="postgres").lower()
        if isinstance(e, exp.AggFunc):
            return Col(by_sql[key].out)
        if key in gsql and not isinstance(e, exp.Literal):
            return Col(gsql[key])
    if isinstance(e, exp.Column):
        cid = rel.resolve(e.name, e.table or None)
        if agg is not None:
            if cid not in agg[2]:
                raise SqlError(f"column {e.sql()!r} must appear in GROUP BY or be used in an aggregate")
            return Col(agg[2][cid])
        return Col(cid)
    rec = lambda x: translate(x, rel, agg)  # noqa: E731
    if isinstance(e, exp.Paren):
        return rec(e.this)
    if isinstance(e, exp.Literal):
        if e.is_string:
            return Lit(e.this)
        txt = e.this
        return Lit(int(txt)) if txt.lstrip("-").isdigit() else Lit(float(txt))
    if isinstance(e, exp.Boolean):
        return Lit(bool(e.this))
    if isinstance(e, exp.Null):
        return Lit(None)
    if isinstance(e, (exp.Add, exp.Sub)) and isinstance(e.expression, exp.Interval):
        return _date_plus_interval(rec(e.this), e.expression, -1 if isinstance(e, exp.Sub) else 1)
    if type(e) in _BIN:
        return Call(_BIN[type(e)], (rec(e.this), rec(e.expression)))
    if isinstance(e, exp.Neg):
        x = rec(e.this)
        return Lit(-x.value) if isinstance(x, Lit) and isinstance(x.value, (int, float)) else Call("neg", (x,))
    if isinstance(e, exp.Not):
        return Call("not", (rec(e.this),))
    if isinstance(e, exp.Between):
        x = rec(e.this)
        return Call("and", (Call("gte", (x, rec(e.args["low"]))), Call("lte", (x, rec(e.args["high"])))))
    if isinstance(e, exp.In):
        if e.args.get("query") is not None or e.args.get("field") is not None:
            raise UnsupportedSqlError("IN (subquery) is not supported (correlated or nested subqueries)")
        vals = []
        for v in e.expressions:
            lv = rec(v)
            if not isinstance(lv, Lit):
                raise UnsupportedSqlError("IN lists must hold literals")
            vals.append(lv.value)
        return InList(rec(e.this), tuple(vals))
    if isinstance(e, (exp.Like, exp.ILike)):
        pat = rec(e.expression)
        if not isinstance(pat, Lit):
            raise UnsupportedSqlError("LIKE patterns must be literals")
        return Like(rec(e.this), pat.value, bool(e.args.get("negate")), isinstance(e, exp.ILike))
    if isinstance(e, exp.Is):
        if not isinstance(e.expression, exp.Null):
            raise UnsupportedSqlError(f"IS {e.expression.sql()} is not supported")
        return IsNull(rec(e.this), bool(e.args.get("negate")))
    if isinstance(e, exp.Case):
        operand = e.this
        whens = []
        for i in e.args.get("ifs") or []:
            c = rec(i.this)
            if operand is not None:
                c = Call("eq", (rec(operand), c))
            whens.append((c, rec(i.args["true"])))
        d = e.args.get("default")
        return Case(tuple(whens), rec(d) if d is not None else None)
    if isinstance(e, exp.If):
        return Case(((rec(e.this), rec(e.args["true"])),), rec(e.args["false"]) if e.args.get("false") else None)
    if isinstance(e, (exp.Cast, exp.TryCast)):
        return cast(rec(e.this), e.to)
    if isinstance(e, exp.StrToDate):
        x = rec(e.this)
        fmt = e.args.get("format")
        if isinstance(x, Lit) and isinstance(x.value, str):
            f = fmt.this if isinstance(fmt, exp.Literal) else "%Y-%m-%d"
            try:
                return Lit(_dt.datetime.strptime(x.value.strip(), f).date())
            except ValueError:
                raise SqlError(f"to_date({x.value!r}): does not match format {f!r}") from None
        return Cast(x, "date")
    if isinstance(e, exp.Extract):
        unit = e.this.name.lower() if isinstance(e.this, (exp.Var, exp.Literal)) else str(e.this).lower()
        if unit not in ("year", "month"):
            raise UnsupportedSqlError(f"extract({unit}) is not supported (year, month are)")
        return Call(unit, (rec(e.expression),))
    if isinstance(e, (exp.Year, exp.Month)):
        return Call(type(e).__name__.lower(), (rec(e.this),))
    if isinstance(e, exp.Anonymous) and e.name.lower() == "date_part":
        unit = rec(e.expressions[0])
        if not isinstance(unit, Lit) or str(unit.value).lower() not in ("year", "month"):
            raise UnsupportedSqlError("date_part supports 'year' and 'month'")
        return Call(str(unit.value).lower(), (rec(e.expressions[1]),))
    if isinstance(e, exp.Substring):
        args = [rec(e.this), rec(e.args["start"])]
        if e.args.get("length") is not None:
            args.append(rec(e.args["length"]))
        return Call("substr", tuple(args))
    if type(e) in _FUNCS:
        args = [rec(e.this)] + [rec(x) for x in (e.expressions or [])]
        if isinstance(e, exp.Round) and e.args.get("decimals") is not None:
            args.append(rec(e.args["decimals"]))
        return Call(_FUNCS[type(e)], tuple(args))
    if isinstance(e, exp.AggFunc):
        raise SqlError(f"aggregate {e.sql()} is not allowed here")
    if isinstance(e, (exp.Subquery, exp.Select, exp.Exists)):
        raise UnsupportedSqlError("subqueries inside expressions (correlated or scalar subqueries) are not supported")
    if isinstance(e, exp.Interval):
        raise UnsupportedSqlError("INTERVAL arithmetic is not supported")
    raise UnsupportedSqlError(f"SQL construct {type(e).__name__} ({e.sql(dialect='postgres')}) is not supported")


def cast(x, to: exp.DataType):
    t = to.this
    T = exp.DataType.Type
    if t in (T.DOUBLE, T.FLOAT, T.DECIMAL, T.BIGDECIMAL, T.MONEY) or str(t).upper().endswith("NUMERIC"):
        target = "float"
    elif t in (T.INT, T.BIGINT, T.SMALLINT, T.TINYINT):
        target = "int"
    elif t in (T.TEXT, T.VARCHAR, T.CHAR, T.NVARCHAR, T.NCHAR):
        target = "text"
    elif t == T.DATE:
        target = "date"
    elif t in (T.TIMESTAMP, T.DATETIME, T.TIMESTAMPTZ):
        target = "timestamp"
    elif t == T.BOOLEAN:
        target = "bool"
    else:
        raise UnsupportedSqlError(f"cast to {to.sql()} is not supported")
    if isinstance(x, Lit) and isinstance(x.value, str):
        v = x.value.strip()
        try:
            if target == "date":
                return Lit(_dt.date.fromisoformat(v[:10]))
            if target == "timestamp":
                return Lit(_dt.datetime.fromisoformat(v))
            if target == "float":
                return Lit(float(v))
            if target == "int":
                return Lit(int(v))
        except ValueError:
            raise SqlError(f"cannot cast literal {x.value!r} to {target}") from None
    if isinstance(x, Lit) and isinstance(x.value, int) and target == "float":
        return Lit(float(x.value))
    return Cast(x, target)


def _date_plus_interval(x, iv: exp.Interval, sign: int):
    """Fold ``DATE 'lit' ± INTERVAL 'n' unit`` (day, month, year) into a date literal."""
    if not (isinstance(x, Lit) and isinstance(x.value, _dt.date)):
        raise UnsupportedSqlError("INTERVAL arithmetic is supported on date literals only")
    txt = iv.this.name if iv.this is not None else ""
    unit = iv.args.get("unit")
    unit = unit.name.lower() if unit is not None else ""
    parts = txt.split()
    if len(parts) == 2 and not unit:
        txt, unit = parts[0], parts[1].lower()
    try:
        n = sign * int(txt)
    except ValueError:
        raise UnsupportedSqlError(f"INTERVAL {iv.sql()} is not supported") from None
    unit = unit.rstrip("s")
    d = x.value
    if unit == "day":
        return Lit(d + _dt.timedelta(days=n))
    if unit in ("month", "year"):
        months = d.year * 12 + d.month - 1 + (n if unit == "month" else 12 * n)
        y, m = divmod(months, 12)
        day = min(d.day, calendar.monthrange(y, m + 1)[1])
        return Lit(_dt.date(y, m + 1, day))
    raise UnsupportedSqlError(f"INTERVAL unit {unit!r} is not supported (day, month, year)")

