"""Partitioned pipelined semi-naive evaluation of a linear recursive view with absorption provenance.

The view has the shape ``R(o, …) :- S(edge j→o), R(j, …)`` plus base tuples of ``R``
(reachability: ``reachable(x,y) :- link(x,z), reachable(z,y)``; shortest paths: the same with
a path vector and cost; the region query: ``active(y,rid) :- edge(x,y), active(x,rid)``).

Incremental rule (Alg. 1–3): every simulated node runs a Fixpoint (P: tuple -> BDD), the
R side of a symmetric PipelinedHashJoin (shares P: the FixPointReceiver is local), the S side
(edge copies shipped to the node of their join end) and one MinShip per outgoing channel. An
insertion ORs its provenance into P; only a change of P (a derivation not absorbed) probes the
join; join outputs ``pv ∧ p_other`` go through MinShip to the home node of the derived tuple.
MinShip ships the first derivation of a tuple; later ones are buffered (``lazy``: until the
shipped formula dies; ``eager``: flushed every round, the paper's timer) or shipped every time
(``plain`` = no MinShip). Optional AggSel in front of every Fixpoint and in every channel.

State kept per node: ``fix`` (ProvTable), ``r_by_key`` (h_R), ``s`` + ``s_by_j`` (p_S, h_S),
``agg``; per channel (src, dst): ``sent`` (B_sent), ``buf`` (P_ins), ``agg``. Lazy views whose
tuples have one derivation (shortest paths, ``lazy_sel``) keep instead, per channel, ``sel``
(shipsel.py: the best per group, re-derived from ``s_by_o`` ⋈ the Fixpoint when it dies) and
restrict the Fixpoint's AggSel lazily (``_kill_sel``, ``sweep``).

Deletions (digest §6.5): a dead variable is broadcast to every node and restricted to false in
every table at once; entries that become false disappear (no over-deletion, no re-derivation).
A lazy channel whose shipped formula died ships its buffered alternative (INS only, never a DEL:
the receiver already restricted the same variable); an AggSel whose best died promotes the next.
Stats count the dissemination as a broadcast and as messages routed along the shipped paths.
Scheduling: FIFO rounds (all messages of round r are delivered in round r+1), run to quiescence
inside every ``run()``; nodes are simulated in one process.
"""

from __future__ import annotations

import zlib
from collections import Counter, defaultdict
from typing import Hashable, Optional

from core.errors import ConfigError, InvariantError
from bench.recursive_research.aggsel import AggSel
from bench.recursive_research.provenance import Provenance, ProvTable
from bench.recursive_research.shipsel import ShipSel
from operators.recursive.spec import Spec

SHIP_MODES = ("lazy", "eager", "plain")


def _vkey(v):
    return (isinstance(v, str), v)


def partitioner(nodes):
    """``int`` k: stable hash of the vertex mod k; ``"vertex"``: one node per vertex (paper's Fig. 2)."""
    if nodes == "vertex":
        return lambda v: v
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ConfigError(f"recursive view: nodes must be a positive int or 'vertex', got {nodes!r}")
    if nodes == 1:
        return lambda v: 0
    return lambda v: (v % nodes) if isinstance(v, int) else zlib.crc32(str(v).encode()) % nodes


class _Node:
    __slots__ = ("fix", "r_by_key", "s", "s_by_j", "s_by_o", "agg", "fix_group", "base_to", "bases",
                 "base_of_var", "ghosts", "out_links", "in_links")

    def __init__(self, prov: Provenance, spec: Spec, lazy_sel: bool = False, local: bool = False) -> None:
        self.fix = ProvTable(prov)
        self.r_by_key: dict = defaultdict(set)
        self.s = ProvTable(prov)
        self.s_by_j: dict = defaultdict(set)
        self.s_by_o: dict = defaultdict(set)  # out vertex -> edges (re-derivation of a ShipSel group)
        self.agg = (AggSel(prov, spec.group, (spec.rank,) + spec.extra_ranks, lazy=lazy_sel, keep=not local)
                    if spec.group else None)
        self.fix_group: dict = {}  # group -> tuples of the group in the Fixpoint (<= #aggregates)
        self.base_to: dict = {}  # covers: second vertex -> base tuples held here (maybe dead)
        self.bases: dict = {}  # local re-derivation: group -> {live base tuple: provenance}
        self.base_of_var: dict = {}  # local re-derivation: variable -> (group, base tuple)
        self.ghosts: dict = {}  # covers: (x, y) -> (rank, cube) of a path x holds, cut from a dead one
        self.out_links: dict = {}  # two-hop covers: x -> {p: (link(x, p), cube)} for x with edges here
        self.in_links: dict = {}  # two-hop covers: p -> {w: (edge(w, p), cube)} for p with links here


class _Channel:
    __slots__ = ("sent", "buf", "alt", "agg", "sel")

    def __init__(self, prov: Provenance, spec: Spec, lazy_sel: bool) -> None:
        self.sent = ProvTable(prov)
        self.buf = ProvTable(prov)  # eager mode: P_ins, formulas waiting for the next flush
        self.alt: dict = {}  # lazy mode: tuple -> {(edge, r)} join pairs at the sender that derive it
        ranks = (spec.rank,) + spec.extra_ranks
        # Lazy one-derivation AggSel views: the best per group only, no H (shipsel.py).
        self.sel = ShipSel(prov, spec.group, ranks) if lazy_sel else None
        self.agg = AggSel(prov, spec.group, ranks) if spec.group and not lazy_sel else None


class Engine:
    """The distributed plan of Fig. 4 over simulated nodes; see the module docstring."""

    def __init__(self, spec: Spec, prov: Provenance, nodes=1, ship: str = "lazy",
                 flush_every: Optional[int] = None, max_rounds: Optional[int] = None,
                 clock_period: int = 2, clock_unit=None) -> None:
        if ship not in SHIP_MODES:
            raise ConfigError(f"recursive view {spec.name}: ship must be one of {SHIP_MODES}, got {ship!r}")
        self.spec, self.prov, self.ship = spec, prov, ship
        self.nodes_arg = nodes
        self.node_of = partitioner(nodes)
        self.flush_every = flush_every
        self.max_rounds = max_rounds  # guard for specs whose recursion may not terminate
        self.nodes: dict[Hashable, _Node] = {}
        self.channels: dict[tuple, _Channel] = {}
        self.queue: list = []
        self.stats: Counter = Counter()
        self.before: dict = {}
        self.lazy_sel = ship == "lazy" and spec.group is not None and spec.one_derivation
        # Covers (shipsel.py): a single-aggregate lazy view whose tuples can be cut after their link
        self.covers = self.lazy_sel and not spec.extra_ranks and spec.suffix is not None
        # One node: every derivation is local and nothing is shipped, so alternatives buy nothing.
        # A removed row is re-derived from the join state (its base tuples, edges into its source ⋈
        # the current rows), as DRed re-derives; exact here because a best path's suffix is its
        # next vertex's best path (positive costs, total order) and a row goes exactly when its
        # cube holds a dead variable. AggSel keeps the bests only.
        self.local = self.lazy_sel and nodes == 1
        self.covers = self.covers and not self.local
        self._outboxes: dict = {}  # (src, dst) -> channel with ShipSel tuples queued this round
        self._dead_recent: set = set()  # lazy_sel: variables killed since the last sweep
        self._stale = 0  # lazy_sel: rows and channel bests removed since the last sweep
        self._stale_ratio = 4.0  # lazy_sel: dead lazy entries per such removal (learnt at each sweep)
        # Ship clock (covers views, after a deletion): a queued candidate waits for its turn in a
        # cycle of ``clock_period`` rounds, by which end of its link is smaller and, for a period
        # > 2, by cost (``clock_unit``: None = the smallest link cost seen); 0 or None: off.
        self.clock_period = clock_period if self.covers and spec.ship_key is not None else None
        self.clock_unit = clock_unit
        self._min_cost = None  # smallest base cost seen (the clock's unit when clock_unit is None)
        self._clock = None  # rounds since the deletion, while one is being run to quiescence
        self._var_base: dict = {}  # covers: variable -> the base tuple (link) it labels
        # Two-hop covers: a node holding link(x, z) also gets copies of x's other links (shipped,
        # counted), so x→p→r' bounds x's row for any live p-row r' it knows.
        self.two_hop = self.covers and getattr(prov, "backend", None) == "cube"
        self._base_out: dict = {}  # x -> {p: (base link(x, p), cube)} (at x's node)
        self._out_targets: dict = {}  # x -> nodes holding an edge copy out of x
        self._in_targets: dict = {}  # p -> nodes holding a link into p (at p's node)

    # -- helpers -------------------------------------------------------------------------------
    def node(self, n) -> _Node:
        nd = self.nodes.get(n)
        if nd is None:
            nd = self.nodes[n] = _Node(self.prov, self.spec, self.lazy_sel, self.local)
        return nd

    def channel(self, src, dst) -> _Channel:
        ch = self.channels.get((src, dst))
        if ch is None:
            ch = self.channels[(src, dst)] = _Channel(self.prov, self.spec, self.lazy_sel)
        return ch

    def current(self, g):
        """The tuple currently in the view for group ``g`` (the tuple itself without AggSel)."""
        nd = self.nodes.get(self.node_of(g[0]))
        if nd is None:
            return None
        if self.spec.group is None:
            return g if g in nd.fix else None
        ts = nd.fix_group.get(g)
        return min(ts, key=self.spec.rank) if ts else None

    def best_by(self, g, i: int):
        """The Fixpoint's best tuple of group ``g`` for aggregate ``i`` (0 = the view's)."""
        nd = self.nodes.get(self.node_of(g[0]))
        ts = nd.fix_group.get(g) if nd is not None else None
        if not ts:
            return None
        return min(ts, key=((self.spec.rank,) + self.spec.extra_ranks)[i])

    def _touch(self, g) -> None:
        if g not in self.before:
            self.before[g] = self.current(g)

    def _emit(self, src, dst, kind, item, pv) -> None:
        self.queue.append((dst, kind, item, pv, src != dst))
        if src != dst:
            self.stats["tuples_shipped"] += 1
            self.stats["prov_bytes_shipped"] += self.prov.nbytes(pv)
        else:
            self.stats["local_messages"] += 1

    # -- Fixpoint + join R side ------------------------------------------------------------------
    def insert_base(self, r, pv) -> None:
        """Base-case tuple (B^Δ), inserted at its home node without shipping."""
        n = self.node_of(r[0])
        self.index_base(r, pv)
        if self.two_hop:
            for m in self._out_targets.get(r[0], ()):
                self._ship_copy(n, m, "link", r, pv)
        self._fix_insert(n, r, pv)

    def index_base(self, r, pv) -> None:
        """What covers, the ship clock, two-hop covers and one-node re-derivation keep of a base
        tuple (at insertion, and for every live one after a restore)."""
        nd = self.node(self.node_of(r[0]))
        if self.covers:
            nd.base_to.setdefault(r[1], set()).add(r)
            if self.clock_period and self.spec.ship_key is not None:
                c = self.spec.rank(r)[0]
                if self._min_cost is None or c < self._min_cost:
                    self._min_cost = c
        if self.two_hop:
            self._base_out.setdefault(r[0], {})[r[1]] = (r, pv)
            if len(pv) == 1:
                for v in pv:
                    self._var_base[v] = r
        if self.local:
            g = self.spec.gkey(r)
            nd.bases.setdefault(g, {})[r] = pv
            for v in pv:
                nd.base_of_var[v] = (g, r)

    def _fix_insert(self, n, r, pv, promoted: bool = False, probe: bool = True) -> bool:
        """Fixpoint input; True iff P changed (then the join was probed, unless ``probe`` is off)."""
        nd = self.node(n)
        spec = self.spec
        if nd.agg is not None and not promoted:
            beaten = nd.agg.insert(r, pv, self._dead_recent)
            if beaten is None:
                self.stats["pruned"] += 1
                return False
            for old in beaten:
                self._fix_retract(nd, old)
        g = spec.gkey(r)
        self._touch(g)
        new = r not in nd.fix
        if not nd.fix.merge(r, pv):
            self.stats["absorbed"] += 1
            return False
        self.stats["fixpoint_updates"] += 1
        if new:
            nd.r_by_key[r[0]].add(r)
            if spec.group is not None:
                nd.fix_group.setdefault(g, set()).add(r)
        if probe:
            self._probe(n, nd, r, pv)
        return True

    def _probe(self, n, nd: _Node, r, pv) -> None:
        """Join a Fixpoint update with the edge copies at its node (R side of the join)."""
        combine = self.spec.combine
        for e in tuple(nd.s_by_j.get(r[0], ())):
            out = combine(e, r)
            if out is not None:
                self._derive(n, out, pv, nd.s.get(e), (e, r))

    def _fix_retract(self, nd: _Node, old) -> None:
        """AggSel beat ``old``: drop it from the Fixpoint and the join (it stays in AggSel's h)."""
        if nd.fix.pop(old) is None:
            return
        g = self.spec.gkey(old)
        self._touch(g)
        nd.r_by_key[old[0]].discard(old)
        self._drop_group(nd, g, old)

    @staticmethod
    def _drop_group(nd: _Node, g, r) -> None:
        ts = nd.fix_group.get(g)
        if ts is not None:
            ts.discard(r)
            if not ts:
                del nd.fix_group[g]

    # -- join S side -----------------------------------------------------------------------------
    def insert_edge(self, e, pv) -> None:
        """Ship an edge copy from the node of ``e[0]`` to the node of its join end."""
        src, dst = self.node_of(e[0]), self.node_of(self.spec.j(e))
        self._emit(src, dst, "edge", e, pv)
        if self.two_hop:
            x = self.spec.o(e)
            ts = self._out_targets.setdefault(x, set())
            if dst not in ts:  # a new node with links out of x: it gets x's live links
                ts.add(dst)
                dead = self._dead_recent
                for b, pb in self._base_out.get(x, {}).values():
                    if pb.isdisjoint(dead):
                        self._ship_copy(src, dst, "link", b, pb)

    def rebuild_link_copies(self, edges) -> None:
        """Two-hop covers after a restore (bases indexed first): link copies as they were shipped."""
        into: dict = {}
        for e, pe in edges:
            x, p = self.spec.o(e), self.spec.j(e)
            self._out_targets.setdefault(x, set()).add(self.node_of(p))
            self._in_targets.setdefault(p, set()).add(self.node_of(x))
            into.setdefault(p, []).append((e, pe))
        for x, ms in self._out_targets.items():
            for b, pb in self._base_out.get(x, {}).values():
                for m in ms:
                    self._store_copy(m, "link", b, pb)
        for p, ms in self._in_targets.items():
            for e, pe in into.get(p, ()):
                for m in ms:
                    self._store_copy(m, "in_link", e, pe)

    def _ship_copy(self, src, dst, kind, item, pv) -> None:
        """A link copy for two-hop covers (``kind`` "link": one of x's links; "in_link": a link into p)."""
        if src == dst:
            self._store_copy(dst, kind, item, pv)
            return
        self.stats["link_copies"] += 1
        self._emit(src, dst, kind, item, pv)

    def _store_copy(self, n, kind, item, pv) -> None:
        if kind == "link":
            self.node(n).out_links.setdefault(item[0], {})[item[1]] = (item, pv)
        else:
            self.node(n).in_links.setdefault(item[1], {})[item[0]] = (item, pv)

    def _edge_insert(self, n, e, pv) -> None:
        nd = self.node(n)
        if not nd.s.merge(e, pv):
            return
        j = self.spec.j(e)
        nd.s_by_j[j].add(e)
        if self.lazy_sel:
            nd.s_by_o[self.spec.o(e)].add(e)
        if self.two_hop:  # p's links in go to the nodes holding a link into p
            m = self.node_of(self.spec.o(e))
            ts = self._in_targets.setdefault(j, set())
            if m not in ts:
                ts.add(m)
                dead = self._dead_recent
                for f in nd.s_by_j[j]:
                    pf = nd.s.get(f)
                    if f != e and pf is not None and pf.isdisjoint(dead):
                        self._ship_copy(n, m, "in_link", f, pf)
            for m2 in ts:
                self._ship_copy(n, m2, "in_link", e, pv)
        for r in tuple(nd.r_by_key.get(j, ())):
            out = self.spec.combine(e, r)
            if out is not None:
                self._derive(n, out, pv, nd.fix.get(r), (e, r))

    # -- MinShip ---------------------------------------------------------------------------------
    def _derive(self, src, out, a, b, pair) -> None:
        """Join output ``out`` with provenance ``a ∧ b`` (computed only if someone needs it)."""
        self.stats["derivations"] += 1
        dst = self.node_of(out[0])
        if dst == src and self.spec.group is not None:
            if self.local and self.nodes[src].agg.dominated(out):
                # one node keeps no alternatives: what the AggSel would prune is dropped here,
                # before its provenance is built (in-batch bests only improve, so the test holds
                # when the message would have arrived)
                self.stats["pruned"] += 1
                return
            # Nothing crosses the network: the Fixpoint's AggSel prunes and keeps exactly what the
            # channel's would, so a second copy (channel AggSel + MinShip state) only cost time
            # and memory (dense60 shortest on 1 node: every derivation stored twice).
            self._emit(src, dst, "rins", out, a & b)
            return
        ch = self.channel(src, dst)
        if ch.sel is not None:
            if ch.sel.offer(out, a & b):
                self._outboxes[(src, dst)] = ch
            else:
                self.stats["pruned"] += 1
            return
        if ch.agg is None and self.ship == "lazy":
            self._ship_lazy(src, dst, ch, out, None, a, b, pair)
            return
        self._ship(src, dst, ch, out, a & b, pair)

    def _ship(self, src, dst, ch: _Channel, t, pv, pair) -> None:
        if ch.agg is not None and ch.agg.insert(t, pv) is None:
            self.stats["pruned"] += 1
            return
        if self.ship == "plain":
            self._emit(src, dst, "rins", t, pv)
            return
        if self.ship == "lazy":
            self._ship_lazy(src, dst, ch, t, pv, None, None, pair)
            return
        old = ch.sent.get(t)
        if old is None:
            ch.sent.put(t, pv)
            self._emit(src, dst, "rins", t, pv)
        elif (old | pv) == old:
            self.stats["absorbed_at_ship"] += 1
        else:
            ch.buf.merge(t, pv)
            self.stats["buffered"] += 1
            if self.ship == "eager" and self.flush_every and len(ch.buf) >= self.flush_every:
                self._flush(src, dst, ch)

    def _ship_lazy(self, src, dst, ch: _Channel, t, pv, a, b, pair) -> None:
        """Lazy MinShip: ship one witness of the first derivation; remember the join pair, not its formula.

        Buffering the alternatives' formulas (P_ins = OR of every later derivation) is what blew
        up on dense graphs: on a 60-vertex stream P_ins averaged 180 BDD nodes (max 7,219) against
        9 for what was shipped, and one deletion re-shipped and re-merged hundreds of them. The
        alternative is only needed once the shipped formula dies, and then its *current* formula
        is ``p_S[edge] ∧ P[r]`` at this node (already restricted by the same deletion), so a
        reference to the pair is enough.
        """
        ch.alt.setdefault(t, set()).add(pair)
        if t in ch.sent:
            self.stats["buffered"] += 1
            return
        w = self.prov.witness(pv if pv is not None else a & b)
        ch.sent.put(t, w)
        self._emit(src, dst, "rins", t, w)

    def _alternative(self, src, ch: _Channel, t):
        """A witness of t from a join pair still live at ``src`` (None if none); drops dead pairs."""
        pairs = ch.alt.get(t)
        if not pairs:
            return None
        nd = self.nodes[src]
        false = self.prov.false
        for pair in list(pairs):
            e, r = pair
            fe, fr = nd.s.get(e), nd.fix.get(r)
            if fe is None or fr is None:  # re-derived through the join if they come back
                pairs.discard(pair)
                continue
            f = fe & fr
            if f != false:
                return self.prov.witness(f)
        if not pairs:
            del ch.alt[t]
        return None

    def rebuild_alternatives(self) -> None:
        """Lazy mode: every join pair at every node as an alternative (after a restore)."""
        if self.ship != "lazy":
            return
        spec = self.spec
        for n, nd in self.nodes.items():
            for e in nd.s.keys():
                for r in nd.r_by_key.get(spec.j(e), ()):
                    out = spec.combine(e, r)
                    if out is None:
                        continue
                    dst = self.node_of(out[0])
                    if dst == n and spec.group is not None:
                        continue  # local derivations of an AggSel view bypass the channel (_derive)
                    self.channel(n, dst).alt.setdefault(out, set()).add((e, r))

    def _flush(self, src, dst, ch: _Channel) -> None:
        for t, pv in list(ch.buf.items()):
            ch.sent.merge(t, pv)
            self._emit(src, dst, "rins", t, pv)
        ch.buf = ProvTable(self.prov)

    def flush(self) -> None:
        """Release every MinShip buffer (eager batch ship) and run to quiescence."""
        while any(len(ch.buf) for ch in self.channels.values()):
            for (src, dst), ch in list(self.channels.items()):
                if len(ch.buf):
                    self._flush(src, dst, ch)
            self.run()

    # -- deletions -------------------------------------------------------------------------------
    def kill(self, dead: set[str]) -> None:
        """Broadcast dead variables to every node and restrict every table (digest §6.5)."""
        if not dead:
            return
        spec = self.spec
        self.stats["deleted_vars"] += len(dead)
        self.stats["deletion_broadcasts"] += len(dead) * max(len(self.nodes) - 1, 0)
        if self.lazy_sel:
            self._kill_sel(dead)
            return
        self.stats["deletion_messages"] += self._path_messages(dead)
        promos = []
        for n, nd in self.nodes.items():
            _, removed = nd.fix.kill(dead)
            for r in removed:
                g = spec.gkey(r)
                if g not in self.before:  # fix_group still lists every pre-kill tuple of g here
                    self.before[g] = r if spec.group is None else self.current(g)
                nd.r_by_key[r[0]].discard(r)
                if spec.group is not None:
                    self._drop_group(nd, g, r)
            self.stats["removed"] += len(removed)
            _, removed = nd.s.kill(dead)
            for e in removed:
                nd.s_by_j[spec.j(e)].discard(e)
                nd.s_by_o[spec.o(e)].discard(e)
            if nd.agg is not None:
                promos.extend((n, r, pv) for r, pv in nd.agg.kill(dead))
        for (src, dst), ch in self.channels.items():
            cpromos = ch.agg.kill(dead) if ch.agg is not None else []
            _, removed = ch.sent.kill(dead)
            ch.buf.kill(dead)
            for t in removed:  # the shipped derivation died: ship the buffered alternative
                alt = ch.buf.pop(t) if self.ship != "lazy" else self._alternative(src, ch, t)
                if alt is not None:
                    ch.sent.put(t, alt)
                    self.stats["reships"] += 1
                    self._emit(src, dst, "rins", t, alt)
            for t, pv in cpromos:
                self.stats["promotions"] += 1
                if ch.sent.get(t) is None:
                    ch.sent.put(t, pv)
                    self._emit(src, dst, "rins", t, pv)
        for n, r, pv in promos:
            self.stats["promotions"] += 1
            self._fix_insert(n, r, pv, promoted=True)

    def _kill_sel(self, dead: set[str]) -> None:
        """Deletion in a lazy one-derivation AggSel view: only the Fixpoint and edge indexes are visited.

        Removed rows give the groups whose AggSel promotes (alternatives are restricted lazily,
        aggsel.py); channels index their bests only (shipsel.py). The variables are broadcast
        (every node needs them to skip dead alternatives), so ``deletion_messages`` counts the
        broadcast.
        """
        spec = self.spec
        self.stats["deletion_messages"] += len(dead) * max(len(self.nodes) - 1, 0)
        self._dead_recent |= dead
        if self.clock_period:
            self._clock = 0
        if self.two_hop:
            self._make_ghosts(dead)
        promos, lost, regroup = [], {}, {}  # lost: channel -> groups; regroup: node -> groups (one node)
        for n, nd in self.nodes.items():
            _, rows = nd.fix.kill(dead)
            _, edges = nd.s.kill(dead)
            groups = set()
            for r in rows:
                g = spec.gkey(r)
                if g not in self.before:  # fix_group still lists every pre-kill tuple of g here
                    self.before[g] = self.current(g)
                nd.r_by_key[r[0]].discard(r)
                self._drop_group(nd, g, r)
                groups.add(g)
            self.stats["removed"] += len(rows)
            for e in edges:
                nd.s_by_j[spec.j(e)].discard(e)
                nd.s_by_o[spec.o(e)].discard(e)
            promos.extend((n, r, pv) for r, pv in nd.agg.promote(groups, self._dead_recent))
            self._stale += len(rows)
            if self.local:
                for v in dead:
                    gb = nd.base_of_var.pop(v, None)
                    if gb is not None:
                        bs = nd.bases.get(gb[0])
                        if bs is not None and bs.pop(gb[1], None) is not None and not bs:
                            del nd.bases[gb[0]]
                regroup[n] = groups
        for key, ch in (() if self.local else self.channels.items()):
            gs = ch.sel.kill(dead)
            if gs:
                lost[key] = (ch, gs)
                self._stale += len(gs)
            if ch.sel.outbox:  # held bests whose cover died
                self._outboxes[key] = ch
        # A lost channel group is re-derived from the sender's join state, so the sender's own
        # promotions go into its Fixpoint first (else the first promoted candidate to probe would
        # be shipped, then beaten by the re-derivation and shipped again).
        self.stats["promotions"] += len(promos)
        applied = [(n, r, pv) for n, r, pv in promos if self._fix_insert(n, r, pv, promoted=True, probe=False)]
        if self.local:
            for n, gs in regroup.items():
                for g in gs:
                    applied.extend(self._rederive_row(n, g))
            for n, r, pv in applied:
                nd = self.nodes[n]
                if nd.fix.get(r) is not None:  # not beaten by a later candidate of its group
                    self._probe(n, nd, r, pv)
            self._dead_recent, self._stale = set(), 0  # every dead entry was met and dropped
            return
        for (src, dst), (ch, gs) in lost.items():
            for g in gs:
                self._rederive(src, dst, ch, g)
        for n, r, pv in applied:
            self._probe(n, self.nodes[n], r, pv)
        if self._stale * self._stale_ratio >= self._lazy_entries():
            self.sweep()

    def _rederive_row(self, n, g) -> list:
        """One node: candidates of a removed row's group from its base tuples and the join state.

        Returns [(node, row, provenance)] taken into the Fixpoint (probed by the caller once every
        removed group has its candidates, as DRed resumes semi-naive evaluation).
        """
        nd = self.nodes[n]
        spec = self.spec
        out = []
        for r, pv in list(nd.bases.get(g, {}).items()):
            if self._fix_insert(n, r, pv, probe=False):
                out.append((n, r, pv))
        rest = tuple(g[1:])
        for e in tuple(nd.s_by_o.get(g[0], ())):
            fe = nd.s.get(e)
            for r in tuple(nd.fix_group.get((spec.j(e),) + rest, ())):
                c = spec.combine(e, r)
                if c is None or spec.gkey(c) != g:
                    continue
                self.stats["derivations"] += 1
                self.stats["rederivations"] += 1
                if nd.agg.dominated(c):
                    continue
                pv = fe & nd.fix.get(r)
                if self._fix_insert(n, c, pv, probe=False):
                    out.append((n, c, pv))
        return out

    def _make_ghosts(self, dead) -> None:
        """Covers that outlive a link: when link(z, x) dies, z's paths through it lose their first
        link only; each one's suffix from x (its cube minus that link's variable) lives on in x's
        AggSel, so x holds it or better for as long as that cube lives. Kept per (x, y) at z's node,
        the best one only; ``_cover`` uses it like a live ``link(z, x) ⋈ r``. (On transit-stub
        400, a deleted link's tail went on shipping its changed rows to the head, which held
        better paths: ~20 arrivals per deletion.)
        """
        spec = self.spec
        for v in dead:
            b = self._var_base.pop(v, None)
            if b is None:
                continue
            z, x = b[0], b[1]
            nd = self.nodes.get(self.node_of(z))
            if nd is None:
                continue
            h_f, ghosts, members = nd.agg.h.f, nd.ghosts, nd.agg.members
            # a group with a live member has its best in the Fixpoint: z's groups are its rows'
            # (a scan of every group at the node cost ~5 ms a deletion on the road graph)
            for g in {spec.gkey(r) for r in nd.r_by_key.get(z, ())}:
                for h in members.get(g, ()):
                    ph = h_f.get(h)
                    if ph is None or v not in ph:
                        continue
                    suf = spec.suffix(h, b)
                    if suf is None:
                        continue
                    c = self.prov.conj([u for u in ph if u != v])
                    if not c.isdisjoint(dead) or not c.isdisjoint(self._dead_recent):
                        continue
                    k = (x, g[1])
                    rs = spec.rank(suf)
                    old = ghosts.get(k)
                    if old is None or rs < old[0] or not old[1].isdisjoint(self._dead_recent):
                        ghosts[k] = (rs, c)

    def sweep(self) -> None:
        """Lazy_sel: drop the alternatives and shipped records that hold a dead variable.

        A sweep is a pass over both tables. It comes when the dead entries left behind are
        estimated at the number of live ones: the estimate counts the rows and channel bests
        deletions removed, scaled by the dead entries per removal the last sweep found. So a
        sweep's cost per deletion stays about the number of entries a deletion kills (a
        disjointness test each, cheaper than index upkeep), and the tables are at most about
        half dead entries.
        """
        dead, self._dead_recent = self._dead_recent, set()
        if not dead:
            return
        before = self._lazy_entries()
        for nd in self.nodes.values():
            nd.agg.sweep(dead)
        for ch in self.channels.values():
            ch.sel.sweep(dead)
        for nd in self.nodes.values():
            for k, (_, c) in list(nd.ghosts.items()):
                if not c.isdisjoint(dead):
                    del nd.ghosts[k]
            self._sweep_links(nd.out_links, dead)
            self._sweep_links(nd.in_links, dead)
            for x, bs in list(nd.base_to.items()):
                live = {b for b in bs if b in nd.agg.h.f}
                if live:
                    nd.base_to[x] = live
                else:
                    del nd.base_to[x]
        self._sweep_links(self._base_out, dead)
        if self._stale:
            self._stale_ratio = max((before - self._lazy_entries()) / self._stale, 1.0)
        self._stale = 0
        self.stats["sweeps"] += 1

    @staticmethod
    def _sweep_links(table: dict, dead) -> None:
        for x, links in list(table.items()):
            for p, (_, c) in list(links.items()):
                if not c.isdisjoint(dead):
                    del links[p]
            if not links:
                del table[x]

    def _lazy_entries(self) -> int:
        return (sum(len(nd.agg.h) for nd in self.nodes.values())
                + sum(len(ch.sel.shipped) for ch in self.channels.values()))

    def _rederive(self, src, dst, ch: _Channel, g) -> None:
        """Offer a ShipSel group's candidates at the sender again: edges into g's source ⋈ Fixpoint rows."""
        nd = self.nodes.get(src)
        if nd is None:
            return
        spec = self.spec
        rest = tuple(g[1:])
        for e in tuple(nd.s_by_o.get(g[0], ())):
            fe = nd.s.get(e)
            for r in nd.fix_group.get((spec.j(e),) + rest, ()):
                out = spec.combine(e, r)
                if out is None or spec.gkey(out) != g:
                    continue
                self.stats["derivations"] += 1
                self.stats["rederivations"] += 1
                if ch.sel.offer(out, fe & nd.fix.get(r), g):
                    self._outboxes[(src, dst)] = ch

    def _ship_outboxes(self) -> None:
        """End of a round: ship what ShipSel channels queued in it (still the best of its group)."""
        if not self._outboxes:
            return
        boxes, self._outboxes = self._outboxes, {}
        ready = None if self._clock is None else (lambda t: self._due(t) == self._clock)
        for (src, dst), ch in boxes.items():
            cover = (lambda t, n=src: self._cover(n, t)) if self.covers else None
            for t, pv in ch.sel.take(cover, ready):
                self._emit(src, dst, "rins", t, pv)
            if ch.sel.outbox:  # waiting for their turn
                self._outboxes[(src, dst)] = ch

    def _due(self, t) -> int:
        """The first round (since the deletion, >= now) in which queued candidate ``t`` may ship.

        Key = 2 * (cost in units) + (1 if the vertex t was derived at is larger than the one it
        goes to), taken modulo ``clock_period``: a candidate waits at most period - 1 rounds. Two
        neighbours x, z that both changed their rows to y at the same cost each queue a candidate
        for the other, and neither is any use (x→z→r costs a link more than z's own row r). The
        tie bit sends one of them first; it reaches the other's node before that one's turn, where
        it is a cover (``_cover``) for the candidate waiting there. The cost bits order candidates
        whose costs differ by a unit the same way (Dijkstra's order, cut to a cycle: enough for
        neighbours, whose rows differ by at most a link's cost). The receiver's view is the same
        whatever the order: only shipping is delayed. The default period 2 keeps the tie bit only
        (odd rounds for one end, even rounds for the other): with two-hop covers, period 4 shipped
        0-2% fewer tuples on transit-stub and took ~2 more rounds per deletion; no cycle at all
        (Dijkstra's order by cost) took ~60 timer rounds per deletion.
        """
        cost, at, to = self.spec.ship_key(t)
        unit = self.clock_unit or self._min_cost or 1
        key = 2 * int(cost // unit) + (1 if _vkey(at) > _vkey(to) else 0)
        return self._clock + (key - self._clock) % self.clock_period

    def _cover(self, n, t):
        """Cube of a live path the receiver of ``t`` holds and that beats ``t``, known at ``n``; or None.

        Node ``n`` got ``h`` = link(z, x) ⋈ r from x's node, where r was x's row for (x, y) then;
        while ``h`` lives, r lives and is in x's AggSel, so x's row for (x, y) is at least as good.
        (On transit-stub 400, 42% of the ships that changed nothing at the receiver had one.)
        """
        spec = self.spec
        nd = self.nodes[n]
        x, y = tuple(spec.gkey(t))
        h_f, members, dead = nd.agg.h.f, nd.agg.members, self._dead_recent
        rt = spec.rank(t)
        for b in nd.base_to.get(x, ()):
            pb = h_f.get(b)
            if pb is None or not pb.isdisjoint(dead):
                continue
            for h in members.get(spec.gkey(b)[:1] + (y,), ()):
                suf = spec.suffix(h, b)
                if suf is None:
                    continue
                ph = h_f.get(h)
                if ph is not None and ph.isdisjoint(dead) and spec.rank(suf) < rt:
                    self.stats["held_by_cover"] += 1
                    return ph
        gh = nd.ghosts.get((x, y))
        if gh is not None and gh[0] < rt and gh[1].isdisjoint(dead):
            self.stats["held_by_ghost"] += 1
            return gh[1]
        links = nd.out_links.get(x) if self.two_hop and self._clock is not None else None
        if links:
            c = self._two_hop(n, nd, t, links, rt)
            if c is not None and not c.isdisjoint(dead):
                c = None
            if c is not None:
                self.stats["held_by_two_hop"] += 1
                return c
        return None

    def _two_hop(self, n, nd: _Node, t, links, rt):
        """Cube of a live path x→p→r' that beats ``t`` = link(x, z) ⋈ r, known here; or None.

        ``links``: x's links shipped here. r' is r after its first link (p = the vertex after z;
        r' = nothing when p is y), or p's row when p lives here. Once the view has settled, x's
        row is at least as good as any live path from x, so ``t`` is not needed while that path
        lives; and the shortest path is never held by one (no live path beats it).
        """
        spec = self.spec
        x, y, vec = t[0], t[1], t[3]
        z = vec[1]
        dead = self._dead_recent
        if len(vec) > 2:
            p = vec[2]
            lk = links.get(p)
            if lk is not None and lk[1].isdisjoint(dead):
                if p == y:
                    if spec.rank(lk[0]) < rt:
                        return lk[1]
                else:
                    lz = self._link_cost(nd, x, z)
                    pr = None if lz is None else nd.agg.h.f.get((z, y, t[2] - lz, vec[1:]))
                    if pr is not None:
                        for b in nd.base_to.get(p, ()):  # link(z, p): the live one (r's first link)
                            pb = nd.agg.h.f.get(b) if b[0] == z else None
                            if pb is not None and pb <= pr:
                                suf = spec.suffix((z, y, t[2] - lz, vec[1:]), b)
                                out = spec.combine(lk[0], suf) if suf is not None else None
                                if out is not None and spec.rank(out) < rt:
                                    return lk[1] & pr
                                break
        if len(vec) > 2:  # x→w→p→r' for a link(w, p) into r's second vertex p
            p = vec[2]
            ins = nd.in_links.get(p)
            if ins:
                c = self._diamond(nd, t, links, ins, rt)
                if c is not None:
                    return c
        node_of = self.node_of
        for p, (b, pb) in links.items():
            if p == z or node_of(p) != n:
                continue
            if not pb.isdisjoint(dead):
                continue
            if p == y:
                if spec.rank(b) < rt:
                    return pb
                continue
            for rp in nd.fix_group.get((p, y), ()):
                out = spec.combine(b, rp)
                if out is not None and spec.rank(out) < rt:
                    return pb & nd.fix.get(rp)
        return None

    def _diamond(self, nd: _Node, t, links, ins, rt):
        spec = self.spec
        x, y, vec = t[0], t[1], t[3]
        z, p = vec[1], vec[2]
        if p == y:
            suf = None
            pr = self.prov.true
        else:
            lz = self._link_cost(nd, x, z)
            if lz is None:
                return None
            r = (z, y, t[2] - lz, vec[1:])
            pr = nd.agg.h.f.get(r)
            if pr is None:
                return None
            suf = None
            for b in nd.base_to.get(p, ()):
                pb = nd.agg.h.f.get(b) if b[0] == z else None
                if pb is not None and pb <= pr:
                    suf = spec.suffix(r, b)
                    break
            if suf is None:
                return None
        for w, (b, pb) in links.items():
            if w == z or w == p:
                continue
            il = ins.get(w)
            if il is None:
                continue
            e, pe = il
            mid = (w, p, e[2], (w, p)) if suf is None else spec.combine(e, suf)
            out = spec.combine(b, mid) if mid is not None else None
            if out is not None and spec.rank(out) < rt:
                c = pb & pe & pr
                if c.isdisjoint(self._dead_recent):
                    return c
        return None

    def _link_cost(self, nd: _Node, x, z):
        for e in nd.s_by_o.get(x, ()):
            if e[1] == z:
                return e[2]
        return None  # the edge t was derived through is gone (t is no channel best then)

    def _path_messages(self, dead: set[str]) -> int:
        """Messages if DEL(v) only followed the paths formulas with v were shipped on.

        The simulation restricts every node (as a broadcast would); this counts the cheaper
        dissemination: one message per dead variable per channel that shipped a formula with it,
        plus one per remote edge copy. Plain mode keeps no record of what it shipped: broadcast.
        """
        if self.ship == "plain":
            return len(dead) * max(len(self.nodes) - 1, 0)
        n_msgs = 0
        for (src, dst), ch in self.channels.items():
            if src != dst:
                sent = ch.sel.shipped if ch.sel is not None else ch.sent
                n_msgs += sum(1 for v in dead if sent.by_var.get(v))
        for n, nd in self.nodes.items():
            for v in dead:
                if any(self.node_of(e[0]) != n for e in nd.s.by_var.get(v, ())):
                    n_msgs += 1
        return n_msgs

    # -- scheduler -------------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            self._ship_outboxes()
            while self.queue:
                batch, self.queue = self.queue, []
                self.stats["rounds"] += 1
                if self._clock is not None:
                    self._clock += 1
                if self.max_rounds is not None and self.stats["rounds"] > self.max_rounds:
                    raise InvariantError(f"recursive view {self.spec.name}: no fixpoint after "
                                         f"{self.max_rounds} rounds ({self.stats['derivations']} derivations)")
                for dst, kind, item, pv, remote in batch:
                    if kind == "rins":
                        if not self._fix_insert(dst, item, pv) and remote:
                            # the receiver had it or better (AggSel: from another sender): the
                            # measure of what senders ship without knowing the receiver's state
                            self.stats["arrivals_unused"] += 1
                    elif kind == "link" or kind == "in_link":
                        self._store_copy(dst, kind, item, pv)
                    else:
                        self._edge_insert(dst, item, pv)
                self._ship_outboxes()
                if self.ship == "eager" and not self.flush_every:
                    for (src, d), ch in list(self.channels.items()):
                        if len(ch.buf):
                            self._flush(src, d, ch)
            if self.ship == "eager" and any(len(ch.buf) for ch in self.channels.values()):
                for (src, d), ch in list(self.channels.items()):
                    if len(ch.buf):
                        self._flush(src, d, ch)
                continue
            if self._clock is not None and self._outboxes:
                # nothing in flight: candidates wait for their turn (timer rounds, no delivery)
                nxt = min(self._due(t) for ch in self._outboxes.values() for t in ch.sel.outbox)
                self.stats["idle_rounds"] += nxt - self._clock
                self._clock = nxt
                continue
            break
        self._clock = None
        self.prov.maybe_gc()

    def begin(self) -> None:
        self.before = {}

    def end(self) -> dict:
        """{group: (row before the batch, row now)} for every group whose row changed."""
        out = {}
        for g, old in self.before.items():
            new = self.current(g)
            if old != new:
                out[g] = (old, new)
        self.before = {}
        return out

    # -- introspection ---------------------------------------------------------------------------
    def view_tuples(self):
        for nd in self.nodes.values():
            yield from nd.fix.keys()

    def formula(self, r):
        nd = self.nodes.get(self.node_of(r[0]))
        return None if nd is None else nd.fix.get(r)

    def state_tuples(self) -> int:
        n = sum(len(nd.fix) + len(nd.s) + (len(nd.agg.h) if nd.agg else 0) for nd in self.nodes.values())
        n += sum(len(c.sent) + len(c.buf) + (len(c.agg.h) if c.agg else 0) + (len(c.sel) if c.sel else 0)
                 for c in self.channels.values())
        return n
