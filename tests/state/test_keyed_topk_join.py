"""Top-k and joins on the statestore backend's keyed stages against the memory backend's engine, no Spark.

Random CDC histories over two tables (inserts, updates of the group, join key and order
values, deletes that empty groups and join keys, keys that return, NULL join keys and
order values, truncates of either table) are cut into batches and fed to ``KeyedPipeline``
(join state per (query, join key), group state per (query, group), one top-k state per
query, μ per fragment) and to ``SketchMaintainer.apply`` with the exact signed difference of
the mirrors. Every batch the sketch deltas and the sketches of both partitioned tables must
agree; at the end the join and top-k states must hold nothing for what is gone.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.debezium import CdcEvent
from operators.errors import UnsupportedSqlError
from operators.keyed.pipeline import KeyedPipeline
from operators.keyed.sketch import KeyedQuery, decode_join, decode_topk
from operators.sketch import RangePartition, SketchMaintainer
from tests.state.test_keyed_pipeline import PART, SCHEMA, _compare_batches, _history, _write_mirror, ops

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


def _u_history(raw, start: int) -> list:
    live, events = {}, []
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
    logs = {"t": _history(raw), "u": _u_history(uraw, len(raw) + 1)}
    # one log per table (one partition each), interleaved at random into one sequence of batches
    tags = ["t"] * len(logs["t"]) + ["u"] * len(logs["u"])
    pick.shuffle(tags)
    its = {tb: iter(evs) for tb, evs in logs.items()}
    seq = [(tb, next(its[tb])) for tb in tags]

    keyed = [KeyedQuery(n, sql, PARTS, SCHEMAS) for n, sql in JOINS.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets)
    memory = {n: SketchMaintainer(sql, PARTS) for n, sql in JOINS.items()}
    for m in memory.values():
        m.initialize({t: s.empty_table() for t, s in SCHEMAS.items()})
    mirrors: dict = {"t": {}, "u": {}}
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


def test_cross_products_and_nested_shapes_are_refused_with_a_reason():
    with pytest.raises(UnsupportedSqlError, match="cross product"):
        KeyedQuery("x", "SELECT t.v, u.w FROM t, u", PARTS, SCHEMAS)
    with pytest.raises(UnsupportedSqlError, match="two-way equi-join"):
        KeyedQuery("j3", "SELECT t.v FROM t JOIN u ON t.id = u.id JOIN u v ON v.k = t.g", PARTS, SCHEMAS)
