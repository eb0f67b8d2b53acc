"""Sketch-annotated deltas: columnar rows with a signed weight and a sketch per row.

A ``Delta`` is a pyarrow table whose columns are named by the plan's internal column ids,
an int64 ``weight`` per row (``+n`` inserts n copies, ``-n`` deletes n copies) and a
sketch annotation per row in one of two forms (PBDS's "delay" trick, IMP Sec. 7.1):

* **compact** - a 2-D int64 matrix ``(rows, w)``: the row's sketch is the set of its
  non-negative entries (``-1`` = no fragment).  Table access yields width 1, a join of
  two annotated inputs concatenates the matrices, an input that touches no partitioned
  table has width 0.  Fragment ids are *global*: table ``t`` fragment ``i`` is
  ``offset[t] + i`` (see ``SketchSpace``).
* **set** - a 1-D object array of ``frozenbitarray`` of ``nbits`` bits.  Aggregation and
  DISTINCT produce it (a group's sketch is the union of its members'); any merge of a
  set with something else stays a set.

``consolidate`` sums the weights of identical (row, sketch) pairs and drops zero sums, so
an insert and a delete of the same annotated tuple in one batch cancel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bitarray import bitarray, frozenbitarray

EMPTY = np.zeros((0, 0), dtype=np.int64)


@dataclass(frozen=True)
class SketchSpace:
    """Global fragment numbering: table -> (offset, n_fragments + 1 incl. NULL fragment)."""

    offsets: tuple  # ((table, offset, size), ...)
    nbits: int

    @classmethod
    def build(cls, partitions: dict) -> "SketchSpace":
        offs, off = [], 0
        for t in sorted(partitions):
            size = partitions[t].n_fragments + 1
            offs.append((t, off, size))
            off += size
        return cls(tuple(offs), max(off, 1))

    def offset(self, table: str) -> int:
        for t, off, _ in self.offsets:
            if t == table:
                return off
        raise KeyError(table)

    def split(self, global_ids) -> dict:
        """Global fragment ids -> {table: set(local ids)}."""
        out = {t: set() for t, _, _ in self.offsets}
        for g in global_ids:
            for t, off, size in self.offsets:
                if off <= g < off + size:
                    out[t].add(int(g - off))
                    break
        return out


# -- sketch column helpers -----------------------------------------------------------------

def is_compact(s) -> bool:
    return s.ndim == 2


# Sketches of at most one fragment are interned: frozenbitarrays are immutable, and most
# groups and rows lie in one fragment, so one shared object (~240 B) per (nbits, fragment)
# replaces one per group.  Bounded so that many sketch spaces cannot grow it without end.
_SMALL: dict = {}
_SMALL_MAX = 1 << 16


def bits_from_ids(ids, nbits: int) -> frozenbitarray:
    if type(ids) is not tuple:
        ids = [int(i) for i in ids]
    if len(ids) > 1:
        return _make_bits(ids, nbits)
    key = (nbits, ids[0] if ids else -1)
    b = _SMALL.get(key)
    if b is None:
        if len(_SMALL) >= _SMALL_MAX:
            _SMALL.clear()
        b = _SMALL[key] = _make_bits(ids, nbits)
    return b


def _make_bits(ids, nbits: int) -> frozenbitarray:
    b = bitarray(nbits)
    b.setall(0)
    if ids:
        b[list(ids)] = 1
    return frozenbitarray(b)


def ids_of(bits) -> list:
    return list(bits.search(1))


def as_sets(s, nbits: int) -> np.ndarray:
    """Any sketch column -> 1-D object array of frozenbitarray."""
    if not is_compact(s):
        return s
    out = np.empty(len(s), dtype=object)
    cache: dict = {}
    for i, row in enumerate(s.tolist()):
        key = tuple(sorted(set(x for x in row if x >= 0)))
        b = cache.get(key)
        if b is None:
            b = cache[key] = bits_from_ids(key, nbits)
        out[i] = b
    return out


def row_ids(s, i) -> list:
    """Fragment ids of row i (with repeats for compact rows that repeat a fragment)."""
    if is_compact(s):
        return [x for x in s[i].tolist() if x >= 0]
    return ids_of(s[i])


def concat_sketches(cols, nbits: int):
    cols = list(cols)
    if not cols:
        return EMPTY
    if all(is_compact(c) for c in cols):
        w = max(c.shape[1] for c in cols)
        padded = [c if c.shape[1] == w else np.hstack([c, -np.ones((len(c), w - c.shape[1]), np.int64)]) for c in cols]
        return np.vstack(padded) if padded else EMPTY
    sets = [as_sets(c, nbits) for c in cols]
    return np.concatenate(sets) if sets else np.empty(0, dtype=object)


def hstack_sketches(a, b, nbits: int):
    """Row-wise union of two sketch columns of equal length (join output)."""
    if is_compact(a) and is_compact(b):
        return np.hstack([a, b])
    sa, sb = as_sets(a, nbits), as_sets(b, nbits)
    out = np.empty(len(sa), dtype=object)
    for i in range(len(sa)):
        out[i] = sa[i] | sb[i]
    return out


def sketch_keys(s) -> list:
    """Hashable per-row sketch keys (sorted id tuples), for consolidation and state maps."""
    if is_compact(s):
        return [tuple(sorted(set(x for x in row if x >= 0))) for row in s.tolist()]
    return [tuple(b.search(1)) for b in s]


# -- grouping ------------------------------------------------------------------------------

def _codes_of(a):
    if isinstance(a, np.ndarray):
        if a.dtype == object:
            m: dict = {}
            c = np.fromiter((m.setdefault(x, len(m)) for x in a), dtype=np.int64, count=len(a))
            return c, max(len(m), 1)
        u, c = np.unique(a, return_inverse=True)
        return c.astype(np.int64).reshape(-1), max(len(u), 1)
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    d = pc.dictionary_encode(a, null_encoding="encode")
    return d.indices.to_numpy(zero_copy_only=False).astype(np.int64), max(len(d.dictionary), 1)


def group_codes(arrays, n: int):
    """Dense group id per row over several key columns; returns (inverse, first_index)."""
    codes = np.zeros(n, dtype=np.int64)
    card = 1
    for a in arrays:
        c, k = _codes_of(a)
        if card * k >= (1 << 62):
            _, codes = np.unique(codes, return_inverse=True)
            codes = codes.astype(np.int64).reshape(-1)
            card = int(codes.max()) + 1 if n else 1
        codes = codes * k + c
        card *= k
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    return inv.astype(np.int64).reshape(-1), first.astype(np.int64)


# -- the batch -----------------------------------------------------------------------------

class Delta:
    """An annotated delta batch (see module docstring)."""

    __slots__ = ("table", "weight", "sketch")

    def __init__(self, table: pa.Table, weight: np.ndarray, sketch):
        self.table = table
        self.weight = weight
        self.sketch = sketch

    def __len__(self):
        return self.table.num_rows

    @property
    def columns(self):
        return self.table.column_names

    def take(self, idx) -> "Delta":
        idx = np.asarray(idx, dtype=np.int64)
        return Delta(self.table.take(pa.array(idx)), self.weight[idx], self.sketch[idx])

    def filter(self, mask: np.ndarray) -> "Delta":
        return self.take(np.flatnonzero(mask))

    def with_weight(self, w) -> "Delta":
        return Delta(self.table, w, self.sketch)

    @staticmethod
    def concat(deltas, nbits: int) -> "Delta | None":
        ds = [d for d in deltas if d is not None and len(d)]
        if not ds:
            return None
        if len(ds) == 1:
            return ds[0]
        tbl = pa.concat_tables([d.table for d in ds], promote_options="permissive")
        return Delta(tbl, np.concatenate([d.weight for d in ds]), concat_sketches([d.sketch for d in ds], nbits))

    def rows(self) -> list:
        """Row tuples (Python values)."""
        cols = [c.to_pylist() for c in self.table.columns]
        return list(zip(*cols)) if cols else [()] * len(self)


def consolidate(d: "Delta | None", nbits: int) -> "Delta | None":
    """Sum weights of identical (row, sketch) pairs; drop pairs that cancel."""
    if d is None or len(d) == 0:
        return None
    n = len(d)
    arrays = list(d.table.columns)
    if is_compact(d.sketch):
        arrays.extend(np.sort(d.sketch, axis=1).T)
    else:
        arrays.append(d.sketch)
    inv, first = group_codes(arrays, n)
    if len(first) == n and (d.weight != 0).all():
        return d
    w = np.bincount(inv, weights=d.weight, minlength=len(first)).astype(np.int64)
    keep = np.flatnonzero(w != 0)
    if len(keep) == 0:
        return None
    out = d.take(first[keep])
    out.weight = w[keep]
    return out
