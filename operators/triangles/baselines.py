"""Baselines with the TriangleCounter update API: classical first-order IVM and full recount.

Incremental rule (classical IVM): δQ = m · Σ_z K_j(y, z) · K_k(z, x) for δK_i = {(x,y) ↦ m},
computed as one adjacency intersection of the forward row K_j(y, ·) and the reverse column
K_k(·, x), iterating the shorter one (times 3, plus 3m²R(x,x) + m³ for a self-loop, in the
self-join form).  No partition and no views: O(min-degree) per update, O(|D|) in the worst
case (two hubs).  ``RecountCounter`` recomputes Q from scratch when the count is read after a
change (``reference.static_q``, O(|D|^1.5)); it is the "recompute" baseline of the paper.

State kept: forward rows and reverse columns per relation, Q, |D|.  Deletions: negative
multiplicities; zero entries are removed.  Edge semantics and rejections are the shared
``frontend`` ones, so all three counters accept and reject exactly the same rows.
"""

from __future__ import annotations

from core.errors import ConfigError
from operators.triangles.frontend import MODES, GraphFrontend
from operators.triangles.reference import static_q


class PlainCore:
    """Unpartitioned relations with forward and reverse indexes; Q maintained by deltas."""

    def __init__(self, nrel: int, unit: bool):
        self.nrel = nrel
        self.unit = unit
        self.rows: list[dict] = [{} for _ in range(nrel)]
        self.cols: list[dict] = [{} for _ in range(nrel)]
        self.q = 0
        self.size = 0

    def _dot(self, a, b) -> int:
        if self.unit:
            return len(a.keys() & b.keys())
        return sum([a[k] * b[k] for k in a.keys() & b.keys()])

    def update_self(self, x, y, m, known=None) -> int:
        rows = self.rows[0]
        if known is None:
            ry, cx = rows.get(y), self.cols[0].get(x)
            known = self._dot(ry, cx) if ry and cx else 0
        dq = 3 * m * known
        if x == y:
            rx = rows.get(x)
            dq += 3 * m * m * (rx.get(x, 0) if rx else 0) + m * m * m
        self.q += dq
        self._write(0, x, y, m)
        return known

    def update_three(self, i, x, y, m) -> None:
        ry = self.rows[(i + 1) % 3].get(y)
        cx = self.cols[(i + 2) % 3].get(x)
        if ry and cx:
            self.q += m * self._dot(ry, cx)
        self._write(i, x, y, m)

    def _write(self, i, x, y, m) -> None:
        rows, cols = self.rows[i], self.cols[i]
        rx = rows.get(x)
        if rx is None:
            rx = rows[x] = {}
        cy = cols.get(y)
        if cy is None:
            cy = cols[y] = {}
        old = rx.get(y, 0)
        new = old + m
        if new:
            rx[y] = cy[x] = new
            self.size += not old
        else:
            del rx[y], cy[x]
            self.size -= 1
            if not rx:
                del rows[x]
            if not cy:
                del cols[y]

    def column(self, i, y) -> dict:
        return self.cols[i].get(y, {})


class RecountCore(PlainCore):
    """Same relations; Q recomputed from scratch whenever it is read after a change."""

    def __init__(self, nrel: int, unit: bool):
        super().__init__(nrel, unit)
        self._dirty = False

    @property
    def q(self) -> int:
        if self._dirty:
            self._q = static_q(self.rows, self.cols)
            self._dirty = False
        return self._q

    @q.setter
    def q(self, value: int) -> None:
        self._q = value

    def update_self(self, x, y, m, known=None) -> int:
        self._write(0, x, y, m)
        self._dirty = True
        return 0

    def update_three(self, i, x, y, m) -> None:
        self._write(i, x, y, m)
        self._dirty = True


class _Baseline(GraphFrontend):
    core_cls = PlainCore

    def __init__(self, epsilon: float | None = None, mode: str = "undirected"):
        if mode not in MODES:
            raise ConfigError(f"triangles: mode must be one of {MODES}, got {mode!r}")
        nrel = 3 if mode == "three_relation" else 1
        super().__init__(mode, self.core_cls(nrel, unit=(nrel == 1)))

    def stats(self) -> dict:
        c = self._core
        return {"mode": self.mode, "D": c.size, "Q": c.q, "count": self.count,
                "rejected_rows": self.rejected}


class ClassicalCounter(_Baseline):
    """Classical first-order IVM (delta join by adjacency intersection); ``epsilon`` ignored."""

    core_cls = PlainCore


class RecountCounter(_Baseline):
    """Recompute-from-scratch baseline: reading ``count`` after a change recounts everything."""

    core_cls = RecountCore


def preloaded_recount(mode: str, src, dst, weight=None, relation=None) -> RecountCounter:
    """A RecountCounter holding the given rows, loaded without a recount per row (benchmarks).

    The rows go through the classical counter (same semantics and rejections), then its
    relations are handed to a recount core and Q is recounted once.
    """
    loader = ClassicalCounter(mode=mode)
    loader.apply_batch(src, dst, weight, relation)
    rc = RecountCounter(mode=mode)
    core = rc._core
    core.rows, core.cols, core.size = loader._core.rows, loader._core.cols, loader._core.size
    core.q = static_q(core.rows, core.cols)
    rc._extra = loader._extra
    return rc
