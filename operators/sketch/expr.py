"""Scalar expressions over annotated batches, evaluated vectorised with pyarrow.compute.

Expressions are small immutable trees (``Col``, ``Lit``, ``Call``, ``Case``, ``Cast``,
``InList``, ``Like``, ``IsNull``) built by the SQL front end.  ``evaluate(expr, table)``
returns a pyarrow Array or Scalar; ``evaluate_array`` always an Array of the table's
length; ``predicate_mask`` a numpy bool mask where NULL counts as false (SQL WHERE).
SQL NULL semantics come from Arrow: arithmetic on NULL is NULL, AND/OR are Kleene.
A string literal compared with a date/timestamp column is read as a date (Postgres
coerces such literals too).  Integer ``/`` truncates like Postgres.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import SqlError


class Expr:
    def refs(self) -> set:
        out: set = set()
        _collect(self, out)
        return out


@dataclass(frozen=True)
class Col(Expr):
    id: str


@dataclass(frozen=True)
class Lit(Expr):
    value: object
    type: object = None  # optional pa.DataType


@dataclass(frozen=True)
class Call(Expr):
    op: str
    args: tuple


@dataclass(frozen=True)
class Case(Expr):
    whens: tuple  # ((cond, value), ...)
    default: Expr | None


@dataclass(frozen=True)
class Cast(Expr):
    arg: Expr
    to: str  # 'float' | 'int' | 'text' | 'date' | 'timestamp' | 'bool'


@dataclass(frozen=True)
class InList(Expr):
    arg: Expr
    values: tuple
    negate: bool = False


@dataclass(frozen=True)
class Like(Expr):
    arg: Expr
    pattern: str
    negate: bool = False
    ignore_case: bool = False


@dataclass(frozen=True)
class IsNull(Expr):
    arg: Expr
    negate: bool = False


def _collect(e, out):
    if isinstance(e, Col):
        out.add(e.id)
    elif isinstance(e, Call):
        for a in e.args:
            _collect(a, out)
    elif isinstance(e, Case):
        for c, v in e.whens:
            _collect(c, out)
            _collect(v, out)
        if e.default is not None:
            _collect(e.default, out)
    elif isinstance(e, (Cast, InList, Like, IsNull)):
        _collect(e.arg, out)


def substitute(e, mapping: dict):
    """Replace column ids (id -> Expr)."""
    if isinstance(e, Col):
        return mapping.get(e.id, e)
    if isinstance(e, Call):
        return Call(e.op, tuple(substitute(a, mapping) for a in e.args))
    if isinstance(e, Case):
        return Case(tuple((substitute(c, mapping), substitute(v, mapping)) for c, v in e.whens),
                    None if e.default is None else substitute(e.default, mapping))
    if isinstance(e, Cast):
        return Cast(substitute(e.arg, mapping), e.to)
    if isinstance(e, InList):
        return InList(substitute(e.arg, mapping), e.values, e.negate)
    if isinstance(e, Like):
        return Like(substitute(e.arg, mapping), e.pattern, e.negate, e.ignore_case)
    if isinstance(e, IsNull):
        return IsNull(substitute(e.arg, mapping), e.negate)
    return e


def conjuncts(e) -> list:
    if isinstance(e, Call) and e.op == "and":
        return conjuncts(e.args[0]) + conjuncts(e.args[1])
    return [e]


def and_all(es):
    es = list(es)
    if not es:
        return None
    out = es[0]
    for x in es[1:]:
        out = Call("and", (out, x))
    return out


# -- evaluation ------------------------------------------------------------------------------

_CMP = {"eq": pc.equal, "neq": pc.not_equal, "lt": pc.less, "lte": pc.less_equal,
        "gt": pc.greater, "gte": pc.greater_equal}
_CASTS = {"float": pa.float64(), "int": pa.int64(), "text": pa.string(), "date": pa.date32(),
          "timestamp": pa.timestamp("us"), "bool": pa.bool_()}


def _scalar(v, t=None):
    if isinstance(v, pa.Scalar):
        return v
    return pa.scalar(v, type=t) if t is not None else pa.scalar(v)


def _is_temporal(t):
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _coerce_pair(a, b):
    """Read string scalars as dates when compared with temporal values."""
    ta, tb = a.type, b.type
    if _is_temporal(ta) and pa.types.is_string(tb) and isinstance(b, pa.Scalar):
        b = _str_to_temporal(b, ta)
    elif _is_temporal(tb) and pa.types.is_string(ta) and isinstance(a, pa.Scalar):
        a = _str_to_temporal(a, tb)
    elif pa.types.is_date(ta) and pa.types.is_timestamp(tb):
        a = pc.cast(a, tb)
    elif pa.types.is_timestamp(ta) and pa.types.is_date(tb):
        b = pc.cast(b, ta)
    return a, b


def _str_to_temporal(s, t):
    txt = s.as_py()
    if txt is None:
        return pa.scalar(None, type=t)
    if pa.types.is_date(t):
        return pa.scalar(_dt.date.fromisoformat(txt.strip()[:10]), type=pa.date32())
    return pa.scalar(_dt.datetime.fromisoformat(txt.strip()), type=t)


def _unify(vals):
    types = [v.type for v in vals if not pa.types.is_null(v.type)]
    if not types:
        return vals
    if any(pa.types.is_floating(t) for t in types) and all(
        pa.types.is_integer(t) or pa.types.is_floating(t) for t in types
    ):
        target = pa.float64()
    elif all(pa.types.is_integer(t) for t in types):
        target = pa.int64()
    else:
        target = types[0]
    return [v if v.type == target else pc.cast(v, target) for v in vals]


def broadcast(v, n: int) -> pa.Array:
    if isinstance(v, pa.ChunkedArray):
        return v.combine_chunks()
    if isinstance(v, pa.Array):
        return v
    if not v.is_valid:
        t = v.type if not pa.types.is_null(v.type) else pa.null()
        return pa.nulls(n, type=t)
    return pa.repeat(v, n)


def evaluate(e: Expr, t: pa.Table):
    if isinstance(e, Col):
        c = t.column(e.id)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    if isinstance(e, Lit):
        return _scalar(e.value, e.type)
    if isinstance(e, Call):
        return _call(e, t)
    if isinstance(e, Case):
        n = t.num_rows
        conds = [pc.fill_null(broadcast(evaluate(c, t), n), False) for c, _ in e.whens]
        vals = [broadcast(evaluate(v, t), n) for _, v in e.whens]
        dflt = broadcast(evaluate(e.default, t), n) if e.default is not None else None
        allv = _unify(vals + ([dflt] if dflt is not None else []))
        if dflt is not None:
            vals, dflt = allv[:-1], allv[-1]
        else:
            vals = allv
        if n == 0:
            return vals[0] if vals else pa.nulls(0)
        return pc.case_when(pc.make_struct(*conds, field_names=[f"c{i}" for i in range(len(conds))]),
                            *vals, *([dflt] if dflt is not None else []))
    if isinstance(e, Cast):
        v = evaluate(e.arg, t)
        target = _CASTS[e.to]
        if e.to == "int" and pa.types.is_floating(v.type):
            v = pc.round(v)
        if e.to == "text" and pa.types.is_floating(v.type):
            return _float_to_text(v)
        if pa.types.is_string(v.type) and e.to in ("date", "timestamp"):
            v = pc.utf8_trim_whitespace(v)
        return pc.cast(v, target, safe=False)
    if isinstance(e, InList):
        v = evaluate(e.arg, t)
        vals = [x for x in e.values]
        vs = pa.array(vals)
        if _is_temporal(v.type) and pa.types.is_string(vs.type):
            vs = pa.array([_str_to_temporal(pa.scalar(x), v.type).as_py() for x in vals], type=v.type)
        elif vs.type != v.type:
            try:
                vs = vs.cast(v.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                v = pc.cast(v, vs.type)
        arr = broadcast(v, t.num_rows)
        r = pc.is_in(arr, value_set=vs)
        r = pc.if_else(arr.is_null(), pa.scalar(None, pa.bool_()), r)
        return pc.invert(r) if e.negate else r
    if isinstance(e, Like):
        v = broadcast(evaluate(e.arg, t), t.num_rows)
        r = pc.match_like(v, e.pattern, ignore_case=e.ignore_case)
        return pc.invert(r) if e.negate else r
    if isinstance(e, IsNull):
        v = evaluate(e.arg, t)
        r = pc.is_valid(v) if e.negate else pc.is_null(v)
        return r
    raise SqlError(f"cannot evaluate expression {e!r}")


def _float_to_text(v):
    py = v.to_pylist() if isinstance(v, pa.Array) else [v.as_py()]
    out = [None if x is None else (str(int(x)) if float(x).is_integer() else repr(x)) for x in py]
    return pa.array(out, type=pa.string()) if isinstance(v, pa.Array) else pa.scalar(out[0], pa.string())


def _call(e: Call, t: pa.Table):
    op = e.op
    if op == "and" or op == "or":
        a = evaluate(e.args[0], t)
        b = evaluate(e.args[1], t)
        return (pc.and_kleene if op == "and" else pc.or_kleene)(a, b)
    args = [evaluate(a, t) for a in e.args]
    if op == "not":
        return pc.invert(args[0])
    if op in _CMP:
        a, b = _coerce_pair(args[0], args[1])
        return _CMP[op](a, b)
    if op in ("add", "sub", "mul"):
        a, b = args
        if op == "sub" and pa.types.is_date(a.type) and pa.types.is_integer(b.type):
            return pc.cast(pc.subtract(pc.cast(a, pa.int32()), pc.cast(b, pa.int32())), pa.date32())
        if op == "add" and pa.types.is_date(a.type) and pa.types.is_integer(b.type):
            return pc.cast(pc.add(pc.cast(a, pa.int32()), pc.cast(b, pa.int32())), pa.date32())
        return {"add": pc.add, "sub": pc.subtract, "mul": pc.multiply}[op](a, b)
    if op == "div":
        a, b = args
        return pc.divide(a, b)
    if op == "mod":
        a, b = args
        n = t.num_rows
        aa = broadcast(a, n).to_numpy(zero_copy_only=False)
        bb = broadcast(b, n).to_numpy(zero_copy_only=False)
        with np.errstate(all="ignore"):
            r = np.fmod(aa, bb)
        return pa.array(r)
    if op == "neg":
        return pc.negate(args[0])
    if op == "year":
        return pc.cast(pc.year(args[0]), pa.int64())
    if op == "month":
        return pc.cast(pc.month(args[0]), pa.int64())
    if op == "concat":
        a, b = [pc.cast(x, pa.string()) for x in args]
        return pc.binary_join_element_wise(a, b, "")
    if op == "abs":
        return pc.abs(args[0])
    if op == "round":
        return pc.round(args[0], int(args[1].as_py()) if len(args) > 1 else 0)
    if op == "coalesce":
        return pc.coalesce(*_unify(args))
    if op == "upper":
        return pc.utf8_upper(args[0])
    if op == "lower":
        return pc.utf8_lower(args[0])
    if op == "length":
        return pc.cast(pc.utf8_length(args[0]), pa.int64())
    if op == "substr":
        start = int(args[1].as_py()) - 1
        if len(args) > 2:
            return pc.utf8_slice_codeunits(args[0], start, start + int(args[2].as_py()))
        return pc.utf8_slice_codeunits(args[0], start)
    raise SqlError(f"unknown function {op!r}")


def evaluate_array(e: Expr, t: pa.Table) -> pa.Array:
    return broadcast(evaluate(e, t), t.num_rows)


def predicate_mask(e: Expr, t: pa.Table) -> np.ndarray:
    v = evaluate(e, t)
    if isinstance(v, pa.Scalar):
        return np.full(t.num_rows, bool(v.as_py()), dtype=bool)
    return pc.fill_null(v, False).to_numpy(zero_copy_only=False).astype(bool)
