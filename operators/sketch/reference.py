"""From-scratch capture of a planned query: the ``reference_*`` twins chained over the tree.

Evaluates the same operator tree as the incremental engine, but every operator recomputes
its whole annotated output from its whole annotated input with row-at-a-time Python
(nested-loop joins, dict grouping, full sorts): lineage annotation propagation in the
style of PBDS's capture rules r0-r7.  Tests compare the incremental state with it after
every batch.  Scalar expressions are shared with the engine (``expr.evaluate``), so the
reference checks state handling and sketch propagation, not SQL expression semantics
(duckdb checks those in the tests).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from operators.sketch import plan as P
from operators.sketch.aggregate import reference_aggregate
from operators.sketch.join import reference_join
from operators.sketch.merge import reference_merge
from operators.sketch.partition import decimal_to_float
from operators.sketch.scan import normalize_type, reference_scan
from operators.sketch.stateless import reference_project, reference_select, reference_union
from operators.sketch.topk import reference_topk


def _norm_table(t: pa.Table) -> pa.Table:
    cols = []
    for c in t.columns:
        c = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        if pa.types.is_dictionary(c.type):
            c = c.dictionary_decode()
        if pa.types.is_decimal(c.type):  # same correctly rounded reading as the engine's
            c = decimal_to_float(c)
        nt = normalize_type(c.type)
        cols.append(c.cast(nt) if c.type != nt else c)
    return pa.Table.from_arrays(cols, names=t.column_names)


def evaluate(node: P.Node, tables: dict):
    """-> (column ids, [(row, frozenset sketch, multiplicity)])."""
    if isinstance(node, P.ScanNode):
        raw = _norm_table(tables[node.table])
        bag = reference_scan(node.spec, raw)
        cols = [cid for _, cid in node.cols]
        if node.pushed is not None:
            bag = reference_select(P.stateless.SelectSpec(node.pushed), cols, bag)
        return cols, bag
    if isinstance(node, P.FilterNode):
        cols, bag = evaluate(node.children[0], tables)
        return cols, reference_select(node.spec, cols, bag)
    if isinstance(node, P.ProjectNode):
        cols, bag = evaluate(node.children[0], tables)
        return [i for i, _ in node.exprs], reference_project(node.spec, cols, bag)
    if isinstance(node, P.JoinNode):
        lc, lb = evaluate(node.children[0], tables)
        rc, rb = evaluate(node.children[1], tables)
        return list(node.spec.left_cols) + list(node.spec.right_cols), reference_join(node.spec, lc, lb, rc, rb)
    if isinstance(node, P.UnionNode):
        bags = []
        for child, cols_in in zip(node.children, node.spec.inputs):
            cols, bag = evaluate(child, tables)
            pos = [cols.index(c) for c in cols_in]
            bags.append([(tuple(r[p] for p in pos), s, m) for r, s, m in bag])
        return list(node.out), reference_union(bags)
    if isinstance(node, P.AggNode):
        cols, bag = evaluate(node.children[0], tables)
        return list(node.out), reference_aggregate(node.spec, cols, bag)
    if isinstance(node, P.TopKNode):
        cols, bag = evaluate(node.children[0], tables)
        return list(node.spec.columns), reference_topk(node.spec, cols, bag)
    raise TypeError(type(node).__name__)


def reference_capture(maintainer, tables: dict):
    """(sketch: table -> sorted fragment ids, result rows as a Counter) computed from scratch."""
    tables = {t.lower(): v for t, v in tables.items()}
    cols, bag = evaluate(maintainer.query.root, tables)
    sk = maintainer.ctx.space.split(reference_merge(bag))
    rows: Counter = Counter()
    for r, _, m in bag:
        rows[r] += m
    return {t: sorted(v) for t, v in sk.items()}, +rows
