"""A registered query's sketch maintenance split by key: annotate, per-group aggregate, μ per fragment.

The memory backend runs a query's whole operator tree on one batch in one process. Keyed
state needs each stateful operator apart, partitioned by its key, so this module cuts the
planned tree (``operators.sketch``, the same planner and the same operator code) in three:

1. **annotate** (stateless, per bucket of signed deltas): the scan, selections and
   projections below the aggregation; rows are then split by group key. A query without
   aggregation is stateless all the way to μ: annotate yields fragment weights directly.
2. **group** (keyed by query and group key): ``aggregate.step`` on a state that holds that
   one group, then the selections and projections above it (HAVING), then each output
   row's fragments with its weight. State kept (``imp.group.v1``): the group's
   ``AggState`` (hidden count, sums, MIN/MAX ordered multisets, F_g fragment counts),
   pickled; none once the group is empty (a global aggregate keeps its one group).
3. **μ** (keyed by query and global fragment id): the fragment's counter; +fragment when it
   leaves zero, −fragment when it returns to zero (``operators.sketch.merge``'s rule).
   State kept (``mu.fragment.v1``): the counter.

Supported shapes: one table, selections/projections, at most one aggregation (GROUP BY,
SUM/COUNT/AVG/MIN/MAX, DISTINCT), HAVING. Joins, unions and top-k raise ``UnsupportedSqlError``
(they stay on the memory backend). Float sums can differ from the memory backend in the last
bit (rows of a group are summed in another order).
"""

from __future__ import annotations

import pickle
from collections import defaultdict

import numpy as np
import pyarrow as pa

from operators.errors import InvariantError, StateError, UnsupportedSqlError
from operators.sketch import aggregate, stateless
from operators.sketch.delta import Delta, group_codes, ids_of, is_compact
from operators.sketch.maintainer import SketchMaintainer
from operators.sketch.plan import AggNode, FilterNode, ProjectNode, ScanNode
from operators.sketch.scan import normalize_type

GROUP_ENCODING = "imp.group.v1"
MU_ENCODING = "mu.fragment.v1"


class KeyedQuery:
    """One registered query, planned once per process, cut into its keyed stages."""

    def __init__(self, name: str, sql: str, partitions: dict, schemas: dict):
        """``partitions``: table -> RangePartition; ``schemas``: table -> pa.Schema of its rows."""
        self.name = name
        m = SketchMaintainer(sql, partitions)
        m.prepare({t.lower(): list(s.names) for t, s in schemas.items()})
        self.ctx = m.ctx
        self.space = m.ctx.space
        if len(m.tables) != 1:
            raise UnsupportedSqlError(f"sketch {name!r}: the statestore backend maintains single-table queries; "
                                      f"this one reads {m.tables} (keep it on [state] backend = \"memory\")")
        self.table = m.tables[0]
        self.above: list = []  # stateless nodes above the aggregation, root first
        node = m.query.root
        while isinstance(node, (FilterNode, ProjectNode)):
            self.above.append(node)
            node = node.children[0]
        self.agg: AggNode | None = node if isinstance(node, AggNode) else None
        if self.agg is None:
            self.above, self.below = [], m.query.root
        else:
            self.below = self.agg.children[0]
        n = self.below
        while isinstance(n, (FilterNode, ProjectNode)):
            n = n.children[0]
        if not isinstance(n, ScanNode):
            raise UnsupportedSqlError(f"sketch {name!r}: the statestore backend maintains selections, projections "
                                      f"and one aggregation; found {type(n).__name__} (joins, unions and top-k stay "
                                      "on [state] backend = \"memory\")")
        schema = schemas[self.table] if self.table in schemas else {t.lower(): s for t, s in schemas.items()}[self.table]
        n.state.types = {c: normalize_type(schema.field(c).type) for c, _ in n.spec.columns}
        self.schema = schema

    @property
    def aggregated(self) -> bool:
        return self.agg is not None

    # -- stage 1: annotate ---------------------------------------------------------------------
    def annotate(self, deltas: list) -> Delta | None:
        """Signed deltas [(weight, image dict)] of the query's table -> the annotated delta below
        the aggregation (or of the whole query when it has none)."""
        if not deltas:
            return None
        cols = {f.name: [img[f.name] for _, img in deltas] for f in self.schema}
        tbl = pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in self.schema], schema=self.schema)
        w = np.fromiter((x for x, _ in deltas), dtype=np.int64, count=len(deltas))
        return self.below.run(self.ctx, {self.table: (tbl, w)}, False)

    def split_groups(self, d: Delta | None) -> list:
        """An annotated delta -> [(group key text, that group's rows as a Delta)]."""
        if d is None or len(d) == 0:
            return []
        spec = self.agg.spec
        if not spec.group:
            return [("()", d)]
        inv, first = group_codes([d.table.column(i) for i, _ in spec.group], len(d))
        reps = d.table.take(pa.array(first))
        keys = list(zip(*[reps.column(i).to_pylist() for i, _ in spec.group]))
        order = np.argsort(inv, kind="stable")
        bounds = np.flatnonzero(np.diff(inv[order])) + 1
        out = []
        for g, idx in zip(np.unique(inv[order]).tolist(), np.split(order, bounds)):
            out.append((group_key_text(keys[g]), d.take(idx)))
        return out

    # -- stage 2: one group ----------------------------------------------------------------------
    def group_step(self, blob: bytes | None, parts: list) -> tuple:
        """The group's state (or None) and its rows of this batch -> (new state or None when the
        group is gone, {global fragment: weight} for μ)."""
        spec = self.agg.spec
        state = decode_group(blob) if blob is not None else aggregate.new_state(spec)
        d = Delta.concat(parts, self.space.nbits)
        state, out = aggregate.step(spec, state, d)
        for node in reversed(self.above):
            out = (stateless.select_step if isinstance(node, FilterNode) else stateless.project_step)(
                node.spec, None, out)[1]
        keep = bool(state.slot_of) or not spec.group
        return (encode_group(state) if keep else None), fragment_weights(out)

    # -- output ------------------------------------------------------------------------------------
    def split_fragment(self, g: int) -> tuple:
        """Global fragment id -> (table, local fragment id)."""
        for t, off, size in self.space.offsets:
            if off <= g < off + size:
                return t, g - off
        raise InvariantError(f"sketch {self.name!r}: fragment {g} outside its sketch space")


def group_key_text(key: tuple) -> str:
    """A group key as text: equal keys (as the memory backend's dict sees them) give equal text."""
    return repr(tuple(0.0 if isinstance(v, float) and v == 0 else v for v in key))


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


def encode_group(state) -> bytes:
    return pickle.dumps((GROUP_ENCODING, state), protocol=pickle.HIGHEST_PROTOCOL)


def decode_group(blob: bytes):
    enc, state = pickle.loads(blob)
    if enc != GROUP_ENCODING:
        raise StateError(f"group state encoding {enc!r} is not {GROUP_ENCODING!r}")
    return state


def encode_delta(d: Delta) -> bytes:
    return pickle.dumps((d.table, d.weight, d.sketch), protocol=pickle.HIGHEST_PROTOCOL)


def decode_delta(blob: bytes) -> Delta:
    return Delta(*pickle.loads(blob))
