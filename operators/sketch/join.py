"""Inner equi-join and cross product of annotated deltas (IMP Sec. 5.2.4, Fig. 4).

Incremental rule (three terms, old states L, R):
    Δ(L ⋈ R) = ΔL ⋈ R  +  L ⋈ ΔR  +  ΔL ⋈ ΔR
with weights multiplied, so a deleted row joined with a deleted row comes out as an
insert (compensating the two deletions produced by the first two terms) and an insert
joined with a delete cancels.  Sketches of joined rows are the union of both sides'
(compact matrices are concatenated).  No keys = cross product.
State kept: each input's current annotated rows in a ``operators.sketch.side_store.SideStore``
(``operators.sketch.memory_side.MemoryIndex``, an in-memory hash index, by default) and, optionally, a
counting bloom filter per side over its key hashes (``join.hashindex.v1``).  The bloom
filter (Sec. 7.2) drops ΔL rows that cannot have a partner in R before probing R (and
symmetrically); ΔL ⋈ ΔR is always computed from the unfiltered deltas, so keys new on both
sides in one batch are not lost.  Every store is probed the same way, with the delta rows'
key hashes and key columns (a Delta-backed store looks the rows up by value).
NULL keys never join (SQL), so such rows are neither stored nor probed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.sketch.bloom import CountingBloom
from operators.sketch.delta import Delta, hstack_sketches
from operators.sketch.joinstore import expand_matches, key_hash, not_null_mask
from operators.sketch.memory_side import memory_factory
from operators.sketch.side_store import SideStore

ENCODING = "join.hashindex.v1"


@dataclass(frozen=True)
class JoinSpec:
    left_keys: tuple
    right_keys: tuple
    left_cols: tuple
    right_cols: tuple
    nbits: int = 1
    use_bloom: bool = True


@dataclass
class JoinState:
    left: SideStore
    right: SideStore
    left_bloom: CountingBloom | None = None
    right_bloom: CountingBloom | None = None
    bloom_dropped: int = 0  # delta rows the bloom filters spared a probe (observability)
    encoding: str = ENCODING


def new_state(spec: JoinSpec, store_factory=None, tables=((), ()), nodes=(None, None), ctx=None) -> JoinState:
    """Empty state; ``store_factory(nbits, key_ids, side, tables, node=, ctx=) -> SideStore``
    (a ``operators.sketch.side_store.StoreFactory``) picks the storage of each input; default: memory."""
    make = store_factory or memory_factory
    return JoinState(make(spec.nbits, spec.left_keys, "left", tables[0], node=nodes[0], ctx=ctx),
                     make(spec.nbits, spec.right_keys, "right", tables[1], node=nodes[1], ctx=ctx))


def _prep(d: Delta | None, keys):
    if d is None or len(d) == 0:
        return None, None
    if keys:
        m = not_null_mask(d.table, keys)
        if not m.all():
            d = d.filter(m)
            if len(d) == 0:
                return None, None
    return d, key_hash(d.table, keys)


def _pairs(spec: JoinSpec, left: Delta, li, right: Delta, ri) -> Delta | None:
    if len(li) == 0:
        return None
    lt = left.table.take(pa.array(li))
    rt = right.table.take(pa.array(ri))
    if spec.left_keys:
        ok = np.ones(len(li), dtype=bool)
        for a, b in zip(spec.left_keys, spec.right_keys):  # weed out hash collisions
            ok &= pc.fill_null(pc.equal(lt.column(a), rt.column(b)), False).to_numpy(zero_copy_only=False)
        if not ok.all():
            sel = np.flatnonzero(ok)
            if len(sel) == 0:
                return None
            li, ri = li[sel], ri[sel]
            lt, rt = lt.take(pa.array(sel)), rt.take(pa.array(sel))
    cols = [lt.column(c) for c in spec.left_cols] + [rt.column(c) for c in spec.right_cols]
    tbl = pa.Table.from_arrays(cols, names=list(spec.left_cols) + list(spec.right_cols))
    w = left.weight[li] * right.weight[ri]
    sk = hstack_sketches(left.sketch[li], right.sketch[ri], spec.nbits)
    return Delta(tbl, w, sk)


def _probe(spec, d: Delta, h, store: SideStore, bloom, state, d_is_left: bool):
    """One cross term: the delta rows probe the other side's stored state."""
    if bloom is not None:
        keep = bloom.might_contain(h)
        if not keep.all():
            state.bloom_dropped += int((~keep).sum())
            sel = np.flatnonzero(keep)
            if len(sel) == 0:
                return None
            d, h = d.take(sel), h[sel]
    keys = spec.left_keys if d_is_left else spec.right_keys
    pi, rows = store.probe(h, d.table.select(list(keys)))  # zero-copy: the key columns
    if rows is None:
        return None
    if d_is_left:
        return _pairs(spec, d, pi, rows, np.arange(len(rows), dtype=np.int64))
    return _pairs(spec, rows, np.arange(len(rows), dtype=np.int64), d, pi)


def _direct(spec, dl: Delta, hl, ol, dr: Delta, hr, or_) -> Delta | None:
    """ΔL ⋈ ΔR by merging the two hash-sorted deltas (sequential searchsorted)."""
    hrs = hr[or_]
    hls = hl[ol]
    lo = np.searchsorted(hrs, hls, "left")
    hi = np.searchsorted(hrs, hls, "right")
    p, pos = expand_matches(lo, hi)
    return _pairs(spec, dl, ol[p], dr, or_[pos])


def step(spec: JoinSpec, state: JoinState, dl: Delta | None, dr: Delta | None):
    dl, hl = _prep(dl, spec.left_keys)
    dr, hr = _prep(dr, spec.right_keys)
    if dl is None and dr is None:
        return state, None
    ol = np.argsort(hl) if dl is not None else None  # shared by ΔL ⋈ ΔR and the store
    or_ = np.argsort(hr) if dr is not None else None
    parts = []
    if dl is not None:
        parts.append(_probe(spec, dl, hl, state.right, state.right_bloom if spec.use_bloom else None, state, True))
    if dr is not None:
        parts.append(_probe(spec, dr, hr, state.left, state.left_bloom if spec.use_bloom else None, state, False))
    if dl is not None and dr is not None:
        parts.append(_direct(spec, dl, hl, ol, dr, hr, or_))
    # apply the deltas to the stored sides (after all three terms used the old states)
    for d, h, o, store, attr in ((dl, hl, ol, state.left, "left_bloom"), (dr, hr, or_, state.right, "right_bloom")):
        if d is None:
            continue
        store.add(d, h, o)
        if spec.use_bloom and spec.left_keys:
            bf = getattr(state, attr)
            if bf is None or bf.needs_rebuild():
                hh, ww = store.key_weights()
                setattr(state, attr, CountingBloom.build(hh, ww, len(hh)))
            else:
                bf.update(h, d.weight)
    return state, Delta.concat(parts, spec.nbits)


def reference_join(spec: JoinSpec, lcols, lbag, rcols, rbag) -> list:
    """From scratch, nested loops: [(row, sketch, mult)] of the joined bags."""
    li = [lcols.index(k) for k in spec.left_keys]
    ri = [rcols.index(k) for k in spec.right_keys]
    lsel = [lcols.index(c) for c in spec.left_cols]
    rsel = [rcols.index(c) for c in spec.right_cols]
    out = []
    for lr, ls, lm in lbag:
        lk = [lr[i] for i in li]
        if any(v is None for v in lk):
            continue
        for rr, rs, rm in rbag:
            rk = [rr[i] for i in ri]
            if any(v is None for v in rk) or lk != rk:
                continue
            out.append((tuple(lr[i] for i in lsel) + tuple(rr[i] for i in rsel), ls | rs, lm * rm))
    return out
