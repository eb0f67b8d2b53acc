"""The research views: the recursive views of ``operators.recursive`` over the paper's engine.

Same API as the job's views, plus the paper's parameters: ``nodes`` (simulated partitions, int
or ``"vertex"``), ``ship`` (MinShip ``"lazy"``, ``"eager"`` or ``"plain"``), ``flush_every``
(eager count threshold W) and, for shortest paths, ``aggregates=("cost", "hops")`` (the
multi-aggregate AggSel, with ``fewest_hops()``); ``RegionView``; ``baseline(view, method)``
for DRed and recomputation; ``explain(row, complete=True)`` (every minimal witness, from
scratch). With the default parameters a view runs the job's one-node method; anything else runs
``engine.Engine`` with absorption provenance (``ProvImpl``). The job never imports this package.
"""

from __future__ import annotations

from dataclasses import replace

from bench.recursive_research.engine import Engine
from bench.recursive_research.provenance import CubeProvenance, Provenance, ProvTable
from bench.recursive_research.provenance_reference import reference_provenance
from core.errors import ConfigError
from operators.recursive import views as product
from operators.recursive.fronts import Events
from operators.recursive.onenode import OneNodeImpl
from operators.recursive.spec import HOPS_RANK, REACH, SHORTEST, Spec
from operators.recursive.views import ViewDelta, tup

__all__ = ["ProvImpl", "ReachabilityView", "ShortestPathView", "ViewDelta", "baseline", "tup"]


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


class _ResearchView:
    """The paper's parameters on a job view: the default runs ``OneNodeImpl``, the rest ``ProvImpl``."""

    def _setup(self, nodes, ship, flush_every) -> None:
        self._params = (nodes, ship, flush_every)
        product._View.__init__(self, *self._fresh())

    def _fresh(self):
        front = self._new_front()
        if self._params == (1, "lazy", None) and self.spec in (REACH, SHORTEST):
            return front, OneNodeImpl(self.spec, front)
        return front, ProvImpl(self.spec, front, *self._params)

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
        if isinstance(self._impl, ProvImpl):
            return self._impl.explain(r, complete)
        if complete:
            return _complete(self._impl, r)
        return self._impl.explain(r)


def _complete(impl, r) -> str:
    prov, formulas = reference_provenance(impl.spec, impl.front.labels, impl.front.live_bases(),
                                          impl.front.live_edges())
    f = formulas.get(r)
    return "false" if f is None else prov.render(f)


class ReachabilityView(_ResearchView, product.ReachabilityView):
    """``ReachabilityView`` with ``nodes``, ``ship`` and ``flush_every`` (see the module docstring)."""

    def __init__(self, nodes=1, ship: str = "lazy", flush_every=None) -> None:
        self._setup(nodes, ship, flush_every)


class ShortestPathView(_ResearchView, product.ShortestPathView):
    """``ShortestPathView`` with the paper's parameters and ``aggregates=("cost", "hops")``."""

    def __init__(self, nodes=1, ship: str = "lazy", flush_every=None, aggregates=("cost",)) -> None:
        aggregates = tuple(aggregates)
        if aggregates not in (("cost",), ("cost", "hops")):
            raise ConfigError(f"ShortestPathView: aggregates must be ('cost',) or ('cost', 'hops'), "
                              f"got {aggregates!r}")
        self._aggregates = aggregates
        self.spec = SHORTEST if aggregates == ("cost",) else replace(SHORTEST, extra_ranks=(HOPS_RANK,))
        self._setup(nodes, ship, flush_every)

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
    from bench.recursive_research.baselines import SetImpl  # baselines imports this module's engine

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
