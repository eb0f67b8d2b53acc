"""The current annotated state of one join input, behind a small interface.

``SideStore`` is what the join operator needs from "the other side": ``add`` a delta and
``probe`` with key hashes for candidate partner rows.  ``MemoryIndex`` keeps the rows in
memory as runs sorted by key hash (a large ``main`` run and O(log n) small ``tail`` runs
of recent deltas), so a probe is a few ``np.searchsorted`` calls and a vectorised range
expansion - cost proportional to the probe and its matches.  Deletes are appended as negative-weight
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
        """-> (key hashes, weights) of all stored rows (to rebuild a bloom filter)."""
        raise NotImplementedError

    def distinct_keys(self) -> int:  # pragma: no cover - interface
        """An upper bound of the distinct keys stored (sizes the bloom filter)."""
        raise NotImplementedError


class MemoryIndex(SideStore):
    """Rows sorted by key hash in a big ``main`` run plus a few sorted ``tail`` runs.

    Tail runs are merged like a binary counter (a new run absorbs older runs at most twice
    its size), so there are O(log n) of them and each row is re-sorted O(log n) times; a
    probe is one ``searchsorted`` per run.  When the tail outgrows max(min_tail, main/8)
    rows it is merged into main and rows sharing key hashes with it are consolidated.
    """

    min_tail = 4096  # rows the tail may hold before a compaction (tests lower it)

    def __init__(self, nbits: int, key_ids: tuple):
        self.nbits = nbits
        self.key_ids = tuple(key_ids)
        self.main: Delta | None = None
        self.main_h = np.zeros(0, dtype=np.uint64)
        self.tail: list = []  # [(Delta sorted by hash, sorted hashes)]
        self.encoding = ENCODING

    def __len__(self):
        return (len(self.main) if self.main is not None else 0) + sum(len(d) for d, _ in self.tail)

    def distinct_keys(self) -> int:
        """Distinct key hashes in main (sorted, so one linear pass) plus tail rows (upper bound)."""
        n = 0
        if self.main is not None and len(self.main_h):
            n = 1 + int(np.count_nonzero(self.main_h[1:] != self.main_h[:-1]))
        return n + sum(len(d) for d, _ in self.tail)

    def _sorted_run(self, d: Delta, h: np.ndarray):
        order = np.argsort(h)
        return d.take(order), h[order]

    def add(self, d: Delta, hashes: np.ndarray) -> None:
        if d is None or len(d) == 0:
            return
        if self.main is None:
            self.main, self.main_h = self._sorted_run(d, hashes)
            return
        run = self._sorted_run(d, hashes)
        while self.tail and len(self.tail[-1][0]) <= 2 * len(run[0]):
            od, oh = self.tail.pop()
            run = self._sorted_run(Delta.concat([od, run[0]], self.nbits), np.concatenate([oh, run[1]]))
        self.tail.append(run)
        if sum(len(x) for x, _ in self.tail) > max(self.min_tail, len(self.main) // 8):
            self._compact()

    def _compact(self) -> None:
        td = Delta.concat([x for x, _ in self.tail], self.nbits)
        th = np.concatenate([y for _, y in self.tail])
        lo = np.searchsorted(self.main_h, th, "left")
        hi = np.searchsorted(self.main_h, th, "right")
        _, idx = _expand(lo, hi)
        idx = np.unique(idx)
        keep = np.ones(len(self.main), dtype=bool)
        keep[idx] = False
        merged = consolidate(Delta.concat([self.main.take(idx), td], self.nbits), self.nbits)
        rest_idx = np.flatnonzero(keep)
        parts, hs = [self.main.take(rest_idx)], [self.main_h[rest_idx]]
        if merged is not None:
            parts.append(merged)
            hs.append(key_hash(merged.table, self.key_ids))
        d = Delta.concat(parts, self.nbits)
        self.tail = []
        if d is None or len(d) == 0:
            self.main, self.main_h = None, np.zeros(0, dtype=np.uint64)
            return
        self.main, self.main_h = self._sorted_run(d, np.concatenate(hs))

    def probe(self, hashes: np.ndarray):
        pi_parts, rows = [], []
        runs = ([(self.main, self.main_h)] if self.main is not None else []) + self.tail
        if len(hashes):
            for d, h in runs:
                lo = np.searchsorted(h, hashes, "left")
                hi = np.searchsorted(h, hashes, "right")
                p, idx = _expand(lo, hi)
                if len(p):
                    pi_parts.append(p)
                    rows.append(d.take(idx))
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
