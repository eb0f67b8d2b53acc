"""Capture at registration for the keyed stages: their initial state from a table's rows.

The state the keyed pipeline would hold after one batch that inserts every row of the mirrors
(and nothing else), computed slice by slice so that no process ever holds a whole table:

1. ``slice_rows`` (one slice of one table's rows, stateless): for each row its last image
   under (table, bucket of its key) -- an entry of a ``cdc.image_pages.v2`` page; and for each
   query on the table the slice's annotated rows routed to the query's next stage
   (``KeyedQuery.route``): a join's side rows cut by ``JOIN_BUCKETS`` buckets of the join key,
   an aggregation's rows cut by the group stage's buckets (key: the query's set of queries
   with the same group key, and the bucket), a top-k's rows (one key per query), or, with no
   stateful operator, fragment weights (key (query, fragment)).
2. ``merge_joins`` (all side rows of one (query, bucket)): one ``join.step`` from no state
   over both sides' rows (ΔL ⋈ ΔR: every pair), routed on like 1's, and each join key's
   ``sketch.join.v1`` state (its rows of each side, consolidated: what ``join_step`` from no
   state leaves).
3. ``merge_groups`` (all partial rows of one (set, bucket), from 1 and 2): per query one
   ``aggregate.step`` from the empty state over them, then the HAVING/projection nodes above
   it, and the state cut into one record per group (``aggregate.take``: what ``groups_step``
   would hold had the rows come in one batch), gathered into the bucket's pages of groups
   (``imp.groups.v3``, {group key text: {query: record}}); the output rows go on to the top-k
   or to μ.
4. ``merge_topk`` (all top-k input rows of one query, from 1, 2 and 3): one ``topk_step`` from
   the empty state: the query's ``topk.ordered.v2`` (one row per group, or per input row) and
   the fragment weights of the k rows it emits.
5. μ (key (query, fragment)): the sum of the fragment weights of 1 to 4; the fragments with
   a positive count are the sketch.

Rows are ``(k1, k2, pk, w, a)`` (``CAPTURE_SCHEMA``): k1 is the table for a last image (w:
the key's ``key_hash``, from which the page follows once the table's page count is known; a:
its pickled (key, image); the pages job groups them by (table, bucket, page)), ``j:`` +
query for a join side's rows (k2: bucket; w: side 0/1; a: ``encode_delta``) or a join key's
state (k2: the join key text; a: ``encode_join``), ``g:`` + set of queries for partial rows
(k2: bucket; pk: the query; a: ``encode_delta``) or a page of group records (k2: the bucket;
pk: the page; w: its records; a: ``encode_groups``), ``k:`` + query for top-k input rows (k2: "";
a: ``encode_delta``) or the query's top-k state (k2: ""; a: ``encode_topk``), ``f:`` + query
for a fragment weight or count (w). Spark runs 1 as ``mapInArrow`` over the mirror at a
pinned Delta version, 2 to 4 over partitions sorted by (k1, k2) and 5 as a ``sum``; the tests
run the same functions in one process.
"""

from __future__ import annotations

import datetime as dt
import pickle
import zlib

import pyarrow as pa

from operators.keyed.cdc import key_hash
from operators.keyed.sketch import (decode_delta, encode_delta, encode_groups, fragment_weights, group_key_text,
                                    group_page, join_key_text)
from operators.sketch import aggregate, stateless
from operators.sketch.delta import Delta
from operators.sketch.plan import FilterNode

JOIN_BUCKETS = 64  # the same for a join's side rows

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
        h = key_hash(key)
        out.add(table, str(h % buckets), None, h, _dumps((key, img)))
    deltas = [(1, img) for img in images]
    for q in queries:
        if not q.reads(table):
            continue
        if q.join is not None:
            for b, side, part in q.annotate_sides(table, deltas, join_bucket):
                out.add(f"j:{q.name}", b, w=side, a=encode_delta(part))
            continue
        _route(out, q, q.annotate(deltas, table), "input")
    return out.table()


def join_bucket(key: tuple) -> str | None:
    """The capture's bucket of a join key (None for a NULL key: such rows never join)."""
    text = join_key_text(key)
    return None if text is None else str(zlib.crc32(text.encode("utf-8")) % JOIN_BUCKETS)


def _route(out: _Rows, q, d: Delta | None, after: str) -> None:
    """A stage's output rows to the next capture stage, as ``KeyedQuery.route`` sends a batch's."""
    if d is None or len(d) == 0:  # as the pipeline: no rows, no group
        return
    if after in ("input", "join") and q.aggregated:
        for b, part in q.split_groups(d):
            out.add(f"g:{q.group_set}", str(b), q.name, a=encode_delta(part))
    elif after != "topk" and q.topk is not None:
        out.add(f"k:{q.name}", "", a=encode_delta(d))
    else:
        for f, x in fragment_weights(d).items():
            out.add(f"f:{q.name}", str(f), w=int(x))


def merge_joins(queries: dict, rows: pa.Table) -> pa.Table:
    """Stage 2 over whole buckets (rows with ``k1`` = ``j:`` + query, any number of buckets):
    each join key's state (k2: the key text, a: ``encode_join``) and the join's output rows,
    routed to the aggregation, the top-k or μ."""
    by: dict = {}
    for qk, side, blob in zip(rows.column("k1").to_pylist(), rows.column("w").to_pylist(),
                              rows.column("a").to_pylist()):
        by.setdefault(qk, ([], []))[side].append(decode_delta(blob))
    out = _Rows()
    for qk, (ls, rs) in by.items():
        q = queries[qk[2:]]
        states, res = q.join_keys(ls, rs)
        for text, blob in sorted(states):
            out.add(qk, text, a=blob)
        _route(out, q, res, "join")
    return out.table()


def merge_topk(queries: dict, rows: pa.Table) -> pa.Table:
    """Stage 4 over whole queries (rows with ``k1`` = ``k:`` + query): each query's top-k state
    (k2 "", a: ``encode_topk``) and the fragment weights of the rows it emits."""
    by: dict = {}
    for qk, blob in zip(rows.column("k1").to_pylist(), rows.column("a").to_pylist()):
        by.setdefault(qk, []).append(decode_delta(blob))
    out = _Rows()
    for qk, ds in by.items():
        q = queries[qk[2:]]
        blob, res = q.topk_step(None, ds)
        if blob is not None:
            out.add(qk, "", a=blob)
        _route(out, q, res, "topk")
    return out.table()


def merge_groups(queries: dict, rows: pa.Table, pages_of) -> pa.Table:
    """Stage 3 over whole buckets (rows with ``k1`` = ``g:`` + set of queries, pk the query; any
    number of buckets): each bucket's pages of group records (k2: the bucket, pk: the page, w:
    its records, a: the page blob; ``pages_of``: set -> pages per bucket) and the groups' output
    rows, routed to the top-k or μ."""
    by: dict = {}
    for key, name, blob in zip(zip(rows.column("k1").to_pylist(), rows.column("k2").to_pylist()),
                               rows.column("pk").to_pylist(), rows.column("a").to_pylist()):
        by.setdefault(key, {}).setdefault(name, []).append(blob)
    out = _Rows()
    for (k1, k2), per in by.items():
        pages: dict = {}  # page -> {group key text: {query: record}}
        routed = []
        n_pages = pages_of(k1[2:])
        for name, blobs in sorted(per.items()):
            q = queries[name]
            spec = q.agg.spec
            d = Delta.concat([decode_delta(b) for b in blobs], q.space.nbits)
            state, res = aggregate.step(spec, aggregate.new_state(spec), d)
            for node in reversed(q.above):
                res = (stateless.select_step if isinstance(node, FilterNode) else stateless.project_step)(
                    node.spec, None, res)[1]
            live = list(state.slot_of.items())  # live groups only (inserts: every group seen)
            for (key, _), rec in zip(live, aggregate.take(spec, state, [s for _, s in live])):
                text = group_key_text(key if len(spec.group) != 1 else (key,))
                pages.setdefault(group_page(text, n_pages), {}).setdefault(text, {})[name] = rec
            routed.append((q, res))
        for pid, page in sorted(pages.items()):
            out.add(k1, k2, str(pid), w=sum(len(e) for e in page.values()), a=encode_groups(page))
        for q, res in routed:
            _route(out, q, res, "group")
    return out.table()
