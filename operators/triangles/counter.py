"""TriangleCounter: the IVM^ε triangle count with the public update, stats and snapshot API.

Incremental rule: each accepted row is one single-tuple update (two for an undirected edge,
one per orientation) through IVM^ε's OnUpdate (see ``engine``): amortised
O(|D|^max(ε, 1−ε)) time per update, O(1) to read ``count``.

State kept: the ``engine.IvmEpsState`` (partitions, indexes, views, Q, N, counters; the
undirected mode uses ``symmetric.SymmetricState``, one step per edge) and the
graph-mode reference counts of ``frontend``; encoded by ``snapshot()`` as
``triangles.ivm_eps.v2`` (see ``snapshot``).  Vertex ids are int64 (Python ints checked
against the int64 range; numpy integer arrays in batches).

Deletions: negative weights.  Graph modes reject self-loops and deletes of absent edges
(returned as ``BadEdge`` rows, code ``DATA_BAD_EDGE``); three_relation accepts any integer
multiplicity.
"""

from __future__ import annotations

from core.errors import ConfigError
from operators.triangles.engine import IvmEpsState
from operators.triangles.frontend import MODES, RELATIONS, BadEdge, GraphFrontend
from operators.triangles.reference import static_q
from operators.triangles.symmetric import SymmetricState
from operators.triangles import snapshot as _snap


class _BulkCore:
    """Adapter that lets the frontend's edge semantics feed the preprocessing path."""

    def __init__(self, state: IvmEpsState):
        self.rows = state.rows
        self.q = 0
        self.update_three = state.bulk_write
        self.update_self = lambda x, y, m, known=None: state.bulk_write(0, x, y, m) or 0


class TriangleCounter(GraphFrontend):
    """IVM^ε triangle counter; ``epsilon`` ∈ [0, 1] (½ is the O(√N) point)."""

    def __init__(self, epsilon: float = 0.5, mode: str = "undirected",
                 witnesses: bool = False):
        """``witnesses=True`` (undirected mode only) keeps the light middles of each view
        entry, so ``triangles_of_edge`` has constant delay after O(N^max(ε,1−ε)) for
        every edge; it costs O(|D|^1.5) space in the worst case instead of linear."""
        nrel = 3 if mode == "three_relation" else 1
        if mode not in MODES:
            GraphFrontend.__init__(self, mode, None)  # raises ConfigError
        if witnesses and mode != "undirected":
            raise ConfigError(f"triangles: witnesses=True is for undirected mode, not {mode}")
        core = SymmetricState(epsilon, witnesses=bool(witnesses)) if mode == "undirected" \
            else IvmEpsState(epsilon, nrel, unit=(nrel == 1))
        super().__init__(mode, core)

    @property
    def epsilon(self) -> float:
        return self._core.epsilon

    @classmethod
    def from_edges(cls, src, dst, weight=None, relation=None, *, epsilon: float = 0.5,
                   mode: str = "undirected",
                   witnesses: bool = False) -> tuple["TriangleCounter", list[BadEdge]]:
        """Build from an initial database with the paper's preprocessing (O(|D|^1.5)).

        N = 2|D| + 1, strict partitions, Q by a static count, views by a join.  Rows get the
        same semantics and rejections as ``apply_batch``; returns (counter, rejected rows).
        """
        tc = cls(epsilon=epsilon, mode=mode, witnesses=witnesses)
        state = tc._core
        tc._core = _BulkCore(state)
        try:
            bad = tc.apply_batch(src, dst, weight, relation)
        finally:
            tc._core = state
        state.finish_bulk(static_q)
        return tc, bad

    def stats(self) -> dict:
        c = self._core
        names = ["R", "S", "T"] if c.nrel == 3 else ["E"]
        return {
            "mode": self.mode,
            "epsilon": c.epsilon,
            "witnesses": getattr(c, "witnesses", False),
            "N": c.n,
            "D": c.size,
            "theta": float(c.n) ** c.epsilon,
            "threshold_strict": c.h_strict,
            "threshold_light_to_heavy": c.h_up,
            "threshold_heavy_to_light": c.h_down,
            "heavy_values": {names[i]: len(c.heavy[i]) for i in range(c.nrel)},
            "view_entries": {self._view_name(i): sum(map(len, c.views[i].values()))
                             for i in range(c.nrel)},
            "Q": c.q,
            "count": self.count,
            "major_rebalances": c.major,
            "minor_rebalances": c.minor,
            "tuples_moved": c.moved,
            "rejected_rows": self.rejected,
            "cancelled_in_batch": self.cancelled,
            "edges_with_extra_refs": len(self._extra),
        }

    def _view_name(self, i: int) -> str:
        if self._core.nrel == 1:
            return "V"
        return ["V_RS", "V_ST", "V_TR"][i]

    def snapshot(self) -> bytes:
        """Versioned bytes of the whole state (see ``snapshot`` for the encoding)."""
        return _snap.encode(self)

    @classmethod
    def restore(cls, data: bytes) -> "TriangleCounter":
        """Inverse of ``snapshot``; raises ``StateError`` on unknown version or corruption."""
        return _snap.decode(cls, data)


def step(counter: TriangleCounter, batch: dict) -> tuple[TriangleCounter, dict]:
    """Style-guide step function: apply ``batch`` = {src, dst, weight[, relation]} in place.

    Returns (the same counter, {"count", "delta", "rejected"}) where ``delta`` is the change
    of ``count`` over the batch and ``rejected`` the ``BadEdge`` rows to quarantine.
    """
    before = counter.count
    bad = counter.apply_batch(batch["src"], batch["dst"], batch.get("weight"),
                              batch.get("relation"))
    return counter, {"count": counter.count, "delta": counter.count - before, "rejected": bad}


__all__ = ["TriangleCounter", "BadEdge", "RELATIONS", "step"]
