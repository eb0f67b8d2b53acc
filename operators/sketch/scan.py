"""Table access: turn a raw signed delta into an annotated delta (IMP Sec. 5.2.1, Def. 4.4).

Incremental rule: I(R, ΔD) = annotate(ΔR) - every delta row gets the singleton sketch of
the fragment its partition attribute falls in (compact int form, PBDS "delay").  A
selection directly above the table (after push-down, Sec. 7.2 "filtering deltas based on
selections") is evaluated here on the raw delta, before anything else is computed.
State kept: only the table's column types seen at ``initialize`` (``scan.schema.v1``);
deltas are cast to them (decimals are read as float64, narrow ints as int64).
Deletions: carried as negative weights; an insert and a delete of the same row in one
batch cancel (consolidation).  Tables without a partition get width-0 sketches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import IvmError, StateError
from operators.sketch.delta import Delta, consolidate
from operators.sketch.expr import Expr, predicate_mask
from operators.sketch.partition import RangePartition, decimal_to_float

WEIGHT = "__weight"
ENCODING = "scan.schema.v1"


@dataclass(frozen=True)
class ScanSpec:
    table: str
    columns: tuple  # ((raw_name, col_id), ...) produced by the scan
    partition: RangePartition | None = None
    offset: int = 0  # global id of this table's fragment 0
    pushed: Expr | None = None  # selection over col ids, evaluated on the raw delta
    nbits: int = 1


@dataclass
class ScanState:
    types: dict = field(default_factory=dict)  # raw column -> pa type used by the engine
    encoding: str = ENCODING


def normalize_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    if pa.types.is_date(t):
        return pa.date32()
    return t


def _column(raw: pa.Table, name: str, spec: ScanSpec) -> pa.Array:
    try:
        c = raw.column(name)
    except KeyError:
        raise IvmError(f"table {spec.table!r} has no column {name!r}") from None
    return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c


def step(spec: ScanSpec, state: ScanState, raw: pa.Table | None, weight=None, learn: bool = False):
    """Annotate a raw delta (``weight`` defaults to ``raw[__weight]``); returns (state, Delta|None)."""
    if raw is None:
        return state, None
    if weight is None:
        if WEIGHT not in raw.column_names:
            raise IvmError(f"delta for table {spec.table!r} lacks the int64 column {WEIGHT!r}")
        weight = raw.column(WEIGHT).to_numpy(zero_copy_only=False).astype(np.int64)
    if learn:
        for name, _ in spec.columns:
            state.types[name] = normalize_type(_column(raw, name, spec).type)
        if spec.partition is not None:
            _column(raw, spec.partition.attribute, spec)
    elif not state.types and spec.columns:
        raise StateError(f"scan of {spec.table!r} used before initialize()")
    arrays, names = [], []
    for name, cid in spec.columns:
        c = _column(raw, name, spec)
        t = state.types.get(name) or normalize_type(c.type)
        if pa.types.is_dictionary(c.type):
            c = c.dictionary_decode()
        if pa.types.is_decimal(c.type):
            c = decimal_to_float(c)
        if c.type != t:
            c = pc.cast(c, t)
        arrays.append(c)
        names.append(cid)
    if not names:
        raise IvmError(f"scan of {spec.table!r} produces no column (planner keeps at least one)")
    tbl = pa.Table.from_arrays(arrays, names=names)
    keep = None
    if spec.pushed is not None and tbl.num_rows:  # selection first: annotate survivors only
        keep = np.flatnonzero(predicate_mask(spec.pushed, tbl))
        if len(keep) == 0:
            return state, None
        tbl, weight = tbl.take(pa.array(keep)), weight[keep]
    if spec.partition is not None:
        pv = _column(raw, spec.partition.attribute, spec)
        if keep is not None:
            pv = pv.take(pa.array(keep))
        sketch = (spec.partition.fragment_of(pv) + spec.offset).reshape(-1, 1)
    else:
        sketch = np.zeros((tbl.num_rows, 0), dtype=np.int64)
    d = Delta(tbl, weight, sketch)
    if not learn and len(d) and (d.weight < 0).any() and (d.weight > 0).any():
        d = consolidate(d, spec.nbits)
    if d is None or len(d) == 0:
        return state, None
    return state, d


def reference_scan(spec: ScanSpec, raw: pa.Table) -> list:
    """From scratch: [(row tuple, frozenset(global fragment ids), multiplicity)] of a full table."""
    cols = [raw.column(name).to_pylist() for name, _ in spec.columns]
    rows = list(zip(*cols)) if cols else [()] * raw.num_rows
    if spec.partition is not None:
        vals = raw.column(spec.partition.attribute).to_pylist()
        frags = [frozenset({_ref_fragment(spec.partition, v) + spec.offset}) for v in vals]
    else:
        frags = [frozenset()] * raw.num_rows
    return [(r, f, 1) for r, f in zip(rows, frags)]


def _ref_fragment(p: RangePartition, v) -> int:
    """Per-value fragment by a linear walk over the boundaries (independent of searchsorted)."""
    if v is None:
        return p.n_fragments
    if not isinstance(v, (str, int)) and hasattr(v, "is_finite"):
        v = float(v)
    i = 0
    while i + 1 < p.n_fragments and v >= p.boundaries[i + 1]:
        i += 1
    return i
