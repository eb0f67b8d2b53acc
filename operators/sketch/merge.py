"""The final merge μ: per-fragment counters over the query result -> sketch deltas (IMP Sec. 5.1).

Incremental rule: for every result delta row ±⟨t, P⟩ⁿ and every fragment r ∈ P,
S[r] += ±n.  A fragment whose counter goes from 0 to non-zero is added to the sketch
(+r); one whose counter returns to 0 is removed (−r).  Fragments touched in a batch but
back to their old zero/non-zero status emit nothing.
State kept (``merge.fragcount.v1``): the counters S (global fragment id -> count) and the
current query result as a multiset of rows (so ``result()`` needs no recomputation).
Deletions: a counter below zero means an operator emitted a delete it never inserted;
that breaks an invariant and raises.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from core.errors import InvariantError
from operators.sketch.delta import Delta, ids_of, is_compact

ENCODING = "merge.fragcount.v1"


@dataclass
class MergeState:
    counts: dict = field(default_factory=dict)
    rows: Counter = field(default_factory=Counter)
    types: list | None = None
    encoding: str = ENCODING


def step(state: MergeState, d: Delta | None, columns, keep_rows: bool = True):
    """Returns (state, added global ids, removed global ids)."""
    if d is None or len(d) == 0:
        return state, set(), set()
    new_types = [d.table.schema.field(c).type for c in columns]
    if state.types is None:
        state.types = new_types
    else:  # a column first seen all-NULL (null type) learns its real type later
        state.types = [n if pa.types.is_null(o) else o for o, n in zip(state.types, new_types)]
    w = d.weight
    delta: dict = {}
    if is_compact(d.sketch):
        if d.sketch.shape[1]:
            r, c = np.nonzero(d.sketch >= 0)
            fr = d.sketch[r, c]
            if len(fr):
                u, inv = np.unique(fr, return_inverse=True)
                s = np.bincount(inv.reshape(-1), weights=w[r], minlength=len(u)).astype(np.int64)
                delta = dict(zip(u.tolist(), s.tolist()))
    else:
        per_sketch: Counter = Counter()
        for b, x in zip(d.sketch, w.tolist()):
            per_sketch[b] += x
        for b, x in per_sketch.items():
            if x:
                for f in ids_of(b):
                    delta[f] = delta.get(f, 0) + x
    added, removed = set(), set()
    counts = state.counts
    for f, x in delta.items():
        if x == 0:
            continue
        old = counts.get(f, 0)
        new = old + x
        if new < 0:
            raise InvariantError(f"merge: fragment {f} counter below zero")
        if new == 0:
            counts.pop(f, None)
            removed.add(f)
        else:
            counts[f] = new
            if old == 0:
                added.add(f)
    if keep_rows:
        rows = list(zip(*[d.table.column(c).to_pylist() for c in columns])) if columns else [()] * len(d)
        net: Counter = Counter()
        for row, x in zip(rows, w.tolist()):
            net[row] += x  # net per row first: a batch may delete before it re-inserts
        res = state.rows
        for row, x in net.items():
            if x == 0:
                continue
            v = res[row] + x
            if v == 0:
                del res[row]
            elif v < 0:
                raise InvariantError(f"merge: result row {row!r} deleted more often than inserted")
            else:
                res[row] = v
    return state, added, removed


def reference_merge(bag) -> set:
    """From scratch: the union of the sketches of all result rows with positive multiplicity."""
    out: set = set()
    for _, sk, m in bag:
        if m > 0:
            out |= set(sk)
    return out
