"""Join input rows in driver memory: ``MemoryIndex``, the default ``operators.sketch.side_store.SideStore``.

A big ``main`` run plus O(log n) small ``tail`` runs of recent deltas, each searchable by key
hash, so a probe is a few ``np.searchsorted`` calls and a vectorised range expansion - cost
proportional to the probe and its matches.  Deletes are appended as negative-weight rows (they
cancel their inserts in every consumer, which sums weights per annotated tuple); when the tail
outgrows 1/8 of main it is merged in and the rows sharing key hashes with it are consolidated,
so cancelled pairs disappear (amortised O(n log n)).  Encoding: ``join.side.memory.v2`` (v2:
runs keep arrival order plus a sorting permutation instead of physically sorted rows).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from operators.sketch.delta import Delta, consolidate
from operators.sketch.joinstore import expand_matches, key_hash
from operators.sketch.side_store import SideStore

ENCODING = "join.side.memory.v2"


class _Run:
    """Rows in arrival order plus the permutation that sorts them by key hash."""

    __slots__ = ("d", "perm", "h")

    def __init__(self, d: Delta, hashes: np.ndarray, order: np.ndarray | None = None):
        order = np.argsort(hashes) if order is None else order
        self.d, self.perm, self.h = d, order.astype(np.int64, copy=False), hashes[order]

    def __len__(self):
        return len(self.d)

    def unsorted_hashes(self) -> np.ndarray:
        out = np.empty_like(self.h)
        out[self.perm] = self.h
        return out

    def __getstate__(self):
        return (self.d, self.perm, self.h)

    def __setstate__(self, st):
        self.d, self.perm, self.h = st


class MemoryIndex(SideStore):
    """A big ``main`` run plus a few small ``tail`` runs, each searchable by key hash.

    A run keeps its rows in arrival order and a sorting permutation, so capture never
    reorders whole tables.  Tail runs are merged like a binary counter (a new run absorbs
    older runs at most twice its size): O(log n) runs, each row re-sorted O(log n) times;
    a probe is one ``searchsorted`` per run.  When the tail outgrows max(min_tail, main/8)
    rows it is merged into main and rows sharing key hashes with it are consolidated.
    """

    min_tail = 4096  # rows the tail may hold before a compaction (tests lower it)

    def __init__(self, nbits: int, key_ids: tuple):
        self.nbits = nbits
        self.key_ids = tuple(key_ids)
        self.main: _Run | None = None
        self.tail: list = []  # [_Run]
        self.encoding = ENCODING

    def _runs(self) -> list:
        return ([self.main] if self.main is not None else []) + self.tail

    def __len__(self):
        """Net rows stored (sum of weights), as every ``SideStore`` counts."""
        return int(sum(int(r.d.weight.sum()) for r in self._runs()))

    def rows_held(self) -> int:
        """Physical rows in the runs (deletes not yet compacted away count too)."""
        return sum(len(r) for r in self._runs())

    def distinct_keys(self) -> int:
        """Distinct key hashes in main (sorted, so one linear pass) plus tail rows (upper bound)."""
        n = 0
        if self.main is not None and len(self.main.h):
            h = self.main.h
            n = 1 + int(np.count_nonzero(h[1:] != h[:-1]))
        return n + sum(len(r) for r in self.tail)

    def add(self, d: Delta, hashes: np.ndarray, order: np.ndarray | None = None) -> None:
        """Store a delta; ``order`` may pass a precomputed ``argsort(hashes)``."""
        if d is None or len(d) == 0:
            return
        run = _Run(d, hashes, order)
        if self.main is None:
            self.main = run
            return
        while self.tail and len(self.tail[-1]) <= 2 * len(run):
            old = self.tail.pop()
            run = _Run(Delta.concat([old.d, run.d], self.nbits),
                       np.concatenate([old.unsorted_hashes(), run.unsorted_hashes()]))
        self.tail.append(run)
        if sum(len(r) for r in self.tail) > max(self.min_tail, len(self.main) // 8):
            self._compact()

    def _compact(self) -> None:
        td = Delta.concat([r.d for r in self.tail], self.nbits)
        th = np.concatenate([r.unsorted_hashes() for r in self.tail])
        m = self.main
        lo = np.searchsorted(m.h, th, "left")
        hi = np.searchsorted(m.h, th, "right")
        _, idx = expand_matches(lo, hi)
        rows = np.unique(m.perm[idx])
        keep = np.ones(len(m), dtype=bool)
        keep[rows] = False
        merged = consolidate(Delta.concat([m.d.take(rows), td], self.nbits), self.nbits)
        rest = np.flatnonzero(keep)
        mh = m.unsorted_hashes()
        parts, hs = [m.d.take(rest)], [mh[rest]]
        if merged is not None:
            parts.append(merged)
            hs.append(key_hash(merged.table, self.key_ids))
        d = Delta.concat(parts, self.nbits)
        self.tail = []
        self.main = _Run(d, np.concatenate(hs)) if d is not None and len(d) else None

    def bind(self, node, ctx, resources) -> None:
        """Nothing to attach: the rows are here."""

    def probe(self, hashes: np.ndarray, keys: pa.Table) -> tuple:
        """Stored rows per probing hash (``keys`` unused: hashes identify the rows here)."""
        pi_parts, rows = [], []
        if len(hashes):
            for r in self._runs():
                lo = np.searchsorted(r.h, hashes, "left")
                hi = np.searchsorted(r.h, hashes, "right")
                p, idx = expand_matches(lo, hi)
                if len(p):
                    pi_parts.append(p)
                    rows.append(r.d.take(r.perm[idx]))
        if not pi_parts:
            return np.zeros(0, np.int64), None
        return np.concatenate(pi_parts), Delta.concat(rows, self.nbits)

    def hashes_and_weights(self):
        runs = self._runs()
        if not runs:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return (np.concatenate([r.h for r in runs]),
                np.concatenate([r.d.weight[r.perm] for r in runs]))

    def key_weights(self):
        """(distinct key hashes, net weight per key): what a bloom filter needs."""
        h, w = self.hashes_and_weights()
        if len(h) == 0:
            return h, w
        if len(self.tail) == 0:  # main alone is sorted: one linear pass
            starts = np.concatenate([[0], np.flatnonzero(h[1:] != h[:-1]) + 1])
            return h[starts], np.add.reduceat(w, starts)
        u, inv = np.unique(h, return_inverse=True)
        return u, np.bincount(inv.reshape(-1), weights=w, minlength=len(u)).astype(np.int64)

    def rows(self) -> Delta | None:
        return consolidate(Delta.concat([r.d for r in self._runs()], self.nbits), self.nbits)


def memory_factory(nbits: int, key_ids: tuple, side: str, tables: tuple, node=None, ctx=None) -> MemoryIndex:
    """The default ``StoreFactory``: every join input in driver memory."""
    return MemoryIndex(nbits, key_ids)
