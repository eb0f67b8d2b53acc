"""The recursive views the job maintains: reachability and shortest paths (``onenode.py``).

Incremental rule: ``apply(inserts, deletes, now)`` runs, in this order, the deletions, the
insertions, then the expirations at ``now`` (``expires_at <= now``), each to quiescence, and
returns the net ``ViewDelta`` of the batch (rows added / removed; a changed shortest path appears
in both, old value in ``removed``, new in ``added``, ready for a MERGE by key).
State kept: the front (live base tuples) and the method's state (``onenode.OneNodeImpl``: a search
tree per source). Snapshots are JSON, tagged ``ivmstream.recursive.v1``; they hold the front, and
the rows are rebuilt from it on restore. Deletions: see ``onenode.py``. The research engine of
the paper (absorption provenance, partitioned, MinShip, AggSel, regions) and its DRed and
recompute baselines live in ``bench/recursive_research`` on this same API.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from core.errors import StateError
from operators.recursive.fronts import LinkFront
from operators.recursive.onenode import OneNodeImpl
from operators.recursive.spec import REACH, SHORTEST, Spec

ENCODING = "ivmstream.recursive.v1"


@dataclass
class ViewDelta:
    """Net change of one batch: sets of rows, or dicts key -> value for shortest paths."""

    added: object = field(default_factory=set)
    removed: object = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.added) or bool(self.removed)


def tup(x):
    """JSON lists back to (nested) tuples."""
    return tuple(tup(v) for v in x) if isinstance(x, list) else x


class _View:
    """Shared API; subclasses fix the recursion (spec), the front and the row shape."""

    spec: Spec
    keyed = False  # rows() is a dict (shortest paths) instead of a set

    def __init__(self, front, impl) -> None:
        self._impl = impl
        self._front = front

    # row shape (overridden by the region view)
    def _row(self, r):
        return (r[0], r[1])

    def _value(self, r):
        return None

    def _lookup(self, row):
        if self.keyed:
            return self._impl.current(tuple(row))
        return tuple(row)

    def apply(self, inserts=(), deletes=(), now=None) -> ViewDelta:
        """Apply one batch and return its net ``ViewDelta``.

        ``inserts``: edges ``(src, dst)``, ``(src, dst, cost)`` or ``(src, dst, cost, expires_at)``
        (``cost`` ignored by reachability, may be ``None``; ``expires_at`` ``None`` = never);
        re-inserting a live edge refreshes its expiry, with another cost it replaces it.
        ``deletes``: ``(src, dst)`` (extra fields ignored); deleting an absent edge is a no-op.
        ``now``: current time; every base tuple with ``expires_at <= now`` expires (= is deleted)
        after the batch's deletions and insertions. Bad input raises ``IvmError`` with code
        ``DATA_BAD_EDGE`` and leaves the view unchanged (the whole batch is checked first).
        """
        impl, front = self._impl, self._front
        inserts, deletes = list(inserts), list(deletes)
        front.check(inserts, deletes)
        impl.begin()
        impl.feed(front.delete(deletes))
        impl.feed(front.insert(inserts))
        if now is not None:
            impl.feed(front.expire(now))
        changes = impl.end()
        if self.keyed:
            delta = ViewDelta({}, {})
            for g, (old, new) in changes.items():
                if old is not None:
                    delta.removed[g] = self._value(old)
                if new is not None:
                    delta.added[g] = self._value(new)
        else:
            delta = ViewDelta(set(), set())
            for g, (old, new) in changes.items():
                if old is None:
                    delta.added.add(self._row(new))
                elif new is None:
                    delta.removed.add(self._row(old))
        self._after(delta)
        return delta

    def _after(self, delta: ViewDelta) -> None:
        pass

    def rows(self):
        if self.keyed:
            best: dict = {}
            rank = self.spec.rank
            for r in self._impl.tuples():
                g = self._row(r)
                if g not in best or rank(r) < rank(best[g]):
                    best[g] = r
            return {g: self._value(r) for g, r in best.items()}
        return {self._row(r) for r in self._impl.tuples()}

    def explain(self, row) -> str:
        """A witness of the row: live base tuples whose links derive it (``false`` if absent);
        for shortest paths the row's own path, for reachability the fewest-hops path."""
        r = self._lookup(row)
        if r is None:
            return "false"
        return self._impl.explain(r)

    def stats(self) -> dict:
        s = self._impl.stats()
        s["method"] = self._impl.method
        s["rows"] = len(self.rows())
        return s

    # -- snapshot ------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        doc = {"encoding": ENCODING, "view": type(self).__name__, "method": self._impl.method,
               "config": self._config(), "front": self._front.dump(), "state": self._impl.dump()}
        return json.dumps(doc, separators=(",", ":")).encode()

    def _config(self) -> dict:
        """Constructor parameters; a snapshot only restores into a view built with the same."""
        return {"params": list(self._params)}

    def restore(self, data: bytes) -> None:
        """Replace this view's state by a snapshot of the same view class and method."""
        try:
            doc = json.loads(data)
        except (ValueError, TypeError) as exc:
            raise StateError(f"{type(self).__name__}.restore: not a snapshot ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("encoding") != ENCODING:
            got = doc.get("encoding") if isinstance(doc, dict) else None
            raise StateError(f"{type(self).__name__}.restore: unknown state encoding {got!r}, "
                             f"expected {ENCODING!r}")
        older = (doc.get("method") == "absorption" and getattr(self._impl, "rebuilds_from_front", False))
        if doc.get("view") != type(self).__name__ or (doc.get("method") != self._impl.method and not older):
            raise StateError(f"{type(self).__name__}.restore: snapshot is of "
                             f"{doc.get('view')}/{doc.get('method')}, not "
                             f"{type(self).__name__}/{self._impl.method}")
        if doc.get("config") != json.loads(json.dumps(self._config())):
            raise StateError(f"{type(self).__name__}.restore: snapshot was taken with "
                             f"{doc.get('config')}, this view has {self._config()}")
        self._front, self._impl = self._fresh()
        self._front.load(doc["front"])
        self._impl.load(doc["state"])


def _reach_front():
    return LinkFront(lambda s, d, c: (s, d), lambda s, d, c: (s, d), weighted=False)


def _sp_front():
    return LinkFront(lambda s, d, c: (s, d, c, (s, d)), lambda s, d, c: (s, d, c), weighted=True)


class _OneNodeView(_View):
    # The constructor parameters of the research engine's views, as snapshots record them:
    # one node, lazy shipping (a snapshot restores into a view built with the same).
    _params = (1, "lazy", None)

    def __init__(self) -> None:
        super().__init__(*self._fresh())

    def _fresh(self):
        front = self._new_front()
        return front, OneNodeImpl(self.spec, front)


class ReachabilityView(_OneNodeView):
    """``reachable(x, y)``: rows() is a set of (src, dst); edges ``(src, dst[, cost[, expires_at]])``."""

    spec = REACH
    _new_front = staticmethod(_reach_front)


class ShortestPathView(_OneNodeView):
    """Cheapest path per (src, dst): rows() is {(src, dst): (cost, path)}, path a vertex tuple.

    Edges ``(src, dst, cost[, expires_at])``, cost > 0. The order is total: cost, then fewer
    hops, then the smaller path.
    """

    keyed = True
    spec = SHORTEST
    _aggregates = ("cost",)
    _new_front = staticmethod(_sp_front)

    def _config(self) -> dict:
        return {"params": list(self._params), "aggregates": list(self._aggregates)}

    def _value(self, r):
        return (r[2], r[3])
