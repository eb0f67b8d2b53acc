"""Adapters that give each engine the ``state.protocol.Engine`` interface.

- ``TriangleEngine``: ``operators.triangles.TriangleCounter`` over one edge table, plus the
  number of edge rows it holds (mirror rows minus rejected ones). Encoding
  ``triangles.engine.v2``: that row count (int64, little-endian) followed by the counter's
  own ``triangles.ivm_eps.v2`` bytes (heavy index and view stored, not rebuilt). It reads
  ``triangles.engine.v1`` too (the same framing around ``triangles.ivm_eps.v1`` bytes).
  ``apply`` returns the rejected rows (``BadEdge``).
- ``ViewEngine``: a ``ReachabilityView`` or ``ShortestPathView`` over one link table, through
  the views' public ``snapshot()``/``restore()`` (encoding ``ivmstream.recursive.v1``).
  ``apply`` runs one view batch per mirror commit and returns their net ``ViewDelta``.
- ``SketchEngine``: an initialised ``operators.sketch.SketchMaintainer`` (encoding
  ``sketch.maintainer.v1``, ``operators.sketch.codec``); ``apply`` returns its ``SketchDelta``.

Each ``restore`` refuses, with ``StateError``, a snapshot taken under another configuration
(mode, ε, view kind or parameters): its bytes would decode into the wrong engine.
"""

from __future__ import annotations

import struct
from typing import Mapping

import numpy as np
import pyarrow as pa

from core.errors import IvmError, StateError
from operators.recursive import ReachabilityView, ShortestPathView, ViewDelta
from operators.recursive.views import ENCODING
from operators.triangles import TriangleCounter
from state.protocol import VERSION, WEIGHT, by_version, check_encoding, ordered


class TriangleEngine:
    """The IVM^ε triangle counter of one graph behind the engine protocol."""

    encoding = "triangles.engine.v2"
    reads = ("triangles.engine.v1", "triangles.engine.v2")  # the counter's bytes carry their own version

    def __init__(self, table: str, src: str, dst: str, *, mode: str = "undirected",
                 epsilon: float = 0.5, relation: str | None = None):

        self.table, self.src, self.dst, self.relation = table, src, dst, relation
        self.mode, self.epsilon = mode, float(epsilon)
        self.counter = TriangleCounter(epsilon=self.epsilon, mode=mode)
        self.edges = 0  # edge rows applied and accepted (net of deletes)

    @property
    def count(self) -> int:
        return int(self.counter.count)

    def apply(self, deltas: Mapping[str, pa.Table]) -> list:
        delta = deltas.get(self.table)
        if delta is None or delta.num_rows == 0:
            return []
        delta = ordered(delta)
        weights = delta.column(WEIGHT).to_numpy(zero_copy_only=False).astype(np.int64)
        rel = delta.column(self.relation).to_pylist() if self.relation else None
        bad = self.counter.apply_batch(delta.column(self.src).to_numpy(zero_copy_only=False),
                                       delta.column(self.dst).to_numpy(zero_copy_only=False),
                                       weights, relation=rel)
        self.edges += int(weights.sum()) - sum(int(b.weight) for b in bad)
        return bad

    def snapshot(self) -> tuple[str, bytes]:
        return self.encoding, struct.pack("<q", self.edges) + self.counter.snapshot()

    def restore(self, encoding: str, data: bytes) -> None:

        check_encoding("triangles", encoding, self.reads)
        data = memoryview(data)
        if len(data) < 8:
            raise StateError("triangles: snapshot shorter than its header")
        counter = TriangleCounter.restore(data[8:])
        if counter.mode != self.mode or counter.epsilon != self.epsilon:
            raise StateError(f"triangles: snapshot taken with mode {counter.mode}, epsilon {counter.epsilon}; "
                             f"the config says mode {self.mode}, epsilon {self.epsilon}")
        self.counter = counter
        (self.edges,) = struct.unpack("<q", data[:8])

class ViewEngine:
    """A recursive view (reachability or shortest paths) behind the engine protocol."""

    def __init__(self, table: str, kind: str, src: str, dst: str, cost: str | None = None,
                 expires: str | None = None):
        self.table, self.kind, self.src, self.dst, self.cost, self.expires = table, kind, src, dst, cost, expires
        self.view = self._fresh()
        self.errors: list = []  # commits of the last apply() that the view refused

    @property
    def encoding(self) -> str:

        return ENCODING

    def _fresh(self):

        return ReachabilityView() if self.kind == "reachability" else ShortestPathView()

    def edges(self, rows: pa.Table) -> list[tuple]:
        """View edges ``(src, dst[, cost[, expires_at]])`` of mirror rows."""
        cols = [rows.column(self.src).to_pylist(), rows.column(self.dst).to_pylist()]
        if self.cost or self.expires:
            cols.append(rows.column(self.cost).to_pylist() if self.cost else [None] * rows.num_rows)
        if self.expires:
            cols.append(rows.column(self.expires).to_pylist())
        return list(zip(*cols))

    def apply(self, deltas: Mapping[str, pa.Table], now: float | None = None):
        """One view batch per mirror commit (a view batch runs its deletes before its inserts,
        which is right within one commit only); ``now`` expires edges after the last one.
        A commit with bad input (``IvmError``, DATA_BAD_EDGE) leaves the view unchanged and is
        listed in ``self.errors`` as (inserts, deletes, error); the others apply."""

        self.errors = []
        delta = deltas.get(self.table)
        parts = by_version(delta) if delta is not None and delta.num_rows else []
        out: list = []
        for i, part in enumerate(parts or [None]):
            inserts, deletes = [], []
            if part is not None:
                for e, w in zip(self.edges(part), part.column(WEIGHT).to_pylist()):
                    (inserts if w > 0 else deletes).append(e)
            try:
                out.append(self.view.apply(inserts=inserts, deletes=deletes,
                                           now=now if i == len(parts or [None]) - 1 else None))
            except IvmError as err:
                self.errors.append((len(inserts), len(deletes), err))
        if len(out) == 1:
            return out[0]
        return _compose(out, self.view.keyed, ViewDelta)

    def snapshot(self) -> tuple[str, bytes]:
        return self.encoding, self.view.snapshot()

    def restore(self, encoding: str, data: bytes) -> None:
        check_encoding(f"view ({self.kind})", encoding, (self.encoding,))
        view = self._fresh()
        view.restore(bytes(data))  # StateError on another view class, method or parameters
        self.view = view

def _compose(deltas: list, keyed: bool, ViewDelta):
    """The net ViewDelta of several consecutive ones (a row's first old value against its last new one)."""
    first: dict = {}  # row/key -> value before the first delta (None = absent)
    last: dict = {}  # row/key -> value after the last delta that touched it
    for d in deltas:
        removed = d.removed if keyed else dict.fromkeys(d.removed, True)
        added = d.added if keyed else dict.fromkeys(d.added, True)
        for k in set(removed) | set(added):
            if k not in first:
                first[k] = removed.get(k)
            last[k] = added.get(k)
    net = ViewDelta({}, {}) if keyed else ViewDelta(set(), set())
    for k, old in first.items():
        new = last[k]
        if old == new:
            continue
        if keyed:
            if old is not None:
                net.removed[k] = old
            if new is not None:
                net.added[k] = new
        elif new is None:
            net.removed.add(k)
        else:
            net.added.add(k)
    return net

class SketchEngine:
    """An initialised sketch maintainer (one registered query) behind the engine protocol.

    ``store_factory`` is handed to ``SketchMaintainer.restore`` for its join side stores."""

    def __init__(self, maintainer=None, store_factory=None):
        self.maintainer = maintainer
        self.store_factory = store_factory

    @property
    def encoding(self) -> str:
        from operators.sketch import codec as sketch_codec

        return sketch_codec.ENCODING

    def apply(self, deltas: Mapping[str, pa.Table]):
        if self.maintainer is None:
            raise StateError("sketch engine: apply() before initialize or restore")
        clean = {t: (d.drop_columns([VERSION]) if VERSION in d.column_names else d) for t, d in deltas.items()
                 if d is not None}
        return self.maintainer.apply(clean)  # a bag: order and commit boundaries do not matter

    def snapshot(self) -> tuple[str, bytes]:
        if self.maintainer is None:
            raise StateError("sketch engine: snapshot() before initialize or restore")
        return self.encoding, self.maintainer.snapshot()

    def restore(self, encoding: str, data: bytes) -> None:
        from operators.sketch import SketchMaintainer

        check_encoding("sketch", encoding, (self.encoding,))
        self.maintainer = SketchMaintainer.restore(bytes(data), store_factory=self.store_factory)
