"""Query templates and the reuse test (PBDS §7): may a sketch captured for Q answer Q'?

``template_of(sql)`` replaces every constant of the selection conditions (WHERE, JOIN … ON,
HAVING) and of LIMIT by a parameter ``:p1, :p2, …`` and returns the template text (the key)
and the binding (the constants in order). Two instances of one template Q (captured) and Q'
(new) pass ``reusable(Q, Q')`` when

* the template has ORDER BY … LIMIT anywhere: only for identical bindings (PBDS Fig. 5 has
  no τ rule; the digest's [R] choice); otherwise
* ge(Q',Q) holds (group-by values and DISTINCT columns implied equal across the instances,
  with the group comparison conditions ①/② deciding how each aggregate of Q' relates to Q's)
  and uconds(Q',Q) = Ψ_{Q',Q} ∧ pred(Q') ∧ expr(Q') ∧ expr(Q) → pred(Q) is valid (z3).

By PBDS Thm. 3 a sketch safe for Q is then safe for Q'. Ex. 8: a sketch of
``… WHERE popden > 100 … HAVING count(*) > 10`` answers the instance with 15, not the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import z3
from sqlglot import exp

from core.errors import SqlError
from operators.sketch_safety.analyze import Analyzer, Refuted
from operators.sketch_safety.check import parse
from operators.sketch_safety.logic import string_literals, valid


@dataclass(frozen=True)
class Instance:
    sql: str
    template: str  # the template text, also the store key
    binding: tuple  # constant per parameter, in order
    topk: bool
    tree: exp.Expression  # the template's parse tree (with placeholders)

    def params(self) -> dict:
        return {f":p{i + 1}": v for i, v in enumerate(self.binding)}


def _value(lit: exp.Literal):
    if lit.is_string:
        return lit.this
    d = Decimal(lit.this)
    return int(d) if d == d.to_integral_value() and "." not in lit.this and "e" not in lit.this.lower() else float(d)


def template_of(sql: str) -> Instance:
    tree = parse(sql).copy()
    binding = []
    clauses = []
    for node in tree.walk():
        if isinstance(node, (exp.Where, exp.Having)):
            clauses.append(node)
        elif isinstance(node, exp.Join) and node.args.get("on") is not None:
            clauses.append(node.args["on"])
        elif isinstance(node, exp.Limit):
            clauses.append(node)
    topk = any(isinstance(c, exp.Limit) for c in clauses)
    for clause in clauses:
        for lit in list(clause.find_all(exp.Literal)):
            node, value = lit, _value(lit)
            if isinstance(lit.parent, exp.Neg) and not lit.is_string:  # -5 is one constant
                node, value = lit.parent, -value
            binding.append(value)
            node.replace(exp.Placeholder(this=f"p{len(binding)}"))
    return Instance(sql, tree.sql(dialect="postgres"), tuple(binding), topk, tree)


def reusable(captured: Instance, new: Instance, schema: dict, stats: dict | None = None) -> tuple[bool, str]:
    """Whether a (safe) sketch of ``captured`` is safe for ``new``; returns (ok, reason)."""
    if captured.template != new.template:
        return False, "different templates"
    if captured.binding == new.binding:
        return True, "identical binding"
    if captured.topk:
        return False, "top-k template: reuse only for identical bindings"
    strings = string_literals(captured.tree) + [v for v in captured.binding + new.binding if isinstance(v, str)]
    an = Analyzer("reuse", schema, stats, params=(captured.params(), new.params()), strings=strings)
    try:
        rel = an.query(captured.tree)
    except Refuted as e:
        return False, f"ge(Q',Q) fails: {e}"
    except SqlError:
        raise
    pred0 = [p[0] for p in rel.pred]
    ante = rel.psi + [p[1] for p in rel.pred] + [e[1] for e in rel.expr] + [e[0] for e in rel.expr]
    if valid(ante, z3.And(*pred0)):
        return True, "uconds(Q',Q) holds: the new instance's provenance is contained in the captured one's"
    return False, "uconds(Q',Q) fails: the new instance's conditions do not imply the captured ones"
