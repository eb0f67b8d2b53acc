"""Aggregate selection (AggSel, Alg. 4) on an update stream with absorption provenance.

Incremental rule: per group key keep the best tuple under a total order ``rank`` (smaller is
better); an insertion passes downstream only if it is new-best for its group, or a new
derivation of the current best; anything else is pruned (not propagated) but kept.
State kept: ``h`` = every tuple that arrived and is still derivable, with its provenance (this
is what the paper keeps so that deletions work), ``members`` group -> tuples, ``best`` group ->
tuple. Deletions: dead variables are restricted to false in ``h``; when the best of a group
dies, the next best among the kept tuples is promoted (returned to the caller, which emits an
INS for it). Retraction of a beaten best is left to the caller (the Fixpoint drops it).

Reading of the paper: Alg. 4 prunes a new derivation of the *current best* (it is neither
absent nor strictly better); we pass it, otherwise the best tuple's provenance would be
incomplete. Ranks are total (cost, hops, path), so ties cannot happen and the chosen path does
not depend on arrival order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable

from operators.recursive.provenance import Provenance, ProvTable

PASS = ("pass",)


class AggSel:
    """One AggSel instance (embedded in a Fixpoint or in a MinShip channel)."""

    __slots__ = ("h", "members", "best", "group", "rank")

    def __init__(self, prov: Provenance, group: Callable, rank: Callable) -> None:
        self.h = ProvTable(prov)
        self.members: dict[Hashable, set] = defaultdict(set)
        self.best: dict[Hashable, tuple] = {}
        self.group = group
        self.rank = rank

    def insert(self, t, pv):
        """None = pruned/absorbed; PASS = forward t; ("improve", old) = forward t, old is beaten."""
        if not self.h.merge(t, pv):
            return None
        g = self.group(t)
        self.members[g].add(t)
        b = self.best.get(g)
        if b is None or b == t:
            self.best[g] = t
            return PASS
        if self.rank(t) < self.rank(b):
            self.best[g] = t
            return ("improve", b)
        return None

    def kill(self, dead: set[str]) -> list:
        """Restrict dead variables; returns [(promoted tuple, its provenance)]."""
        _, removed = self.h.kill(dead)
        lost = set()
        for t in removed:
            g = self.group(t)
            ms = self.members.get(g)
            if ms is not None:
                ms.discard(t)
            if self.best.get(g) == t:
                del self.best[g]
                lost.add(g)
        promos = []
        for g in lost:
            ms = self.members.get(g)
            if ms:
                nb = min(ms, key=self.rank)
                self.best[g] = nb
                promos.append((nb, self.h.get(nb)))
            else:
                self.members.pop(g, None)
        return promos

    def rebuild(self) -> None:
        """Recompute members/best from ``h`` (after a restore)."""
        self.members.clear()
        self.best.clear()
        for t in self.h.keys():
            self.members[self.group(t)].add(t)
        for g, ms in self.members.items():
            self.best[g] = min(ms, key=self.rank)
