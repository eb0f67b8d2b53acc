"""Bottom-up analysis of a SELECT tree into PBDS formulas: pred, expr, Ψ and the sketch attributes.

One walk serves two checks that differ only in the rules applied at each operator:

* ``mode="safety"`` (PBDS §6, generalized containment): side 0 is the query over the full
  data D, side 1 over the sketch instance D_𝒫𝒮; Ψ relates each D_𝒫𝒮 tuple to the D tuple it
  maps to; the gc conditions (selection, aggregation group-by, DISTINCT, top-k order) are
  checked as the walk goes and a failure raises ``Refuted`` with the reason.
* ``mode="reuse"`` (PBDS §7): side 0 is the instance Q a sketch was captured for, side 1 the
  new instance Q' (same template, other parameter binding); Ψ_{Q',Q}, ge(Q',Q) and the group
  comparison conditions ①/② are built the same way, and ``uconds`` is checked at the root by
  the caller.

The rules and which reading of the paper each follows are listed in ``operators/sketch_safety/
__init__.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import z3
from sqlglot import exp
from z3.z3util import get_vars

from core.errors import SqlError, UnsupportedSqlError
from operators.sketch_safety.logic import Strings, Translator, conjuncts, to_bool, to_real, valid, value_text

_AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


class Refuted(Exception):
    """A gc / ge condition could not be proven; the message says which and where."""


@dataclass
class Col:
    qual: str | None
    name: str
    t: tuple  # (side-0 term, side-1 term)


@dataclass
class Rel:
    cols: list
    pred: list = field(default_factory=list)  # (formula side 0, formula side 1): selections
    expr: list = field(default_factory=list)  # (formula side 0, formula side 1): equations, facts
    psi: list = field(default_factory=list)  # formulas relating side 1 to side 0
    X: list = field(default_factory=list)  # side-0 vars of the sketched attribute (safety)
    keys: list = field(default_factory=list)  # sets of output names that are unique per row
    topk: bool = False

    def conds(self, side: int) -> list:
        return [p[side] for p in self.pred] + [e[side] for e in self.expr]

    def both(self) -> list:
        return self.psi + self.conds(0) + self.conds(1)


def relation(psi_ante: list, a0, a1) -> str | None:
    """How side 1 relates to side 0 under the antecedents: 'eq', 'le' (a1 ≤ a0), 'ge' or None."""
    if valid(psi_ante, a1 == a0):
        return "eq"
    if valid(psi_ante, a1 <= a0):
        return "le"
    if valid(psi_ante, a1 >= a0):
        return "ge"
    return None


_REL = {"eq": lambda a, b: b == a, "le": lambda a, b: b <= a, "ge": lambda a, b: b >= a}


class Analyzer:
    def __init__(self, mode: str, schema: dict, stats: dict | None = None, sketch: tuple | None = None,
                 params: tuple = ({}, {}), strings=(), nullable: dict | None = None):
        self.mode = mode
        self.schema = {t.lower(): list(c) for t, c in schema.items()}
        # columns that may hold NULL, and the z3 variables (names) whose value may be NULL
        self.nullable = {t.lower(): set(c) for t, c in (nullable or {}).items()}
        self.null_vars = {"null"}  # CASE without ELSE
        self.stats = {t.lower(): s for t, s in (stats or {}).items()}
        self.sketch = (sketch[0].lower(), sketch[1]) if sketch else None
        self.params = params
        texts = list(strings)
        for cols in self.stats.values():
            for lo_hi in cols.values():
                texts += [t for t in (value_text(v) for v in lo_hi) if t is not None]
        self.strings = Strings(texts)
        self._ids = itertools.count()

    # -- helpers -----------------------------------------------------------------------------
    def fresh(self, stem: str) -> tuple:
        i = next(self._ids)
        return z3.Real(f"{stem}#{i}"), z3.Real(f"{stem}#{i}'")

    def refute(self, msg: str):
        raise Refuted(msg)

    def may_null(self, *terms) -> bool:
        """Whether any of the terms mentions a variable whose value may be NULL."""
        return any(str(v) in self.null_vars for t in terms for v in get_vars(to_real(t)))

    def null_guard(self, node, rel: Rel, subst, aliases, where: str) -> None:
        """CASE is the one construct the encoding evaluates two-valued where SQL is not
        monotone in unknowns (WHEN NULL takes ELSE): refuse a WHEN whose two sides differ and
        may be NULL."""
        if self.mode != "safety":
            return
        ante = None
        for case in node.find_all(exp.Case):
            for branch in case.args.get("ifs") or []:
                c0, c1 = (to_bool(t) for t in self.pair(branch.this, rel.cols, subst, aliases))
                if str(c0) == str(c1) or not self.may_null(c0, c1):
                    continue
                ante = rel.both() if ante is None else ante
                if not valid(ante, c0 == c1):
                    self.refute(f"{where}: CASE WHEN {branch.this.sql()!r} may be unknown (NULL) over the sketch "
                                f"instance and not over the full data (three-valued CASE is not modelled)")

    def translators(self, scope: list, subst: dict | None = None, aliases: list | None = None):
        """Per side, a translator resolving ``subst`` sub-expressions, then columns in ``scope``,
        then SELECT aliases (HAVING/ORDER BY may name them)."""
        out = []
        for side in (0, 1):
            tr = Translator(None, self.strings, self.params[side])

            def lookup(node, side=side, tr=tr):
                if subst:
                    hit = subst.get(node.sql())
                    if hit is not None:
                        return hit[side]
                if isinstance(node, exp.Column):
                    try:
                        return resolve(scope, node)[side]
                    except SqlError:
                        for a in aliases or []:
                            if not node.table and a.alias == node.name:
                                return tr(a.this)
                        raise
                return None

            tr.lookup = lookup
            out.append(tr)
        return out

    def pair(self, node, scope, subst=None, aliases=None) -> tuple:
        t0, t1 = self.translators(scope, subst, aliases)
        return t0(node), t1(node)

    # -- queries -----------------------------------------------------------------------------
    def query(self, q: exp.Expression) -> Rel:
        if not hasattr(self, "tree_columns"):  # statistics bounds only for columns the query names
            self.tree_columns = [c for c in q.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
            if any(isinstance(s.parent, (exp.Select, exp.Column)) for s in q.find_all(exp.Star)):
                self.tree_columns = []
        if isinstance(q, exp.Subquery):
            return self.query(q.this)
        if isinstance(q, exp.Union) and type(q) is exp.Union:
            return self.union(q)
        if isinstance(q, exp.Select):
            return self.select(q)
        raise UnsupportedSqlError(f"safety check: unsupported query node {type(q).__name__}")

    def table(self, t: exp.Table) -> Rel:
        name = t.name.lower()
        if name not in self.schema:
            raise SqlError(f"unknown table {name!r}")
        alias = t.alias_or_name
        rel = Rel(cols=[])
        used = {c.name for c in self.tree_columns}
        for c in self.schema[name]:
            # Ψ of a base relation is "every column equal": both sides share one variable
            z = self.fresh(f"{alias}.{c}")[0]
            v = (z, z)
            rel.cols.append(Col(alias, c, v))
            nullable = c in self.nullable.get(name, ())
            if nullable:
                self.null_vars.add(str(z))
            lo_hi = None if nullable else self.stats.get(name, {}).get(c)  # a bound says nothing of NULL
            if lo_hi is not None and None not in lo_hi and (c in used or not self.tree_columns):
                lo, hi = (Translator(lambda n: None, self.strings).literal(x) for x in lo_hi)
                rel.expr.append((z3.And(z >= lo, z <= hi), z3.BoolVal(True)))
            if self.sketch and name == self.sketch[0] and c == self.sketch[1]:
                rel.X.append(v[0])
        if self.sketch and name == self.sketch[0] and not any(c == self.sketch[1] for c in self.schema[name]):
            raise SqlError(f"{self.sketch[1]!r} is not a column of {name!r}")
        return rel

    def source(self, src: exp.Expression) -> Rel:
        if isinstance(src, exp.Table) and not src.args.get("joins"):
            return self.table(src)
        if isinstance(src, exp.Subquery):
            inner = self.query(src.this)
            alias = src.alias or None
            names = [c.name for c in (src.args["alias"].columns if src.args.get("alias") else [])]
            for i, c in enumerate(inner.cols):
                c.qual = alias
                if i < len(names):
                    c.name = names[i]
            inner.keys = []
            return inner
        raise UnsupportedSqlError(f"safety check: unsupported FROM item {src.sql()[:80]!r}")

    def product(self, a: Rel, b: Rel) -> Rel:
        return Rel(cols=a.cols + b.cols, pred=a.pred + b.pred, expr=a.expr + b.expr, psi=a.psi + b.psi,
                   X=a.X + b.X, topk=a.topk or b.topk)

    def select_where(self, rel: Rel, cond: exp.Expression, where: str, subst=None, aliases=None) -> None:
        """σ_θ: in safety mode prove Ψ ∧ conds ∧ conds^𝒫𝒮 ∧ θ^𝒫𝒮 → θ; then add θ to pred.

        Sound with NULLs (a row is kept iff θ is TRUE) because AND/OR/NOT, comparisons and
        arithmetic are monotone in unknowns (TRUE with a NULL operand stays TRUE whatever value
        replaces it), an operand NULL over the full data is NULL over the sketch instance too,
        and no fact is assumed of a value that may be NULL (see ``aggregate``); CASE is guarded."""
        self.null_guard(cond, rel, subst, aliases, where)
        parts = [self.pair(c, rel.cols, subst, aliases) for c in conjuncts(cond)]
        parts = [(to_bool(a), to_bool(b)) for a, b in parts]
        if self.mode == "safety":
            th0 = z3.And(*[p[0] for p in parts])
            th1 = z3.And(*[p[1] for p in parts])
            if not valid(rel.both() + [th1], th0):
                self.refute(f"{where} {cond.sql()!r}: a partial group or tuple of the sketch instance could "
                            f"satisfy it while the full data does not")
        rel.pred.extend(parts)

    def select(self, sel: exp.Select) -> Rel:
        if sel.args.get("with_") is not None:
            raise UnsupportedSqlError("safety check: WITH is not supported")
        from_ = sel.args.get("from_")
        if from_ is None:
            raise UnsupportedSqlError("safety check: SELECT without FROM")
        rel = self.source(from_.this)
        for j in sel.args.get("joins") or []:
            side = (j.args.get("side") or "").upper()
            if side in ("LEFT", "RIGHT", "FULL"):
                raise UnsupportedSqlError(f"safety check: {side} JOIN")
            rel = self.product(rel, self.source(j.this))
            if j.args.get("on") is not None:
                self.select_where(rel, j.args["on"], "join condition")
        if sel.args.get("where") is not None:
            self.select_where(rel, sel.args["where"].this, "WHERE")

        aliases = [e for e in sel.expressions if isinstance(e, exp.Alias)]
        aggs = []
        for part in [*sel.expressions, sel.args.get("having"), sel.args.get("order")]:
            if part is not None:
                aggs += [a for a in part.find_all(exp.AggFunc) if a.find_ancestor(exp.AggFunc) is None]
        group = sel.args.get("group")
        subst = None
        if group is not None or aggs:
            subst = self.aggregate(rel, sel, group, aggs, aliases)
        if sel.args.get("having") is not None:
            self.select_where(rel, sel.args["having"].this, "HAVING", subst, aliases)

        # projection: output columns are the SELECT expressions over the (aggregated) scope
        out, names = [], []
        for e in sel.expressions:
            if isinstance(e, exp.Star):
                out += [Col(None, c.name, c.t) for c in rel.cols]
                continue
            if isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
                out += [Col(None, c.name, c.t) for c in rel.cols if c.qual == e.table]
                continue
            node = e.this if isinstance(e, exp.Alias) else e
            self.null_guard(node, rel, subst, None, f"SELECT {e.sql()!r}")
            out.append(Col(None, e.alias_or_name, self.pair(node, rel.cols, subst)))
        names = [c.name for c in out]
        in_scope, rel.cols = rel.cols, out
        if group is not None:
            gnames = {g.sql() for g in group.expressions}
            key = {e.alias_or_name for e in sel.expressions
                   if (e.this if isinstance(e, exp.Alias) else e).sql() in gnames}
            if len(key) == len(gnames):
                rel.keys = [key]
        elif aggs:
            rel.keys = [set()]
        if sel.args.get("distinct") is not None:
            self.distinct(rel)
            rel.keys = [set(names)]
        if sel.args.get("limit") is not None:
            self.topk(rel, sel, in_scope, subst, aliases)
        return rel

    # -- γ -----------------------------------------------------------------------------------
    def aggregate(self, rel: Rel, sel: exp.Select, group, aggs, aliases) -> dict:
        gexprs = []
        for g in (group.expressions if group is not None else []):
            if isinstance(g, exp.Literal) and not g.is_string:  # GROUP BY 2
                g = sel.expressions[int(g.this) - 1]
            if isinstance(g, exp.Column) and not g.table:  # GROUP BY select alias
                hit = [a.this for a in aliases if a.alias == g.name]
                if hit and not any(c.name == g.name for c in rel.cols):
                    g = hit[0]
            gexprs.append(g.this if isinstance(g, exp.Alias) else g)
        gterms = [self.pair(g, rel.cols) for g in gexprs]
        ante = rel.both()
        for g, (g0, g1) in zip(gexprs, gterms):
            g0, g1 = to_real(g0), to_real(g1)
            if not valid(ante, g1 == g0):
                what = "sketch instance" if self.mode == "safety" else "new instance"
                self.refute(f"GROUP BY {g.sql()!r}: its value over the {what} is not implied equal")
        subst = {g.sql(): (to_real(a), to_real(b)) for g, (a, b) in zip(gexprs, gterms)}
        whole, subset = self.group_shape(rel, gterms)
        new_expr = []
        for a in aggs:
            key = a.sql()
            if key in subst:
                continue
            f = next((n for c, n in _AGGS.items() if isinstance(a, c)), None)
            if f is None:
                raise UnsupportedSqlError(f"safety check: aggregate {a.sql()!r}")
            arg = a.this
            distinct = isinstance(arg, exp.Distinct)
            if distinct:
                arg = arg.expressions[0]
            star = f == "count" and (arg is None or isinstance(arg, exp.Star))
            b = self.fresh(f"{f}")
            subst[key] = b
            if star:
                a_terms, rel_a = None, "eq"
            else:
                self.null_guard(arg, rel, None, None, f"aggregate {a.sql()!r}")
                a_terms = tuple(to_real(t) for t in self.pair(arg, rel.cols))
                rel_a = relation(ante, *a_terms)
            # NULL inputs: SUM/AVG/MIN/MAX skip them (NULL if none is left, or over no rows
            # without GROUP BY), COUNT(x) counts the others (0 if none), COUNT(*) every row
            a_null = a_terms is not None and self.may_null(*a_terms)
            if f != "count" and (a_null or group is None):
                self.null_vars.update((str(b[0]), str(b[1])))
            # facts that hold on both sides: counts are positive, sign of sum/min/max/avg
            for side in (0, 1):
                facts = []
                if f == "count":
                    facts.append(b[side] >= (1 if group is not None and not a_null else 0))
                elif a_terms is not None:
                    if valid(rel.conds(side), a_terms[side] >= 0):
                        facts.append(b[side] >= 0)
                    if valid(rel.conds(side), a_terms[side] <= 0):
                        facts.append(b[side] <= 0)
                if facts:
                    new_expr.append((side, z3.And(*facts)))
            nonneg = a_terms is not None and valid(rel.conds(0), a_terms[0] >= 0)
            nonpos = a_terms is not None and valid(rel.conds(0), a_terms[0] <= 0)
            # a row whose input is NULL over the sketch instance but not over the full data
            # drops out of the side-1 aggregate: only relations that survive dropping values hold
            dropped = self.mode == "safety" and a_null and rel_a != "eq"
            r = self.agg_relation(f, distinct, whole, subset, rel_a, nonneg, nonpos, dropped)
            if r is not None:
                rel.psi.append(_REL[r](b[0], b[1]))
        for side, fact in new_expr:
            rel.expr.append((fact, z3.BoolVal(True)) if side == 0 else (z3.BoolVal(True), fact))
        return subst

    def group_shape(self, rel: Rel, gterms) -> tuple[bool, bool]:
        """(whole, subset): side-1 groups equal / are contained in the side-0 groups."""
        if self.mode == "safety":
            # case 1: every sketch attribute is implied equal to some group-by value
            whole = all(any(valid(rel.conds(0), x == to_real(g0)) for g0, _ in gterms) for x in rel.X)
            return whole, True
        gvars = {str(v) for g in gterms for t in g for v in get_vars(to_real(t))}
        def non_group(side):
            return [p[side] for p in rel.pred if not {str(v) for v in get_vars(p[side])} <= gvars]
        e0, e1 = [e[0] for e in rel.expr], [e[1] for e in rel.expr]
        ng0, ng1 = non_group(0), non_group(1)
        one = valid(rel.psi + ng0 + e0 + e1, z3.And(*ng1))  # ① each Q group ⊆ its Q' group
        two = valid(rel.psi + ng1 + e1 + e0, z3.And(*ng0))  # ② each Q' group ⊆ its Q group
        return one and two, two

    @staticmethod
    def agg_relation(f, distinct, whole, subset, rel_a, nonneg, nonpos, dropped: bool = False) -> str | None:
        """Relation of b over side 1 to b over side 0 (PBDS §6 four cases, see package doc).

        ``dropped``: side-1 inputs may be NULL where side-0 ones are not, so a whole group may
        still lose values: the cases that need every value (whole-group SUM, AVG, MIN ≤, MAX ≥)
        are off."""
        if not subset:
            return None
        if dropped:
            whole = False
        if whole and rel_a == "eq":
            return "eq"
        if distinct and f != "count":
            return None
        if f == "count":
            return "le" if rel_a in ("eq", "le", "ge") or distinct else None
        if f == "sum":
            if rel_a in ("eq", "le") and (whole or nonneg):
                return "le"
            if rel_a in ("eq", "ge") and (whole or nonpos):
                return "ge"
            return None
        if f == "max":
            if rel_a in ("eq", "le"):
                return "le"
            return "ge" if whole and rel_a == "ge" else None
        if f == "min":
            if rel_a in ("eq", "ge"):
                return "ge"
            return "le" if whole and rel_a == "le" else None
        if f == "avg" and whole and rel_a in ("le", "ge"):
            return rel_a
        return None

    # -- δ, τ, ∪ -----------------------------------------------------------------------------
    def distinct(self, rel: Rel) -> None:
        ante = rel.both()
        for c in rel.cols:
            a0, a1 = (to_real(t) for t in c.t)
            if not valid(ante, a1 == a0):
                self.refute(f"DISTINCT: column {c.name!r} is not implied equal, so duplicates could be merged differently")

    def topk(self, rel: Rel, sel: exp.Select, in_scope, subst, aliases) -> None:
        rel.topk = True
        if self.mode != "safety":
            return
        ante = rel.both()
        out_alias = [exp.alias_(e.this if isinstance(e, exp.Alias) else e, e.alias_or_name) for e in sel.expressions
                     if not isinstance(e, exp.Star)]
        order = sel.args.get("order")
        for o in (order.expressions if order is not None else []):
            node = o.this
            hit = None
            if isinstance(node, exp.Column) and not node.table:
                hit = next((c for c in rel.cols if c.name == node.name), None)
            if isinstance(node, exp.Literal) and not node.is_string:
                hit = rel.cols[int(node.this) - 1]
            o0, o1 = (to_real(t) for t in (hit.t if hit is not None else self.pair(node, in_scope, subst, out_alias)))
            if self.may_null(o0, o1) and not valid(ante, o1 == o0):
                self.refute(f"ORDER BY {o.sql()!r} … LIMIT: the key may be NULL over the sketch instance and not "
                            f"over the full data, and engines sort NULL first or last differently")
            ok = valid(ante, o1 <= o0) if o.args.get("desc") else valid(ante, o0 <= o1)
            if not ok:
                self.refute(f"ORDER BY {o.sql()!r} … LIMIT: a group of the sketch instance could rank higher "
                            f"than over the full data")
        # ties are broken on all output columns ascending: check them until a key is covered
        key = rel.keys[0] if rel.keys else None
        seen = set()
        for c in rel.cols:
            if key is not None and key <= seen:
                break
            a0, a1 = (to_real(t) for t in c.t)
            if self.may_null(a0, a1) and not valid(ante, a1 == a0):
                self.refute(f"ORDER BY … LIMIT: ties are broken on column {c.name!r}, which may be NULL over the "
                            f"sketch instance and not over the full data")
            if not valid(ante, a0 <= a1):
                self.refute(f"ORDER BY … LIMIT: ties are broken on column {c.name!r}, whose value over the "
                            f"sketch instance could be smaller")
            seen.add(c.name)

    def union(self, u: exp.Union) -> Rel:
        if any(u.args.get(k) is not None for k in ("order", "limit")):
            raise UnsupportedSqlError("safety check: ORDER BY/LIMIT on a UNION")
        a, b = self.query(u.this), self.query(u.expression)
        if len(a.cols) != len(b.cols):
            raise SqlError("UNION branches have different numbers of columns")
        rel = Rel(cols=[], pred=a.pred + b.pred, expr=a.expr + b.expr, psi=a.psi + b.psi, X=a.X + b.X,
                  topk=a.topk or b.topk)
        ante_a, ante_b = a.both(), b.both()
        for ca, cb in zip(a.cols, b.cols):
            v = self.fresh(f"u.{ca.name}")
            rel.cols.append(Col(None, ca.name, v))
            ra = relation(ante_a, *(to_real(t) for t in ca.t))
            rb = relation(ante_b, *(to_real(t) for t in cb.t))
            common = ra if ra == rb else ("le" if {ra, rb} == {"eq", "le"} else "ge" if {ra, rb} == {"eq", "ge"} else None)
            if common is not None:
                rel.psi.append(_REL[common](v[0], v[1]))
        if u.args.get("distinct"):
            self.distinct(rel)
        return rel


def resolve(scope: list, node: exp.Column) -> tuple:
    name, qual = node.name, node.table or None
    hits = [c for c in scope if c.name == name and (qual is None or c.qual == qual)]
    if not hits and qual is None:
        hits = [c for c in scope if c.name.lower() == name.lower()]
    if not hits:
        raise SqlError(f"unknown column {node.sql()!r}")
    if len(hits) > 1 and any(str(h.t[0]) != str(hits[0].t[0]) for h in hits):
        raise SqlError(f"ambiguous column {node.sql()!r}")
    return hits[0].t
