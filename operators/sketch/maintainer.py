"""SketchMaintainer: one registered query's provenance sketch, captured once, then maintained.

``from_sql`` parses and checks the query; ``initialize(tables)`` plans it against the
tables' schemas and captures the initial sketch and operator state by running every
operator on the whole tables as one insert-only delta (vectorised, the same code path as
maintenance); ``apply(deltas)`` runs one batch (several tables at once) bottom-up and
returns the sketch delta of μ.  Sketch semantics are lineage (Perm/PBDS): a fragment is
in the sketch iff a tuple of the partitioned table in it contributes to a result row -
for aggregation every tuple of a group that survives HAVING/top-k.
Over-approximations: none beyond lineage itself (MIN/MAX groups carry all members'
fragments, as IMP's F_g does; top-k rows carry all fragments of their input).
After an error inside ``apply`` the state may be half-updated: the maintainer refuses
further batches until ``initialize`` recaptures (``RecaptureRequired`` is the planned
case: bounded MIN/MAX/top-k state exhausted by deletions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from core.errors import IvmError, StateError
from operators.sketch import frontend, merge
from operators.sketch.aggregate import RecaptureRequired
from operators.sketch.delta import SketchSpace
from operators.sketch.partition import RangePartition
from operators.sketch.scan import WEIGHT
from operators.sketch.topk import order_key
from operators.sketch import codec as sketch_codec


@dataclass
class SketchDelta:
    """Fragments added to / removed from each partitioned table's sketch by one batch."""

    added: dict = field(default_factory=dict)
    removed: dict = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not any(self.added.values()) and not any(self.removed.values())


@dataclass(frozen=True)
class _Ctx:
    partitions: dict
    space: SketchSpace
    use_bloom: bool
    minmax_bound: int | None
    topk_bound: int | None
    store_factory: object = None


def consolidated(v: pa.Table, w: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """Identical rows of one delta netted: weights summed per row, zero sums dropped."""
    if v.num_rows < 2:
        return (v, w) if v.num_rows == 0 or w[0] else (v.slice(0, 0), w[:0])
    cols = [c for c in v.column_names if c != WEIGHT]
    body = v.drop_columns([WEIGHT]).append_column(WEIGHT, pa.array(w, pa.int64()))
    try:
        g = body.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return v, w
    if g.num_rows == v.num_rows and w.all():
        return v, w  # nothing to net: keep the delta as it came
    ws = g.column(f"{WEIGHT}_sum").to_numpy(zero_copy_only=False).astype(np.int64)
    keep = ws != 0
    out = g.select(cols).filter(pa.array(keep)).cast(v.drop_columns([WEIGHT]).schema)
    return out.append_column(WEIGHT, pa.array(ws[keep], pa.int64())), ws[keep]


class SketchMaintainer:
    def __init__(self, sql: str, partitions: dict | None = None, *, use_bloom: bool = True,
                 minmax_bound: int | None = None, topk_bound: int | None = None, store_factory=None):
        """``use_bloom``: counting bloom filters on join keys; ``minmax_bound`` /
        ``topk_bound``: keep only the best m values per MIN/MAX group / rows of a top-k
        (Sec. 7.2; ``RecaptureRequired`` when deletions exhaust them); ``store_factory``:
        ``(nbits, key_ids, side, tables) -> SideStore`` for join inputs (default in memory)."""
        self.sql = sql
        self.tree = frontend.parse(sql)
        self.partitions = {t.lower(): p for t, p in (partitions or {}).items()}
        for t, p in self.partitions.items():
            if not isinstance(p, RangePartition):
                raise IvmError(f"partition for table {t!r} must be a RangePartition")
        self.options = {"use_bloom": use_bloom, "minmax_bound": minmax_bound, "topk_bound": topk_bound}
        self.ctx = _Ctx(self.partitions, SketchSpace.build(self.partitions), use_bloom, minmax_bound, topk_bound,
                        store_factory)
        self.query = None
        self.schemas = None
        self.merge = merge.MergeState()
        self._broken = None

    @classmethod
    def from_sql(cls, sql: str, partitions: dict | None = None, **options) -> "SketchMaintainer":
        return cls(sql, partitions, **options)

    # -- planning ------------------------------------------------------------------------------
    def _plan(self, schemas: dict) -> None:
        self.schemas = {t.lower(): list(c) for t, c in schemas.items()}
        q, pl = frontend.build(self.tree, self.schemas)
        for t, p in self.partitions.items():
            if t in pl.tables_used and p.attribute not in self.schemas[t]:
                raise IvmError(f"partition attribute {p.attribute!r} is not a column of {t!r}")
        for node in q.root.walk():
            node.freeze(self.ctx)
        self.query = q
        self.tables = sorted(pl.tables_used)

    def prepare(self, schemas: dict) -> "SketchMaintainer":
        """Plan the query against table schemas (name -> column names) without data; raises
        ``SqlError``/``UnsupportedSqlError`` like ``initialize`` would.  ``initialize`` re-plans."""
        self._plan(schemas)
        return self

    @property
    def root_columns(self) -> list:
        return list(self.query.root.out)

    # -- capture and maintenance ------------------------------------------------------------------
    def initialize(self, tables: dict) -> SketchDelta:
        """Capture the sketch and all operator state from full tables (name -> pyarrow.Table)."""
        tables = {t.lower(): (v if isinstance(v, pa.Table) else pa.table(v)) for t, v in tables.items()}
        schemas = {t: [c for c in v.column_names if c != WEIGHT] for t, v in tables.items()}
        self._plan(schemas)
        missing = [t for t in self.tables if t not in tables]
        if missing:
            raise IvmError(f"initialize() needs tables {missing} for query {self.sql[:60]!r}")
        self.merge = merge.MergeState()
        self._broken = None
        raw = {t: (tables[t], np.ones(tables[t].num_rows, dtype=np.int64)) for t in self.tables}
        return self._run(raw, learn=True)

    def apply(self, deltas: dict, consolidate: bool = True) -> SketchDelta:
        """Maintain the sketch under one batch: table -> pyarrow.Table with an int64 ``__weight``.

        ``consolidate`` (default): identical rows of a table's delta are netted first (weights
        summed, zero sums dropped), so an insert and a delete of the same row in one batch do no
        work in any operator; the operators are linear in the weights, so the sketch and the
        result are those of the unconsolidated delta (``tests/sketch/test_consolidate.py``). A
        delta whose column types Arrow cannot group by is applied as it is.
        """
        if self.query is None:
            raise StateError("apply() before initialize()")
        if self._broken is not None:
            raise RecaptureRequired(f"state is not usable after an earlier failure ({self._broken}); initialize() again")
        raw = {}
        for t, v in deltas.items():
            t = t.lower()
            if t not in self.tables or v is None:
                continue
            if not isinstance(v, pa.Table):
                v = pa.table(v)
            if v.num_rows == 0:
                continue
            if WEIGHT not in v.column_names:
                raise IvmError(f"delta for table {t!r} lacks the int64 column {WEIGHT!r}")
            w = v.column(WEIGHT).to_numpy(zero_copy_only=False).astype(np.int64)
            if consolidate:
                v, w = consolidated(v, w)
                if not len(w):
                    continue
            raw[t] = (v, w)
        if not raw:
            return SketchDelta({t: set() for t in self.partitions}, {t: set() for t in self.partitions})
        try:
            return self._run(raw, learn=False)
        except Exception as e:
            self._broken = f"{type(e).__name__}: {e}"
            raise

    def _run(self, raw: dict, learn: bool) -> SketchDelta:
        d = self.query.root.run(self.ctx, raw, learn)
        self.merge, added, removed = merge.step(self.merge, d, self.root_columns)
        sp = self.ctx.space
        return SketchDelta(sp.split(added), sp.split(removed))

    # -- views -----------------------------------------------------------------------------------
    @property
    def sketch(self) -> dict:
        """Partitioned table -> sorted list of fragment ids in the current sketch."""
        out = self.ctx.space.split(self.merge.counts.keys())
        return {t: sorted(v) for t, v in out.items()}

    def predicate(self, table: str) -> str:
        """SQL condition that restricts ``table`` to the current sketch (adjacent ranges merged)."""
        t = table.lower()
        return self.partitions[t].predicate(self.sketch[t])

    def result(self) -> pa.Table:
        """The query's current result (SELECT-list names; ORDER BY applied)."""
        if self.query is None:
            raise StateError("result() before initialize()")
        q = self.query
        cols = self.root_columns
        rows = []
        for row, m in self.merge.rows.items():
            rows.extend([row] * m)
        if q.order:
            pos = {c: i for i, c in enumerate(cols)}
            order = [(pos[c], desc) for c, desc in q.order]
            rows.sort(key=lambda r: order_key(order, r, ()))
        keep = [cols.index(i) for i in q.ids]
        types = self.merge.types
        arrays = []
        for k in keep:
            vals = [r[k] for r in rows]
            t = types[k] if types is not None else None
            arrays.append(pa.array(vals, type=t) if t is not None else pa.array(vals))
        return pa.Table.from_arrays(arrays, names=list(q.names))

    # -- persistence -------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        if self.query is None:
            raise StateError("snapshot() before initialize()")
        nodes = [(type(n).__name__, getattr(n.state, "encoding", None), n.state) for n in self.query.root.walk()]
        payload = {
            "encoding": sketch_codec.ENCODING,
            "sql": self.sql,
            "partitions": {t: (p.attribute, list(p.boundaries)) for t, p in self.partitions.items()},
            "options": dict(self.options),
            "schemas": self.schemas,
            "nodes": nodes,
            "merge": (self.merge.encoding, self.merge),
        }
        return sketch_codec.encode(payload)

    @classmethod
    def restore(cls, data: bytes, store_factory=None) -> "SketchMaintainer":
        p = sketch_codec.decode(data)
        parts = {t: RangePartition(a, b) for t, (a, b) in p["partitions"].items()}
        m = cls(p["sql"], parts, store_factory=store_factory, **p["options"])
        m._plan(p["schemas"])
        nodes = list(m.query.root.walk())
        if len(nodes) != len(p["nodes"]):
            raise StateError("snapshot does not match the planned operator tree")
        for node, (kind, enc, st) in zip(nodes, p["nodes"]):
            want = getattr(node.state, "encoding", None)
            if kind != type(node).__name__ or enc != want:
                raise StateError(f"snapshot operator {kind}/{enc} does not match {type(node).__name__}/{want}")
            node.state = st
        enc, ms = p["merge"]
        if enc != merge.ENCODING:
            raise StateError(f"unknown merge state encoding {enc!r}")
        m.merge = ms
        return m
