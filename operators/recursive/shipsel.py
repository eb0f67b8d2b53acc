"""Lazy MinShip with aggregate selection for a channel: per group only the best shipped.

Incremental rule: a join output offered to the channel is shipped iff it beats the channel's
best of its group for some aggregate (the same test as the channel AggSel of Alg. 4); anything
else is pruned and forgotten. Shipping happens at the end of the round (``take``): a message
put on the wire in round r is delivered in round r+1 whenever in round r it was emitted, so a
group improved twice in a round ships once. A tuple already shipped and still live is not
shipped again (the receiver's AggSel keeps it).
State kept: ``shipped`` = the live tuples shipped on this channel (what the receiver's AggSel
holds from this sender), ``best``/``best_rank`` = (group, aggregate) -> that tuple, ``outbox``.
Deletions: dead variables are restricted in ``shipped``; a group whose best died is returned to
the engine, which re-derives the group's candidates from the sender's join state (edges into the
group's source ⋈ the Fixpoint's current rows) once the sender's own promotions are in, and
offers them again. That replaces Alg. 4's H (every derivation that ever crossed the channel):
on transit-stub 400 it was ~22k entries, nearly all of them re-visited by deletions only to be
dropped, while the next best is one join probe away at the sender.
"""

from __future__ import annotations

from typing import Callable

from operators.recursive.provenance import Provenance, ProvTable


class ShipSel:
    """One channel's lazy MinShip + AggSel state (see the module docstring)."""

    __slots__ = ("shipped", "best", "best_rank", "outbox", "group", "ranks")

    def __init__(self, prov: Provenance, group: Callable, ranks: tuple) -> None:
        self.shipped = ProvTable(prov)
        self.best: dict = {}  # (group, aggregate index) -> tuple
        self.best_rank: dict = {}  # (group, aggregate index) -> rank of that tuple
        self.outbox: dict = {}  # tuple -> provenance, shipped at the end of the round if still best
        self.group = group
        self.ranks = tuple(ranks)

    def __len__(self) -> int:
        return len(self.shipped) + len(self.outbox)

    def offer(self, t, pv, g=None) -> bool:
        """True iff ``t`` became the best of its group for some aggregate (queued for shipping)."""
        g = self.group(t) if g is None else g
        best, best_rank = self.best, self.best_rank
        passed = False
        for i, rank in enumerate(self.ranks):
            k = (g, i)
            b = best.get(k)
            if b is None:
                best[k], best_rank[k] = t, rank(t)
                passed = True
            elif b is not t and b != t:
                rt = rank(t)
                if rt < best_rank[k]:
                    best[k], best_rank[k] = t, rt
                    passed = True
        if passed and t not in self.shipped:
            self.outbox[t] = pv
        return passed

    def take(self) -> list:
        """[(tuple, provenance)] to ship now: queued tuples still best for some aggregate."""
        out = []
        best = self.best
        for t, pv in self.outbox.items():
            g = self.group(t)
            if any(best.get((g, i)) == t for i in range(len(self.ranks))):
                self.shipped.put(t, pv)
                out.append((t, pv))
        self.outbox = {}
        return out

    def kill(self, dead: set) -> set:
        """Restrict dead variables; returns the groups that lost a best (to re-derive)."""
        _, removed = self.shipped.kill(dead)
        if self.outbox:  # queued, not shipped yet (kill runs between rounds: normally empty)
            prov = self.shipped.prov
            gone = [t for t, pv in self.outbox.items() if prov.kill(pv, dead) == prov.false]
            for t in gone:
                del self.outbox[t]
            removed = list(removed) + gone
        lost = set()
        best, best_rank = self.best, self.best_rank
        for t in removed:
            g = self.group(t)
            for i in range(len(self.ranks)):
                if best.get((g, i)) == t:
                    del best[(g, i)]
                    del best_rank[(g, i)]
                    lost.add(g)
        return lost

    def rebuild(self) -> None:
        """Best per group = the best live shipped tuple (true at quiescence); after a restore."""
        self.best.clear()
        self.best_rank.clear()
        for t in self.shipped.keys():
            g = self.group(t)
            for i, rank in enumerate(self.ranks):
                rt = rank(t)
                k = (g, i)
                if k not in self.best or rt < self.best_rank[k]:
                    self.best[k], self.best_rank[k] = t, rt
