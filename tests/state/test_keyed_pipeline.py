"""The statestore backend's keyed stages against the memory backend's engine, no Spark.

Random CDC histories (inserts, updates, deletes, keys and groups that vanish and return,
truncates, TOASTed updates) are cut into batches. Each batch goes (1) through
``KeyedPipeline`` (last image per key in bucket state, group records in pages of a bucket of
groups shared by the queries with the same group key, μ per fragment) and (2) through the memory backend's path: the mirror as a dict, the exact signed
difference of the batch, ``SketchMaintainer.apply``. Every batch the mirror plan, the signed
deltas (as a multiset), the sketch delta and the sketch must agree; after the last batch each
sketch must also equal DuckDB's lineage of its query over the final rows (``reference_sketch``).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.debezium import CdcEvent
from operators.keyed.cdc import DictStore, PagedStore, bucket_of, decode_page, key_hash, page_of, pages_for, step
from operators.keyed.pipeline import KeyedPipeline, stage_groups
from operators.keyed.sketch import KeyedQuery, group_bucket, group_page, mu_step
from operators.sketch import RangePartition, SketchMaintainer
from tests.oracles.sketch_reference import reference_sketch

SCHEMA = pa.schema([("id", pa.int64()), ("g", pa.int64()), ("v", pa.int64()), ("p", pa.int64())])
PART = {"t": RangePartition("p", [0, 3, 6, 10])}
QUERIES = {
    "having": "SELECT g, SUM(v) AS s, COUNT(*) AS c FROM t GROUP BY g HAVING COUNT(*) > 1",
    "minmax": "SELECT g, MIN(v) AS lo, MAX(v) AS hi FROM t WHERE v > 2 GROUP BY g HAVING MAX(v) < 9",
    "avg": "SELECT g, AVG(v) AS a FROM t GROUP BY g HAVING AVG(v) >= 4",
    "distinct": "SELECT DISTINCT g FROM t WHERE p < 8",
    "global": "SELECT COUNT(*) AS n, SUM(v) AS s FROM t WHERE g = 1",
    "select": "SELECT id, v FROM t WHERE v < 5",
}


def _write_mirror(mirror: dict, plan) -> tuple[list, list]:
    """The memory backend's mirror write of one table's plan into ``mirror`` ({key: image});
    returns the rows it removed and the rows it added (an update is one of each)."""
    before = dict(mirror)
    if plan.truncate:
        mirror.clear()
    for key, img in plan.final.items():
        if img is None:
            mirror.pop(key, None)
        else:
            mirror[key] = img
    return ([r for key, r in before.items() if mirror.get(key) != r],
            [r for key, r in mirror.items() if before.get(key) != r])


def _row(i, g, v, p):
    return {"id": i, "g": g, "v": v, "p": p}


ops = st.lists(st.tuples(st.sampled_from("iiuudt~"), st.integers(0, 7), st.integers(0, 3),
                         st.one_of(st.none(), st.integers(0, 10)), st.integers(-1, 11)),
               min_size=1, max_size=60)


def _history(raw, live=None):
    """Raw draws -> CdcEvents in log order, as Debezium would send them for a live table
    (``live``: key -> row the table holds before, as after a capture)."""
    live = dict(live or {})
    events = []
    for off, (op, i, g, v, p) in enumerate(raw):
        key = (i,)
        if op == "t":
            events.append(CdcEvent("t", "t", (), None, None, None, 0, off))
            live.clear()
        elif op == "d":
            if key in live:
                events.append(CdcEvent("t", "d", key, live.pop(key), None, None, 0, off))
        elif op == "~":  # an update whose v Debezium left out (TOAST): keep the current value
            if key in live:
                after = {**live[key], "g": g, "v": None}
                events.append(CdcEvent("t", "u", key, None, after, None, 0, off, frozenset({"v"})))
                live[key] = {**after, "v": live[key]["v"]}
        else:  # i or u: a create of an absent key, else an update
            after = _row(i, g, v, p)
            events.append(CdcEvent("t", "u" if key in live else "c", key, live.get(key), after, None, 0, off))
            live[key] = after
    return events


def _table(rows, weights=None):
    t = pa.Table.from_pylist(rows, schema=SCHEMA) if rows else SCHEMA.empty_table()
    if weights is not None:
        t = t.append_column("__weight", pa.array(weights, pa.int64()))
    return t


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=ops, cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]),
       pages=st.sampled_from([1, 2, 5]), group_pages=st.sampled_from([1, 3, 1 << 16]))
# a key truncated and written back with the image it had: no delta (found by this test)
@example(raw=[("i", 0, 0, 1, 1), ("i", 0, 0, None, 0), ("t", 0, 0, None, 0), ("i", 0, 0, 1, 1)], cuts=[1, 4],
         buckets=1, pages=2, group_pages=3)
def test_keyed_pipeline_equals_memory_engine(raw, cuts, buckets, pages, group_pages):
    events = _history(raw)
    keyed = [KeyedQuery(n, sql, PART, {"t": SCHEMA}) for n, sql in QUERIES.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets, pages=pages, group_pages=group_pages)
    memory = {n: SketchMaintainer(sql, PART) for n, sql in QUERIES.items()}
    for m in memory.values():
        m.initialize({"t": _table([])})
    _compare_batches(events, cuts, pipe, keyed, memory, {}, buckets)


def _compare_batches(events, cuts, pipe, keyed, memory, mirror, buckets):
    """Feed ``events`` in batches of ``cuts`` to the keyed pipeline and to the memory path (the
    mirror as a dict, its exact difference, ``SketchMaintainer.apply``); compare every batch."""
    pos, k = 0, 0
    while pos < len(events):
        batch = events[pos:pos + cuts[k % len(cuts)]]
        pos, k = pos + len(batch), k + 1
        plans, deltas, changes = pipe.run_batch({"t": batch})
        # the memory backend: mirror write, then the exact difference of the mirror
        gone, new = _write_mirror(mirror, plans["t"])
        want = Counter([(-1, tuple(r.values())) for r in gone] + [(1, tuple(r.values())) for r in new])
        got = Counter((w, tuple(img.values())) for w, img in deltas.get("t", []))
        assert got == want, "signed deltas from the keyed last images differ from the mirror's difference"
        for n, m in memory.items():
            sd = m.apply({"t": _table(gone + new, [-1] * len(gone) + [1] * len(new))})
            added, removed = changes[n]
            q = next(q for q in keyed if q.name == n)
            assert {q.split_fragment(f)[1] for f in added} == sd.added["t"], n
            assert {q.split_fragment(f)[1] for f in removed} == sd.removed["t"], n
            assert sorted(q.split_fragment(f)[1] for f in pipe.sketch(n)) == m.sketch["t"], n
    # the state holds exactly the live rows, each in its bucket and page, and no empty page
    held = {key: img for (t, b), s in pipe.images().items() for key, img in s.items()
            if bucket_of(key, buckets) == b}
    assert held == mirror
    # and the final sketches are DuckDB's lineage of each query over the final rows (the oracle)
    final = _table(list(mirror.values()))
    for q in keyed:
        want = reference_sketch(memory[q.name].sql, {"t": final}, PART)["t"]
        assert sorted(q.split_fragment(f)[1] for f in pipe.sketch(q.name)) == want, q.name
    for m in pipe.cdc.values():
        for pid, blob in m.items():
            page = decode_page(blob)
            assert page and all(page_of(key_hash(k), buckets, pipe.pages) == pid for k in page)
    # pages of groups: each group in its bucket and page, no empty page, no empty entry; a
    # query's groups are in its set's entries only
    sets = {q.name: q.group_set for q in keyed}
    for (gset, b, pid), page in pipe.group_records().items():
        assert page and all(group_bucket(text) == b and group_page(text, pipe.group_pages) == pid for text in page)
        assert all(e and all(sets[n] == gset for n in e) for e in page.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.dictionaries(st.integers(0, 9), st.tuples(st.integers(0, 3), st.integers(0, 10), st.integers(-1, 11)),
                               max_size=10),
       raw=ops, cuts=st.lists(st.integers(1, 12), min_size=1, max_size=8), buckets=st.sampled_from([1, 3, 8]),
       slice_size=st.integers(1, 6), pages=st.sampled_from([1, 2, 5]), group_pages=st.sampled_from([1, 3, 1 << 16]))
def test_capture_then_history_equals_memory_engine(initial, raw, cuts, buckets, slice_size, pages, group_pages):
    """Capture at registration: the keyed state built slice by slice from a non-empty table (as
    the Spark capture does), then a random history that updates and deletes the captured rows,
    against the memory engine initialized on the same table."""
    rows = {(i,): _row(i, g, v, p) for i, (g, v, p) in initial.items()}
    keyed = [KeyedQuery(n, sql, PART, {"t": SCHEMA}) for n, sql in QUERIES.items()]
    pipe = KeyedPipeline(keyed, buckets=buckets, pages=pages, group_pages=group_pages)
    pipe.capture({"t": _table(list(rows.values()))}, {"t": ["id"]}, slice_size=slice_size)
    memory = {n: SketchMaintainer(sql, PART) for n, sql in QUERIES.items()}
    for n, m in memory.items():
        m.initialize({"t": _table(list(rows.values()))})
        q = next(q for q in keyed if q.name == n)
        assert sorted(q.split_fragment(f)[1] for f in pipe.sketch(n)) == m.sketch["t"], n  # the captured sketch
    _compare_batches(_history(raw, rows), cuts, pipe, keyed, memory, dict(rows), buckets)


class _Counted(DictStore):
    """A page map that counts its reads and writes (the state calls of the Spark operator)."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def get(self, k, default=None):
        self.calls["get"] += 1
        return super().get(k, default)

    def put(self, k, v):
        self.calls["put"] += 1
        super().put(k, v)

    def remove(self, k):
        self.calls["remove"] += 1
        super().remove(k)


def test_queries_with_one_group_key_share_entries_and_a_bucket_reads_each_page_once():
    keyed = {n: KeyedQuery(n, QUERIES[n], PART, {"t": SCHEMA}) for n in ("having", "minmax", "avg", "distinct", "global")}
    assert {n: q.group_set for n, q in keyed.items()} == {"having": "t.g", "minmax": "t.g", "avg": "t.g",
                                                          "distinct": "t.g", "global": "()"}
    pipe = KeyedPipeline(list(keyed.values()), buckets=2, group_pages=1)
    rows = [_row(i, i % 3, 3 + i % 5, i % 10) for i in range(12)]
    pipe.run_batch({"t": [CdcEvent("t", "c", (r["id"],), None, r, None, 0, i) for i, r in enumerate(rows)]})
    recs = pipe.group_records()
    by_text = {text: set(e) for (gset, _, _), page in recs.items() if gset == "t.g" for text, e in page.items()}
    # one entry per group, holding every query of the set that keeps the group (minmax keeps v > 2)
    assert by_text == {"(0,)": {"having", "minmax", "avg", "distinct"}, "(1,)": {"having", "minmax", "avg", "distinct"},
                       "(2,)": {"having", "minmax", "avg", "distinct"}}
    assert {gset for gset, _, _ in recs} == {"t.g", "()"}
    # the next batch's rows of one bucket: each page read once, written once, whatever the queries
    b = group_bucket("(1,)")
    pages = _Counted()
    pages.update(pipe.groups[("t.g", b)])
    change = [(1, _row(20, 1, 7, 2)), (-1, rows[1])]  # a row of group 1 in, another out
    parts = {n: [part for bb, part in keyed[n].split_groups(keyed[n].annotate(change, "t")) if bb == b]
             for n in ("having", "minmax", "avg")}
    assert all(len(p) == 1 for p in parts.values())
    out = stage_groups(keyed, pages, 1, parts)
    assert pages.calls == Counter({"get": 1, "put": 1}) and set(out) == set(parts)


def test_truncate_deletes_every_held_image_and_keeps_what_follows():
    s = DictStore()
    step(s, [CdcEvent("t", "c", (1,), None, _row(1, 0, 1, 1), None, 0, 0),
             CdcEvent("t", "c", (2,), None, _row(2, 0, 2, 2), None, 0, 1)])
    out = step(s, [CdcEvent("t", "c", (3,), None, _row(3, 0, 3, 3), None, 0, 4),
                   CdcEvent("t", "t", (), None, None, None, 0, 3),  # out of order on purpose: sorted by offset
                   CdcEvent("t", "u", (2,), None, _row(2, 1, 2, 2), None, 0, 2)])
    assert sorted((w, img["id"], img["g"]) for w, img in out.deltas) == [(-1, 1, 0), (-1, 2, 0), (1, 3, 0)]  # the update before the truncate never lands
    assert dict(s) == {(3,): _row(3, 0, 3, 3)}
    assert out.plan.truncate


def test_paged_store_truncate_sweeps_every_page_and_drops_empty_pages():
    pages = DictStore()
    s = PagedStore(pages, 1, 4)
    step(s, [CdcEvent("t", "c", (i,), None, _row(i, 0, i, 1), None, 0, i) for i in range(12)])
    s.flush()
    assert 1 < len(pages) <= 4 and sum(len(decode_page(b)) for b in pages.values()) == 12
    s = PagedStore(pages, 1, 4)  # the next batch: pages read back from the map
    out = step(s, [CdcEvent("t", "t", (), None, None, None, 0, 20),
                   CdcEvent("t", "c", (3,), None, _row(3, 0, 3, 1), None, 0, 21)])
    s.flush()
    assert len(out.deltas) == 11 and all(w == -1 for w, _ in out.deltas)  # key 3 came back as it was
    assert list(pages) == [page_of(key_hash((3,)), 1, 4)] and decode_page(pages[list(pages)[0]]) == {(3,): _row(3, 0, 3, 1)}


def test_pages_grow_with_the_table_in_powers_of_two():
    assert pages_for(0, 64) == pages_for(64 * 256 * 64, 64) == 256
    assert pages_for(64 * 256 * 64 + 1, 64) == 512
    assert pages_for(6_000_000, 64) == 2048  # TPC-H SF1 lineitem: ~46 images a page


def test_unchanged_image_emits_nothing_and_toast_reads_state():
    s = DictStore()
    step(s, [CdcEvent("t", "c", (1,), None, _row(1, 0, 7, 1), None, 0, 0)])
    out = step(s, [CdcEvent("t", "u", (1,), None, {**_row(1, 0, None, 1)}, None, 0, 1, frozenset({"v"}))])
    assert out.deltas == [] and out.plan.toast_filled == 1
    out = step(s, [CdcEvent("t", "u", (9,), None, _row(9, 0, None, 1), None, 0, 2, frozenset({"v"}))])
    assert out.deltas == [] and [code for _, code, _ in out.plan.rejected] == ["DATA_TOAST_UNKNOWN"]


def test_mu_counter_flips_only_at_zero():
    assert mu_step(0, 2) == (2, 1)
    assert mu_step(2, -1) == (1, 0)
    assert mu_step(1, -1) == (0, -1)
    with pytest.raises(Exception, match="below zero"):
        mu_step(0, -1)
