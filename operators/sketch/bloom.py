"""Counting bloom filter over 64-bit join-key hashes, correct under deletes (IMP Sec. 7.2).

A key is added (removed) by incrementing (decrementing) ``k`` uint16 counters chosen by
double hashing of its 64-bit hash.  ``might_contain`` is false only when some counter is
0, so a "no" is always right: a delta row it rejects has no partner in the other side.
A counter that reached its maximum saturates and is never decremented again (it can only
cause false positives, never false negatives).  When the number of keys added since the
last build exceeds the capacity the filter was sized for, the owner rebuilds it from its
side's current keys (rebuild-on-threshold), keeping the false-positive rate bounded.
State encoding: ``join.bloom.v1`` (counters, k, capacity, additions since build).
"""

from __future__ import annotations

import numpy as np

ENCODING = "join.bloom.v1"
_MAX = np.uint16(65535)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (vectorised), spreads structured keys such as small ints."""
    z = h.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    return z


class CountingBloom:
    __slots__ = ("counters", "k", "capacity", "added", "encoding")

    def __init__(self, capacity: int, k: int = 3, bits_per_key: int = 10):
        capacity = max(int(capacity), 1024)
        m = 1 << int(np.ceil(np.log2(capacity * bits_per_key)))
        self.counters = np.zeros(m, dtype=np.uint16)
        self.k = k
        self.capacity = capacity
        self.added = 0
        self.encoding = ENCODING

    def _positions(self, hashes: np.ndarray) -> np.ndarray:
        z = _mix(hashes)
        h1 = z & np.uint64(0xFFFFFFFF)
        h2 = (z >> np.uint64(32)) | np.uint64(1)
        mask = np.uint64(len(self.counters) - 1)
        ks = np.arange(self.k, dtype=np.uint64)
        with np.errstate(over="ignore"):
            pos = (h1[:, None] + ks[None, :] * h2[:, None]) & mask
        return pos.astype(np.int64)

    def update(self, hashes: np.ndarray, weights: np.ndarray) -> None:
        """Add (weight > 0) or remove (weight < 0) keys with multiplicity."""
        if len(hashes) == 0:
            return
        pos = self._positions(hashes).reshape(-1)
        w = np.repeat(weights.astype(np.int64), self.k)
        if len(pos) * 8 > len(self.counters):  # bulk (build): one linear pass over m
            delta = np.bincount(pos, weights=w, minlength=len(self.counters)).astype(np.int64)
            touched = np.flatnonzero(delta)
            delta = delta[touched]
        else:  # a delta: O(delta), never scan all m counters
            touched, inv = np.unique(pos, return_inverse=True)
            delta = np.bincount(inv.reshape(-1), weights=w, minlength=len(touched)).astype(np.int64)
        cur = self.counters[touched].astype(np.int64)
        saturated = cur == int(_MAX)
        new = np.clip(cur + delta, 0, int(_MAX))
        new[saturated] = int(_MAX)
        self.counters[touched] = new.astype(np.uint16)
        self.added += int(weights[weights > 0].sum())

    def might_contain(self, hashes: np.ndarray) -> np.ndarray:
        if len(hashes) == 0:
            return np.zeros(0, dtype=bool)
        pos = self._positions(hashes)
        return (self.counters[pos] > 0).all(axis=1)

    def needs_rebuild(self) -> bool:
        return self.added > 2 * self.capacity

    @classmethod
    def build(cls, hashes: np.ndarray, weights: np.ndarray, n_keys: int | None = None) -> "CountingBloom":
        """A filter sized for ``n_keys`` distinct keys (default: counted here) holding the keys."""
        if n_keys is None:
            live = hashes[weights != 0] if len(hashes) else hashes
            n_keys = len(np.unique(live)) if len(live) else 0
        bf = cls(capacity=n_keys)
        bf.update(hashes, weights)
        bf.added = 0
        return bf
