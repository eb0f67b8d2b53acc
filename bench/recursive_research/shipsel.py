"""Lazy MinShip with aggregate selection for a channel: per group only the best shipped.

Incremental rule: a join output offered to the channel is shipped iff it beats the channel's
best of its group for some aggregate (the same test as the channel AggSel of Alg. 4); anything
else is pruned and forgotten. Shipping happens at the end of the round (``take``): a message
put on the wire in round r is delivered in round r+1 whenever in round r it was emitted, so a
group improved twice in a round ships once. A tuple already shipped and still live is not
shipped again (the receiver's AggSel keeps it).
State kept: ``shipped`` = the tuples shipped on this channel with their cubes (what the
receiver's AggSel holds from this sender), ``best``/``best_rank``/``best_pv`` = (group,
aggregate) -> that tuple, its rank and cube, ``outbox``.
Deletions: only the bests are indexed by variable (``by_var``; a beaten best's keys stay, are
skipped, and the index is rebuilt when half of it is stale); the groups
whose best died are returned to the engine, which re-derives them from the sender's join state
(edges into the group's source ⋈ the Fixpoint's current rows) once the sender's own promotions
are in. (A best is usually the join of a current Fixpoint row, but not always: when the better
row's join is not a simple path the old best stays, so its death is found here, not through the
Fixpoint's removals.) ``shipped`` is restricted lazily: an entry with a dead variable never
equals a live cube (variables are fresh per insertion), and ``sweep`` drops such entries now
and then. That replaces Alg. 4's H (every derivation that ever crossed the channel):
on transit-stub 400 it was ~22k entries, nearly all of them re-visited by deletions only to be
dropped, while the next best is one join probe away at the sender.
"""

from __future__ import annotations

from typing import Callable

from bench.recursive_research.provenance import Provenance, ProvTable


class ShipSel:
    """One channel's lazy MinShip + AggSel state (see the module docstring)."""

    __slots__ = ("shipped", "best", "best_rank", "best_pv", "by_var", "stale", "indexed", "outbox", "group",
                 "ranks", "held", "held_by_var")

    def __init__(self, prov: Provenance, group: Callable, ranks: tuple) -> None:
        self.shipped = ProvTable(prov, indexed=False)
        self.best: dict = {}  # (group, aggregate index) -> tuple
        self.best_rank: dict = {}  # (group, aggregate index) -> rank of that tuple
        self.best_pv: dict = {}  # (group, aggregate index) -> cube of that tuple
        self.by_var: dict = {}  # variable -> {(group, aggregate index)} whose best holds (or held) it
        self.stale = 0  # keys in by_var left by beaten bests
        self.indexed = 0  # keys in by_var
        self.outbox: dict = {}  # tuple -> provenance, shipped at the end of the round if still best
        self.group = group
        self.ranks = tuple(ranks)
        self.held: dict = {}  # best not shipped: tuple -> (cube, cube of the cover that beats it)
        self.held_by_var: dict = {}  # variable -> tuples held by a cover holding it (maybe stale)

    def __len__(self) -> int:
        return len(self.shipped) + len(self.outbox) + len(self.held)

    def offer(self, t, pv, g=None) -> bool:
        """True iff ``t`` became the best of its group for some aggregate (queued for shipping)."""
        g = self.group(t) if g is None else g
        best, best_rank = self.best, self.best_rank
        passed = False
        for i, rank in enumerate(self.ranks):
            k = (g, i)
            b = best.get(k)
            if b is None:
                best[k], best_rank[k], self.best_pv[k] = t, rank(t), pv
                self._index(k, pv)
                passed = True
            elif b is not t and b != t:
                rt = rank(t)
                if rt < best_rank[k]:
                    self.held.pop(b, None)
                    self.stale += len(self.best_pv[k])
                    best[k], best_rank[k], self.best_pv[k] = t, rt, pv
                    self._index(k, pv)
                    passed = True
        if passed and self.shipped.f.get(t) != pv:  # equal cube: the receiver holds it, live
            self.outbox[t] = pv
        return passed

    def is_best(self, t) -> bool:
        g = self.group(t)
        return any(self.best.get((g, i)) == t for i in range(len(self.ranks)))

    def take(self, cover=None, ready=None) -> list:
        """[(tuple, provenance)] to ship now: queued tuples still best for some aggregate.

        ``cover(t)``: the cube of a live path the receiver is known to hold that beats ``t``
        (None if none); such a ``t`` is held, and queued again when that path dies.
        ``ready(t)``: False keeps ``t`` queued (the engine's ship clock: not its turn yet).
        """
        out, later = [], {}
        for t, pv in self.outbox.items():
            if ready is not None and not ready(t):
                later[t] = pv
                continue
            if self.is_best(t):
                c = cover(t) if cover is not None else None
                if c is not None:
                    self.held[t] = (pv, c)
                    for v in c:
                        self.held_by_var.setdefault(v, set()).add(t)
                    continue
                self.shipped.put(t, pv)
                out.append((t, pv))
        self.outbox = later
        return out

    def _index(self, k, pv) -> None:
        if self.stale > 64 and 2 * self.stale > self.indexed:  # amortised: rebuilt when half stale
            self._reindex()
        self.indexed += len(pv)
        by_var = self.by_var
        for v in pv:
            ks = by_var.get(v)
            if ks is None:
                by_var[v] = {k}
            else:
                ks.add(k)

    def _reindex(self) -> None:
        self.by_var, self.stale, self.indexed = {}, 0, 0
        for k, pv in self.best_pv.items():
            self._index(k, pv)

    def kill(self, dead) -> set:
        """Forget the bests that hold a dead variable; returns their groups (to re-derive)."""
        lost = set()
        best_pv = self.best_pv
        for v in dead:
            ks = self.by_var.pop(v, ())
            self.indexed -= len(ks)
            self.shipped.prov.restricted += len(ks)  # entries a deletion visits (stats)
            for k in ks:
                pv = best_pv.get(k)
                if pv is not None and v in pv:  # else a stale key: that best was beaten
                    b = self.best.pop(k)
                    self.shipped.f.pop(b, None)
                    self.held.pop(b, None)
                    del self.best_rank[k], best_pv[k]
                    self.stale += len(pv) - 1  # its other keys
                    lost.add(k[0])
                else:
                    self.stale -= 1
        for v in dead:  # a held best whose cover died is queued again (take looks for another)
            for t in self.held_by_var.pop(v, ()):
                h = self.held.get(t)
                if h is not None and v in h[1]:
                    del self.held[t]
                    if self.is_best(t):
                        self.outbox[t] = h[0]
        return lost

    def sweep(self, dead) -> None:
        """Drop shipped records holding a dead variable; rebuild the held index."""
        self.shipped.sweep(dead)
        self.held_by_var = {}
        for t, (_, c) in self.held.items():
            for v in c:
                self.held_by_var.setdefault(v, set()).add(t)

    def pending(self) -> dict:
        """Bests not shipped (held or queued): tuple -> cube; a snapshot keeps them."""
        out = {t: pv for t, (pv, _) in self.held.items()}
        out.update(self.outbox)
        return out

    def rebuild(self) -> None:
        """Best per group = the best live shipped tuple (true at quiescence); after a restore."""
        self.best.clear()
        self.best_rank.clear()
        self.best_pv.clear()
        self.by_var, self.stale, self.indexed = {}, 0, 0
        for t, pv in self.shipped.items():
            g = self.group(t)
            for i, rank in enumerate(self.ranks):
                rt = rank(t)
                k = (g, i)
                if k not in self.best or rt < self.best_rank[k]:
                    self.best[k], self.best_rank[k], self.best_pv[k] = t, rt, pv
        for k, pv in self.best_pv.items():
            self._index(k, pv)
