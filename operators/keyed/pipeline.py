"""The keyed stages of one micro-batch in one process: the statestore backend's logic without Spark.

``stage_cdc`` (key: table and bucket), ``KeyedQuery.join_step`` (key: query and join key),
``stage_group`` (key: query and group), ``KeyedQuery.topk_step`` (key: query) and
``stage_mu`` (key: query and fragment) are what the Spark processors of
``streaming_app.statestore`` call for each key; ``KeyedPipeline`` calls them with dict state
in the order Spark's shuffles would, so the fast tests check the keyed path against the
memory backend's engine without starting Spark.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from connectors.mirror_plan import TablePlan
from operators.keyed import cdc
from operators.keyed.sketch import KeyedQuery, mu_step


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


def stage_group(q: KeyedQuery, blob, parts: list) -> tuple:
    return q.group_step(blob, parts)


def stage_mu(count: int, w: int) -> tuple:
    return mu_step(count, w)


class KeyedPipeline:
    """Every keyed stage with dict state: the statestore backend's answers, in one process."""

    def __init__(self, queries: list, buckets: int = 8):
        self.queries = {q.name: q for q in queries}
        self.buckets = buckets
        self.cdc: dict = defaultdict(cdc.DictStore)  # (table, bucket) -> store
        self.joins: dict = {}  # (query, join key text) -> blob
        self.groups: dict = {}  # (query, group key text) -> blob
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
                parts[(name, key)].append(d)
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
                o = stage_cdc(self.cdc[(table, b)], bevs, qs, table)
                plan.final.update(o.plan.final)
                plan.truncate |= o.plan.truncate
                plan.rejected.extend(o.plan.rejected)
                deltas.setdefault(table, []).extend(o.deltas)
                for name, js in o.joins.items():
                    for key, side, d in js:
                        jparts[(name, key)][side].append(d)
                for name, gs in o.groups.items():
                    for key, d in gs:
                        parts[(name, key)].append(d)
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
        for (name, key), ds in parts.items():
            q = self.queries[name]
            blob, out = q.group_delta(self.groups.get((name, key)), ds)
            _keep(self.groups, (name, key), blob)
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
        groups, then μ; the state must be empty before."""
        import pickle

        import pyarrow as pa

        from operators.keyed.capture import ARROW_SCHEMA, merge_groups, slice_rows

        stage1 = []
        plain = [q for q in self.queries.values() if q.plain]  # joins and top-k: refused over data
        for table, rows in tables.items():
            for off in range(0, rows.num_rows, slice_size):
                stage1 += slice_rows(table, rows.slice(off, slice_size), primary_keys[table], plain,
                                     self.buckets).to_pylist()
        buckets: dict = defaultdict(list)  # (query, bucket) -> partial rows, merged bucket by bucket
        for r in stage1:
            if r["k1"].startswith("g:"):
                buckets[(r["k1"], r["k2"])].append(r)
        stage2 = [r for rows in buckets.values()
                  for r in merge_groups(self.queries, pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)).to_pylist()]
        weights: dict = defaultdict(int)
        for r in stage1:
            if r["k1"].startswith("f:"):
                weights[(r["k1"][2:], int(r["k2"]))] += r["w"]
            elif not r["k1"].startswith("g:"):
                key, img = pickle.loads(r["a"])
                self.cdc[(r["k1"], int(r["k2"]))].put(key, img)
        for r in stage2:
            if r["k1"].startswith("f:"):
                weights[(r["k1"][2:], int(r["k2"]))] += r["w"]
            else:
                self.groups[(r["k1"][2:], r["k2"])] = r["a"]
        self.mu.update({k: x for k, x in weights.items() if x})

    def sketch(self, name: str) -> set:
        return {f for (n, f) in self.mu if n == name}


def _keep(states: dict, key, blob) -> None:
    if blob is None:
        states.pop(key, None)
    else:
        states[key] = blob
