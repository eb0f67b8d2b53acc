"""Top-k and joins on the statestore backend's keyed stages against the memory backend's engine, no Spark.

Random CDC histories over two tables (inserts, updates of the group, join key and order
values, deletes that empty groups and join keys, keys that return, NULL join keys and
order values, truncates of either table) are cut into batches and fed to ``KeyedPipeline``
(join state per (query, join key), group records per (set of queries, bucket), one top-k state per
query, μ per fragment) and to ``SketchMaintainer.apply`` with the exact signed difference of
the mirrors. Every batch the sketch deltas and the sketches of both partitioned tables must
agree; at the end the join and top-k states must hold nothing for what is gone, and each
sketch must equal DuckDB's lineage of its query over the final rows (``reference_sketch``).
Capture at registration (tables that already hold rows, built slice by slice as the Spark
capture does) must leave the state one batch inserting every row leaves, the memory engine's
sketch and join / top-k state after ``initialize``, and then agree with it along a history.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.debezium import CdcEvent
from core.errors import UnsupportedSqlError
from operators.keyed.pipeline import KeyedPipeline
from operators.keyed.sketch import KeyedQuery, decode_join, decode_topk
from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch.delta import sketch_keys
from tests.oracles.sketch_reference import reference_sketch
from tests.state.test_keyed_pipeline import PART, SCHEMA, _compare_batches, _history, _row, _table, _write_mirror, ops

U = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("w", pa.int64())])
SCHEMAS = {"t": SCHEMA, "u": U}
PARTS = {**PART, "u": RangePartition("w", [0, 4, 8])}

TOPK = {  # small values: sums, counts and maxima tie often
    "sum_desc": "SELECT g, SUM(v) AS s FROM t GROUP BY g ORDER BY s DESC LIMIT 2",
    "count_having": "SELECT g, COUNT(*) AS c FROM t GROUP BY g HAVING COUNT(*) > 1 ORDER BY c LIMIT 2",
    "max_asc": "SELECT g, MAX(v) AS m FROM t WHERE p < 9 GROUP BY g ORDER BY m LIMIT 1",
    "rows": "SELECT id, v FROM t WHERE v < 8 ORDER BY v DESC LIMIT 3",  # no aggregation; NULL v first
    "distinct": "SELECT DISTINCT g FROM t ORDER BY g DESC LIMIT 2",
}
JOINS = {
    "agg": "SELECT t.g, SUM(u.w) AS s, COUNT(*) AS c FROM t JOIN u ON t.g = u.k GROUP BY t.g HAVING COUNT(*) > 1",
    "rows": "SELECT t.id, u.w FROM t JOIN u ON t.g = u.k WHERE u.w > 2 AND t.v < u.w",
    "topk": "SELECT t.g, MIN(u.w) AS lo FROM t JOIN u ON t.g = u.k GROUP BY t.g ORDER BY lo DESC, t.g LIMIT 2",
    "self": "SELECT a.g, COUNT(*) AS c FROM t a JOIN t b ON a.g = b.g WHERE a.id < b.id GROUP BY a.g",
    "two_keys": "SELECT u.k, MAX(t.v) AS m FROM t JOIN u ON t.g = u.k AND t.id = u.id GROUP BY u.k",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=ops, cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]))
def test_keyed_topk_equals_memory_engine(raw, cuts, buckets):
    keyed = [KeyedQuery(n, sql, PART, {"t": SCHEMA}) for n, sql in TOPK.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets)
    memory = {n: SketchMaintainer(sql, PART) for n, sql in TOPK.items()}
    for m in memory.values():
        m.initialize({"t": SCHEMA.empty_table()})
    _compare_batches(_history(raw), cuts, pipe, keyed, memory, {}, buckets)
    for n, m in memory.items():  # the state is the memory engine's, row for row
        blob = pipe.topks.get(n)
        node = next(x for x in m.query.root.walk() if type(x).__name__ == "TopKNode")
        if blob is None:
            assert not node.state.entries, n
        else:
            st_ = decode_topk(blob)
            assert dict(st_.entries) == dict(node.state.entries) and st_.emitted == node.state.emitted, n


u_ops = st.lists(st.tuples(st.sampled_from("iiuuddt"), st.integers(0, 5), st.one_of(st.none(), st.integers(0, 3)),
                           st.one_of(st.none(), st.integers(0, 10))), max_size=40)


def _u_history(raw, start: int, live: dict | None = None) -> list:
    live, events = dict(live or {}), []
    for off, (op, i, k, w) in enumerate(raw, start):
        key = (i,)
        if op == "t":
            events.append(CdcEvent("u", "t", (), None, None, None, 0, off))
            live.clear()
        elif op == "d":
            if key in live:
                events.append(CdcEvent("u", "d", key, live.pop(key), None, None, 0, off))
        else:
            after = {"id": i, "k": k, "w": w}
            events.append(CdcEvent("u", "u" if key in live else "c", key, live.get(key), after, None, 0, off))
            live[key] = after
    return events


def _weighted(schema, rows, weights):
    t = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
    return t.append_column("__weight", pa.array(weights, pa.int64()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=ops, uraw=u_ops, pick=st.randoms(use_true_random=False),
       cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]))
def test_keyed_joins_equal_memory_engine(raw, uraw, pick, cuts, buckets):
    seq = _interleave({"t": _history(raw), "u": _u_history(uraw, len(raw) + 1)}, pick)

    keyed = [KeyedQuery(n, sql, PARTS, SCHEMAS) for n, sql in JOINS.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets)
    memory = {n: SketchMaintainer(sql, PARTS) for n, sql in JOINS.items()}
    for m in memory.values():
        m.initialize({t: s.empty_table() for t, s in SCHEMAS.items()})
    _compare_join_batches(seq, cuts, pipe, keyed, memory, {"t": {}, "u": {}})


def _interleave(logs: dict, pick) -> list:
    """One log per table (one partition each), interleaved at random into one sequence."""
    tags = [tb for tb, evs in logs.items() for _ in evs]
    pick.shuffle(tags)
    its = {tb: iter(evs) for tb, evs in logs.items()}
    return [(tb, next(its[tb])) for tb in tags]


def _compare_join_batches(seq, cuts, pipe, keyed, memory, mirrors) -> None:
    """``seq`` [(table, event)] in batches of ``cuts`` through the keyed pipeline and the memory
    path (``mirrors``: table -> {key: row} before); sketch changes and sketches every batch."""
    pos, k = 0, 0
    while pos < len(seq):
        batch = seq[pos:pos + cuts[k % len(cuts)]]
        pos, k = pos + len(batch), k + 1
        by_table: dict = {}
        for tb, e in batch:
            by_table.setdefault(tb, []).append(e)
        plans, deltas, changes = pipe.run_batch(by_table)
        diffs = {}
        for tb, plan in plans.items():
            gone, new = _write_mirror(mirrors[tb], plan)
            diffs[tb] = _weighted(SCHEMAS[tb], gone + new, [-1] * len(gone) + [1] * len(new))
        for n, m in memory.items():
            sd = m.apply(diffs)
            q = next(q for q in keyed if q.name == n)
            added, removed = changes[n]
            for tb in ("t", "u"):
                assert {f for t, f in map(q.split_fragment, added) if t == tb} == sd.added[tb], (n, tb)
                assert {f for t, f in map(q.split_fragment, removed) if t == tb} == sd.removed[tb], (n, tb)
                assert sorted(f for t, f in map(q.split_fragment, pipe.sketch(n)) if t == tb) == m.sketch[tb], (n, tb)
    # the join state holds each side's live rows under their key, nothing for emptied keys
    for (n, key), blob in pipe.joins.items():
        left, right = decode_join(blob)
        assert left is not None or right is not None
        for d in (left, right):
            assert d is None or (d.weight > 0).all(), (n, key)
    # the final sketches of both tables are DuckDB's lineage of each query over the final rows
    final = {tb: pa.Table.from_pylist(list(rows.values()), schema=SCHEMAS[tb]) if rows else SCHEMAS[tb].empty_table()
             for tb, rows in mirrors.items()}
    for q in keyed:
        want = reference_sketch(memory[q.name].sql, final, PARTS)
        for tb in ("t", "u"):
            assert sorted(f for t, f in map(q.split_fragment, pipe.sketch(q.name)) if t == tb) == want[tb], (q.name, tb)


# -- capture at registration ------------------------------------------------------------------------

def _bag(d) -> Counter:
    """An annotated delta as a multiset {(row, sketch ids): weight} (row order and runs apart)."""
    out: Counter = Counter()
    if d is not None:
        for row, sk, w in zip(d.rows(), sketch_keys(d.sketch), d.weight.tolist()):
            out[(row, sk)] += w
    return +out


def _state(pipe) -> dict:
    """Every keyed state of a pipeline, decoded to what must be equal (a state's bytes need not be)."""
    topk = {}
    for n, blob in pipe.topks.items():
        s_ = decode_topk(blob)
        topk[n] = (dict(s_.entries), +s_.emitted)
    return {"images": pipe.images(), "mu": dict(pipe.mu), "topk": topk,
            "joins": {k: tuple(_bag(d) for d in decode_join(b)) for k, b in pipe.joins.items()},
            "groups": pipe.group_records()}


def _inserted(queries, buckets, tables: dict) -> KeyedPipeline:
    """The pipeline after one batch that inserts every row of ``tables`` ({table: {key: row}})."""
    ref = KeyedPipeline(queries, buckets=buckets)
    ref.run_batch({tb: [CdcEvent(tb, "c", key, None, row, None, 0, i) for i, (key, row) in enumerate(rows.items())]
                   for tb, rows in tables.items()})
    return ref


def _node(m, kind: str):
    return next(x for x in m.query.root.walk() if type(x).__name__ == kind)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.dictionaries(st.integers(0, 9), st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 10)),
                                                            st.integers(-1, 11)), max_size=10),
       raw=ops, cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]),
       slice_size=st.integers(1, 6))
def test_topk_capture_equals_inserting_every_row_then_memory_engine(initial, raw, cuts, buckets, slice_size):
    """Top-k over a table that holds rows: the capture, slice by slice, leaves the state a batch
    inserting every row leaves (top-k entries and emitted k, groups, μ), the memory engine's
    top-k state and sketch; then a history that updates and deletes the captured rows."""
    rows = {(i,): _row(i, g, v, p) for i, (g, v, p) in initial.items()}
    keyed = [KeyedQuery(n, sql, PART, {"t": SCHEMA}) for n, sql in TOPK.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets)
    pipe.capture({"t": _table(list(rows.values()))}, {"t": ["id"]}, slice_size=slice_size)
    assert _state(pipe) == _state(_inserted(keyed, buckets, {"t": rows}))
    memory = {n: SketchMaintainer(sql, PART) for n, sql in TOPK.items()}
    for n, m in memory.items():
        m.initialize({"t": _table(list(rows.values()))})
        q = next(q for q in keyed if q.name == n)
        assert sorted(q.split_fragment(f)[1] for f in pipe.sketch(n)) == m.sketch["t"], n
        node = _node(m, "TopKNode").state
        got = decode_topk(pipe.topks[n]) if n in pipe.topks else None
        assert (dict(got.entries), got.emitted) == (dict(node.entries), node.emitted) if got else not node.entries, n
    _compare_batches(_history(raw, rows), cuts, pipe, keyed, memory, dict(rows), buckets)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t_rows=st.dictionaries(st.integers(0, 9), st.tuples(st.integers(0, 3), st.integers(0, 10), st.integers(-1, 11)),
                              max_size=10),
       u_rows=st.dictionaries(st.integers(0, 5), st.tuples(st.one_of(st.none(), st.integers(0, 3)),
                                                           st.one_of(st.none(), st.integers(0, 10))), max_size=6),
       raw=ops, uraw=u_ops, pick=st.randoms(use_true_random=False),
       cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]),
       slice_size=st.integers(1, 6))
def test_join_capture_equals_inserting_every_row_then_memory_engine(t_rows, u_rows, raw, uraw, pick, cuts, buckets,
                                                                    slice_size):
    """Joins (with an aggregation, a top-k above, a self-join, two key columns) over two tables
    that hold rows: the capture leaves each join key's state, the groups, top-k and μ a batch
    inserting every row leaves, the memory engine's join sides and sketch; then histories of
    both tables that update join keys and delete the captured rows."""
    tables = {"t": {(i,): _row(i, g, v, p) for i, (g, v, p) in t_rows.items()},
              "u": {(i,): {"id": i, "k": k, "w": w} for i, (k, w) in u_rows.items()}}
    arrow = {tb: _weighted(SCHEMAS[tb], list(rows.values()), [1] * len(rows)).drop_columns(["__weight"])
             for tb, rows in tables.items()}
    keyed = [KeyedQuery(n, sql, PARTS, SCHEMAS) for n, sql in JOINS.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets)
    pipe.capture(arrow, {"t": ["id"], "u": ["id"]}, slice_size=slice_size)
    assert _state(pipe) == _state(_inserted(keyed, buckets, tables))
    memory = {n: SketchMaintainer(sql, PARTS) for n, sql in JOINS.items()}
    for n, m in memory.items():
        m.initialize(arrow)
        q = next(q for q in keyed if q.name == n)
        for tb in ("t", "u"):
            assert sorted(f for t, f in map(q.split_fragment, pipe.sketch(n)) if t == tb) == m.sketch[tb], (n, tb)
        join = _node(m, "JoinNode").state
        held = [Counter(), Counter()]
        for (name, _), blob in pipe.joins.items():
            if name == n:
                for side, d in enumerate(decode_join(blob)):
                    held[side] += _bag(d)
        assert held == [_bag(join.left.rows()), _bag(join.right.rows())], n
    seq = _interleave({"t": _history(raw, tables["t"]), "u": _u_history(uraw, len(raw) + 1, tables["u"])}, pick)
    _compare_join_batches(seq, cuts, pipe, keyed, memory, {tb: dict(rows) for tb, rows in tables.items()})


def test_cross_products_and_nested_shapes_are_refused_with_a_reason():
    with pytest.raises(UnsupportedSqlError, match="cross product"):
        KeyedQuery("x", "SELECT t.v, u.w FROM t, u", PARTS, SCHEMAS)
    with pytest.raises(UnsupportedSqlError, match="two-way equi-join"):
        KeyedQuery("j3", "SELECT t.v FROM t JOIN u ON t.id = u.id JOIN u v ON v.k = t.g", PARTS, SCHEMAS)
