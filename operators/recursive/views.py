"""Public recursive views (reachable, shortest paths, regions) over pluggable maintenance methods.

Incremental rule: ``apply(inserts, deletes, now)`` runs, in this order, the deletions, the
insertions, then the expirations at ``now`` (``expires_at <= now``), each to quiescence, and
returns the net ``ViewDelta`` of the batch (rows added / removed; a changed shortest path appears
in both, old value in ``removed``, new in ``added``, ready for a MERGE by key).
State kept: the front (live base tuples) and the method's state (absorption provenance engine,
DRed or recomputation). Snapshots are JSON, tagged ``ivmstream.recursive.v1``; formulas are
stored as their minimal DNF over live variables. Deletions: see the method modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from core.errors import ConfigError, StateError
from operators.recursive.engine import Engine, Spec
from operators.recursive.fronts import Events, LinkFront
from operators.recursive.provenance import CubeProvenance, Provenance, ProvTable

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


def _vkey(v):
    return (isinstance(v, str), v)


# -- the three recursions ---------------------------------------------------------------------
REACH = Spec(
    name="reachable",
    j=lambda e: e[1],
    o=lambda e: e[0],
    combine=lambda e, r: (e[0], r[1]),
)


def _sp_combine(e, r):
    vec = r[3]
    x = e[0]
    if vec[0] == vec[-1] or x in vec[:-1]:
        return None  # never a cheapest path with positive costs: not simple
    return (x, r[1], e[2] + r[2], (x,) + vec)


class _PathOrder:
    """A path vector compared as ``tuple(_vkey(v) for v in vec)``, built only on a tie (rank is hot)."""

    __slots__ = ("vec",)

    def __init__(self, vec) -> None:
        self.vec = vec

    def _key(self):
        return tuple(_vkey(v) for v in self.vec)

    def __lt__(self, other) -> bool:
        # Vertices of one type compare as their keys do; only an int met by a str at the first
        # difference needs the keys (building them was a sixth of a transit-stub deletion).
        try:
            return self.vec < other.vec
        except TypeError:
            return self._key() < other._key()

    def __eq__(self, other) -> bool:
        return self.vec == other.vec


def HOPS_RANK(r):
    return (len(r[3]), r[2], _PathOrder(r[3]))


SHORTEST = Spec(
    name="shortest_paths",
    j=lambda e: e[1],
    o=lambda e: e[0],
    combine=_sp_combine,
    group=lambda r: (r[0], r[1]),
    rank=lambda r: (r[2], len(r[3]), _PathOrder(r[3])),
    one_derivation=True,  # a path tuple names its links, each with one live variable
    suffix=lambda r, b: ((b[1], r[1], r[2] - b[2], r[3][1:])
                         if len(r[3]) > 2 and r[3][0] == b[0] and r[3][1] == b[1] else None),
    ship_key=lambda r: (r[2], r[3][1] if len(r[3]) > 1 else r[0], r[0]),
)


class ProvImpl:
    """Absorption provenance method: the partitioned engine of ``engine.py``."""

    method = "absorption"

    def __init__(self, spec: Spec, front, nodes=1, ship: str = "lazy", flush_every=None) -> None:
        self.spec, self.front = spec, front
        self.params = {"nodes": nodes, "ship": ship, "flush_every": flush_every}
        # One derivation per tuple: the formula is one conjunction, kept as a Cube (no BDD).
        self.prov = CubeProvenance() if spec.one_derivation else Provenance()
        self.engine = Engine(spec, self.prov, nodes=nodes, ship=ship, flush_every=flush_every)
        self._complete = None  # lazy mode: (Provenance, formulas) from scratch, for explain(complete=True)

    def _pv(self, names):
        for v in names:
            if v not in self.prov.labels:
                self.prov.declare(v, self.front.labels[v])
        return self.prov.conj(names)

    def feed(self, ev: Events) -> None:
        eng = self.engine
        self._complete = None
        if ev.dead:
            r0 = eng.stats["rounds"] + eng.stats["idle_rounds"]
            eng.kill(ev.dead)
            eng.run()
            # the broadcast of the dead variables is a round; then the FIFO rounds to quiescence,
            # the ship clock's timer rounds (nothing in flight, a candidate waits its turn) included
            eng.stats["deletion_rounds"] += 1 + eng.stats["rounds"] + eng.stats["idle_rounds"] - r0
            for v in ev.dead:  # dead variables never come back (fresh ones per insertion)
                self.prov.labels.pop(v, None)
        for r, names in ev.bases:
            eng.insert_base(r, self._pv(names))
        for e, names in ev.edges:
            eng.insert_edge(e, self._pv(names))
        eng.run()

    def begin(self) -> None:
        self.engine.begin()

    def end(self) -> dict:
        return self.engine.end()

    def tuples(self):
        return self.engine.view_tuples()

    def current(self, g):
        return self.engine.current(g)

    def formula(self, r):
        """The absorption provenance the view keeps for ``r`` (None if absent).

        Eager and plain modes keep the complete formula. Lazy mode keeps the derivations that
        were shipped: every term is a witness over live base tuples and the formula is non-false
        exactly when ``r`` is derivable, but alternatives stay at their senders as join pairs.
        """
        return self.engine.formula(r)

    def explain(self, r, complete: bool = False) -> str:
        if complete and self.engine.ship == "lazy":
            return self.explain_complete(r)
        f = self.formula(r)
        return "false" if f is None else self.prov.render(f)

    def explain_complete(self, r) -> str:
        """PosBool provenance of ``r`` over the live base tuples, evaluated from scratch.

        Lazy mode does not hold it (that is the point of lazy MinShip), and releasing every
        alternative into the view would rebuild the formulas whose size blew up on dense graphs,
        so it is computed beside the view, cached until the next batch. Exponential in the
        number of paths: meant for small graphs and tests.
        """
        from operators.recursive.reference import reference_provenance

        if self._complete is None:
            self.engine.stats["explain_recomputations"] += 1
            self._complete = reference_provenance(self.spec, self.front.labels, self.front.live_bases(),
                                                  self.front.live_edges())
        prov, formulas = self._complete
        f = formulas.get(r)
        return "false" if f is None else prov.render(f)

    def stats(self) -> dict:
        s = dict(self.engine.stats)
        s["state_entries"] = self.engine.state_tuples()
        s["bdd_nodes"] = self.prov.node_count()
        s["restricted_entries"] = self.prov.restricted
        return s

    def dump(self) -> dict:
        eng = self.engine
        if eng.lazy_sel:
            eng.sweep()  # lazily restricted tables: dump live entries only
        return {
            "stats": dict(eng.stats),
            "nodes": [[n, nd.fix.dump(), nd.s.dump(), nd.agg.h.dump() if nd.agg else None]
                      for n, nd in eng.nodes.items()],
            "channels": [[s, d, (ch.sel.shipped if ch.sel else ch.sent).dump(),
                          self._pending(ch) if ch.sel else ch.buf.dump(),
                          ch.agg.h.dump() if ch.agg else None]
                         for (s, d), ch in eng.channels.items()],
        }

    def _pending(self, ch) -> list:
        t = ProvTable(self.prov, indexed=False)
        for k, pv in sorted(ch.sel.pending().items(), key=repr):
            t.put(k, pv)
        return t.dump()

    def load(self, d: dict) -> None:
        eng = self.engine
        for v, label in self.front.labels.items():
            self.prov.declare(v, label)
        eng.stats.update(d["stats"])
        for n, fix, s, agg in d["nodes"]:
            nd = eng.node(n)
            nd.fix.load(fix, tup)
            for r in nd.fix.keys():
                nd.r_by_key[r[0]].add(r)
                if self.spec.group is not None:
                    nd.fix_group.setdefault(self.spec.group(r), set()).add(r)
            nd.s.load(s, tup)
            for e in nd.s.keys():
                nd.s_by_j[self.spec.j(e)].add(e)
                if eng.lazy_sel:
                    nd.s_by_o[self.spec.o(e)].add(e)
            if agg is not None:
                nd.agg.h.load(agg, tup)
                nd.agg.rebuild()
                if not nd.agg.keep:
                    nd.agg.drop_non_bests()
        for s, dst, sent, buf, agg in d["channels"]:
            ch = eng.channel(s, dst)
            if ch.sel is not None:  # sent = the live tuples shipped; the best of each group follows
                ch.sel.shipped.load(sent, tup)
                ch.sel.rebuild()
                held = ProvTable(self.prov)
                held.load(buf, tup)  # bests not shipped: offered again, the next round decides
                for t, pv in held.items():
                    if ch.sel.offer(t, pv):
                        eng._outboxes[(s, dst)] = ch
                continue
            ch.sent.load(sent, tup)
            ch.buf.load(buf, tup)
            if agg is not None:
                ch.agg.h.load(agg, tup)
                ch.agg.rebuild()
        eng.rebuild_alternatives()  # lazy alternatives are join pairs: derived from the join state
        for r, names in self.front.live_bases():  # covers, clock and one-node indexes of base tuples
            eng.index_base(r, self._pv(names))
        if eng.two_hop:  # ghosts start empty; link copies as they were shipped (not counted again)
            eng.rebuild_link_copies([(e, self._pv(names)) for e, names in self.front.live_edges()])


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

    def explain(self, row, complete: bool = False) -> str:
        """The row's absorption provenance as a minimal DNF over base tuples; ``false`` if absent.

        Every term is a set of live base tuples that derives the row. In lazy mode (the default)
        these are the derivations the view keeps: at least one while the row is derivable, not
        necessarily all of them (a dense graph has exponentially many). ``complete=True`` gives
        every minimal witness (the PosBool provenance), evaluated from scratch in lazy mode.
        """
        r = self._lookup(row)
        if r is None:
            return "false"
        return self._impl.explain(r, complete)

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


class _ProvView(_View):
    def __init__(self, nodes=1, ship: str = "lazy", flush_every=None) -> None:
        self._params = (nodes, ship, flush_every)
        super().__init__(*self._fresh())

    def _fresh(self):
        front = self._new_front()
        if self._params == (1, "lazy", None) and self.spec in (REACH, SHORTEST):
            # the default (what the job runs): one process, a search tree per source (onenode.py)
            from operators.recursive.onenode import OneNodeImpl

            return front, OneNodeImpl(self.spec, front)
        return front, ProvImpl(self.spec, front, *self._params)


class ReachabilityView(_ProvView):
    """``reachable(x, y)``: rows() is a set of (src, dst); edges ``(src, dst[, cost[, expires_at]])``.

    ``nodes``: simulated partitions (int, or ``"vertex"`` = one per vertex as in the paper);
    ``ship``: MinShip mode ``"lazy"`` (default), ``"eager"`` or ``"plain"`` (no MinShip);
    ``flush_every``: eager count threshold W (default: flush every round).
    """

    spec = REACH
    _new_front = staticmethod(_reach_front)


class ShortestPathView(_ProvView):
    """Cheapest path per (src, dst): rows() is {(src, dst): (cost, path)}, path a vertex tuple.

    Edges ``(src, dst, cost[, expires_at])``, cost > 0. Aggregate selection with the total order
    (cost, hops, path) keeps, per (src, dst), every derived path that is still derivable and
    forwards only the best; ties of cost are broken by fewer hops, then the smaller path.
    ``aggregates=("cost", "hops")`` runs the paper's multi-aggregate AggSel: a path is also kept
    while it has the fewest hops (order (hops, cost, path)), and ``fewest_hops()`` is available.
    Same ``nodes``/``ship``/``flush_every`` parameters as ``ReachabilityView``.
    """

    keyed = True
    _new_front = staticmethod(_sp_front)

    def __init__(self, nodes=1, ship: str = "lazy", flush_every=None, aggregates=("cost",)) -> None:
        aggregates = tuple(aggregates)
        if aggregates not in (("cost",), ("cost", "hops")):
            raise ConfigError(f"ShortestPathView: aggregates must be ('cost',) or ('cost', 'hops'), "
                              f"got {aggregates!r}")
        self._aggregates = aggregates
        self.spec = SHORTEST if aggregates == ("cost",) else replace(SHORTEST, extra_ranks=(HOPS_RANK,))
        super().__init__(nodes, ship, flush_every)

    def _config(self) -> dict:
        return {"params": list(self._params), "aggregates": list(self._aggregates)}

    def _value(self, r):
        return (r[2], r[3])

    def fewest_hops(self) -> dict:
        """minHops / fewestHops: {(src, dst): (hops, path)} (needs aggregates=("cost", "hops"))."""
        if "hops" not in self._aggregates or not isinstance(self._impl, ProvImpl):
            raise ConfigError("fewest_hops() needs ShortestPathView(aggregates=('cost', 'hops'))")
        best: dict = {}
        for r in self._impl.tuples():
            g = (r[0], r[1])
            if g not in best or HOPS_RANK(r) < HOPS_RANK(best[g]):
                best[g] = r
        return {g: (len(r[3]) - 1, r[3]) for g, r in best.items()}


def baseline(view_cls, method: str):
    """The same view maintained by ``method`` ("dred" or "recompute"), without provenance."""
    from operators.recursive.baselines import SetImpl

    class Baseline(view_cls):
        def __init__(self, nodes=1, **params) -> None:
            self._method_nodes = nodes
            super().__init__(nodes=nodes, **params)

        def _fresh(self):
            front = self._new_front()
            return front, SetImpl(self.spec, front, method, self._method_nodes)

    prefix = "DRed" if method == "dred" else "Recompute"
    Baseline.__name__ = Baseline.__qualname__ = prefix + view_cls.__name__
    Baseline.__doc__ = f"{view_cls.__name__} maintained by {method} (set semantics, same API)."
    return Baseline
