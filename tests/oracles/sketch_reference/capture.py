"""Accurate provenance-sketch capture by a Perm-style lineage rewrite of SQL run in DuckDB.

This is the oracle the sketch engine (``operators.sketch``) is tested against. It shares no
code with the engine: the query is parsed with sqlglot, every SELECT block is rewritten so that
each output row carries, per partitioned table ``t``, the fragment ids of the base tuples of
``t`` in its lineage (a column ``"__prov_t"``), and DuckDB evaluates the rewritten query.

Rewrite rules (Lineage semantics, PBDS rules r0–r7 with sets of fragment ids instead of
bitsets; "scalar" = one fragment id per row, "list" = a list of ids):

* table access of a partitioned table: the registered relation has an extra int column
  ``__prov_t`` = the tuple's fragment id, computed in numpy from the boundaries (scalar);
* projection, selection (WHERE), join (any inner/outer join, comma join): the row's lineage is
  the concatenation of the lineage of its source rows (scalar stays scalar while only one
  source has it, the "delay" trick of PBDS);
* aggregation (GROUP BY and/or aggregate functions): a group's lineage is the union over all
  of its input rows, i.e. every tuple of the group that survived WHERE/joins; HAVING is
  evaluated on the same SELECT so filtered groups contribute nothing;
* DISTINCT: like GROUP BY all output columns, the lineage of a distinct row is the union of
  the lineage of all its duplicates; UNION (distinct) likewise over UNION ALL;
* UNION ALL: each branch keeps its own lineage (tables a branch lacks get an empty list);
* ORDER BY … LIMIT k [OFFSET o]: rows are ordered by the ORDER BY keys (Postgres NULL order:
  ASC NULLS LAST, DESC NULLS FIRST), ties by all output columns ascending (NULLS LAST), and
  rows equal in all output columns by their sorted list of (global) fragment ids — the
  engine's documented order (operators/sketch/topk.py); the rows at positions o … o+k−1 keep
  their lineage, the others are dropped;
* root: the sketch of ``t`` is the set union of ``__prov_t`` over all result rows.

SQL is read in the Postgres dialect and run with DuckDB's ``integer_division`` on, so that
``int / int`` truncates toward zero as in Postgres (sqlglot leaves ``/`` as is).

Not supported (raises ``UnsupportedSqlError``): WITH, subqueries outside FROM/JOIN (IN/EXISTS/
scalar subqueries), window functions, NATURAL and LATERAL joins, INTERSECT/EXCEPT,
DISTINCT ON.

Cost: one DuckDB query of about the cost of the original query plus a hash-distinct of small
ints per group; fragment ids are computed once per call with numpy.searchsorted.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import duckdb
import pyarrow as pa
import sqlglot
import sqlglot.expressions as exp

from core.errors import UnsupportedSqlError
from tests.oracles.sketch_reference.fragments import fragment_ids

PROV = "__prov_"
SCALAR, LIST = "scalar", "list"


def prov_column(table: str) -> str:
    return f"{PROV}{table}"


def _frag(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="duckdb")


def _qcol(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(
        this=exp.to_identifier(name, quoted=True),
        table=exp.to_identifier(table, quoted=True) if table else None,
    )


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _Rel:
    """A rewritten query and the lineage columns its output carries: table → kind."""

    query: exp.Expression
    provs: dict[str, str] = field(default_factory=dict)


class _Rewriter:
    def __init__(self, sizes: dict[str, int], con: duckdb.DuckDBPyConnection):
        # Global fragment numbering used only to order tied rows: tables sorted by name, table
        # t's fragment i is offset[t] + i, each table taking n_fragments + 1 ids (NULL fragment).
        self.partitioned = set(sizes)
        self.offsets: dict[str, int] = {}
        off = 0
        for t in sorted(sizes):
            self.offsets[t] = off
            off += sizes[t]
        self.con = con
        self._ids = itertools.count(1)

    def fresh(self, stem: str) -> str:
        return f"__{stem}{next(self._ids)}"

    # -- dispatch ---------------------------------------------------------------------------
    def query(self, q: exp.Expression) -> _Rel:
        if isinstance(q, exp.Subquery):
            return self.query(q.this)
        if isinstance(q, exp.Select):
            return self.select(q)
        if isinstance(q, exp.Union):
            return self.union(q)
        raise UnsupportedSqlError(f"reference capture: unsupported query node {type(q).__name__}: {q.sql()[:200]}")

    # -- FROM items -------------------------------------------------------------------------
    def source(self, src: exp.Expression) -> tuple[exp.Expression, str, dict[str, str]]:
        # A parenthesised join "(A JOIN B ON …) [AS j]" reaches us as a Table/Subquery that
        # carries the joins itself (unaliased), or wrapped once more in an aliased Subquery.
        if isinstance(src, (exp.Table, exp.Subquery)) and src.args.get("joins"):
            return self._join_group(src, None)
        if isinstance(src, exp.Subquery) and isinstance(src.this, (exp.Table, exp.Subquery)):
            return self._join_group(src.this, src.alias or None)
        if isinstance(src, exp.Table):
            if src.args.get("joins") or src.args.get("laterals"):
                raise UnsupportedSqlError("reference capture: nested join syntax")
            name = src.name.lower()
            alias = src.alias_or_name
            return src, alias, ({name: SCALAR} if name in self.partitioned else {})
        if isinstance(src, exp.Subquery):
            inner = self.query(src.this)
            alias_node = src.args.get("alias")
            alias = src.alias or self.fresh("s")
            new_alias = exp.TableAlias(this=exp.to_identifier(alias))
            if alias_node is not None and alias_node.columns:
                cols = [c.copy() for c in alias_node.columns]
                cols += [exp.to_identifier(prov_column(t), quoted=True) for t in inner.provs]
                new_alias.set("columns", cols)
            return exp.Subquery(this=inner.query, alias=new_alias), alias, inner.provs
        raise UnsupportedSqlError(f"reference capture: unsupported FROM item {type(src).__name__}")

    def _join_group(self, first: exp.Expression, alias: str | None) -> tuple[exp.Expression, str, dict[str, str]]:
        """Evaluate a parenthesised join as the derived table ``(SELECT * FROM A JOIN B …)``.

        Columns stay reachable unqualified or through the group's alias; references to the
        inner aliases from outside an unaliased group are not supported (DuckDB then fails)."""
        base = first.copy()
        joins = base.args.get("joins") or []
        base.set("joins", None)
        sel = exp.Select(expressions=[exp.Star()]).from_(base)
        if joins:
            sel.set("joins", [j.copy() for j in joins])
        rel = self.select(sel)
        alias = alias or self.fresh("j")
        return exp.Subquery(this=rel.query, alias=exp.TableAlias(this=exp.to_identifier(alias))), alias, rel.provs

    # -- SELECT -----------------------------------------------------------------------------
    def _check_expressions(self, sel: exp.Select) -> None:
        parts: list[exp.Expression] = list(sel.expressions)
        for key in ("where", "group", "having", "order", "qualify"):
            if sel.args.get(key) is not None:
                parts.append(sel.args[key])
        for j in sel.args.get("joins") or []:
            if j.args.get("on") is not None:
                parts.append(j.args["on"])
        for p in parts:
            if p.find(exp.Query) is not None or p.find(exp.Exists) is not None:
                raise UnsupportedSqlError(f"reference capture: subquery in an expression: {p.sql()[:200]}")
            if p.find(exp.Window) is not None:
                raise UnsupportedSqlError(f"reference capture: window function: {p.sql()[:200]}")
        if sel.args.get("qualify") is not None or sel.args.get("laterals"):
            raise UnsupportedSqlError("reference capture: QUALIFY / LATERAL")

    @staticmethod
    def _is_aggregate(sel: exp.Select) -> bool:
        if sel.args.get("group") is not None or sel.args.get("having") is not None:
            return True
        return any(e.find(exp.AggFunc) is not None for e in sel.expressions)

    def select(self, sel: exp.Select) -> _Rel:
        sel = sel.copy()
        if sel.args.get("with_") is not None:
            raise UnsupportedSqlError("reference capture: WITH is not supported")
        self._check_expressions(sel)
        distinct = sel.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise UnsupportedSqlError("reference capture: DISTINCT ON")
        aggregate = self._is_aggregate(sel)

        if distinct is not None and aggregate:
            # DISTINCT over an aggregate: evaluate the aggregate below, DISTINCT (and any
            # ORDER BY/LIMIT) above it.
            inner = sel.copy()
            for key in ("distinct", "order", "limit", "offset"):
                inner.set(key, None)
            alias = self.fresh("d")
            outer = exp.Select(expressions=[exp.Star()]).from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias))))
            outer.set("distinct", exp.Distinct())
            for key in ("order", "limit", "offset"):
                if sel.args.get(key) is not None:
                    outer.set(key, sel.args[key].copy())
            return self.select(outer)

        # 1. FROM and JOIN sources
        sources: list[tuple[str, dict[str, str]]] = []
        from_ = sel.args.get("from_")
        if from_ is not None:
            new_src, alias, provs = self.source(from_.this)
            from_.set("this", new_src)
            sources.append((alias, provs))
        for j in sel.args.get("joins") or []:
            if (j.args.get("method") or "").upper() == "NATURAL" or (j.args.get("kind") or "").upper() == "NATURAL":
                raise UnsupportedSqlError("reference capture: NATURAL JOIN")
            new_src, alias, provs = self.source(j.this)
            j.set("this", new_src)
            sources.append((alias, provs))

        # 2. SELECT * must not expose lineage columns of the sources
        all_prov_cols = sorted({prov_column(t) for _, p in sources for t in p})
        by_alias = {a: p for a, p in sources}
        new_exprs = []
        for e in sel.expressions:
            if isinstance(e, exp.Star) and all_prov_cols:
                e = e.copy()
                e.set("except_", [_qcol(c) for c in all_prov_cols])
            elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
                provs = by_alias.get(e.table, {})
                if provs:
                    e = e.copy()
                    e.this.set("except_", [_qcol(prov_column(t)) for t in sorted(provs)])
            new_exprs.append(e)
        sel.set("expressions", new_exprs)

        # 3. lineage of one row of the FROM clause, per partitioned table
        terms: dict[str, list[tuple[str, str]]] = {}
        for alias, provs in sources:
            for t, kind in provs.items():
                terms.setdefault(t, []).append((f"{_q(alias)}.{_q(prov_column(t))}", kind))
        row_prov: dict[str, tuple[str, str]] = {}
        for t, ts in terms.items():
            if len(ts) == 1:
                row_prov[t] = ts[0]
            else:
                parts = ", ".join(f"[{c}]" if k == SCALAR else f"COALESCE({c}, [])" for c, k in ts)
                row_prov[t] = (f"flatten([{parts}])", LIST)

        # 4. DISTINCT without aggregation = GROUP BY all output columns
        if distinct is not None:
            sel.set("distinct", None)
            sel.set("group", exp.Group(all=True))
            aggregate = True

        out_provs: dict[str, str] = {}
        n_visible = None
        if sel.args.get("limit") is not None or sel.args.get("offset") is not None:
            n_visible = self._width(sel)
        lineage_key = []
        for t, (expr, kind) in sorted(row_prov.items()):
            if aggregate:
                text = f"list(DISTINCT {expr})" if kind == SCALAR else f"list_distinct(flatten(list({expr})))"
                out_provs[t] = LIST
            else:
                text, out_provs[t] = expr, kind
            sel.append("expressions", exp.alias_(_frag(text), prov_column(t), quoted=True))
            as_list = f"[{text}]" if out_provs[t] == SCALAR else text
            lineage_key.append(f"list_transform(list_sort(list_distinct({as_list})), x -> x + {self.offsets[t]})")

        # 5. ORDER BY … LIMIT: total order = ORDER BY keys, then every output column ascending
        if n_visible is not None:
            order = sel.args.get("order")
            keys = list(order.expressions) if order is not None else []
            keys += [exp.Ordered(this=exp.Literal.number(i), desc=False, nulls_first=False) for i in range(1, n_visible + 1)]
            if lineage_key:  # identical rows: the one with the smaller sorted fragment-id list first
                keys.append(exp.Ordered(this=_frag(f"flatten([{', '.join(lineage_key)}])"), desc=False, nulls_first=False))
            sel.set("order", exp.Order(expressions=keys))
        return _Rel(sel, out_provs)

    def _width(self, sel: exp.Select) -> int:
        """Number of output columns of a SELECT (asks DuckDB, which expands stars)."""
        probe = sel.copy()
        for key in ("order", "limit", "offset"):
            probe.set(key, None)
        desc = self.con.execute("DESCRIBE " + probe.sql(dialect="duckdb")).fetchall()
        return len(desc)

    # -- UNION ------------------------------------------------------------------------------
    def union(self, u: exp.Union) -> _Rel:
        if type(u) is not exp.Union:  # Intersect and Except subclass Union in sqlglot
            raise UnsupportedSqlError(f"reference capture: {type(u).__name__} is not supported")
        if u.args.get("with_") is not None:
            raise UnsupportedSqlError("reference capture: WITH is not supported")
        if any(u.args.get(k) is not None for k in ("order", "limit", "offset")):
            bare = u.copy()
            for key in ("order", "limit", "offset"):
                bare.set(key, None)
            alias = self.fresh("u")
            outer = exp.Select(expressions=[exp.Star()]).from_(exp.Subquery(this=bare, alias=exp.TableAlias(this=exp.to_identifier(alias))))
            for key in ("order", "limit", "offset"):
                if u.args.get(key) is not None:
                    outer.set(key, u.args[key].copy())
            return self.select(outer)
        left, right = self.query(u.this), self.query(u.expression)
        tables = sorted(set(left.provs) | set(right.provs))

        def normalise(rel: _Rel) -> exp.Expression:
            if not tables:
                return rel.query
            alias = self.fresh("b")
            star = exp.Star()
            if rel.provs:
                star.set("except_", [_qcol(prov_column(t)) for t in sorted(rel.provs)])
            exprs: list[exp.Expression] = [star]
            for t in tables:
                col = f"{_q(alias)}.{_q(prov_column(t))}"
                kind = rel.provs.get(t)
                text = f"[{col}]" if kind == SCALAR else col if kind == LIST else "CAST([] AS INTEGER[])"
                exprs.append(exp.alias_(_frag(text), prov_column(t), quoted=True))
            return exp.Select(expressions=exprs).from_(exp.Subquery(this=rel.query, alias=exp.TableAlias(this=exp.to_identifier(alias))))

        both = exp.Union(this=normalise(left), expression=normalise(right), distinct=False)
        provs = {t: LIST for t in tables}
        if not u.args.get("distinct"):
            return _Rel(both, provs)
        alias = self.fresh("ud")
        star = exp.Star()
        if tables:
            star.set("except_", [_qcol(prov_column(t)) for t in tables])
        exprs: list[exp.Expression] = [star]
        for t in tables:
            exprs.append(exp.alias_(_frag(f"list_distinct(flatten(list({_q(alias)}.{_q(prov_column(t))})))"), prov_column(t), quoted=True))
        sel = exp.Select(expressions=exprs).from_(exp.Subquery(this=both, alias=exp.TableAlias(this=exp.to_identifier(alias))))
        sel.set("group", exp.Group(all=True))
        return _Rel(sel, provs)


# -- public API ---------------------------------------------------------------------------


_LOCAL = threading.local()


@contextlib.contextmanager
def _connect(tables: Mapping[str, pa.Table], partitions: Mapping[str, Any] | None):
    """A DuckDB connection with ``tables`` registered (partitioned ones with ``__prov_t``).

    One connection per thread is reused (opening one costs ~25 ms, more than a small query);
    the registered views are dropped again on exit."""
    con = getattr(_LOCAL, "con", None)
    if con is None:
        con = duckdb.connect()
        con.execute("SET threads TO 1")  # the test machine is shared; keep the oracle polite
        con.execute("SET integer_division = true")  # Postgres semantics: int / int truncates
        _LOCAL.con = con
    names = []
    try:
        for name, table in tables.items():
            if partitions and name in partitions:
                part = partitions[name]
                ids = fragment_ids(table.column(part.attribute), part.boundaries)
                table = table.append_column(prov_column(name), ids)
            con.register(name, table)
            names.append(name)
        yield con
    finally:
        for name in names:
            con.unregister(name)


def capture_sql(sql: str, tables: Mapping[str, pa.Table], partitions: Mapping[str, Any], *, dialect: str = "postgres") -> str:
    """The DuckDB SQL of the capture query (for debugging and the benchmark)."""
    with _connect(tables, partitions) as con:
        return _capture_query(sql, con, partitions, dialect)[0]


def _capture_query(sql: str, con, partitions, dialect: str) -> tuple[str, dict[str, str]]:
    tree = sqlglot.parse_one(sql, read=dialect)
    sizes = {t.lower(): len(p.boundaries) for t, p in partitions.items()}  # n_fragments + 1
    rel = _Rewriter(sizes, con).query(tree)
    if not rel.provs:
        return "", {}
    exprs = []
    for t, kind in sorted(rel.provs.items()):
        col = f'"__root".{_q(prov_column(t))}'
        text = f"list(DISTINCT {col})" if kind == SCALAR else f"list_distinct(flatten(list({col})))"
        exprs.append(f"{text} AS {_q(prov_column(t))}")
    root = f"SELECT {', '.join(exprs)} FROM ({rel.query.sql(dialect='duckdb')}) AS \"__root\""
    return root, rel.provs


def reference_sketch(
    sql: str,
    tables: Mapping[str, pa.Table],
    partitions: Mapping[str, Any],
    *,
    dialect: str = "postgres",
) -> dict[str, list[int]]:
    """The accurate (Lineage) sketch of ``sql`` on ``tables``: table → sorted fragment ids.

    ``partitions`` maps table name → an object with ``.attribute`` and ``.boundaries`` (e.g.
    ``operators.sketch.RangePartition``, used as a plain data holder). Every partitioned table
    gets an entry, empty if no tuple of it contributes to the result.
    """
    with _connect(tables, partitions) as con:
        root, provs = _capture_query(sql, con, partitions, dialect)
        out: dict[str, list[int]] = {t: [] for t in partitions}
        if root:
            row = con.execute(root).fetchall()[0]
            for (t, _), ids in zip(sorted(provs.items()), row):
                key = next(k for k in partitions if k.lower() == t)
                out[key] = sorted({int(i) for i in (ids or []) if i is not None})
        return out


def reference_result(sql: str, tables: Mapping[str, pa.Table], *, dialect: str = "postgres") -> pa.Table:
    """The result of ``sql`` on ``tables`` computed by DuckDB (SQL transpiled by sqlglot).

    Every ORDER BY … LIMIT gets the same total order as in ``reference_sketch`` (ORDER BY keys,
    then all output columns ascending), so which tied rows make the cut is defined."""
    with _connect(tables, None) as con:
        rel = _Rewriter({}, con).query(sqlglot.parse_one(sql, read=dialect))
        return con.sql(rel.query.sql(dialect="duckdb")).to_arrow_table()


def order_columns(sql: str, *, dialect: str = "postgres") -> list[str] | None:
    """Names of the top-level ORDER BY keys if all are plain columns (else None)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    order = tree.args.get("order")
    if order is None:
        return []
    names = []
    for o in order.expressions:
        if not isinstance(o.this, exp.Column):
            return None
        names.append(o.this.name)
    return names
