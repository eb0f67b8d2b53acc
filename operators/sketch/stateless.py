"""Selection, projection and bag union over annotated deltas (IMP Sec. 5.2.2, 5.2.3, 5.2.5).

Incremental rules: σ keeps the delta rows whose tuple satisfies θ (NULL = false);
Π evaluates its expressions on each delta row and passes the sketch unchanged; ∪ (UNION
ALL) concatenates its inputs' deltas, renaming the right input's columns positionally.
State kept: none.  Deletions: a deleted row is filtered/projected exactly like an
inserted one, so its negative weight reaches the same output tuple.  Sketches pass
through untouched (a projected or selected tuple depends on the same data as its input).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from operators.sketch.delta import Delta
from operators.sketch.expr import Expr, evaluate_array, predicate_mask


@dataclass(frozen=True)
class SelectSpec:
    predicate: Expr


@dataclass(frozen=True)
class ProjectSpec:
    exprs: tuple  # ((out_id, Expr), ...)


@dataclass(frozen=True)
class UnionSpec:
    inputs: tuple  # per input: tuple of its column ids, positionally aligned
    out: tuple  # output column ids


def select_step(spec: SelectSpec, state, d: Delta | None):
    if d is None or len(d) == 0:
        return state, None
    out = d.filter(predicate_mask(spec.predicate, d.table))
    return state, (out if len(out) else None)


def project_step(spec: ProjectSpec, state, d: Delta | None):
    if d is None or len(d) == 0:
        return state, None
    arrays = [evaluate_array(e, d.table) for _, e in spec.exprs]
    tbl = pa.Table.from_arrays(arrays, names=[cid for cid, _ in spec.exprs])
    return state, Delta(tbl, d.weight, d.sketch)


def union_step(spec: UnionSpec, state, deltas: list, nbits: int):
    parts = []
    for cols, d in zip(spec.inputs, deltas):
        if d is None or len(d) == 0:
            continue
        tbl = pa.Table.from_arrays([d.table.column(c) for c in cols], names=list(spec.out))
        parts.append(Delta(tbl, d.weight, d.sketch))
    return state, Delta.concat(parts, nbits)


# -- from-scratch twins over annotated bags [(row, frozenset, mult)] ---------------------------

def reference_select(spec: SelectSpec, columns, bag, types=None) -> list:
    if not bag:
        return []
    t = _typed_table(columns, bag, types)
    mask = predicate_mask(spec.predicate, t)
    return [x for x, m in zip(bag, mask) if m]


def reference_project(spec: ProjectSpec, columns, bag, types=None) -> list:
    if not bag:
        return []
    t = _typed_table(columns, bag, types)
    cols = [evaluate_array(e, t).to_pylist() for _, e in spec.exprs]
    return [(tuple(c[i] for c in cols), s, m) for i, (_, s, m) in enumerate(bag)]


def reference_union(bags) -> list:
    out = []
    for b in bags:
        out.extend(b)
    return out


def _typed_table(columns, bag, types):
    rows = [r for r, _, _ in bag]
    arrays = []
    for i, c in enumerate(columns):
        vals = [r[i] for r in rows]
        t = (types or {}).get(c)
        arrays.append(pa.array(vals, type=t) if t is not None else pa.array(vals))
    return pa.Table.from_arrays(arrays, names=list(columns))
