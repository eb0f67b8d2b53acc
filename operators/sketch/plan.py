"""The operator tree of one registered query: nodes, push-down, column pruning, execution.

Each node wraps one operator module: a frozen spec built by ``freeze`` and an explicit
state object (the ``step(spec, state, delta) -> (state, out)`` functions live in the
operator modules; they update the state object in place and return it, because copying
join stores of millions of rows per batch is not an option).  Column ids are plan-unique strings; names live only in the front
end's scopes, so renaming never copies data.  Two rewrites run before freezing:
``push_filters`` moves WHERE/ON/HAVING conjuncts towards the scans (selection push-down
onto the delta, Sec. 7.2) and turns cross-side column equalities into join keys;
``prune`` drops columns no ancestor reads, so join stores hold only what they need.
"""

from __future__ import annotations

import contextlib
import itertools
import threading

from core.errors import InvariantError
from operators.sketch import aggregate, join, scan, stateless, topk
from operators.sketch.expr import Call, Col, Expr, and_all, conjuncts, substitute

_lock = threading.RLock()
_ids = itertools.count()


@contextlib.contextmanager
def id_scope():
    """Number column ids from 0 while planning one query, so a re-planned query (restore)
    gets exactly the same ids its saved state refers to."""
    global _ids
    with _lock:
        saved, _ids = _ids, itertools.count()
        try:
            yield
        finally:
            _ids = saved


def new_id(hint: str = "c") -> str:
    return f"{hint}#{next(_ids)}"


class Node:
    children: list
    out: list
    spec = None
    state = None

    def tables(self) -> set:
        s = set()
        for c in self.children:
            s |= c.tables()
        return s

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


class ScanNode(Node):
    def __init__(self, table: str, cols: list):
        self.table, self.cols, self.children, self.pushed = table, list(cols), [], None
        self.out = [cid for _, cid in self.cols]

    def tables(self):
        return {self.table}

    def freeze(self, ctx):
        p = ctx.partitions.get(self.table)
        self.spec = scan.ScanSpec(self.table, tuple(self.cols), p,
                                  ctx.space.offset(self.table) if p is not None else 0,
                                  self.pushed, ctx.space.nbits)
        self.state = scan.ScanState()

    def run(self, ctx, raw, learn):
        r = raw.get(self.table)
        if r is None:
            return None
        self.state, d = scan.step(self.spec, self.state, r[0], r[1], learn=learn)
        return d


class FilterNode(Node):
    def __init__(self, child, pred: Expr):
        self.children, self.pred = [child], pred
        self.out = list(child.out)

    def freeze(self, ctx):
        self.spec = stateless.SelectSpec(self.pred)

    def run(self, ctx, raw, learn):
        d = self.children[0].run(ctx, raw, learn)
        return stateless.select_step(self.spec, None, d)[1]


class ProjectNode(Node):
    def __init__(self, child, exprs: list):
        self.children, self.exprs = [child], list(exprs)
        self.out = [i for i, _ in self.exprs]

    def freeze(self, ctx):
        self.spec = stateless.ProjectSpec(tuple(self.exprs))

    def run(self, ctx, raw, learn):
        d = self.children[0].run(ctx, raw, learn)
        return stateless.project_step(self.spec, None, d)[1]


class JoinNode(Node):
    def __init__(self, left, right, lkeys=(), rkeys=()):
        self.children, self.lkeys, self.rkeys = [left, right], list(lkeys), list(rkeys)
        self.out = list(left.out) + list(right.out)

    def freeze(self, ctx):
        l, r = self.children
        self.spec = join.JoinSpec(tuple(self.lkeys), tuple(self.rkeys), tuple(l.out), tuple(r.out),
                                  ctx.space.nbits, ctx.use_bloom)
        self.state = join.new_state(self.spec, ctx.store_factory,
                                    (tuple(sorted(l.tables())), tuple(sorted(r.tables()))), (l, r), ctx)

    def run(self, ctx, raw, learn):
        dl = self.children[0].run(ctx, raw, learn)
        dr = self.children[1].run(ctx, raw, learn)
        self.state, d = join.step(self.spec, self.state, dl, dr)
        return d


class UnionNode(Node):
    def __init__(self, children, out):
        self.children, self.out = list(children), list(out)

    def freeze(self, ctx):
        self.spec = stateless.UnionSpec(tuple(tuple(c.out) for c in self.children), tuple(self.out))

    def run(self, ctx, raw, learn):
        ds = [c.run(ctx, raw, learn) for c in self.children]
        return stateless.union_step(self.spec, None, ds, ctx.space.nbits)[1]


class AggNode(Node):
    def __init__(self, child, group: list, aggs: list, name="aggregate"):
        self.children, self.group, self.aggs, self.name = [child], list(group), list(aggs), name
        self.out = [o for _, o in self.group] + [a.out for a in self.aggs]

    def freeze(self, ctx):
        self.spec = aggregate.AggSpec(tuple(self.group), tuple(self.aggs), ctx.space.nbits,
                                      ctx.minmax_bound, self.name, _annotated(self, ctx))
        self.state = aggregate.new_state(self.spec)

    def run(self, ctx, raw, learn):
        d = self.children[0].run(ctx, raw, learn)
        self.state, out = aggregate.step(self.spec, self.state, d)
        return out


class TopKNode(Node):
    def __init__(self, child, order: list, k: int):
        self.children, self.order, self.k = [child], list(order), k
        self.out = list(child.out)

    def freeze(self, ctx):
        pos = {c: i for i, c in enumerate(self.out)}
        self.spec = topk.TopKSpec(tuple((pos[c], desc) for c, desc in self.order), self.k, tuple(self.out),
                                  ctx.space.nbits, ctx.topk_bound, "topk", _annotated(self, ctx))
        self.state = topk.TopKState()

    def run(self, ctx, raw, learn):
        d = self.children[0].run(ctx, raw, learn)
        self.state, out = topk.step(self.spec, self.state, d)
        return out


def _annotated(node: Node, ctx) -> bool:
    """Does any partitioned table feed this node (else its sketches are always empty)?"""
    return bool(node.tables() & set(ctx.partitions))


# -- rewrites ------------------------------------------------------------------------------

def _is_col_eq(p):
    return isinstance(p, Call) and p.op == "eq" and all(isinstance(a, Col) for a in p.args)


def push_filters(node: Node, preds=()) -> Node:
    """Push conjuncts as far down as they can go; returns the rewritten subtree."""
    preds = list(preds)
    if isinstance(node, FilterNode):
        return push_filters(node.children[0], preds + conjuncts(node.pred))
    keep = []
    if isinstance(node, ScanNode):
        if preds:
            node.pushed = and_all(([node.pushed] if node.pushed is not None else []) + preds)
        return node
    if isinstance(node, ProjectNode):
        m = {i: e for i, e in node.exprs}
        down = []
        for p in preds:
            if all(isinstance(m.get(r), Col) for r in p.refs()):
                down.append(substitute(p, m))
            else:
                keep.append(p)
        node.children[0] = push_filters(node.children[0], down)
    elif isinstance(node, JoinNode):
        l, r = node.children
        ls, rs = set(l.out), set(r.out)
        lp, rp = [], []
        for p in preds:
            refs = p.refs()
            if refs <= ls:
                lp.append(p)
            elif refs <= rs:
                rp.append(p)
            elif _is_col_eq(p) and {p.args[0].id} <= ls and {p.args[1].id} <= rs:
                node.lkeys.append(p.args[0].id)
                node.rkeys.append(p.args[1].id)
            elif _is_col_eq(p) and {p.args[1].id} <= ls and {p.args[0].id} <= rs:
                node.lkeys.append(p.args[1].id)
                node.rkeys.append(p.args[0].id)
            else:
                keep.append(p)
        node.children[0] = push_filters(l, lp)
        node.children[1] = push_filters(r, rp)
    elif isinstance(node, AggNode):
        gm = {o: Col(i) for i, o in node.group}
        down = []
        for p in preds:
            if p.refs() <= set(gm) and node.group:
                down.append(substitute(p, gm))
            else:
                keep.append(p)
        node.children[0] = push_filters(node.children[0], down)
    else:
        keep = preds
        node.children = [push_filters(c) for c in node.children]
    return FilterNode(node, and_all(keep)) if keep else node


def prune(node: Node, needed: set) -> None:
    """Keep only the columns some ancestor reads (scans keep at least one column)."""
    if isinstance(node, ScanNode):
        extra = node.pushed.refs() if node.pushed is not None else set()
        cols = [c for c in node.cols if c[1] in needed or c[1] in extra]
        node.cols = cols or node.cols[:1]
        node.out = [cid for _, cid in node.cols]
    elif isinstance(node, FilterNode):
        prune(node.children[0], needed | node.pred.refs())
        node.out = list(node.children[0].out)
    elif isinstance(node, ProjectNode):
        ex = [(i, e) for i, e in node.exprs if i in needed] or node.exprs[:1]
        node.exprs = ex
        node.out = [i for i, _ in ex]
        refs = set()
        for _, e in ex:
            refs |= e.refs()
        prune(node.children[0], refs)
    elif isinstance(node, JoinNode):
        need = set(needed) | set(node.lkeys) | set(node.rkeys)
        for c in node.children:
            prune(c, need & set(_all_out(c)) if not isinstance(c, ScanNode) else need)
        node.out = list(node.children[0].out) + list(node.children[1].out)
    elif isinstance(node, AggNode):
        refs = {i for i, _ in node.group} | {a.arg for a in node.aggs if a.arg is not None}
        prune(node.children[0], refs)
    elif isinstance(node, TopKNode):
        prune(node.children[0], set(node.children[0].out))
        node.out = list(node.children[0].out)
    elif isinstance(node, UnionNode):
        for c in node.children:
            prune(c, set(c.out))
    else:
        raise InvariantError(f"prune: unknown node {type(node).__name__}")


def _all_out(node) -> list:
    if isinstance(node, ScanNode):
        return [cid for _, cid in node.cols]
    return list(node.out)
