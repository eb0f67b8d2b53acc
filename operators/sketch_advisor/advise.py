"""Cost-based choice of the sketch attribute (CB-OPT / CB-OPT-GB of the cost-based digest).

``advise(sql, tables)`` estimates, for every safe candidate attribute, the share of its table
an accurate sketch on an equi-depth partition of that attribute would cover, and returns the
candidates smallest estimate first. Steps (digest §4–§6):

1. candidates: attributes proven safe (``operators.sketch_safety``) with more distinct values
   than fragments (digest §7 pre-filter); ``strategy="gb"`` keeps only group-by columns;
2. the aggregation's input (FROM, joins, WHERE) is evaluated once with DuckDB, every row
   tagged with its group id (this replaces the paper's wander join for Q-AJGH: exact join,
   sampled aggregation);
3. stratified reservoir sample on the group-by columns at rate θ (with the fallback), B = 50
   bootstrap, per-group SUM/COUNT/AVG estimates and Haas half-widths;
4. 𝒢′ = groups whose estimates pass HAVING (or the top k by the ORDER BY aggregate);
   size~ = Σ sizes of the fragments holding a row of a group in 𝒢′ (Alg. 2, over the full
   data); the interval uses the groups that surely / possibly pass at the estimates' 95%
   bounds; E(size~) uses P(X_g) and independent groups.

Supported shape: one SELECT block (Q-AGH, Q-AJGH) with GROUP BY columns/expressions,
SUM/COUNT/AVG, HAVING a conjunction of ``aggregate op constant`` and optionally ORDER BY
aggregate LIMIT k. Nested aggregation (Q-AAGH) raises ``UnsupportedSqlError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from core.errors import ConfigError, UnsupportedSqlError
from operators.sketch.partition import RangePartition
from operators.sketch_advisor.estimate import Z95, pass_probability
from operators.sketch_advisor.sample import bootstrap_means, stratified_sample
from operators.sketch_safety.check import parse
from operators.sketch_safety.logic import conjuncts

_AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg"}
_OPS = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass
class Candidate:
    table: str
    attribute: str
    estimate: float  # estimated share of the table the sketch covers (size~ / |R|)
    ci_low: float
    ci_high: float
    expected: float  # E(size~)/|R| from the pass probabilities
    fragments: int  # fragments of the partition
    true: float | None = None  # true share (``verify``)


@dataclass
class Shape:
    select: exp.Select
    aliases: dict  # table -> alias in FROM (tables read once)
    group: list
    aggs: dict  # sql key -> (f, arg or None)
    having: list = field(default_factory=list)  # (agg key, op, constant)
    topk: tuple | None = None  # (agg key, desc, k)


def shape_of(sql: str) -> Shape:
    tree = parse(sql)
    if not isinstance(tree, exp.Select):
        raise UnsupportedSqlError("advisor: only a single SELECT block (Q-AGH / Q-AJGH) is supported")
    if tree.find(exp.Subquery) is not None:
        raise UnsupportedSqlError("advisor: nested queries (Q-AAGH) are not supported by the estimator")
    counts: dict = {}
    aliases = {}
    for t in tree.find_all(exp.Table):
        name = t.name.lower()
        counts[name] = counts.get(name, 0) + 1
        aliases[name] = t.alias_or_name
    aliases = {t: a for t, a in aliases.items() if counts[t] == 1}
    sel_alias = {e.alias: e.this for e in tree.expressions if isinstance(e, exp.Alias)}
    group = [g for g in (tree.args["group"].expressions if tree.args.get("group") else [])]
    group = [sel_alias.get(g.name, g) if isinstance(g, exp.Column) and not g.table and g.name in sel_alias else g
             for g in group]
    aggs = {}

    def agg_key(node):
        node = sel_alias.get(node.name, node) if isinstance(node, exp.Column) and not node.table else node
        while isinstance(node, exp.Paren):
            node = node.this
        f = next((n for c, n in _AGGS.items() if isinstance(node, c)), None)
        if f is None or isinstance(node.this, exp.Distinct):
            raise UnsupportedSqlError(f"advisor: {node.sql()!r} is not SUM/COUNT/AVG of an expression")
        arg = None if f == "count" and isinstance(node.this, exp.Star) else node.this
        aggs[node.sql()] = (f, arg)
        return node.sql()

    shape = Shape(tree, aliases, group, aggs)
    if tree.args.get("having") is not None:
        for c in conjuncts(tree.args["having"].this):
            op = next((o for k, o in _OPS.items() if isinstance(c, k)), None)
            if op is None:
                raise UnsupportedSqlError(f"advisor: HAVING conjunct {c.sql()!r} is not 'aggregate op constant'")
            left, right = c.this, c.expression
            if _const(left) is not None:
                left, right, op = right, left, _FLIP[op]
            value = _const(right)
            if value is None:
                raise UnsupportedSqlError(f"advisor: HAVING conjunct {c.sql()!r} is not 'aggregate op constant'")
            shape.having.append((agg_key(left), op, value))
    if tree.args.get("limit") is not None:
        order = tree.args.get("order")
        if order is None or len(order.expressions) != 1:
            raise UnsupportedSqlError("advisor: LIMIT needs ORDER BY one aggregate")
        o = order.expressions[0]
        k = _const(tree.args["limit"].expression)
        shape.topk = (agg_key(o.this), bool(o.args.get("desc")), int(k))
    return shape


def _const(node):
    neg = False
    while isinstance(node, (exp.Paren, exp.Neg)):
        neg ^= isinstance(node, exp.Neg)
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        v = float(node.this)
        return -v if neg else v
    return None


def _input_rows(shape: Shape, tables: dict, cands: list) -> pa.Table:
    """The aggregation's input rows (FROM, joins, WHERE) with group id, aggregate arguments and
    candidate attribute values, computed by DuckDB."""
    inner = shape.select.copy()
    for k in ("group", "having", "order", "limit", "distinct"):
        inner.set(k, None)
    exprs = [exp.alias_(g.copy(), f"__g{i}", quoted=True) for i, g in enumerate(shape.group)]
    for j, (key, (f, arg)) in enumerate(shape.aggs.items()):
        exprs.append(exp.alias_(arg.copy() if arg is not None else exp.Literal.number(1), f"__a{j}", quoted=True))
    for k, (t, a) in enumerate(cands):
        exprs.append(exp.alias_(exp.column(a, table=shape.aliases[t], quoted=True), f"__c{k}", quoted=True))
    inner.set("expressions", exprs)
    if shape.group:
        keys = ", ".join(f'"__g{i}"' for i in range(len(shape.group)))
        gid = f"dense_rank() OVER (ORDER BY {keys}) - 1"
    else:
        gid = "0"
    sql = f'SELECT *, {gid} AS "__gid" FROM ({inner.sql(dialect="duckdb")}) AS "__in"'
    con = duckdb.connect()
    try:
        con.execute("SET threads TO 1")
        con.execute("SET integer_division = true")
        for name, t in tables.items():
            con.register(name, t)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def _floats(col) -> np.ndarray:
    if pa.types.is_decimal(col.type):
        col = pc.cast(col, pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def _group_stats(values: np.ndarray, sample, n_groups: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: bootstrapped mean s̄, sample std (ddof 1, pooled std where unknown), #s."""
    v = values[sample.rows]
    g = sample.group
    ns = np.bincount(g, minlength=n_groups)
    mean = bootstrap_means(v, g, n_groups, rng)
    if len(v):
        mean = np.where(np.isnan(mean), float(v.mean()), mean)  # unsampled group (fallback): overall mean
    s1 = np.bincount(g, weights=v, minlength=n_groups)
    s2 = np.bincount(g, weights=v * v, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s1 / ns
        var = (s2 - ns * m * m) / (ns - 1)
    pooled = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    sd = np.where(ns >= 2, np.sqrt(np.maximum(var, 0.0)), pooled)
    return mean, sd, ns


def _estimates(shape: Shape, rows: pa.Table, theta: float, rng) -> tuple:
    """Per group estimate, half-width, pass probability; masks of groups in 𝒢′ (est, sure, possible)."""
    gid = rows.column("__gid").to_numpy().astype(np.int64)
    n_groups = int(gid.max()) + 1 if len(gid) else 0
    sample = stratified_sample(gid, theta, rng)
    sizes = sample.group_sizes.astype(np.float64)
    est, eps = {}, {}
    for j, (key, (f, arg)) in enumerate(shape.aggs.items()):
        v = _floats(rows.column(f"__a{j}"))
        mean, sd, ns = _group_stats(v, sample, n_groups, rng)
        whole = ns >= sizes
        with np.errstate(invalid="ignore", divide="ignore"):
            if f == "count":
                est[key], eps[key] = sizes.copy(), np.zeros(n_groups)  # WHERE is applied: #s_pred = #s
            elif f == "sum":
                est[key] = sizes * mean
                eps[key] = np.where(whole, 0.0, Z95 * sizes * sd / np.sqrt(np.maximum(ns, 1)))
            else:
                est[key] = mean
                eps[key] = np.where(whole, 0.0, Z95 * sd / np.sqrt(np.maximum(ns, 1)))
    ok = np.ones(n_groups, dtype=bool)
    sure = np.ones(n_groups, dtype=bool)
    possible = np.ones(n_groups, dtype=bool)
    prob = np.ones(n_groups)
    for key, op, c in shape.having:
        e, h = est[key], eps[key]
        cmp = {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}[op]
        ok &= cmp(e, c)
        worst, best = (e - h, e + h) if op in (">", ">=") else (e + h, e - h)
        sure &= cmp(worst, c)
        possible &= cmp(best, c)
        prob *= np.array([pass_probability(a, b / Z95, op, c) for a, b in zip(e, h)]) if n_groups else prob
    if shape.topk is not None:
        key, desc, k = shape.topk
        s_e = (-1.0 if desc else 1.0) * est[key]  # smaller is better
        s_lo, s_hi = s_e - eps[key], s_e + eps[key]
        idx = np.flatnonzero(ok)
        chosen = np.zeros(n_groups, dtype=bool)
        chosen[idx[np.argsort(s_e[idx], kind="stable")[:k]]] = True
        others = possible & ~chosen
        # surely in the top k: beats the best case of every other group; possibly: its best
        # case beats the worst chosen group's worst case
        sure = chosen & (s_hi < (s_lo[others].min() if others.any() else np.inf)) if k > 0 else chosen
        possible = chosen | (possible & (s_lo <= (s_hi[chosen].max() if chosen.any() else -np.inf)))
        ok = chosen
        prob = ok.astype(np.float64)
    return gid, n_groups, ok, sure, possible | ok, prob


def _partition(table: pa.Table, attribute: str, fragments: int, given=None) -> tuple[RangePartition, np.ndarray]:
    """The candidate's partition (``given`` or equi-depth) and the size of every fragment."""
    col = table.column(attribute)
    part = given if given is not None else RangePartition.equi_depth(attribute, col, fragments)
    ids = part.fragment_of(col)
    return part, np.bincount(ids, minlength=part.n_fragments + 1)


@dataclass
class Refused:
    table: str
    attribute: str
    reason: str


@dataclass
class Advice:
    """What ``ivmstream sketch advise`` prints: ranked safe candidates and the refused attributes."""

    candidates: list  # [Candidate], smallest estimate first
    refused: list  # [Refused]
    theta: float

    @property
    def chosen(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def screen(sql: str, tables: dict, strategy: str = "all", fragments: int = 100, prefilter: bool = True,
           stats: dict | None = None, nullable: dict | None = None) -> tuple[list[tuple[str, str]], list[Refused]]:
    """Candidate (table, attribute) pairs (safe, read once, enough distinct values) and every
    other attribute of the query's tables with the reason it is not one.

    ``stats``, ``nullable``: min/max statistics and columns that may hold NULL for the safety
    check (``None``: from ``tables``; ``stats={}`` with every column that may ever hold NULL in
    ``nullable``: an answer that does not depend on the current data)."""
    from operators.sketch_safety import check_safety

    if strategy not in ("all", "gb"):
        raise ConfigError(f"advisor strategy must be 'all' or 'gb', got {strategy!r}")
    shape = shape_of(sql)
    tables = {t.lower(): v for t, v in tables.items()}
    schema = {t: list(v.column_names) for t, v in tables.items()}
    used = sorted({t.name.lower() for t in shape.select.find_all(exp.Table)})
    gb_cols = {(g.table or None, g.name) for g in shape.group if isinstance(g, exp.Column)}
    out, refused = [], []
    for t in used:
        if t not in tables:
            raise ConfigError(f"advisor: unknown table {t!r}")
        for a in schema[t]:
            r = check_safety(sql, t, a, schema=schema, stats=stats, tables=tables,
                             nullable=nullable)
            if not r.safe:
                refused.append(Refused(t, a, r.reason))
            elif t not in shape.aliases:
                refused.append(Refused(t, a, f"{t} is read more than once: the estimator needs one access"))
            elif strategy == "gb" and (shape.aliases[t], a) not in gb_cols and (None, a) not in gb_cols:
                refused.append(Refused(t, a, "not a group-by column (strategy gb)"))
            elif prefilter and (nd := pc.count_distinct(tables[t].column(a)).as_py()) <= fragments:
                refused.append(Refused(t, a, f"{nd} distinct values, not more than the {fragments} fragments"))
            else:
                out.append((t, a))
    return out, refused


def candidates_for(sql: str, tables: dict, strategy: str = "all", fragments: int = 100,
                   prefilter: bool = True, stats: dict | None = None,
                   nullable: dict | None = None) -> list[tuple[str, str]]:
    """Candidate (table, attribute) pairs: safe, read once, enough distinct values."""
    return screen(sql, tables, strategy, fragments, prefilter, stats, nullable)[0]


def advise(sql: str, tables: dict, *, fragments: int = 100, theta: float = 0.05, seed: int = 0,
           strategy: str = "all", candidates: list | None = None, prefilter: bool = True,
           partitions: dict | None = None, stats: dict | None = None,
           nullable: dict | None = None) -> list[Candidate]:
    """Safe candidate attributes with estimated sketch shares, smallest estimate first.

    ``candidates``: (table, attribute) pairs to rank instead of ``candidates_for``;
    ``partitions``: (table, attribute) -> RangePartition instead of equi-depth ones."""
    partitions = partitions or {}
    tables = {t.lower(): v for t, v in tables.items()}
    shape = shape_of(sql)
    if candidates is None:
        candidates = candidates_for(sql, tables, strategy, fragments, prefilter, stats, nullable)
    if not candidates:
        return []
    rng = np.random.default_rng(seed)
    rows = _input_rows(shape, tables, candidates)
    gid, n_groups, ok, sure, possible, prob = _estimates(shape, rows, theta, rng)
    out = []
    for k, (t, a) in enumerate(candidates):
        part, frag_sizes = _partition(tables[t], a, fragments, partitions.get((t, a)))
        frag = part.fragment_of(rows.column(f"__c{k}"))
        total = tables[t].num_rows or 1

        def share(mask):
            return size_from_groups(mask, gid, frag, frag_sizes) / total

        pairs = np.unique(gid * (part.n_fragments + 1) + frag) if len(gid) else np.zeros(0, dtype=np.int64)
        pg, pf = pairs // (part.n_fragments + 1), pairs % (part.n_fragments + 1)
        logq = np.bincount(pf, weights=np.log(np.clip(1.0 - prob[pg], 1e-300, 1.0)), minlength=len(frag_sizes))
        p_frag = 1.0 - np.exp(logq)
        expected = float(np.dot(frag_sizes, p_frag)) / total
        out.append(Candidate(t, a, share(ok), share(sure), share(possible), expected, part.n_fragments))
    return sorted(out, key=lambda c: (c.estimate, c.expected, c.table, c.attribute))


def size_from_groups(selected: np.ndarray, gid: np.ndarray, frag: np.ndarray, frag_sizes: np.ndarray) -> int:
    """Alg. 2: rows of the fragments holding a row of a selected group (``selected[g]``)."""
    if len(gid) == 0:
        return 0
    frags = np.unique(np.asarray(frag)[np.asarray(selected)[np.asarray(gid)]])
    return int(np.asarray(frag_sizes)[frags].sum())


def verify(sql: str, tables: dict, candidates: list[Candidate], *, fragments: int | None = None,
           partitions: dict | None = None, how="capture") -> list[Candidate]:
    """The candidates with ``true`` set: the share the accurate sketch covers, computed by a
    capture with the maintenance engine (``how="capture"``, ``SketchMaintainer.initialize``) or
    by ``how(sql, tables, partitions) -> {table: fragment ids}``: the tests and the bench pass
    the DuckDB lineage oracle (``tests.oracles.sketch_reference.reference_sketch``) here, which
    product code never imports."""
    if isinstance(how, str) and how != "capture":
        raise ValueError(f"verify: how must be 'capture' or a function, got {how!r}")
    tables = {t.lower(): v for t, v in tables.items()}
    out = []
    for c in candidates:
        given = (partitions or {}).get((c.table, c.attribute))
        part, frag_sizes = _partition(tables[c.table], c.attribute, fragments or c.fragments, given)
        if how == "capture":
            from operators.sketch import SketchMaintainer

            m = SketchMaintainer.from_sql(sql, {c.table: part})
            m.initialize(tables)
            ids = np.asarray(sorted(m.sketch.get(c.table, ())), dtype=np.int64)
        else:
            ids = np.asarray(how(sql, tables, {c.table: part})[c.table], dtype=np.int64)
        out.append(replace(c, true=float(frag_sizes[ids].sum()) / (tables[c.table].num_rows or 1)))
    return out


def advise_report(sql: str, tables: dict, *, verify: bool = False, fragments: int = 100, theta: float = 0.05,
                  seed: int = 0, strategy: str = "all", stats: dict | None = None, nullable: dict | None = None,
                  how="capture") -> Advice:
    """Screen the attributes, rank the safe candidates and, with ``verify``, add true shares."""
    cands, refused = screen(sql, tables, strategy, fragments, True, stats, nullable)
    ranked = advise(sql, tables, fragments=fragments, theta=theta, seed=seed, candidates=cands) if cands else []
    if verify and ranked:
        ranked = globals()["verify"](sql, tables, ranked, how=how)
    return Advice(ranked, refused, theta)


def format_advice(advice: Advice) -> str:
    """The printed table of ``ivmstream sketch advise``: candidates, refused attributes, the winner."""
    cands = advice.candidates
    verified = bool(cands) and cands[0].true is not None
    lines = []
    if cands:
        head = f"{'rank':>4}  {'table.attribute':<32} {'estimate':>9} {'95% interval':>17} {'expected':>9}"
        lines.append(head + (f" {'true':>8}" if verified else ""))
        for i, c in enumerate(cands, 1):
            line = (f"{i:>4}  {c.table + '.' + c.attribute:<32} {c.estimate:>8.1%} "
                    f"[{c.ci_low:>6.1%}, {c.ci_high:>6.1%}] {c.expected:>8.1%}")
            lines.append(line + (f" {c.true:>7.1%}" if verified else ""))
    for r in advice.refused:
        lines.append(f"   -  {r.table + '.' + r.attribute:<32} refused: {r.reason}")
    best = advice.chosen
    if best is None:
        lines.append("no safe candidate attribute (a sketch would not be safe for this query)")
    else:
        lines.append(f"chosen: {best.table}.{best.attribute} ({best.fragments} fragments, theta={advice.theta:g})")
        if verified:
            opt = min(c.true for c in cands)
            lines.append("chosen attribute is optimal" if math.isclose(best.true, opt) else
                         f"optimal true share is {opt:.1%}")
    return "\n".join(lines) + "\n"


def advise_for_cli(sql: str, tables: dict, verify: bool = False, *, fragments: int = 100, theta: float = 0.05,
                   seed: int = 0, strategy: str = "all", stats: dict | None = None, how="capture") -> str:
    """``format_advice(advise_report(...))``: the printed table of ``ivmstream sketch advise``."""
    return format_advice(advise_report(sql, tables, verify=verify, fragments=fragments, theta=theta, seed=seed,
                                       strategy=strategy, stats=stats, how=how))
