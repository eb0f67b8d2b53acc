"""Base relations of the recursive views: parse inputs, give each insertion a variable, expire.

Incremental rule: an insertion of a new base tuple gets a fresh variable (errata 9); inserting a
tuple that is already live with the same value refreshes its expiry (soft-state refresh: the
later expiry wins, ``None`` = never); inserting it with another value (another cost, another
position) is a replacement = DEL then INS. The fronts turn base changes into ``Events`` that
both the provenance engine (variables, conjunctions) and the set-semantics baselines (explicit
removed tuples and edges) consume.
State kept: live base tuples ``key -> [var, value, expires_at]``, an expiry heap, variable
labels, and for the region query the derived seed/edge facts with their variable sets.
Deletions: a DEL of a live tuple (or its expiry: ``expires_at <= now``) kills its variable; the
events name every base-case tuple and edge whose conjunction mentions it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from core.errors import DATA_BAD_EDGE, IvmError


@dataclass
class Events:
    dead: set = field(default_factory=set)
    removed_bases: list = field(default_factory=list)
    removed_edges: list = field(default_factory=list)
    bases: list = field(default_factory=list)  # (r, vars)
    edges: list = field(default_factory=list)  # (edge, vars)


def drop_dead_additions(ev: Events) -> Events:
    """A tuple inserted and replaced within one batch never reaches the view."""
    if ev.dead:
        ev.bases = [(t, vs) for t, vs in ev.bases if ev.dead.isdisjoint(vs)]
        ev.edges = [(t, vs) for t, vs in ev.edges if ev.dead.isdisjoint(vs)]
    return ev


def bad(msg: str) -> IvmError:
    return IvmError(msg, code=DATA_BAD_EDGE)


def _vertex(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise bad(f"{what}: vertex ids must be int or str, got {v!r}")
    return v


def _later(a, b):
    return None if a is None or b is None else max(a, b)


class _Store:
    """key -> [var, value, expires_at] with a lazy expiry heap; shared by both fronts."""

    def __init__(self, owner) -> None:
        self.owner = owner
        self.live: dict = {}
        self.heap: list = []
        self.seq = 0

    def put(self, key, value, exp, label):
        """Returns (new var or None, killed var or None)."""
        cur = self.live.get(key)
        if cur is not None and cur[1] == value:
            cur[2] = _later(cur[2], exp)
            if cur[2] is not None:
                self._push(cur[2], key, cur[0])
            return None, None
        killed = cur[0] if cur is not None else None
        var = self.owner.fresh(label)
        self.live[key] = [var, value, exp]
        if exp is not None:
            self._push(exp, key, var)
        return var, killed

    def _push(self, exp, key, var):
        self.seq += 1
        heapq.heappush(self.heap, (exp, self.seq, key, var))

    def remove(self, key):
        cur = self.live.pop(key, None)
        return None if cur is None else cur[0]

    def expired(self, now):
        out = []
        while self.heap and self.heap[0][0] <= now:
            exp, _, key, var = heapq.heappop(self.heap)
            cur = self.live.get(key)
            if cur is not None and cur[0] == var and cur[2] is not None and cur[2] <= now:
                del self.live[key]
                out.append((key, var, cur[1]))
        return out


class _Front:
    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.next_var = 0

    def fresh(self, label: str) -> str:
        name = f"p{self.next_var}"
        self.next_var += 1
        self.labels[name] = label
        return name


class LinkFront(_Front):
    """``link(src, dst[, cost])``; items ``(src, dst)``, ``(src, dst, cost)``, ``(src, dst, cost, expires_at)``."""

    def __init__(self, to_base, to_edge, weighted: bool) -> None:
        super().__init__()
        self.store = _Store(self)
        self.to_base, self.to_edge, self.weighted = to_base, to_edge, weighted

    def parse(self, item):
        if not isinstance(item, (tuple, list)) or not 2 <= len(item) <= 4:
            raise bad(f"edge must be (src, dst[, cost[, expires_at]]), got {item!r}")
        src, dst = _vertex(item[0], "edge"), _vertex(item[1], "edge")
        cost = item[2] if len(item) > 2 and item[2] is not None else 1
        exp = item[3] if len(item) > 3 else None
        if self.weighted:
            if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost > 0 or math.isinf(cost):
                raise bad(f"edge {src!r}->{dst!r}: cost must be a finite number > 0, got {cost!r}")
        else:
            cost = None
        if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float))):
            raise bad(f"edge {src!r}->{dst!r}: expires_at must be a number or None, got {exp!r}")
        return src, dst, cost, exp

    def check(self, inserts, deletes) -> None:
        for item in inserts:
            self.parse(item)
        for item in deletes:
            if not isinstance(item, (tuple, list)) or len(item) < 2:
                raise bad(f"delete must name (src, dst), got {item!r}")
            _vertex(item[0], "edge"), _vertex(item[1], "edge")

    def _kill(self, ev: Events, key, var, cost) -> None:
        ev.dead.add(var)
        self.labels.pop(var, None)
        ev.removed_bases.append(self.to_base(key[0], key[1], cost))
        ev.removed_edges.append(self.to_edge(key[0], key[1], cost))

    def delete(self, items) -> Events:
        ev = Events()
        for item in items:
            src, dst = item[0], item[1]
            cur = self.store.live.get((src, dst))
            if cur is not None:
                self.store.remove((src, dst))
                self._kill(ev, (src, dst), cur[0], cur[1])
        return ev

    def insert(self, items) -> Events:
        ev = Events()
        for item in items:
            src, dst, cost, exp = self.parse(item)
            old = self.store.live.get((src, dst))
            old_cost = old[1] if old else None
            var, killed = self.store.put((src, dst), cost, exp, f"{src}→{dst}")
            if killed is not None:
                self._kill(ev, (src, dst), killed, old_cost)
            if var is not None:
                ev.bases.append((self.to_base(src, dst, cost), (var,)))
                ev.edges.append((self.to_edge(src, dst, cost), (var,)))
        return drop_dead_additions(ev)

    def expire(self, now) -> Events:
        ev = Events()
        for key, var, cost in self.store.expired(now):
            self._kill(ev, key, var, cost)
        return ev

    # -- snapshot --------------------------------------------------------------------------------
    def dump(self) -> dict:
        return {"next_var": self.next_var, "labels": self.labels,
                "live": [[k[0], k[1], v[0], v[1], v[2]] for k, v in self.store.live.items()]}

    def load(self, d: dict) -> None:
        self.next_var = d["next_var"]
        self.labels = dict(d["labels"])
        for src, dst, var, cost, exp in d["live"]:
            self.store.live[(src, dst)] = [var, cost, exp]
            if exp is not None:
                self.store._push(exp, (src, dst), var)

    def live_bases(self):
        return [(self.to_base(k[0], k[1], v[1]), (v[0],)) for k, v in self.store.live.items()]

    def live_edges(self):
        return [(self.to_edge(k[0], k[1], v[1]), (v[0],)) for k, v in self.store.live.items()]
