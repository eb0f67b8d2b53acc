"""SQL front end: sqlglot (Postgres dialect) -> operator tree of ``plan`` nodes.

Supported: SELECT [DISTINCT] with expressions (arithmetic, CASE, casts incl. ``::float``,
``to_date``, ``DATE '...'``, ``extract``/``date_part`` year/month, ``||``, LIKE, IN lists,
BETWEEN, IS NULL, AND/OR/NOT); FROM tables, subqueries and parenthesised join trees;
inner ``JOIN ... ON``, ``CROSS JOIN`` and comma joins (equalities in WHERE become join
keys); GROUP BY (columns, expressions, select aliases, positions); HAVING; aggregates
SUM/COUNT/COUNT(*)/AVG/MIN/MAX; ORDER BY ... LIMIT (top-k); UNION ALL and UNION.
Anything else raises ``UnsupportedSqlError`` naming the construct (outer joins,
subqueries in expressions - correlated or not -, window functions, set difference and
intersection, OFFSET, aggregates over DISTINCT, ...).  Column names are resolved against
the schemas of the base tables, so the tree is built once those are known.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from core.errors import SqlError, UnsupportedSqlError
from operators.sketch import plan as P
from operators.sketch.aggregate import AggCall
from operators.sketch.expr import Col
from operators.sketch.sqlexpr import Star, translate

_AGGS = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}


def parse(sql: str) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError as e:
        raise SqlError(f"cannot parse query: {e}") from None
    if not isinstance(tree, (exp.Select, exp.Union, exp.Subquery)):
        raise UnsupportedSqlError(f"only SELECT queries are supported, got {type(tree).__name__}")
    check_supported(tree)
    return tree


def check_supported(tree: exp.Expression) -> None:
    """Reject constructs outside the supported fragment before any schema is known."""
    for node in tree.walk():
        if isinstance(node, exp.Window):
            raise UnsupportedSqlError("window functions (OVER ...) are not supported")
        if isinstance(node, exp.Join):
            side = (node.args.get("side") or "").upper()
            kind = (node.args.get("kind") or "").upper()
            if side in ("LEFT", "RIGHT", "FULL") or kind == "OUTER":
                raise UnsupportedSqlError(f"outer joins ({side or kind} JOIN) are not supported")
            if kind in ("SEMI", "ANTI") or node.args.get("method"):
                raise UnsupportedSqlError(f"{kind or node.args.get('method')} joins are not supported")
            if node.args.get("using"):
                raise UnsupportedSqlError("JOIN ... USING is not supported (write ON)")
        if isinstance(node, (exp.Except, exp.Intersect)):
            raise UnsupportedSqlError(f"{type(node).__name__.upper()} is not supported")
        if isinstance(node, exp.Exists):
            raise UnsupportedSqlError("EXISTS subqueries (correlated or nested subqueries) are not supported")
        if isinstance(node, exp.Lateral):
            raise UnsupportedSqlError("LATERAL subqueries are not supported")
        if isinstance(node, exp.With):
            raise UnsupportedSqlError("WITH (common table expressions) is not supported")
        if isinstance(node, (exp.Select, exp.Union)) and node.args.get("offset"):
            raise UnsupportedSqlError("OFFSET is not supported")
        if isinstance(node, exp.Select) and _in_expression(node):
            raise UnsupportedSqlError("subqueries inside expressions (correlated or scalar subqueries) are not supported")


def _in_expression(node) -> bool:
    """True if this SELECT sits inside an expression rather than in FROM / JOIN / UNION."""
    p = node.parent
    while p is not None:
        if isinstance(p, (exp.From, exp.Join)):
            return False
        if not isinstance(p, (exp.Subquery, exp.Paren, exp.Union)):
            return True
        p = p.parent
    return False


@dataclass
class Entry:
    qualifier: str | None
    name: str
    id: str


@dataclass
class Rel:
    node: P.Node
    scope: list  # [Entry]

    def resolve(self, name: str, qual: str | None) -> str:
        name_l = name.lower()
        hits = [e for e in self.scope if e.name.lower() == name_l and (qual is None or (e.qualifier or "").lower() == qual.lower())]
        ids = {e.id for e in hits}
        if not hits:
            full = f"{qual}.{name}" if qual else name
            raise SqlError(f"unknown column {full!r}")
        if len(ids) > 1:
            raise SqlError(f"ambiguous column {name!r}")
        return hits[0].id


@dataclass
class Query:
    """A planned query: root node, output names/ids, result order and hidden sort columns."""

    root: P.Node
    names: list
    ids: list
    order: list = field(default_factory=list)  # [(id, desc)] for result()
    hidden: list = field(default_factory=list)
    limit: int | None = None


class Planner:
    def __init__(self, schemas: dict):
        self.schemas = {k.lower(): list(v) for k, v in schemas.items()}
        self.tables_used: set = set()

    # -- relations ---------------------------------------------------------------------------
    def from_item(self, item) -> Rel:
        if isinstance(item, exp.Table):
            if item.args.get("db") or item.args.get("catalog"):
                name = item.name
            else:
                name = item.name
            tname = name.lower()
            if tname not in self.schemas:
                raise SqlError(f"unknown table {name!r}")
            self.tables_used.add(tname)
            cols = [(c, P.new_id(c)) for c in self.schemas[tname]]
            qual = item.alias or name
            return Rel(P.ScanNode(tname, cols), [Entry(qual, c, i) for c, i in cols])
        if isinstance(item, exp.Subquery):
            inner = item.this
            if isinstance(inner, (exp.Select, exp.Union)):
                q = self.query(inner, root=False)
                rel = Rel(q.root, [Entry(item.alias or None, n, i) for n, i in zip(q.names, q.ids)])
            else:
                rel = self.from_item(inner)
            if item.args.get("joins"):
                rel = self.apply_joins(rel, item.args["joins"])
            if item.alias:
                rel = Rel(rel.node, [Entry(item.alias, e.name, e.id) for e in rel.scope])
            return rel
        if isinstance(item, exp.Paren):
            return self.from_item(item.this)
        raise UnsupportedSqlError(f"FROM item {type(item).__name__} is not supported")

    def apply_joins(self, rel: Rel, joins) -> Rel:
        for j in joins:
            right = self.from_item(j.this)
            node = P.JoinNode(rel.node, right.node)
            merged = Rel(node, rel.scope + right.scope)
            on = j.args.get("on")
            if on is not None:
                merged = Rel(P.FilterNode(node, translate(on, merged)), merged.scope)
            rel = merged
        return rel

    # -- queries -----------------------------------------------------------------------------
    def query(self, q, root: bool) -> Query:
        if isinstance(q, exp.Union):
            return self.union(q, root)
        if isinstance(q, exp.Subquery):
            return self.query(q.this, root)
        if not isinstance(q, exp.Select):
            raise UnsupportedSqlError(f"{type(q).__name__} is not supported as a query")
        return self.select(q, root)

    def union(self, q: exp.Union, root: bool) -> Query:
        left = self.query(q.this, root=False)
        right = self.query(q.expression, root=False)
        if len(left.ids) != len(right.ids):
            raise SqlError("UNION inputs have different numbers of columns")
        out = [P.new_id(n) for n in left.names]
        node = P.UnionNode([left.root, right.root], out)
        if q.args.get("distinct"):
            g = [(i, P.new_id(n)) for i, n in zip(out, left.names)]
            node, out = P.AggNode(node, g, [], name="distinct"), [o for _, o in g]
        rel = Rel(node, [Entry(None, n, i) for n, i in zip(left.names, out)])
        return self.finish(q, rel, list(left.names), list(out), root, post=None)

    def select(self, q: exp.Select, root: bool) -> Query:
        frm = q.args.get("from_") or q.args.get("from")
        if frm is None:
            raise UnsupportedSqlError("SELECT without FROM is not supported")
        rel = self.from_item(frm.this)
        if q.args.get("joins"):
            rel = self.apply_joins(rel, q.args["joins"])
        where = q.args.get("where")
        if where is not None:
            rel = Rel(P.FilterNode(rel.node, translate(where.this, rel)), rel.scope)
        items = self.select_items(q, rel)
        group = q.args.get("group")
        having = q.args.get("having")
        aggs_found = any(isinstance(n, exp.AggFunc) for it in items for n in _walk(it[1])) or (
            having is not None) or any(isinstance(n, exp.AggFunc) for o in _order_items(q) for n in o.walk())
        post = None
        if group is not None or aggs_found:
            rel, post = self.aggregate(q, rel, items)
            if having is not None:
                rel = Rel(P.FilterNode(rel.node, post(having.this)), rel.scope)
        exprs, names = [], []
        used = set()
        for name, e in items:
            x = post(e) if post else translate(e, rel)
            if isinstance(x, Col) and x.id not in used:
                oid = x.id
            else:
                oid = P.new_id(name)
            used.add(oid)
            exprs.append((oid, x))
            names.append(name)
        ids = [i for i, _ in exprs]
        node = P.ProjectNode(rel.node, exprs)
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise UnsupportedSqlError("DISTINCT ON is not supported")
            g = [(i, P.new_id(n)) for i, n in zip(ids, names)]
            node, ids = P.AggNode(node, g, [], name="distinct"), [o for _, o in g]
        out_rel = Rel(node, [Entry(None, n, i) for n, i in zip(names, ids)])
        return self.finish(q, out_rel, names, ids, root, post=(post, rel, exprs))

    def select_items(self, q: exp.Select, rel: Rel) -> list:
        items = []
        for it in q.expressions:
            if isinstance(it, exp.Star):
                items.extend((e.name, Star(e.id)) for e in _visible(rel.scope))
                continue
            if isinstance(it, exp.Column) and isinstance(it.this, exp.Star):
                qual = it.table.lower()
                items.extend((e.name, Star(e.id)) for e in _visible(rel.scope) if (e.qualifier or "").lower() == qual)
                continue
            name = it.alias_or_name or it.sql(dialect="postgres")
            e = it.this if isinstance(it, exp.Alias) else it
            items.append((name, e))
        return items

    def aggregate(self, q: exp.Select, rel: Rel, items):
        group = q.args.get("group")
        gexprs = []
        aliases = {n.lower(): e for n, e in items}
        for g in (group.expressions if group is not None else []):
            if isinstance(g, exp.Literal) and not g.is_string:
                g = items[int(g.this) - 1][1]
            elif isinstance(g, exp.Column) and not g.table:
                try:
                    rel.resolve(g.name, None)
                except SqlError:
                    if g.name.lower() in aliases:
                        g = aliases[g.name.lower()]
            gexprs.append(g)
        pre, group_map, col_group = [], [], {}
        for g in gexprs:
            x = translate(g, rel)
            iid = x.id if isinstance(x, Col) else P.new_id("g")
            if not isinstance(x, Col):
                pre.append((iid, x))
            oid = P.new_id(g.alias_or_name or "g")
            group_map.append((g, iid, oid))
            if isinstance(x, Col):
                col_group[x.id] = oid
        agg_nodes = []
        for _, e in items:
            agg_nodes.extend(n for n in _walk(e) if isinstance(n, exp.AggFunc))
        if q.args.get("having") is not None:
            agg_nodes.extend(n for n in q.args["having"].walk() if isinstance(n, exp.AggFunc))
        for o in _order_items(q):
            agg_nodes.extend(n for n in o.walk() if isinstance(n, exp.AggFunc))
        calls, by_sql = [], {}
        for a in agg_nodes:
            key = a.sql(dialect="postgres").lower()
            if key in by_sql:
                continue
            func = _AGGS.get(type(a))
            if func is None:
                raise UnsupportedSqlError(f"aggregate function {a.sql_name()} is not supported")
            arg = a.this
            if isinstance(arg, exp.Distinct):
                raise UnsupportedSqlError(f"aggregates over DISTINCT ({a.sql(dialect='postgres')}) are not supported")
            if func == "count" and (arg is None or isinstance(arg, exp.Star)):
                call = AggCall("count_star", None, P.new_id("count"))
            else:
                x = translate(arg, rel)
                if any(isinstance(n, exp.AggFunc) for n in arg.walk()):
                    raise SqlError("nested aggregate functions are not allowed")
                aid = x.id if isinstance(x, Col) else P.new_id("arg")
                if not isinstance(x, Col):
                    pre.append((aid, x))
                call = AggCall(func, aid, P.new_id(func))
            by_sql[key] = call
            calls.append(call)
        child = rel.node
        if pre:
            passthrough = [(i, Col(i)) for i in child.out]
            child = P.ProjectNode(child, passthrough + pre)
        node = P.AggNode(child, [(iid, oid) for _, iid, oid in group_map], calls)
        gsql = {g.sql(dialect="postgres").lower(): oid for g, _, oid in group_map}

        def post(e):
            return translate(e, rel, agg=(by_sql, gsql, col_group))

        return Rel(node, rel.scope), post

    def finish(self, q, rel: Rel, names, ids, root: bool, post) -> Query:
        order, hidden = [], []
        for o in _order_items(q):
            desc = bool(o.args.get("desc"))
            e = o.this
            oid = None
            if isinstance(e, exp.Literal) and not e.is_string:
                oid = ids[int(e.this) - 1]
            elif isinstance(e, exp.Column) and not e.table:
                m = [i for n, i in zip(names, ids) if n.lower() == e.name.lower()]
                if m:
                    oid = m[0]
            if oid is None:
                if post is None:
                    x = translate(e, rel)
                else:
                    fpost, frel, exprs = post
                    x = fpost(e) if fpost else translate(e, frel)
                    match = [i for i, ex in exprs if ex == x]
                    if match:
                        oid = match[0]
                    elif isinstance(rel.node, P.ProjectNode):
                        oid = P.new_id("order")
                        rel.node.exprs.append((oid, x))
                        rel.node.out.append(oid)
                        hidden.append(oid)
                    else:
                        raise SqlError(f"ORDER BY {e.sql()} must appear in the select list")
                if oid is None:
                    oid = x.id if isinstance(x, Col) else None
                if oid is None:
                    raise SqlError(f"ORDER BY {e.sql()} must appear in the select list")
            order.append((oid, desc))
        node = rel.node
        limit = q.args.get("limit")
        k = None
        if limit is not None:
            le = limit.args.get("expression") or limit.this
            if not isinstance(le, exp.Literal) or le.is_string:
                raise UnsupportedSqlError("LIMIT must be an integer literal")
            k = int(le.this)
            node = P.TopKNode(node, order, k)
        if hidden and not root:  # a subquery hides its extra ORDER BY columns again
            node = P.ProjectNode(node, [(i, Col(i)) for i in ids])
        return Query(node, list(names), list(ids), order if root else [], hidden if root else [], k)

def _walk(e):
    return e.walk() if not isinstance(e, Star) else iter(())


def _visible(scope):
    seen, out = set(), []
    for e in scope:
        if e.id not in seen:
            seen.add(e.id)
            out.append(e)
    return out


def _order_items(q) -> list:
    o = q.args.get("order")
    return list(o.expressions) if o is not None else []


def build(sql_or_tree, schemas: dict) -> tuple:
    """Plan a query; returns (Query, planner) after push-down and pruning."""
    tree = parse(sql_or_tree) if isinstance(sql_or_tree, str) else sql_or_tree
    with P.id_scope():
        pl = Planner(schemas)
        q = pl.query(tree, root=True)
    root = P.push_filters(q.root)
    P.prune(root, set(q.ids) | set(q.hidden) | {i for i, _ in q.order})
    q.root = root
    return q, pl
