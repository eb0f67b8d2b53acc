"""Join keys as the stores see them: the key hash of each row, the NULL-key mask, and the
expansion of matched hash ranges into (probe index, row index) pairs.

The stores themselves are ``operators.sketch.side_store.SideStore`` implementations
(``operators.sketch.memory_side.MemoryIndex`` in memory, ``streaming_app.sketches.delta_side.DeltaSide``
in the Delta mirror); the join operator and every store hash keys with ``key_hash`` here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

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


def expand_matches(lo: np.ndarray, hi: np.ndarray):
    """(probe index, sorted-row index) of every match, given each probe's [lo, hi) range."""
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    probe = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts, counts) + np.repeat(lo, counts)
    return probe, idx
