"""Aggregate selection (AggSel, Alg. 4) on an update stream with absorption provenance.

Incremental rule: per group key and per aggregate keep the best tuple under a total order
(smaller is better); an insertion passes downstream only if it is new-best for its group for
some aggregate, or a new derivation of a current best; anything else is pruned (not
propagated) but kept.
State kept: ``h`` = every tuple that arrived and is still derivable, with its provenance (this
is what the paper keeps so that deletions work), ``members`` group -> tuples, ``best`` group ->
tuple per aggregate. Deletions: dead variables are restricted to false in ``h``; when the best
of a group dies, the next best among the kept tuples is promoted (returned to the caller, which
emits an INS for it). A beaten tuple that is best for no aggregate any more is returned to the
caller, which retracts it (the Fixpoint drops it).

Lazy restriction (``lazy=True``, one-derivation views in lazy mode): ``h`` has no variable
index and deletions do not visit it. The caller tells which groups lost a best (their Fixpoint
rows were removed, which the Fixpoint finds through its own index) and ``promote`` picks the next
best among the group's live members, dropping the dead ones it meets; ``sweep`` drops the
remaining dead entries now and then. On transit-stub 400 a deletion used to restrict ~650 H
entries to remove ~510, nearly all of them alternatives nobody would ever promote.

Reading of the paper: Alg. 4 prunes a new derivation of the *current best* (it is neither
absent nor strictly better); we pass it, otherwise the best tuple's provenance would be
incomplete. Ranks are total (cost, hops, path), so ties cannot happen and the chosen path does
not depend on arrival order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable

from bench.recursive_research.provenance import Provenance, ProvTable

class AggSel:
    """One AggSel instance (embedded in a Fixpoint or in a MinShip channel).

    ``ranks``: one total order per aggregate (MIN of cost, MIN of hops, ...); a tuple is kept
    downstream while it is the best of its group for *any* of them (multi-aggregate AggSel).
    """

    __slots__ = ("h", "members", "best", "best_rank", "group", "ranks", "lazy", "keep")

    def __init__(self, prov: Provenance, group: Callable, ranks: tuple, lazy: bool = False,
                 keep: bool = True) -> None:
        self.lazy = lazy
        self.keep = keep  # False: h holds the bests only (pruned and beaten tuples are forgotten)
        self.h = ProvTable(prov, indexed=not lazy)
        self.members: dict[Hashable, set] = defaultdict(set)
        self.best: dict[tuple, tuple] = {}  # (group, aggregate index) -> tuple
        self.best_rank: dict[tuple, tuple] = {}  # (group, aggregate index) -> rank of that tuple (hot)
        self.group = group
        self.ranks = tuple(ranks)

    def is_best(self, t, g=None) -> bool:
        g = self.group(t) if g is None else g
        return any(self.best.get((g, i)) == t for i in range(len(self.ranks)))

    def insert(self, t, pv, dead=frozenset()):
        """None = pruned or absorbed; else the list of tuples t beat that are now best for nothing.

        ``dead``: variables killed since the last sweep (lazy mode: an entry holding one is gone).
        """
        if self.lazy:
            old = self.h.f.get(t)
            if old is not None and not old.isdisjoint(dead):
                del self.h.f[t]  # a dead derivation of the same tuple (its link came back)
        fresh = t not in self.h.f
        if not self.h.merge(t, pv):
            return None
        g = self.group(t)
        self.members[g].add(t)
        passed, beaten = False, []
        best, best_rank = self.best, self.best_rank
        for i, rank in enumerate(self.ranks):
            k = (g, i)
            b = best.get(k)
            if b is None:
                best[k], best_rank[k] = t, rank(t)
                passed = True
            elif b == t:
                passed = True
            else:
                rt = rank(t)
                if rt < best_rank[k]:
                    best[k], best_rank[k] = t, rt
                    passed = True
                    beaten.append(b)
        if not passed:
            if not self.keep and fresh:
                self._forget(t, g)
            return None
        gone = [b for b in set(beaten) if not self.is_best(b, g)]
        if not self.keep:
            for b in gone:
                self._forget(b, g)
        return gone

    def dominated(self, t) -> bool:
        """True iff the best of t's group beats (or is) t for every aggregate: insert would prune it."""
        g = self.group(t)
        best_rank = self.best_rank
        for i, rank in enumerate(self.ranks):
            b = best_rank.get((g, i))
            if b is None or rank(t) < b:
                return False
        return True

    def drop_non_bests(self) -> None:
        """``keep=False`` after a restore: a snapshot may hold alternatives (written with H)."""
        bests = set(self.best.values())
        for t in [t for t in self.h.f if t not in bests]:
            self._forget(t, self.group(t))

    def _forget(self, t, g) -> None:
        del self.h.f[t]
        ms = self.members[g]
        ms.discard(t)
        if not ms:
            del self.members[g]

    def kill(self, dead: set[str]) -> list:
        """Restrict dead variables; returns [(promoted tuple, its provenance)]."""
        _, removed = self.h.kill(dead)
        lost = set()
        for t in removed:
            g = self.group(t)
            ms = self.members.get(g)
            if ms is not None:
                ms.discard(t)
            for i in range(len(self.ranks)):
                if self.best.get((g, i)) == t:
                    del self.best[(g, i)]
                    del self.best_rank[(g, i)]
                    lost.add((g, i))
        promoted = {}
        for g, i in lost:
            ms = self.members.get(g)
            if ms:
                rank = self.ranks[i]
                nb = min(ms, key=rank)
                self.best[(g, i)], self.best_rank[(g, i)] = nb, rank(nb)
                promoted[nb] = self.h.get(nb)
            else:
                self.members.pop(g, None)
        return list(promoted.items())

    def promote(self, groups, dead) -> list:
        """Lazy mode: the bests of ``groups`` that hold a dead variable are gone; [(next best, pv)]."""
        promoted = {}
        h = self.h.f
        for g in groups:
            lost = []
            for i in range(len(self.ranks)):
                b = self.best.get((g, i))
                if b is not None and not h[b].isdisjoint(dead):
                    del self.best[(g, i)]
                    del self.best_rank[(g, i)]
                    lost.append(i)
            if not lost:
                continue
            ms = self.members.get(g)
            self.h.prov.restricted += len(ms or ())  # entries a deletion visits (stats)
            live = []
            for t in ms or ():
                if h[t].isdisjoint(dead):
                    live.append(t)
                else:
                    del h[t]
            if not live:
                self.members.pop(g, None)
                continue
            if len(live) != len(ms):
                self.members[g] = set(live)
            for i in lost:
                rank = self.ranks[i]
                nb = min(live, key=rank)
                self.best[(g, i)], self.best_rank[(g, i)] = nb, rank(nb)
                promoted[nb] = h[nb]
        return list(promoted.items())

    def sweep(self, dead) -> None:
        """Lazy mode: drop every entry that holds a dead variable (never a best: see promote)."""
        for t in self.h.sweep(dead):
            g = self.group(t)
            ms = self.members.get(g)
            if ms is not None:
                ms.discard(t)
                if not ms:
                    del self.members[g]

    def rebuild(self) -> None:
        """Recompute members/best from ``h`` (after a restore)."""
        self.members.clear()
        self.best.clear()
        self.best_rank.clear()
        for t in self.h.keys():
            self.members[self.group(t)].add(t)
        for g, ms in self.members.items():
            for i, rank in enumerate(self.ranks):
                b = self.best[(g, i)] = min(ms, key=rank)
                self.best_rank[(g, i)] = rank(b)
