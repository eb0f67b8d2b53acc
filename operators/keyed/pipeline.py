"""The keyed stages of one micro-batch in one process: the statestore backend's logic without Spark.

``stage_cdc`` (key: table and bucket), ``KeyedQuery.join_step`` (key: query and join key),
``stage_groups`` (key: set of queries and bucket of groups), ``KeyedQuery.topk_step`` (key: query) and
``stage_mu`` (key: query and fragment) are what the Spark processors of
``state.statestore`` call for each key; ``KeyedPipeline`` calls them with dict state
in the order Spark's shuffles would, so the fast tests check the keyed path against the
memory backend's engine without starting Spark.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from core.mirror_plan import TablePlan
from operators.keyed import cdc
from operators.keyed.sketch import GROUP_MIN_PAGES, GroupPages, KeyedQuery, group_entries, mu_step
from operators.sketch.delta import Delta


@dataclass
class Stage1Out:
    plan: TablePlan
    deltas: list  # (weight, image)
    groups: dict = field(default_factory=dict)  # query -> [(bucket of groups, Delta)]
    fragments: dict = field(default_factory=dict)  # query (no stateful operator) -> {fragment: weight}
    joins: dict = field(default_factory=dict)  # query (join) -> [(join key text, side, Delta)]
    topk: dict = field(default_factory=dict)  # query (top-k, no join, no aggregation) -> Delta

def stage_cdc(store, events: list, queries: list, table: str | None = None) -> Stage1Out:
    """One bucket's events (of ``table``) -> mirror plan, signed deltas, and each query's
    annotated rows for its next stage."""
    b = cdc.step(store, events)
    out = Stage1Out(b.plan, b.deltas)
    raw = queries[0].raw(table or queries[0].tables[0], b.deltas) if queries and b.deltas else None  # once per bucket
    for q in queries:
        if q.join is not None:
            js = q.annotate_sides(table or q.tables[0], b.deltas, raw=raw)
            if js:
                out.joins[q.name] = js
            continue
        r = q.route(q.annotate(b.deltas, table, raw), "input")
        if r.groups:
            out.groups[q.name] = r.groups
        if r.topk is not None:
            out.topk[q.name] = r.topk
        if r.fragments:
            out.fragments[q.name] = r.fragments
    return out

def stage_groups(queries: dict, pages_map, pages: int, deltas: dict) -> dict:
    """One bucket of a set of queries' groups (``imp.groups.v3`` pages over ``pages_map``,
    ``pages`` of them) and this batch's rows of some of its queries ({query: [Delta]}) ->
    {query: its groups' output rows as one Delta or None}: one ``aggregate.step`` per query,
    each page read once and written at most once."""
    store = GroupPages(pages_map, pages)
    out = {}
    for name, ds in deltas.items():
        q = queries[name]
        d = ds[0] if len(ds) == 1 else Delta.concat(ds, q.space.nbits)
        if d is not None and len(d):
            out[name] = q.groups_step(store, d)
    store.flush()
    return out

def stage_mu(count: int, w: int) -> tuple:
    return mu_step(count, w)

class KeyedPipeline:
    """Every keyed stage with dict state: the statestore backend's answers, in one process."""

    def __init__(self, queries: list, buckets: int = 8, pages: int = 2, group_pages: int = GROUP_MIN_PAGES):
        self.queries = {q.name: q for q in queries}
        self.buckets, self.pages, self.group_pages = buckets, pages, group_pages
        self.cdc: dict = defaultdict(cdc.DictStore)  # (table, bucket) -> {page id: page blob}
        self.joins: dict = {}  # (query, join key text) -> blob
        self.groups: dict = defaultdict(cdc.DictStore)  # (set of queries, bucket) -> {page id: page blob}
        self.topks: dict = {}  # query -> blob
        self.mu: dict = {}  # (query, global fragment) -> counter

    def run_batch(self, events: dict) -> tuple:
        """``events``: table -> [CdcEvent] of the batch. Returns ({table: TablePlan merged over
        buckets}, {table: signed deltas}, {query: (added global ids, removed global ids)})."""
        plans, deltas = {}, {}
        jparts: dict = defaultdict(lambda: ([], []))  # (query, join key) -> (left rows, right rows)
        parts: dict = defaultdict(lambda: defaultdict(list))  # (set, bucket) -> query -> [Delta]
        tparts: dict = defaultdict(list)  # query -> top-k input rows
        weights: dict = defaultdict(int)

        def route(name, r):
            for b, d in r.groups:
                parts[(self.queries[name].group_set, b)][name].append(d)
            if r.topk is not None:
                tparts[name].append(r.topk)
            for f, x in r.fragments.items():
                weights[(name, f)] += x

        for table, evs in events.items():
            by_bucket: dict = defaultdict(list)
            for ev in evs:
                if ev.op == "t":  # the decode stage fans a truncate out to every bucket
                    for b in range(self.buckets):
                        by_bucket[b].append(ev)
                else:
                    by_bucket[cdc.bucket_of(ev.key, self.buckets)].append(ev)
            plan = TablePlan()
            qs = [q for q in self.queries.values() if q.reads(table)]
            for b, bevs in sorted(by_bucket.items()):
                store = cdc.PagedStore(self.cdc[(table, b)], self.buckets, self.pages)
                o = stage_cdc(store, bevs, qs, table)
                store.flush()
                plan.final.update(o.plan.final)
                plan.truncate |= o.plan.truncate
                plan.rejected.extend(o.plan.rejected)
                deltas.setdefault(table, []).extend(o.deltas)
                for name, js in o.joins.items():
                    for key, side, d in js:
                        jparts[(name, key)][side].append(d)
                for name, gs in o.groups.items():
                    for b, d in gs:
                        parts[(self.queries[name].group_set, b)][name].append(d)
                for name, d in o.topk.items():
                    tparts[name].append(d)
                for name, fw in o.fragments.items():
                    for f, x in fw.items():
                        weights[(name, f)] += x
            plans[table] = plan
        for (name, key), (ls, rs) in jparts.items():
            q = self.queries[name]
            blob, out = q.join_step(self.joins.get((name, key)), ls, rs)
            _keep(self.joins, (name, key), blob)
            route(name, q.route(out, "join"))
        for key, by in list(parts.items()):
            outs = stage_groups(self.queries, self.groups[key], self.group_pages, by)
            if not self.groups[key]:
                del self.groups[key]
            for name, out in outs.items():
                route(name, self.queries[name].route(out, "group"))
        for name, ds in tparts.items():
            q = self.queries[name]
            blob, out = q.topk_step(self.topks.get(name), ds)
            _keep(self.topks, name, blob)
            route(name, q.route(out, "topk"))
        changes = {n: (set(), set()) for n in self.queries}
        for (name, f), x in weights.items():
            if not x:
                continue
            c, ch = stage_mu(self.mu.get((name, f), 0), x)
            if c:
                self.mu[(name, f)] = c
            else:
                self.mu.pop((name, f), None)
            if ch:
                changes[name][0 if ch > 0 else 1].add(f)
        return plans, deltas, changes

    def capture(self, tables: dict, primary_keys: dict, slice_size: int = 5) -> None:
        """Initial state from ``tables`` ({table: pa.Table of its rows}) the way the Spark
        capture builds it (``operators.keyed.capture``): slices of ``slice_size`` rows, then
        joins, groups and top-k over whole buckets, then μ; the state must be empty before."""

        from operators.keyed.capture import ARROW_SCHEMA, merge_groups, merge_joins, merge_topk, slice_rows

        qs = list(self.queries.values())
        stage1 = []
        for table, rows in tables.items():
            for off in range(0, rows.num_rows, slice_size):
                stage1 += slice_rows(table, rows.slice(off, slice_size), primary_keys[table], qs,
                                     self.buckets).to_pylist()

        def merged(rows: list, prefix: str, fn) -> list:
            """``fn`` over the ``prefix`` rows of each (query, bucket) apart, as Spark's shuffle
            by (k1, k2) hands them to the capture's mapInArrow."""
            buckets: dict = defaultdict(list)
            for r in rows:
                if r["k1"].startswith(prefix):
                    buckets[(r["k1"], r["k2"])].append(r)
            return [r for part in buckets.values()
                    for r in fn(self.queries, pa.Table.from_pylist(part, schema=ARROW_SCHEMA)).to_pylist()]

        joins = merged(stage1, "j:", merge_joins)
        groups = merged(stage1 + joins, "g:", lambda q, t: merge_groups(q, t, lambda _: self.group_pages))
        topk = merged(stage1 + joins + groups, "k:", merge_topk)
        weights: dict = defaultdict(int)
        pages: dict = defaultdict(list)  # (table, bucket, page) -> images, as the capture's pages job groups them
        for r in stage1:
            if r["k1"][:2] in ("f:", "g:", "j:", "k:"):
                continue
            pages[(r["k1"], int(r["k2"]), cdc.page_of(r["w"], self.buckets, self.pages))].append(r["a"])
        for (table, b, pid), parts in pages.items():
            self.cdc[(table, b)].put(pid, cdc.page_from_parts(parts))
        for r in stage1 + joins + groups + topk:
            if r["k1"].startswith("f:"):
                weights[(r["k1"][2:], int(r["k2"]))] += r["w"]
        for r in joins:
            if r["k1"].startswith("j:"):
                assert (r["k1"][2:], r["k2"]) not in self.joins, "a join key from two capture buckets"
                self.joins[(r["k1"][2:], r["k2"])] = r["a"]
        for r in groups:
            if r["k1"].startswith("g:"):
                pages = self.groups[(r["k1"][2:], int(r["k2"]))]
                assert int(r["pk"]) not in pages, "a page of groups from two capture runs"
                pages.put(int(r["pk"]), r["a"])
        for r in topk:
            if r["k1"].startswith("k:"):
                self.topks[r["k1"][2:]] = r["a"]
        self.mu.update({k: x for k, x in weights.items() if x})

    def images(self) -> dict:
        """(table, bucket) -> {key: last image} as the pages hold them."""
        return {tb: dict(cdc.PagedStore(m, self.buckets, self.pages).items()) for tb, m in self.cdc.items()}

    def group_records(self) -> dict:
        """(set of queries, bucket, page id) -> {group key text: {query: record}} as the pages hold them."""
        return {(*key, pid): group_entries(blob) for key, m in self.groups.items() for pid, blob in m.items()}

    def sketch(self, name: str) -> set:
        return {f for (n, f) in self.mu if n == name}

def _keep(states: dict, key, blob) -> None:
    if blob is None:
        states.pop(key, None)
    else:
        states[key] = blob
