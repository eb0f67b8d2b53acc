"""The current annotated state of one join input, behind a small interface.

``SideStore`` is what the join operator needs from "the other side": ``add`` a delta and
``probe`` with key hashes for candidate partner rows.  ``MemoryIndex`` keeps the rows in
memory as two runs sorted by key hash (a large ``main`` run and a small ``tail`` of recent
deltas), so a probe is two ``np.searchsorted`` calls and a vectorised range expansion -
cost proportional to the probe and its matches.  Deletes are appended as negative-weight
rows (they cancel their inserts in every consumer, which sums weights per annotated
tuple); when the tail outgrows 1/8 of main it is merged in and the rows sharing key
hashes with it are consolidated, so cancelled pairs disappear (amortised O(n log n)).
A Delta-backed store (time travel to the right table version) can implement the same
two methods later.  Encoding: ``join.side.memory.v1``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from operators.sketch.delta import Delta, consolidate

ENCODING = "join.side.memory.v1"
_P = np.uint64(0x9E3779B97F4A7C15)


def key_hash(table: pa.Table, key_ids) -> np.ndarray:
    """uint64 hash of the key columns per row (0 for a cross product without keys)."""
    n = table.num_rows
    h = np.zeros(n, dtype=np.uint64)
    for cid in key_ids:
        c = table.column(cid)
        c = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        t = c.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            v = c.cast(pa.float64()).to_numpy(zero_copy_only=False)  # 1 and 1.0 hash alike
            v = v + 0.0  # normalise -0.0
        elif pa.types.is_date(t):
            v = c.cast(pa.int32()).cast(pa.int64()).to_numpy(zero_copy_only=False)
        elif pa.types.is_timestamp(t):
            v = c.cast(pa.int64()).to_numpy(zero_copy_only=False)
        else:
            v = np.asarray(c.cast(pa.string()).to_pylist(), dtype=object)
        hv = pd.util.hash_array(v, categorize=False)
        with np.errstate(over="ignore"):
            h = h * _P + hv
    return h


def not_null_mask(table: pa.Table, key_ids) -> np.ndarray:
    m = np.ones(table.num_rows, dtype=bool)
    for cid in key_ids:
        c = table.column(cid)
        if c.null_count:
            m &= pc.is_valid(c).to_numpy(zero_copy_only=False)
    return m


def _expand(lo: np.ndarray, hi: np.ndarray):
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    probe = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts, counts) + np.repeat(lo, counts)
    return probe, idx


class SideStore:
    """Interface of a join input's current state."""

    def add(self, d: Delta, hashes: np.ndarray) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def probe(self, hashes: np.ndarray):  # pragma: no cover - interface
        """-> (probe_idx, Delta of candidate rows aligned with probe_idx)."""
        raise NotImplementedError

    def hashes_and_weights(self):  # pragma: no cover - interface
        raise NotImplementedError


class MemoryIndex(SideStore):
    min_tail = 4096  # rows the tail may hold before a compaction (tests lower it)

    def __init__(self, nbits: int, key_ids: tuple):
        self.nbits = nbits
        self.key_ids = tuple(key_ids)
        self.main: Delta | None = None
        self.main_h = np.zeros(0, dtype=np.uint64)
        self.tail: list = []  # [(Delta, hashes)]
        self._tail_sorted = None  # cache: (Delta, hashes) sorted by hash
        self.encoding = ENCODING

    def __len__(self):
        return (len(self.main) if self.main is not None else 0) + sum(len(d) for d, _ in self.tail)

    def add(self, d: Delta, hashes: np.ndarray) -> None:
        if d is None or len(d) == 0:
            return
        if self.main is None:
            order = np.argsort(hashes, kind="stable")
            self.main, self.main_h = d.take(order), hashes[order]
            return
        self.tail.append((d, hashes))
        self._tail_sorted = None
        if sum(len(x) for x, _ in self.tail) > max(self.min_tail, len(self.main) // 8):
            self._compact()

    def _sorted_tail(self):
        if self._tail_sorted is None and self.tail:
            d = Delta.concat([x for x, _ in self.tail], self.nbits)
            h = np.concatenate([y for _, y in self.tail])
            order = np.argsort(h, kind="stable")
            self._tail_sorted = (d.take(order), h[order])
        return self._tail_sorted

    def _compact(self) -> None:
        td, th = self._sorted_tail()
        lo = np.searchsorted(self.main_h, th, "left")
        hi = np.searchsorted(self.main_h, th, "right")
        _, idx = _expand(lo, hi)
        idx = np.unique(idx)
        keep = np.ones(len(self.main), dtype=bool)
        keep[idx] = False
        merged = consolidate(Delta.concat([self.main.take(idx), td], self.nbits), self.nbits)
        rest_idx = np.flatnonzero(keep)
        rest = self.main.take(rest_idx)
        parts, hs = [rest], [self.main_h[rest_idx]]
        if merged is not None:
            parts.append(merged)
            hs.append(key_hash(merged.table, self.key_ids))
        allh = np.concatenate(hs)
        d = Delta.concat(parts, self.nbits)
        order = np.argsort(allh, kind="stable")
        self.main, self.main_h = d.take(order), allh[order]
        self.tail, self._tail_sorted = [], None

    def probe(self, hashes: np.ndarray):
        pi_parts, rows = [], []
        if self.main is not None and len(hashes):
            lo = np.searchsorted(self.main_h, hashes, "left")
            hi = np.searchsorted(self.main_h, hashes, "right")
            p, idx = _expand(lo, hi)
            if len(p):
                pi_parts.append(p)
                rows.append(self.main.take(idx))
        st = self._sorted_tail()
        if st is not None and len(hashes):
            td, th = st
            lo = np.searchsorted(th, hashes, "left")
            hi = np.searchsorted(th, hashes, "right")
            p, idx = _expand(lo, hi)
            if len(p):
                pi_parts.append(p)
                rows.append(td.take(idx))
        if not pi_parts:
            return np.zeros(0, np.int64), None
        return np.concatenate(pi_parts), Delta.concat(rows, self.nbits)

    def hashes_and_weights(self):
        hs, ws = [], []
        if self.main is not None:
            hs.append(self.main_h)
            ws.append(self.main.weight)
        for d, h in self.tail:
            hs.append(h)
            ws.append(d.weight)
        if not hs:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.concatenate(hs), np.concatenate(ws)

    def rows(self) -> Delta | None:
        parts = ([self.main] if self.main is not None else []) + [d for d, _ in self.tail]
        return consolidate(Delta.concat(parts, self.nbits), self.nbits)
