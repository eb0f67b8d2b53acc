"""Range partitions of one attribute: the fragments a provenance sketch is made of.

A ``RangePartition(attribute, boundaries)`` with sorted, strictly increasing boundaries
``b_0 < b_1 < ... < b_n`` has ``n`` value fragments: fragment ``i`` is ``[b_i, b_{i+1})``.
So that every value a stream may bring lands somewhere, the first and last fragments are
**open-ended**: values below ``b_0`` belong to fragment 0 and values ``>= b_n`` belong to
fragment ``n - 1``.  ``NULL`` belongs to a dedicated fragment with id ``n`` whose
predicate is ``attr IS NULL``.  A sketch over this partition is therefore a subset of
``{0, ..., n}`` (``n + 1`` bits).

Boundaries may be of any orderable type: int, float/decimal, ``datetime.date``,
``datetime.datetime`` or str.  Decimals are compared as floats (the engine computes on
float64).  ``fragment_of`` is vectorised (``np.searchsorted``) and accepts numpy arrays,
pyarrow arrays/chunked arrays and Python sequences.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import IvmError


def equi_depth_positions(n: int, n_fragments: int) -> list[int]:
    """Where ``equi_depth`` picks its candidate boundaries in ``n`` sorted values."""
    return [int(p) for p in (np.arange(n_fragments, dtype=np.int64) * n) // n_fragments]


class RangePartition:
    """Range partition of ``attribute`` by sorted boundaries (open-ended ends, NULL fragment)."""

    __slots__ = ("attribute", "boundaries", "n_fragments", "_kind", "_np_bounds")

    def __init__(self, attribute: str, boundaries: Sequence):
        bounds = list(boundaries)
        if len(bounds) < 2:
            raise IvmError(f"partition on {attribute!r} needs at least two boundaries, got {bounds!r}")
        bounds = [float(b) if isinstance(b, decimal.Decimal) else b for b in bounds]
        for lo, hi in zip(bounds, bounds[1:]):
            if not lo < hi:
                raise IvmError(
                    f"partition on {attribute!r}: boundaries must be strictly increasing ({lo!r} >= {hi!r})"
                )
        self.attribute = attribute
        self.boundaries = tuple(bounds)
        self.n_fragments = len(bounds) - 1
        self._kind = _kind_of(bounds[0])
        self._np_bounds = _to_numpy(bounds, self._kind)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def equi_depth(cls, attribute: str, values, n_fragments: int) -> "RangePartition":
        """Boundaries at the equi-depth quantiles of ``values`` (NULLs ignored, duplicates merged).

        With fewer distinct values than ``n_fragments`` every distinct value gets its own
        fragment.  The last boundary is ``max + 1`` for integers and ``max`` otherwise (the
        last fragment is open-ended, so the maximum still lands in it).
        """
        if n_fragments < 1:
            raise IvmError(f"equi_depth on {attribute!r}: n_fragments must be >= 1")
        arr = _as_arrow(values)
        arr = pc.drop_null(arr)
        if len(arr) == 0:
            raise IvmError(f"equi_depth on {attribute!r}: no non-NULL values")
        if pa.types.is_decimal(arr.type):
            arr = decimal_to_float(arr)
        arr = arr.take(pc.sort_indices(arr))
        n = len(arr)
        cands = arr.take(pa.array(equi_depth_positions(n, n_fragments))).to_pylist()
        return cls.from_picks(attribute, cands, arr[n - 1].as_py())

    @classmethod
    def from_picks(cls, attribute: str, cands: list, vmax) -> "RangePartition":
        """``equi_depth`` from its picks: the sorted values at ``equi_depth_positions`` and the
        maximum (so that the picks can come from a sort elsewhere, e.g. on Spark's executors)."""
        lo = []
        for v in cands:
            if not lo or v > lo[-1]:
                lo.append(v)
        if isinstance(vmax, (int, np.integer)) and not isinstance(vmax, bool):
            top = vmax + 1
        elif vmax > lo[-1]:
            top = vmax
        else:
            top = None
        if top is None:
            if len(lo) == 1:
                # a single distinct value: give it a closed-open range just above itself
                top = _successor(lo[0])
                lo.append(top)
            # else: last fragment [lo[-2], lo[-1]) is open-ended and still holds max
        else:
            lo.append(top)
        return cls(attribute, lo)

    # -- lookups --------------------------------------------------------------------------
    @property
    def null_fragment(self) -> int:
        """Id of the fragment that holds NULLs (``n_fragments``)."""
        return self.n_fragments

    def fragment_of(self, values) -> np.ndarray:
        """Fragment id (int64) of every value; NULL -> ``n_fragments``."""
        arr = _as_arrow(values)
        n = len(arr)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        vals = _arrow_to_numpy(arr, self._kind)
        ids = np.searchsorted(self._np_bounds, vals, side="right").astype(np.int64) - 1
        np.clip(ids, 0, self.n_fragments - 1, out=ids)
        if nulls is not None:
            ids[nulls] = self.n_fragments
        return ids

    def range_of(self, i: int):
        """Nominal ``(lower, upper)`` of fragment ``i``: ``[b_i, b_{i+1})``; ``(None, None)`` for NULL.

        Fragment 0 additionally holds values below ``b_0`` and fragment ``n-1`` values at or
        above ``b_n`` (see the module docstring); ``predicate`` encodes that.
        """
        if i == self.n_fragments:
            return (None, None)
        if not 0 <= i < self.n_fragments:
            raise IvmError(f"fragment {i} out of range for partition on {self.attribute!r}")
        return (self.boundaries[i], self.boundaries[i + 1])

    def runs(self, fragment_ids: Iterable[int]) -> tuple[list[tuple[int, int]], bool]:
        """The value fragments among ``fragment_ids`` as maximal runs of adjacent ids
        ``[(first, last), ...]`` in ascending order, and whether the NULL fragment is among them."""
        ids = sorted(set(int(i) for i in fragment_ids))
        for i in ids:
            if not 0 <= i <= self.n_fragments:
                raise IvmError(f"fragment {i} out of range for partition on {self.attribute!r}")
        runs: list[tuple[int, int]] = []
        for i in ids:
            if i == self.n_fragments:
                continue
            if runs and runs[-1][1] == i - 1:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        return runs, self.n_fragments in ids

    def predicate(self, fragment_ids: Iterable[int], grouped: bool = False) -> str:
        """SQL condition selecting the given fragments, adjacent ranges merged.

        The plain form is an OR of the ranges, easy to read; a query engine tests a row
        against the ranges one by one, which costs when a sketch has many (a top-k over a
        join can have a few hundred).  ``grouped=True`` puts the same ranges in about sqrt(n)
        groups of consecutive ranges, each behind a test of the group's span
        (``(a >= lo AND a < hi AND (<its ranges>)) OR ...``), so that with AND/OR
        short-circuiting a row costs about 4*sqrt(n) comparisons instead of up to 2n, while
        the condition grows by only 2*sqrt(n) comparisons (engines compile it: a binary
        search of the ranges would double its size).  Both forms select exactly the same
        rows and are only AND/OR over comparisons, so Delta's data skipping and Parquet
        filter push-down use either."""
        runs, has_null = self.runs(fragment_ids)
        a = self.attribute

        def cond(lo: int, hi: int) -> str:
            conds = []
            if lo > 0:
                conds.append(f"{a} >= {_sql_literal(self.boundaries[lo])}")
            if hi < self.n_fragments - 1:
                conds.append(f"{a} < {_sql_literal(self.boundaries[hi + 1])}")
            return " AND ".join(conds) if conds else f"{a} IS NOT NULL"

        if grouped and len(runs) > 4:
            size = math.isqrt(len(runs) - 1) + 1  # ceil(sqrt(n)) ranges per group
            parts = []
            for g in range(0, len(runs), size):
                group = runs[g:g + size]
                span = cond(group[0][0], group[-1][1])
                parts.append(f"{span} AND ({' OR '.join(f'({cond(lo, hi)})' for lo, hi in group)})"
                             if len(group) > 1 else span)
        else:
            parts = [cond(lo, hi) for lo, hi in runs]
        if has_null:
            parts.append(f"{a} IS NULL")
        if not parts:
            return "FALSE"
        if len(parts) == 1:
            return parts[0]
        return " OR ".join(f"({p})" for p in parts)

    def __eq__(self, other):
        return (
            isinstance(other, RangePartition)
            and other.attribute == self.attribute
            and other.boundaries == self.boundaries
        )

    def __hash__(self):
        return hash((self.attribute, self.boundaries))

    def __repr__(self):
        b = self.boundaries
        shown = ", ".join(map(repr, b)) if len(b) <= 6 else f"{b[0]!r}, {b[1]!r}, ..., {b[-1]!r}"
        return f"RangePartition({self.attribute!r}, [{shown}])"

    def __getstate__(self):
        return {"attribute": self.attribute, "boundaries": self.boundaries}

    def __setstate__(self, st):
        self.__init__(st["attribute"], st["boundaries"])


# -- type handling ------------------------------------------------------------------------

def decimal_to_float(arr: pa.Array) -> pa.Array:
    """decimal -> float64, correctly rounded (what ``float(Decimal)`` gives).

    Arrow's own cast is not correctly rounded (0.05 can become 0.05000000000000001), which
    would flip comparisons such as ``l_discount > 0.05``.  For precision <= 18 the unscaled
    int64 is divided by 10**scale (one correctly rounded IEEE division); wider decimals go
    through their decimal text, which Arrow parses with correct rounding.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if not pa.types.is_decimal(t):
        return arr
    if t.bit_width == 128 and t.precision <= 18 and len(arr):
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + len(arr)))
        unscaled = words[2 * arr.offset::2]
        vals = unscaled.astype(np.float64) / float(10 ** t.scale) if t.scale >= 0 else unscaled * float(10 ** -t.scale)
        mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        return pa.array(vals, type=pa.float64(), mask=mask)
    return pc.cast(pc.cast(arr, pa.string()), pa.float64())


def _kind_of(v) -> str:
    if isinstance(v, bool):
        raise IvmError("boolean partition boundaries are not supported")
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, _dt.datetime):
        return "timestamp"
    if isinstance(v, _dt.date):
        return "date"
    if isinstance(v, str):
        return "str"
    raise IvmError(f"unsupported partition boundary type {type(v).__name__}")


def _to_numpy(bounds, kind):
    if kind == "int":
        if any(isinstance(b, float) for b in bounds):
            return np.asarray(bounds, dtype=np.float64)
        return np.asarray(bounds, dtype=np.int64)
    if kind == "float":
        return np.asarray(bounds, dtype=np.float64)
    if kind == "date":
        return np.asarray(bounds, dtype="datetime64[D]")
    if kind == "timestamp":
        return np.asarray([np.datetime64(b.replace(tzinfo=None), "us") for b in bounds])
    return np.asarray(bounds, dtype=object)


def _as_arrow(values):
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array):
        return values
    if isinstance(values, np.ndarray) and values.dtype != object:
        return pa.array(values)
    vals = [float(v) if isinstance(v, decimal.Decimal) else v for v in values]
    return pa.array(vals)


def _arrow_to_numpy(arr: pa.Array, kind: str) -> np.ndarray:
    t = arr.type
    if arr.null_count:
        fill = {"str": "", "date": _dt.date(1970, 1, 1), "timestamp": _dt.datetime(1970, 1, 1)}.get(kind, 0)
        if pa.types.is_decimal(t):
            arr = decimal_to_float(arr)
            t = arr.type
            fill = 0
        arr = arr.fill_null(pa.scalar(fill, type=t) if kind not in ("int", "float") else 0)
    if pa.types.is_decimal(t):
        arr = decimal_to_float(arr)
        t = arr.type
    if kind in ("int", "float"):
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise IvmError(f"partition expects numbers, got column of type {t}")
        return arr.to_numpy(zero_copy_only=False)
    if kind == "date":
        if pa.types.is_timestamp(t):
            arr = arr.cast(pa.date32())
        return arr.cast(pa.date32()).to_numpy(zero_copy_only=False).astype("datetime64[D]")
    if kind == "timestamp":
        if pa.types.is_date(t):
            arr = arr.cast(pa.timestamp("us"))
        if pa.types.is_timestamp(t) and t.tz is not None:
            arr = arr.cast(pa.timestamp(t.unit))
        return arr.to_numpy(zero_copy_only=False).astype("datetime64[us]")
    return np.asarray(arr.to_pylist(), dtype=object)


def _successor(v):
    if isinstance(v, float):
        return float(np.nextafter(v, np.inf))
    if isinstance(v, _dt.datetime):
        return v + _dt.timedelta(microseconds=1)
    if isinstance(v, _dt.date):
        return v + _dt.timedelta(days=1)
    if isinstance(v, str):
        return v + "\x00"
    return v + 1


def _sql_literal(v) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, _dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, _dt.date):
        return f"DATE '{v.isoformat()}'"
    return repr(v) if isinstance(v, float) else str(v)
