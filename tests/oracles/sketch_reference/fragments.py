"""Fragment assignment for range partitions, written from the rule alone (not the engine's code).

Rule: sorted boundaries ``b_0 < … < b_n`` give ``n`` fragments; fragment ``i`` holds
``[b_i, b_{i+1})``; the first and last fragments are open-ended (``v < b_0`` → 0,
``v ≥ b_n`` → ``n − 1``); NULL goes to the extra fragment ``n``.

So ``fragment(v) = clamp(bisect_right(b, v) − 1, 0, n − 1)``. Numeric and temporal columns
go through ``numpy.searchsorted`` (O(log n) per value, vectorised); other types (strings,
decimals) fall back to ``bisect`` on Python values, which is slower but only used on small
tables.
"""

from __future__ import annotations

import bisect
import datetime as _dt
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def n_fragments(boundaries: Sequence[Any]) -> int:
    """Number of (non-NULL) fragments a boundary list defines."""
    if len(boundaries) < 2:
        raise ValueError(f"a range partition needs at least 2 boundaries, got {list(boundaries)!r}")
    return len(boundaries) - 1


def fragment_of(value: Any, boundaries: Sequence[Any]) -> int:
    """The fragment id of one value (NULL → ``n``)."""
    n = n_fragments(boundaries)
    if value is None:
        return n
    return min(max(bisect.bisect_right(list(boundaries), value) - 1, 0), n - 1)


def _numpy_boundaries(typ: pa.DataType, boundaries: Sequence[Any]) -> np.ndarray | None:
    """Boundaries as a numpy array comparable with the column's numpy values, or None."""
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        if all(isinstance(b, (int, float, np.integer, np.floating)) and not isinstance(b, bool) for b in boundaries):
            return np.asarray(boundaries, dtype=np.float64 if any(isinstance(b, (float, np.floating)) for b in boundaries) or pa.types.is_floating(typ) else np.int64)
        return None
    if pa.types.is_date(typ):
        if all(isinstance(b, _dt.date) and not isinstance(b, _dt.datetime) for b in boundaries):
            return np.asarray(boundaries, dtype="datetime64[D]")
        return None
    if pa.types.is_timestamp(typ):
        if all(isinstance(b, _dt.datetime) for b in boundaries):
            return np.asarray(boundaries, dtype="datetime64[us]")
        return None
    return None


def fragment_ids(column: pa.Array | pa.ChunkedArray, boundaries: Sequence[Any]) -> pa.Array:
    """int32 fragment id of every value of ``column`` (NULL → ``n``)."""
    n = n_fragments(boundaries)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    typ = column.type
    if pa.types.is_dictionary(typ):
        column = column.dictionary_decode()
        typ = column.type
    nb = _numpy_boundaries(typ, boundaries)
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    present = column.filter(pa.array(valid)) if column.null_count else column
    if nb is not None:
        values = present.to_numpy(zero_copy_only=False)
        if pa.types.is_timestamp(typ):
            values = values.astype("datetime64[us]")
        found = np.searchsorted(nb, values, side="right") - 1
    else:
        b = list(boundaries)
        found = np.fromiter((bisect.bisect_right(b, v) - 1 for v in present.to_pylist()), dtype=np.int64, count=len(present))
    ids = np.full(len(column), n, dtype=np.int32)
    ids[valid] = np.clip(found, 0, n - 1)
    return pa.array(ids, type=pa.int32())
