"""The keyed stages of one micro-batch in one process: the statestore backend's logic without Spark.

``stage_cdc`` (key: table and bucket), ``KeyedQuery.join_step`` (key: query and join key),
``stage_group_page`` (key: query and page of groups), ``KeyedQuery.topk_step`` (key: query) and
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
from operators.keyed.sketch import KeyedQuery, group_page, mu_step
from operators.sketch.delta import Delta


@dataclass
class Stage1Out:
    plan: TablePlan
    deltas: list  # (weight, image)
    groups: dict = field(default_factory=dict)  # query -> [(group key text, Delta)]
    fragments: dict = field(default_factory=dict)  # query (no stateful operator) -> {fragment: weight}
    joins: dict = field(default_factory=dict)  # query (join) -> [(join key text, side, Delta)]
    topk: dict = field(default_factory=dict)  # query (top-k, no join, no aggregation) -> Delta

def stage_cdc(store, events: list, queries: list, table: str | None = None) -> Stage1Out:
    """One bucket's events (of ``table``) -> mirror plan, signed deltas, and each query's
    annotated rows for its next stage."""
    b = cdc.step(store, events)
    out = Stage1Out(b.plan, b.deltas)
    for q in queries:
        if q.join is not None:
            js = q.annotate_sides(table or q.tables[0], b.deltas)
            if js:
                out.joins[q.name] = js
            continue
        r = q.route(q.annotate(b.deltas, table), "input")
        if r.groups:
            out.groups[q.name] = r.groups
        if r.topk is not None:
            out.topk[q.name] = r.topk
        if r.fragments:
            out.fragments[q.name] = r.fragments
    return out

GROUP_PAGES = 1 << 16  # pages of groups per query (a multiple of the capture's GROUP_BUCKETS)

def stage_group_page(q: KeyedQuery, page_blob, parts: dict) -> tuple:
    """One page of ``q``'s groups ({group key text: group state}, ``imp.group_pages.v2``) and
    this batch's rows of some of them ({text: [Delta]}) -> (new page blob or None when it holds
    no group, the groups' output rows as one Delta or None)."""

    page = cdc.decode_page(page_blob) if page_blob is not None else {}
    outs = []
    for text, ds in parts.items():
        blob, out = q.group_delta(page.get(text), ds)
        if blob is None:
            page.pop(text, None)
        else:
            page[text] = blob
        if out is not None and len(out):
            outs.append(out)
    out = outs[0] if len(outs) == 1 else (Delta.concat(outs, q.space.nbits) if outs else None)
    return (cdc.encode_page(page) if page else None), out

def stage_mu(count: int, w: int) -> tuple:
    return mu_step(count, w)

class KeyedPipeline:
    """Every keyed stage with dict state: the statestore backend's answers, in one process."""

    def __init__(self, queries: list, buckets: int = 8, pages: int = 2, group_pages: int = GROUP_PAGES):
        self.queries = {q.name: q for q in queries}
        self.buckets, self.pages, self.group_pages = buckets, pages, group_pages
        self.cdc: dict = defaultdict(cdc.DictStore)  # (table, bucket) -> {page id: page blob}
        self.joins: dict = {}  # (query, join key text) -> blob
        self.groups: dict = {}  # (query, page of groups) -> page blob
        self.topks: dict = {}  # query -> blob
        self.mu: dict = {}  # (query, global fragment) -> counter

    def run_batch(self, events: dict) -> tuple:
        """``events``: table -> [CdcEvent] of the batch. Returns ({table: TablePlan merged over
        buckets}, {table: signed deltas}, {query: (added global ids, removed global ids)})."""
        plans, deltas = {}, {}
        jparts: dict = defaultdict(lambda: ([], []))  # (query, join key) -> (left rows, right rows)
        parts: dict = defaultdict(list)
        tparts: dict = defaultdict(list)  # query -> top-k input rows
        weights: dict = defaultdict(int)

        def route(name, r):
            for key, d in r.groups:
                parts[(name, group_page(key, self.group_pages))].append((key, d))
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
                    for key, d in gs:
                        parts[(name, group_page(key, self.group_pages))].append((key, d))
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
        for (name, pid), rows in list(parts.items()):
            q = self.queries[name]
            by: dict = defaultdict(list)
            for key, d in rows:
                by[key].append(d)
            blob, out = stage_group_page(q, self.groups.get((name, pid)), by)
            _keep(self.groups, (name, pid), blob)
            route(name, q.route(out, "group"))
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
                                     self.buckets, self.group_pages).to_pylist()

        def merged(rows: list, prefix: str, fn) -> list:
            """``fn`` over the ``prefix`` rows of each (query, bucket) apart, as Spark's shuffle
            by (k1, k2) hands them to the capture's mapInArrow."""
            buckets: dict = defaultdict(list)
            for r in rows:
                if r["k1"].startswith(prefix):
                    buckets[(r["k1"], r["k2"])].append(r)
            return [r for part in buckets.values()
                    for r in fn(self.queries, pa.Table.from_pylist(part, schema=ARROW_SCHEMA)).to_pylist()]

        joins = merged(stage1, "j:", lambda q, t: merge_joins(q, t, self.group_pages))
        groups = merged(stage1 + joins, "g:", lambda q, t: merge_groups(q, t, self.group_pages))
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
                assert (r["k1"][2:], int(r["k2"])) not in self.groups, "a page of groups from two capture buckets"
                self.groups[(r["k1"][2:], int(r["k2"]))] = r["a"]
        for r in topk:
            if r["k1"].startswith("k:"):
                self.topks[r["k1"][2:]] = r["a"]
        self.mu.update({k: x for k, x in weights.items() if x})

    def images(self) -> dict:
        """(table, bucket) -> {key: last image} as the pages hold them."""
        return {tb: dict(cdc.PagedStore(m, self.buckets, self.pages).items()) for tb, m in self.cdc.items()}

    def sketch(self, name: str) -> set:
        return {f for (n, f) in self.mu if n == name}

def _keep(states: dict, key, blob) -> None:
    if blob is None:
        states.pop(key, None)
    else:
        states[key] = blob
