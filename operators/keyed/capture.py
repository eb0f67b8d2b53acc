"""Capture at registration for the keyed stages: their initial state from a table's rows.

The state the keyed pipeline would hold after one batch that inserts every row of the mirrors
(and nothing else), computed slice by slice so that no process ever holds a whole table:

1. ``slice_rows`` (one slice of one table's rows, stateless): for each row its last image
   under (table, bucket of its key) -- ``cdc.last_image.v1``'s entry; and for each query on
   the table the slice's annotated rows, split by group (a partial group, key (query, group))
   or, for a query without aggregation, its fragment weights (key (query, fragment)).
2. ``merge_group`` (key (query, group)): the group's partials from every slice ->
   ``imp.group.v1`` (``group_step`` from the empty state, so the same state as inserting the
   rows one batch at a time) and the fragment weights of its output rows.
3. μ (key (query, fragment)): the sum of the fragment weights of 1 and 2; the fragments with
   a positive count are the sketch.

Rows are ``(k1, k2, pk, w, a)`` (``CAPTURE_SCHEMA``): k1 is the table for a last image (pk:
``repr`` of the key as the CDC stage's MapState has it; a: its pickled (key, image)), ``g:``
+ query for a partial group or a group state (a: ``encode_delta`` / ``encode_group``), ``f:``
+ query for a fragment weight or count (w). Spark runs 1 as ``mapInArrow`` over the mirror
at a pinned Delta version, 2 as ``applyInArrow`` per group and 3 as a ``sum``; the tests run
the same functions in one process.
"""

from __future__ import annotations

import datetime as dt
import pickle

import pyarrow as pa

from operators.keyed.cdc import bucket_of
from operators.keyed.sketch import encode_delta, fragment_weights

CAPTURE_SCHEMA = "k1 string, k2 string, pk string, w long, a binary"
ARROW_SCHEMA = pa.schema([("k1", pa.string()), ("k2", pa.string()), ("pk", pa.string()), ("w", pa.int64()),
                          ("a", pa.binary())])


def _norm(v):
    """A value read back from Arrow as the CDC decoder gives it (aware datetimes in ``timezone.utc``),
    so that a captured key has the ``repr`` (bucket, MapState key) of the same key decoded."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc)
    return v


def _dumps(x) -> bytes:
    return pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)


class _Rows:
    """Columns of ``CAPTURE_SCHEMA`` being filled."""

    def __init__(self):
        self.cols: tuple = ([], [], [], [], [])

    def add(self, k1: str, k2: str, pk=None, w: int = 0, a=None) -> None:
        for col, v in zip(self.cols, (k1, k2, pk, w, a)):
            col.append(v)

    def table(self) -> pa.Table:
        return pa.table([pa.array(c, f.type) for c, f in zip(self.cols, ARROW_SCHEMA)], schema=ARROW_SCHEMA)


def slice_rows(table: str, rows: pa.Table, primary_key: list, queries: list, buckets: int) -> pa.Table:
    """Stage 1 for one slice of ``table``'s rows (columns in the table's schema order)."""
    out = _Rows()
    names = rows.column_names
    cols = [[_norm(v) for v in rows.column(c).to_pylist()] for c in names]
    images = [dict(zip(names, vals)) for vals in zip(*cols)]
    for img in images:
        key = tuple(img[c] for c in primary_key)
        out.add(table, str(bucket_of(key, buckets)), repr(key), 0, _dumps((key, img)))
    deltas = [(1, img) for img in images]
    for q in queries:
        if q.table != table.lower():
            continue
        d = q.annotate(deltas)
        if d is None:
            continue
        if q.aggregated:
            for gkey, part in q.split_groups(d):
                out.add(f"g:{q.name}", gkey, a=encode_delta(part))
        else:
            for f, x in fragment_weights(d).items():
                out.add(f"f:{q.name}", str(f), w=int(x))
    return out.table()


def merge_group(q, parts: list) -> tuple:
    """Stage 2 for one group of ``q``: its partials (``encode_delta`` blobs) -> (``imp.group.v1``
    blob or None, {global fragment: weight})."""
    from operators.keyed.sketch import decode_delta

    return q.group_step(None, [decode_delta(b) for b in parts])


def merge_groups(queries: dict, rows: pa.Table) -> pa.Table:
    """Stage 2 over rows of any number of groups (``k1`` = ``g:`` + query): group states and weights."""
    by: dict = {}
    for qk, g, blob in zip(rows.column("k1").to_pylist(), rows.column("k2").to_pylist(), rows.column("a").to_pylist()):
        by.setdefault((qk, g), []).append(blob)
    out = _Rows()
    for (qk, g), parts in by.items():
        name = qk[2:]
        blob, fw = merge_group(queries[name], parts)
        if blob is not None:
            out.add(qk, g, a=blob)
        for f, x in fw.items():
            out.add(f"f:{name}", str(f), w=int(x))
    return out.table()
