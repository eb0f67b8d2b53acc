"""Set-semantics baselines for the recursive views: DRed and full recomputation, same API.

Incremental rule (DRed, Gupta–Mumick–Subrahmanian '93): insertions run semi-naive evaluation
(for shortest paths with the same AggSel total order: a candidate is kept only if it beats
its group's best). Deletions first *over-delete* every tuple with a derivation through a
deleted edge/base tuple or through an over-deleted tuple (using the old state), wait until all
of that is done, then *re-derive* each over-deleted group from what is left in one step and
resume semi-naive evaluation from the re-derived tuples. Recomputation rebuilds the whole view
from the live base tuples after every batch.
State kept: the view (group -> tuple), h_R (key -> tuples), edges by join end and by out end,
base tuples. No provenance: ``explain`` evaluates the provenance from scratch
(``reference.reference_provenance``).
Shipping is counted on the same partitioning as the provenance engine: an edge copy or a join
output crossing from one simulated node to another is one tuple shipped (also in the
over-delete and re-derive phases, where DRed ships deletions and re-derivations).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque

from bench.recursive_research.engine import partitioner
from operators.recursive.spec import Spec
from operators.recursive.fronts import Events


class SetImpl:
    """``method="dred"`` (incremental) or ``"recompute"`` (from scratch every batch)."""

    def __init__(self, spec: Spec, front, method: str = "dred", nodes=1) -> None:
        self.spec, self.front, self.method = spec, front, method
        self.node_of = partitioner(nodes)
        self.stats_: Counter = Counter()
        self.bases: dict = {}  # group -> set of base tuples
        self.s_by_j: dict = defaultdict(set)
        self.s_by_o: dict = defaultdict(set)
        self._clear_view()
        self.before: dict = {}

    def _clear_view(self) -> None:
        self.view: dict = {}
        self.r_by_key: dict = defaultdict(set)

    # -- accounting ------------------------------------------------------------------------------
    def _ship(self, src_vertex, dst_vertex) -> None:
        if self.node_of(src_vertex) != self.node_of(dst_vertex):
            self.stats_["tuples_shipped"] += 1

    def _touch(self, g) -> None:
        if g not in self.before:
            self.before[g] = self.view.get(g)

    # -- semi-naive insertion --------------------------------------------------------------------
    def _offer(self, r) -> bool:
        spec = self.spec
        g = spec.gkey(r)
        cur = self.view.get(g)
        if cur is not None:
            if spec.rank is None or not spec.rank(r) < spec.rank(cur):
                return False
            self.r_by_key[cur[0]].discard(cur)
        self._touch(g)
        self.view[g] = r
        self.r_by_key[r[0]].add(r)
        self.stats_["fixpoint_updates"] += 1
        return True

    def _derive(self, e, r, work) -> None:
        out = self.spec.combine(e, r)
        if out is None:
            return
        self.stats_["derivations"] += 1
        self._ship(self.spec.j(e), out[0])
        if self._offer(out):
            work.append(out)

    def _propagate(self, work: deque) -> None:
        self._propagate_rounds(deque((r, 0) for r in work))

    def _propagate_rounds(self, work: deque) -> int:
        """Semi-naive evaluation from (tuple, round) pairs, FIFO; returns the last round reached."""
        spec = self.spec
        rounds = 0
        while work:
            r, k = work.popleft()
            rounds = max(rounds, k)
            if self.view.get(spec.gkey(r)) != r:
                continue  # beaten meanwhile
            nxt: deque = deque()
            for e in tuple(self.s_by_j.get(r[0], ())):
                self._derive(e, r, nxt)
            work.extend((o, k + 1) for o in nxt)
        return rounds

    def _add_edge(self, e, work) -> None:
        spec = self.spec
        self._ship(e[0], spec.j(e))
        self.s_by_j[spec.j(e)].add(e)
        self.s_by_o[spec.o(e)].add(e)
        for r in tuple(self.r_by_key.get(spec.j(e), ())):
            self._derive(e, r, work)

    def _add_base(self, r, work) -> None:
        self.bases.setdefault(self.spec.gkey(r), set()).add(r)
        if self._offer(r):
            work.append(r)

    # -- DRed deletion ---------------------------------------------------------------------------
    def _dred_delete(self, ev: Events) -> None:
        spec, view = self.spec, self.view
        over: set = set()
        work: deque = deque()

        # Rounds (the distributed convergence measure, as the engine counts FIFO rounds): the
        # deletion reaches the join node in round 1 (the engine's broadcast), a tuple derived from
        # an item delivered in round k is delivered in round k + 1.
        def mark(r, k):
            g = spec.gkey(r)
            if view.get(g) == r and g not in over:
                over.add(g)
                work.append((r, k))

        rounds = 1 if ev.removed_bases or ev.removed_edges else 0
        for b in ev.removed_bases:
            mark(b, 1)
        for e in ev.removed_edges:
            self._ship(e[0], spec.j(e))  # the DEL of the edge copy
            for r in tuple(self.r_by_key.get(spec.j(e), ())):
                out = spec.combine(e, r)
                if out is not None:
                    self._ship(spec.j(e), out[0])
                    mark(out, 2)
        gone = set(ev.removed_edges)
        while work:  # over-delete with the old edges (pairs with a deleted edge were done above)
            d, k = work.popleft()
            rounds = max(rounds, k)
            for e in tuple(self.s_by_j.get(d[0], ())):
                if e in gone:
                    continue
                out = spec.combine(e, d)
                if out is not None:
                    self._ship(spec.j(e), out[0])
                    mark(out, k + 1)
        for b in ev.removed_bases:
            s = self.bases.get(spec.gkey(b))
            if s is not None:
                s.discard(b)
                if not s:
                    del self.bases[spec.gkey(b)]
        for e in ev.removed_edges:
            self.s_by_j[spec.j(e)].discard(e)
            self.s_by_o[spec.o(e)].discard(e)
        for g in over:
            self._touch(g)
            r = view.pop(g)
            self.r_by_key[r[0]].discard(r)
        self.stats_["overdeleted"] += len(over)
        # Re-derive each over-deleted group in one step from what is left, then semi-naive. DRed
        # may start only once every node has over-deleted: one round for that barrier (a lower
        # bound: detecting distributed termination takes more), one for the rows shipped in.
        base = rounds + 1
        work = deque()
        for g in over:
            for b in self.bases.get(g, ()):
                if self._offer(b):
                    work.append((b, base))
            for e in tuple(self.s_by_o.get(g[0], ())):
                src = view.get((spec.j(e),) + tuple(g[1:]))
                if src is None:
                    continue
                out = spec.combine(e, src)
                if out is not None and spec.gkey(out) == g:
                    self.stats_["derivations"] += 1
                    self._ship(spec.j(e), out[0])
                    if self._offer(out):
                        work.append((out, base + 1))
        self.stats_["rederived"] += sum(1 for g in over if g in view)
        self.stats_["deletion_rounds"] += max(rounds, self._propagate_rounds(work))

    # -- impl interface --------------------------------------------------------------------------
    def feed(self, ev: Events) -> None:
        if ev.dead:
            self.stats_["deleted_vars"] += len(ev.dead)
            if self.method == "dred":
                self._dred_delete(ev)
            else:
                for b in ev.removed_bases:
                    self.bases.get(self.spec.gkey(b), set()).discard(b)
                for e in ev.removed_edges:
                    self.s_by_j[self.spec.j(e)].discard(e)
                    self.s_by_o[self.spec.o(e)].discard(e)
                self.dirty = True
        if self.method == "dred":  # one at a time: every (edge, tuple) pair is joined once
            for r, _ in ev.bases:
                work: deque = deque()
                self._add_base(r, work)
                self._propagate(work)
            for e, _ in ev.edges:
                work = deque()
                self._add_edge(e, work)
                self._propagate(work)
        else:
            for r, _ in ev.bases:
                self.bases.setdefault(self.spec.gkey(r), set()).add(r)
            for e, _ in ev.edges:
                self.s_by_j[self.spec.j(e)].add(e)
                self.s_by_o[self.spec.o(e)].add(e)
            if ev.bases or ev.edges:
                self.dirty = True

    def _recompute(self) -> None:
        old = self.view
        self._clear_view()
        self.stats_["recomputations"] += 1
        work: deque = deque()
        for es in self.s_by_j.values():
            for e in es:
                self._ship(e[0], self.spec.j(e))
        for bs in self.bases.values():
            for b in bs:
                if self._offer(b):
                    work.append(b)
        self._propagate(work)
        self.before = {g: old.get(g) for g in set(old) | set(self.view)}

    def begin(self) -> None:
        self.before = {}
        self.dirty = False

    def end(self) -> dict:
        if self.method == "recompute" and self.dirty:
            self._recompute()
        out = {}
        for g, old in self.before.items():
            new = self.view.get(g)
            if old != new:
                out[g] = (old, new)
        self.before = {}
        return out

    def tuples(self):
        return self.view.values()

    def current(self, g):
        return self.view.get(g)

    def explain(self, r, complete: bool = True) -> str:
        from bench.recursive_research.provenance_reference import reference_provenance

        prov, formulas = reference_provenance(self.spec, self.front.labels, self.front.live_bases(),
                                              self.front.live_edges())
        f = formulas.get(r)
        return "false" if f is None else prov.render(f)

    def stats(self) -> dict:
        s = dict(self.stats_)
        s["state_entries"] = len(self.view) + sum(len(v) for v in self.s_by_j.values())
        return s

    def dump(self) -> dict:
        return {"stats": dict(self.stats_)}

    def load(self, d: dict) -> None:
        """Rebuild from the restored front (same view: set semantics has no hidden state)."""
        self.stats_.update(d["stats"])
        ev = Events(bases=[(r, vs) for r, vs in self.front.live_bases()],
                    edges=[(e, vs) for e, vs in self.front.live_edges()])
        saved = Counter(self.stats_)
        self.begin()
        self.feed(ev)
        self.end()
        self.stats_ = saved
