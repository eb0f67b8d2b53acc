"""SQL expressions as z3 terms over two "sides" (full data vs sketch instance, or Q vs Q').

Every column value is a z3 ``Real``. That is sound for validity checks (∀-formulas): integers
are reals, and strings and dates only occur in comparisons, so they are mapped into the reals
by an order-preserving embedding of every string the query, the bindings and the statistics
mention (``Strings``); a string outside that set becomes an unconstrained constant. Anything
the solver cannot model faithfully (division, LIKE, functions, casts to integer) becomes an
uninterpreted function of its column (and parameter) terms, so equal inputs still give equal
outputs. NULL is not a value here: the safety check keeps track of which variables may be
NULL and restricts its facts accordingly (``analyze.Analyzer.may_null``, package doc).

Cost: one ``z3.Solver`` per validity question with a 2 s timeout ("unknown" counts as "not
proven", which keeps every answer sound).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import Callable, Sequence

import z3
from sqlglot import exp

from core.errors import SqlError

TIMEOUT_MS = 2000


def valid(antecedents: Sequence, consequent, timeout_ms: int = TIMEOUT_MS) -> bool:
    """True iff ``∧ antecedents → consequent`` holds for all values (its negation is unsat)."""
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    for a in antecedents:
        s.add(a)
    s.add(z3.Not(consequent))
    return s.check() == z3.unsat


def to_bool(t):
    return t if z3.is_bool(t) else t != 0


def to_real(t):
    return z3.If(t, z3.RealVal(1), z3.RealVal(0)) if z3.is_bool(t) else t


def value_text(v) -> str | None:
    """The text a string-like statistic compares as (dates ISO), or None if numeric/unsupported."""
    if isinstance(v, str):
        return v
    if isinstance(v, _dt.datetime):
        return None
    if isinstance(v, _dt.date):
        return v.isoformat()
    return None


class Strings:
    """Order-preserving map of a finite set of strings into the reals (their ranks)."""

    def __init__(self, values):
        self.rank = {s: i for i, s in enumerate(sorted(set(values)))}

    def term(self, s: str):
        if s in self.rank:
            return z3.RealVal(self.rank[s])
        return z3.Real(f"str:{s}")


def string_literals(tree: exp.Expression) -> list[str]:
    return [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string]


def number(v):
    if isinstance(v, bool):
        return z3.RealVal(int(v))
    if isinstance(v, decimal.Decimal):
        v = str(v)
    return z3.RealVal(v)


_CMP = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_ARITH = {exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b, exp.Mul: lambda a, b: a * b}
_REAL_CASTS = {"DOUBLE", "FLOAT", "DECIMAL", "DOUBLE PRECISION", "REAL", "NUMERIC", "BIGDECIMAL"}


class Translator:
    """Translate one side of a sqlglot expression to z3.

    ``lookup(node) -> term | None`` resolves columns and precomputed sub-expressions (group-by
    expressions, aggregate calls) for this side; ``params`` maps a parameter name to its value
    on this side (reuse checks); ``strings`` is the shared string embedding."""

    def __init__(self, lookup: Callable, strings: Strings, params: dict | None = None):
        self.lookup = lookup
        self.strings = strings
        self.params = params or {}

    def literal(self, v):
        if isinstance(v, str):
            return self.strings.term(v)
        t = value_text(v)
        if t is not None:
            return self.strings.term(t)
        return number(v)

    def __call__(self, node: exp.Expression):
        hit = self.lookup(node)
        if hit is not None:
            return hit
        if isinstance(node, exp.Paren):
            return self(node.this)
        if isinstance(node, exp.Column):
            raise SqlError(f"unknown column {node.sql()!r}")
        if isinstance(node, exp.Literal):
            return self.strings.term(node.this) if node.is_string else z3.RealVal(node.this)
        if isinstance(node, exp.Boolean):
            return z3.BoolVal(bool(node.this))
        if isinstance(node, (exp.Parameter, exp.Placeholder)):
            key = node.sql()
            if key not in self.params:
                raise SqlError(f"unbound parameter {key}")
            return self.literal(self.params[key])
        if isinstance(node, exp.Neg):
            return -to_real(self(node.this))
        for cls, fn in _ARITH.items():
            if isinstance(node, cls):
                return fn(to_real(self(node.this)), to_real(self(node.expression)))
        for cls, fn in _CMP.items():
            if isinstance(node, cls):
                return fn(to_real(self(node.this)), to_real(self(node.expression)))
        if isinstance(node, exp.And):
            return z3.And(to_bool(self(node.this)), to_bool(self(node.expression)))
        if isinstance(node, exp.Or):
            return z3.Or(to_bool(self(node.this)), to_bool(self(node.expression)))
        if isinstance(node, exp.Not):
            return z3.Not(to_bool(self(node.this)))
        if isinstance(node, exp.Between):
            v = to_real(self(node.this))
            return z3.And(v >= to_real(self(node.args["low"])), v <= to_real(self(node.args["high"])))
        if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
            v = to_real(self(node.this))
            return z3.Or(*[v == to_real(self(e)) for e in node.expressions])
        if isinstance(node, exp.Case) and node.this is None:
            out = to_real(self(node.args["default"])) if node.args.get("default") is not None else z3.Real("null")
            for branch in reversed(node.args.get("ifs") or []):
                out = z3.If(to_bool(self(branch.this)), to_real(self(branch.args["true"])), out)
            return out
        if isinstance(node, exp.Cast):
            to = node.to.sql().upper()
            inner = node.this
            if isinstance(inner, exp.Literal) and inner.is_string and to.startswith(("DATE", "TIMESTAMP")):
                return self.strings.term(inner.this)
            if to.startswith(("DATE",)) or to.split("(")[0] in _REAL_CASTS:
                return self(inner)
        return self.opaque(node)

    def opaque(self, node: exp.Expression):
        """An uninterpreted function of the node's column and parameter terms."""
        args = []
        for sub in node.walk():
            if isinstance(sub, (exp.Column, exp.Parameter, exp.Placeholder)):
                args.append(to_real(self(sub)))
            elif isinstance(sub, exp.AggFunc) and self.lookup(sub) is not None:
                args.append(to_real(self.lookup(sub)))
        rng = z3.BoolSort() if isinstance(node, exp.Predicate) else z3.RealSort()
        name = "fn:" + node.sql()
        if not args:
            return z3.Const(name, rng)
        f = z3.Function(name + f"/{len(args)}", *([z3.RealSort()] * len(args)), rng)
        return f(*args)


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """Top-level AND operands (parentheses removed)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]
