"""A registered query's sketch maintenance split by key: annotate, join, group, top-k, μ.

The memory backend runs a query's whole operator tree on one batch in one process. Keyed
state needs each stateful operator apart, partitioned by its key, so this module cuts the
planned tree (``operators.sketch``, the same planner and the same operator code) into stages;
each stage's output goes to the next stateful one (``route``):

1. **annotate** (stateless, per bucket of signed deltas): the scan, selections and
   projections below the first stateful operator; rows are then split by its key. A query
   with no stateful operator is stateless all the way to μ: annotate yields fragment weights.
2. **join** (keyed by query and join key; only for a query with a join): both sides' rows of
   that key, annotated, consolidated (``sketch.join.v1``); ΔL ⋈ R + L ⋈ ΔR + ΔL ⋈ ΔR
   (``join.step`` on the key's rows), then the selections/projections above the join. None
   once both sides are empty. Rows with a NULL key are dropped in 1 (they never join).
3. **group** (keyed by a set of queries with the same group key and a hash bucket of the
   group key, ``GROUP_BUCKETS`` per set): per query, one ``aggregate.step`` over the rows of
   every group of the bucket the batch touches, on a state assembled from those groups'
   records only (``aggregate.assemble``), then the selections and projections above it
   (HAVING), then each output row's fragments with its weight. State kept
   (``imp.groups.v3``): pages of a bucket's groups, {group key text: entry}, an entry being
   {query: record} (``aggregate.take``'s plain tuple: hidden count, sums, MIN/MAX ordered
   multisets, F_g fragment counts) for every query of the set that holds the group, so that
   sketches with one GROUP BY read and write one entry per group; a record goes once the
   group is empty (a global aggregate keeps its one group).
4. **top-k** (one key per query): ``topk.step`` over the concatenated output rows of every
   group (or of 1/2 without aggregation); state ``topk.ordered.v2``, the memory engine's:
   every input row in the total order (ties broken by all columns, then the sketch), and the
   emitted k, so deletions always find the next candidates.
5. **μ** (keyed by query and global fragment id): the fragment's counter; +fragment when it
   leaves zero, −fragment when it returns to zero (``operators.sketch.merge``'s rule).
   State kept (``mu.fragment.v1``): the counter.

Supported shapes: selections/projections, at most one two-way equi-join of (selected,
projected) table scans, at most one aggregation (GROUP BY, SUM/COUNT/AVG/MIN/MAX, DISTINCT),
HAVING, at most one ORDER BY ... LIMIT. Cross products, several joins, unions and subqueries
raise ``UnsupportedSqlError`` (they stay on the memory backend). Float sums can differ from
the memory backend in the last bit (rows of a group are summed in another order).
"""

from __future__ import annotations

import dataclasses
import numbers
import pickle
import zlib
from collections import defaultdict

import numpy as np
import pyarrow as pa

from core.errors import InvariantError, StateError, UnsupportedSqlError
from operators.sketch import aggregate, join, stateless, topk
from operators.sketch.delta import Delta, consolidate, group_codes, ids_of, is_compact
from operators.sketch.joinstore import key_hash
from operators.sketch.maintainer import SketchMaintainer
from operators.sketch.expr import Col
from operators.sketch.plan import AggNode, FilterNode, JoinNode, ProjectNode, ScanNode, TopKNode
from operators.sketch.scan import normalize_type

GROUPS_ENCODING = "imp.groups.v3"  # pages of {group key text: pickled {query: aggregate record}}
GROUP_BUCKETS = 64  # keys of the group stage per set of queries (pinned with the layout)
GROUP_PAGE_GROUPS = 32  # groups a page of a bucket aims at (pages per bucket chosen at capture)
GROUP_MIN_PAGES = 16  # pages per bucket at least, also for a set of queries empty at the start
MU_ENCODING = "mu.fragment.v1"
JOIN_ENCODING = "sketch.join.v1"
TOPK_ENCODING = "topk.ordered.v2"


@dataclasses.dataclass
class Routed:
    """One stage's output for the next: groups for the aggregation, rows for the top-k, or μ's
    fragment weights (one of the three)."""

    groups: list = dataclasses.field(default_factory=list)  # [(bucket of the group keys, Delta)]
    topk: Delta | None = None
    fragments: dict = dataclasses.field(default_factory=dict)  # {global fragment: weight}


def _stateless(node) -> tuple:
    """The selections/projections from ``node`` down (root first) and the node below them."""
    chain = []
    while isinstance(node, (FilterNode, ProjectNode)):
        chain.append(node)
        node = node.children[0]
    return chain, node


def _run_stateless(nodes: list, d: Delta | None) -> Delta | None:
    for node in reversed(nodes):
        d = (stateless.select_step if isinstance(node, FilterNode) else stateless.project_step)(node.spec, None, d)[1]
    return d


def split_by_key(d: Delta, cols: list, text) -> list:
    """An annotated delta -> [(key text of ``cols``, the rows with that key)]."""
    inv, first = group_codes([d.table.column(c) for c in cols], len(d))
    reps = d.table.take(pa.array(first))
    keys = list(zip(*[reps.column(c).to_pylist() for c in cols]))
    texts: dict = {}  # key text -> its number (keys that give one text share it)
    num = np.fromiter((texts.setdefault(text(k), len(texts)) for k in keys), np.int64, len(keys))
    row = num[inv]
    order = np.argsort(row, kind="stable")
    bounds = np.flatnonzero(np.diff(row[order])) + 1
    names = list(texts)
    out = []
    for idx in np.split(order, bounds):
        t = names[row[idx[0]]]
        if t is not None:  # a NULL join key: never joins
            out.append((t, d.take(idx)))
    return out


class KeyedQuery:
    """One registered query, planned once per process, cut into its keyed stages."""

    def __init__(self, name: str, sql: str, partitions: dict, schemas: dict):
        """``partitions``: table -> RangePartition; ``schemas``: table -> pa.Schema of its rows."""
        self.name = name
        m = SketchMaintainer(sql, partitions)
        m.prepare({t.lower(): list(s.names) for t, s in schemas.items()})
        self.ctx = m.ctx
        self.space = m.ctx.space
        self.tables = list(m.tables)
        # the tree from the root down: [stateless] [top-k [stateless]] [aggregation [stateless]] [join] input
        node = m.query.root
        self.top, node = _stateless(node)  # above the top-k, root first
        self.topk: TopKNode | None = node if isinstance(node, TopKNode) else None
        if self.topk is not None:
            self.above, node = _stateless(node.children[0])
        else:
            self.top, self.above = [], self.top
        self.agg: AggNode | None = node if isinstance(node, AggNode) else None
        if self.agg is None:  # nothing stateless between the top-k (or μ) and what comes below
            node = self.topk.children[0] if self.topk is not None else m.query.root
            self.above = []
        else:
            node = self.agg.children[0]
        self.below = node  # the input of the aggregation / top-k / μ
        self.mid, n = _stateless(node)  # between a join and that input, root first
        self.join: JoinNode | None = n if isinstance(n, JoinNode) else None
        if self.join is not None:
            if not self.join.lkeys:
                raise UnsupportedSqlError(f"sketch {name!r}: the statestore backend keys a join by its equality "
                                          "columns; this one is a cross product (keep it on [state] backend = "
                                          "\"memory\")")
            self.sides = list(self.join.children)
            self.join_spec = dataclasses.replace(self.join.spec, use_bloom=False)  # one key per state: no filter
            leaves = [_stateless(s)[1] for s in self.sides]
        else:
            self.sides = []
            leaves = [n]
        for leaf in leaves:
            if not isinstance(leaf, ScanNode):
                raise UnsupportedSqlError(f"sketch {name!r}: the statestore backend maintains selections, "
                                          "projections, one two-way equi-join of table scans, one aggregation and "
                                          f"one top-k; found {type(leaf).__name__} (keep it on [state] backend = "
                                          "\"memory\")")
        lower = {t.lower(): s for t, s in schemas.items()}
        for leaf in leaves:
            schema = lower[leaf.table]
            leaf.state.types = {c: normalize_type(schema.field(c).type) for c, _ in leaf.spec.columns}
        self.schemas = {t: lower[t] for t in self.tables}
        self.group_set = group_set(self) if self.agg is not None else None
        self.table = self.tables[0] if len(self.tables) == 1 else None  # single-table queries (capture)
        self.schema = self.schemas[self.tables[0]]

    @property
    def aggregated(self) -> bool:
        return self.agg is not None

    def reads(self, table: str) -> bool:
        return table.lower() in self.tables

    # -- stage 1: annotate ---------------------------------------------------------------------
    def raw(self, table: str, deltas: list) -> dict:
        """Signed deltas [(weight, image dict)] of ``table`` as the scans read them; the same for
        every query on the table (their schemas come from the job's tables), so built once."""
        schema = self.schemas[table.lower()]
        cols = {f.name: [img[f.name] for _, img in deltas] for f in schema}
        tbl = pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)
        w = np.fromiter((x for x, _ in deltas), dtype=np.int64, count=len(deltas))
        return {table.lower(): (tbl, w)}

    def annotate(self, deltas: list, table: str | None = None, raw: dict | None = None) -> Delta | None:
        """Signed deltas [(weight, image dict)] of the query's table -> the annotated delta below
        the aggregation / top-k (or of the whole query when it has neither). Not for joins.
        ``raw``: the deltas as ``raw`` gives them, when another query built it already."""
        if not deltas:
            return None
        return self.below.run(self.ctx, raw or self.raw(table or self.tables[0], deltas), False)

    def annotate_sides(self, table: str, deltas: list, text=None, raw: dict | None = None) -> list:
        """A join's stage 1: signed deltas of ``table`` -> [(join key text, side 0/1, Delta)] for
        each side that scans it (both for a self-join); rows with a NULL key never join: dropped.
        ``text``: join key -> the text rows are split by (default ``join_key_text``; the capture
        passes a coarser one, the key's bucket)."""
        if not deltas:
            return []
        raw = raw or self.raw(table, deltas)
        out = []
        for side, (sub, keys) in enumerate(zip(self.sides, (self.join.lkeys, self.join.rkeys))):
            if sub.tables() != {table.lower()}:
                continue
            d = sub.run(self.ctx, raw, False)
            if d is None or len(d) == 0:
                continue
            out.extend((k, side, part) for k, part in split_by_key(d, keys, text or join_key_text))
        return out

    def split_groups(self, d: Delta | None) -> list:
        """An annotated delta -> [(bucket of the group stage, the rows of its groups as a Delta)]."""
        if d is None or len(d) == 0:
            return []
        spec = self.agg.spec
        if not spec.group:
            return [(group_bucket(group_key_text(())), d)]
        inv, texts = _group_texts(spec, d)
        rb = np.fromiter((group_bucket(t) for t in texts), np.int64, len(texts))[inv]
        order = np.argsort(rb, kind="stable")
        bounds = np.flatnonzero(np.diff(rb[order])) + 1
        return [(int(rb[idx[0]]), d.take(idx)) for idx in np.split(order, bounds)]

    def route(self, d: Delta | None, after: str) -> Routed:
        """The output of the stage ``after`` (``input``, ``join``, ``group``, ``topk``) to the next
        stateful stage: the aggregation's groups, the top-k's one key, or μ's fragments."""
        r = Routed()
        if d is None or len(d) == 0:
            return r
        if after in ("input", "join") and self.agg is not None:
            r.groups = self.split_groups(d)
        elif after != "topk" and self.topk is not None:
            r.topk = d
        else:
            r.fragments = fragment_weights(d)
        return r

    # -- stage: one join key ---------------------------------------------------------------------
    def join_step(self, blob: bytes | None, lefts: list, rights: list) -> tuple:
        """Both sides' rows of one join key (or None) and this batch's rows of each side ->
        (new state or None once both sides are empty, the join's output below the next stage).
        Δ(L ⋈ R) = ΔL ⋈ R + L ⋈ ΔR + ΔL ⋈ ΔR (``operators.sketch.join.step`` on this key's rows)."""
        spec, nbits = self.join_spec, self.space.nbits
        held = decode_join(blob) if blob is not None else (None, None)
        state = join.new_state(spec)
        for store, d, keys in ((state.left, held[0], spec.left_keys), (state.right, held[1], spec.right_keys)):
            if d is not None:
                store.add(d, key_hash(d.table, keys))
        state, out = join.step(spec, state, Delta.concat(lefts, nbits), Delta.concat(rights, nbits))
        out = _run_stateless(self.mid, out)
        left, right = state.left.rows(), state.right.rows()
        return (encode_join(left, right) if left is not None or right is not None else None), out

    def join_keys(self, lefts: list, rights: list) -> tuple:
        """Capture: the rows of many join keys from no state, at once -> ([(join key text, the
        key's state)], the join's output below the next stage): what ``join_step`` from None
        gives key by key (each side's rows of a key consolidated), with one ``join.step``."""
        nbits = self.space.nbits
        dl, dr = Delta.concat(lefts, nbits), Delta.concat(rights, nbits)
        _, out = join.step(self.join_spec, join.new_state(self.join_spec), dl, dr)
        keyed: dict = {}  # join key text -> [left rows, right rows]
        for side, (d, cols) in enumerate(((dl, self.join.lkeys), (dr, self.join.rkeys))):
            d = consolidate(d, nbits)
            if d is not None:
                for text, part in split_by_key(d, cols, join_key_text):
                    keyed.setdefault(text, [None, None])[side] = part
        return [(text, encode_join(*sides)) for text, sides in keyed.items()], _run_stateless(self.mid, out)

    # -- stage 2: the groups of one bucket ---------------------------------------------------------
    def groups_step(self, store, d: Delta) -> Delta | None:
        """This batch's rows ``d`` of some groups of one bucket and the bucket's records
        (``store``: a ``GroupPages``) -> the groups' output rows (after HAVING/projections) as
        a Delta, the records of these groups updated in ``store`` (removed once a group is
        empty). One ``aggregate.step`` over every group of ``d``, on a state assembled from their
        records only: the memory engine's code on the memory engine's state, cut to the groups
        the batch touches."""
        spec = self.agg.spec
        if spec.group:
            _, texts = _group_texts(spec, d)
            texts = list(dict.fromkeys(texts))
        else:
            texts = [group_key_text(())]
        held = [r for r in (store.record(t, self.name) for t in texts) if r is not None]
        state, out = aggregate.step(spec, aggregate.assemble(spec, held, d), d)
        out = _run_stateless(self.above, out)
        live = list(state.slot_of.items())
        kept = set()
        for (key, _), rec in zip(live, aggregate.take(spec, state, [s for _, s in live])):
            text = group_key_text(key if len(spec.group) != 1 else (key,))
            store.put(text, self.name, rec)
            kept.add(text)
        for t in texts:
            if t not in kept:
                store.remove(t, self.name)
        return out

    # -- stage: top-k (one key per query) -----------------------------------------------------------
    def topk_step(self, blob: bytes | None, parts: list) -> tuple:
        """The query's ordered rows (every row of the top-k's input, as the memory engine keeps
        them) and this batch's input rows -> (new state or None when empty, the top-k's output
        changes after the nodes above it)."""
        state = decode_topk(blob) if blob is not None else topk.TopKState()
        state, out = topk.step(self.topk.spec, state, Delta.concat(parts, self.space.nbits))
        out = _run_stateless(self.top, out)
        return (encode_topk(state) if state.entries else None), out

    # -- output ------------------------------------------------------------------------------------
    def split_fragment(self, g: int) -> tuple:
        """Global fragment id -> (table, local fragment id)."""
        for t, off, size in self.space.offsets:
            if off <= g < off + size:
                return t, g - off
        raise InvariantError(f"sketch {self.name!r}: fragment {g} outside its sketch space")


def group_hash(text: str) -> int:
    """A group key text's hash: stable across processes (no Python hash seed)."""
    return zlib.crc32(text.encode("utf-8"))


def group_bucket(text: str) -> int:
    """The bucket of a group (by its key text): the key of the group stage with its set."""
    return group_hash(text) % GROUP_BUCKETS


def group_page(text: str, pages: int) -> int:
    """The page of a group within its bucket (the bits the bucket did not use)."""
    return (group_hash(text) // GROUP_BUCKETS) % pages


def group_pages_for(rows: int) -> int:
    """Pages per bucket for a set of queries over tables of at most ``rows`` rows (an upper
    bound of its groups): a power of two, ~``GROUP_PAGE_GROUPS`` groups a page at most."""
    n = GROUP_MIN_PAGES
    while n * GROUP_BUCKETS * GROUP_PAGE_GROUPS < rows:
        n *= 2
    return n


def _group_texts(spec, d: Delta) -> tuple:
    """The group key text of each distinct group of ``d`` and each row's group number."""
    inv, first = group_codes([d.table.column(i) for i, _ in spec.group], len(d))
    reps = d.table.take(pa.array(first))
    keys = zip(*[reps.column(i).to_pylist() for i, _ in spec.group])
    return inv, [group_key_text(k) for k in keys]


def group_set(q: "KeyedQuery") -> str:
    """The entries a query's groups share with other queries': the source columns of its group
    key (table.column, through the projections and joins below the aggregation), so that
    queries grouping the same rows by the same columns read and write one entry per group.
    A group key that is not plain columns gets the query's own entries."""
    spec = q.agg.spec
    if not spec.group:
        return "()"
    out = []
    for cid, _ in spec.group:
        src = _source(q.agg.children[0], cid)
        if src is None:
            return f"={q.name}"
        out.append(src)
    return ",".join(out)


def _source(node, cid):
    """``table.column`` that column ``cid`` of ``node``'s output copies, or None."""
    while True:
        if isinstance(node, ScanNode):
            raw = next((r for r, c in node.cols if c == cid), None)
            return None if raw is None else f"{node.table}.{raw}"
        if isinstance(node, FilterNode):
            node = node.children[0]
        elif isinstance(node, ProjectNode):
            e = dict(node.exprs).get(cid)
            if not isinstance(e, Col):
                return None
            node, cid = node.children[0], e.id
        elif isinstance(node, JoinNode):
            node = next((c for c in node.children if cid in c.out), None)
            if node is None:
                return None
        else:
            return None


class GroupPages:
    """One bucket's group records over a map of pages (``get/put/remove/items`` of page id ->
    blob: a dict in the tests, Spark's MapState on the executors). A page is read at its first
    touch and its entries unpickled only when touched; ``flush`` writes each changed page back
    once (or removes it when it holds no group)."""

    def __init__(self, pages_map, pages: int):
        self.map, self.pages = pages_map, pages
        self.loaded: dict = {}  # page id -> {group key text: pickled entry | entry}
        self.dirty: set = set()

    def _entry(self, text: str, make: bool):
        pid = group_page(text, self.pages)
        page = self.loaded.get(pid)
        if page is None:
            blob = self.map.get(pid)
            page = self.loaded[pid] = decode_groups(blob) if blob is not None else {}
        e = page.get(text)
        if isinstance(e, bytes):
            e = page[text] = pickle.loads(e)
        elif e is None and make:
            e = page[text] = {}
        return pid, page, e

    def record(self, text: str, query: str):
        e = self._entry(text, False)[2]
        return None if e is None else e.get(query)

    def put(self, text: str, query: str, record) -> None:
        pid, _, e = self._entry(text, True)
        e[query] = record
        self.dirty.add(pid)

    def remove(self, text: str, query: str) -> None:
        pid, page, e = self._entry(text, False)
        if e is not None and e.pop(query, None) is not None:
            if not e:
                del page[text]
            self.dirty.add(pid)

    def flush(self) -> None:
        for pid in sorted(self.dirty):
            page = self.loaded[pid]
            if page:
                self.map.put(pid, encode_groups(page))
            else:
                self.map.remove(pid)
        self.dirty.clear()


def encode_groups(page: dict) -> bytes:
    """A page of groups {group key text: entry (pickled or not)} as its state blob."""
    return _tagged(GROUPS_ENCODING, {t: e if isinstance(e, bytes) else pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL)
                                     for t, e in page.items()})


def decode_groups(blob: bytes) -> dict:
    """A page of groups: {group key text: its entry, still pickled}."""
    return _untagged(GROUPS_ENCODING, "page of groups", blob)


def group_entries(blob: bytes) -> dict:
    """A page of groups decoded whole: {group key text: {query: record}} (tests, state readers)."""
    return {t: pickle.loads(e) for t, e in decode_groups(blob).items()}


def group_key_text(key: tuple) -> str:
    """A group key as text: equal keys (as the memory backend's dict sees them) give equal text."""
    return repr(tuple(0.0 if isinstance(v, float) and v == 0 else v for v in key))


def join_key_text(key: tuple) -> str | None:
    """A join key as text; keys the join finds equal (1 and 1.0 alike) give equal text; None when
    a value is NULL (such rows never join). Keys that only look alike share a state, where the
    join compares values."""
    if any(v is None for v in key):
        return None
    return repr(tuple(float(v) if isinstance(v, numbers.Number) and not isinstance(v, bool) else v for v in key))


def fragment_weights(d: Delta | None) -> dict:
    """{global fragment: summed weight} of an annotated delta (μ's input)."""
    out: dict = defaultdict(int)
    if d is None or len(d) == 0:
        return {}
    w = d.weight.tolist()
    if is_compact(d.sketch):
        for row, x in zip(d.sketch.tolist(), w):
            for f in set(v for v in row if v >= 0):
                out[f] += x
    else:
        for b, x in zip(d.sketch, w):
            for f in ids_of(b):
                out[f] += x
    return {f: x for f, x in out.items() if x}


def mu_step(count: int, w: int) -> tuple:
    """A fragment's counter and its batch weight -> (new counter, +1 added / -1 removed / 0)."""
    new = count + w
    if new < 0:
        raise InvariantError(f"μ: fragment counter below zero ({count} {w:+d})")
    if count == 0 and new > 0:
        return new, 1
    if count > 0 and new == 0:
        return new, -1
    return new, 0


def _tagged(encoding: str, state) -> bytes:
    """A state value under its encoding's name, so that a reader of another encoding refuses it."""
    return pickle.dumps((encoding, state), protocol=pickle.HIGHEST_PROTOCOL)


def _untagged(encoding: str, what: str, blob: bytes):
    enc, state = pickle.loads(blob)
    if enc != encoding:
        raise StateError(f"{what} encoding {enc!r} is not {encoding!r}")
    return state


def encode_join(left: Delta | None, right: Delta | None) -> bytes:
    return _tagged(JOIN_ENCODING, [None if d is None else (d.table, d.weight, d.sketch) for d in (left, right)])


def decode_join(blob: bytes) -> tuple:
    return tuple(None if x is None else Delta(*x) for x in _untagged(JOIN_ENCODING, "join state", blob))


def encode_topk(state) -> bytes:
    return _tagged(TOPK_ENCODING, state)


def decode_topk(blob: bytes):
    return _untagged(TOPK_ENCODING, "top-k state", blob)


def encode_delta(d: Delta) -> bytes:
    return pickle.dumps((d.table, d.weight, d.sketch), protocol=pickle.HIGHEST_PROTOCOL)


def decode_delta(blob: bytes) -> Delta:
    return Delta(*pickle.loads(blob))
