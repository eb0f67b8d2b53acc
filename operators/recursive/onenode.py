"""One-process maintenance of reachability and shortest paths: a search tree per source (issue 27).

What the streaming job runs (the views' default, one node). The closure is kept per source:
``rows[s]`` is, for reachability, the set of vertices ``s`` reaches; for shortest paths a dict
from each vertex ``t`` that ``s`` reaches to the row ``(s, t, cost, path)``, and ``srcs[t]`` is
the set of sources that reach ``t`` (reachability finds them by a backward search instead, which
stops at sources that need nothing: half the memory on the road graph).

Incremental rule. A batch is consolidated first: every arc the batch touched (deletes, inserts,
replacements, expirations) is compared, at the end of the batch, as the view has it with the
front's live arc, and only the arcs that changed are applied, deletions before insertions, one
arc at a time (a delete and re-insert of the same arc with the same cost in one batch does no
work; with another cost it is one replacement):

* **insert u→v**: every source ``s`` that reaches ``u`` (and ``u`` itself) gets the candidate
  ``rows[s][u] + u→v``. Reachability: if ``s`` already reaches ``v`` nothing changes (the closure
  is closed, and no source reaching ``s`` needs anything either: the backward search stops
  there), else ``s`` gains ``v`` and what ``v`` reaches. Shortest paths: if the candidate beats
  ``rows[s][v]`` under the view's total order (cost, hops, path), a Dijkstra from ``v`` over the
  out-edges improves ``s``'s tree; it stops where nothing improves.
* **delete u→v**: reachability: if ``u`` still reaches ``v`` without the arc (a search from ``u``
  that stops at ``v``), no row changes; else every source that reaches ``u`` is searched again
  (a search adds the closure of a vertex already searched, or not reaching ``u``, and stops there).
  Shortest paths: the best paths of ``s`` are a tree (a prefix of a best path is the best path
  to its end: costs are > 0 and the order is total), so the arc is in ``s``'s tree iff
  ``rows[s][v]`` ends with it; then only the subtree below ``v`` loses its rows (found by a
  search down from ``v``: ``w`` is a child of ``t`` iff ``rows[s][w]``'s path ends with ``t→w``,
  so the cost is the subtree's out-arcs, not ``s``'s whole tree, and no child index is kept),
  each is re-derived from its in-edges from vertices outside the subtree, and a Dijkstra over
  the subtree settles the rest (Ramalingam–Reps style repair, exact with the total order).

State kept: live arcs by source and by target, ``rows``, ``srcs`` (shortest paths), the arcs
the batch touched. No provenance is stored:
``explain(row)`` derives a witness on demand from the live base tuples (the row's own path for
shortest paths; the fewest-hops path for reachability, by a search from ``src``); every minimal
witness is research code (``bench/recursive_research``, ``explain(row, complete=True)``).
Snapshots hold the front only; the rows are rebuilt from the live arcs on restore (one search per
source, as at load).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque

from operators.recursive.fronts import Events


def _path_lt(a, b) -> bool:
    try:
        return a < b
    except TypeError:  # int meets str at the first difference: the views' key (ints first)
        return _vkey(a) < _vkey(b)


def _vkey(path):
    return tuple((isinstance(v, str), v) for v in path)


def _better(cost, path, cur) -> bool:
    """Is the path (cost, path) before the row ``cur`` = (s, t, cost, path) in the view's order?"""
    if cost != cur[2]:
        return cost < cur[2]
    if len(path) != len(cur[3]):
        return len(path) < len(cur[3])
    return _path_lt(path, cur[3])


class _AllNew:
    """The changes of a load into an empty view: every row new (``items()`` as of a dict, not built)."""

    def __init__(self, impl) -> None:
        self.impl = impl

    def items(self):
        if self.impl.weighted:
            return (((r[0], t), (None, r)) for rs in self.impl.rows.values() for t, r in rs.items())
        return (((s, t), (None, (s, t))) for s, rs in self.impl.rows.items() for t in rs)


class OneNodeImpl:
    """The maintenance method of the default views (``nodes=1``, ``ship="lazy"``)."""

    method = "incremental"
    rebuilds_from_front = True  # a snapshot of an older method restores here from its front

    def __init__(self, spec, front, consolidate: bool = True) -> None:
        self.spec, self.front = spec, front
        self.consolidate = consolidate  # False: every arc change as the front emits it (tests)
        self.touched: set = set()  # (u, v) of the arcs the batch changed, netted at its end
        self.quiet = False  # a load from scratch: no per-row change records
        self.bulk = False  # this batch loaded an empty view from scratch: every row is new
        self.weighted = spec.one_derivation  # shortest paths; reachability otherwise
        self.out: dict = {}  # u -> {v: cost}
        self.inn: dict = {}  # v -> {u: cost}
        self.rows: dict = {}  # s -> {t: tuple}
        self.srcs: dict = {}  # t -> {s}
        self.before: dict = {}
        self.stats_: Counter = Counter()
        self.types: set = set()  # vertex id types seen: int and str together need the views' key
        self.mixed = False

    # -- changes of one batch --------------------------------------------------------------------
    def _row(self, s, t):
        rs = self.rows.get(s)
        if rs is None or t not in rs:
            return None
        return rs[t] if self.weighted else (s, t)

    def _touch(self, s, t) -> None:
        k = (s, t)
        if k not in self.before:
            self.before[k] = self._row(s, t)

    def _gain(self, s, t) -> None:
        """Reachability: s reaches t (new)."""
        k = (s, t)
        if k not in self.before:
            self.before[k] = None
        self.rows.setdefault(s, set()).add(t)

    def _set(self, s, t, r) -> None:
        """Shortest paths: the row of (s, t) is r."""
        row = self.rows.setdefault(s, {})
        old = row.get(t)
        if not self.quiet:
            k = (s, t)
            if k not in self.before:
                self.before[k] = old
        row[t] = r
        if old is None:
            self.srcs.setdefault(t, set()).add(s)

    def _drop(self, s, t) -> None:
        self._touch(s, t)
        row = self.rows[s]
        if self.weighted:
            del row[t]
            ss = self.srcs[t]
            ss.discard(s)
            if not ss:
                del self.srcs[t]
        else:
            row.discard(t)
        if not row:
            del self.rows[s]

    # -- reachability ----------------------------------------------------------------------------
    def _closures(self, sources, stale) -> dict:
        """Vertices reachable (one arc or more) from each of ``sources`` in the current arcs.

        A search from s stops at a vertex whose closure is known: one computed before in this
        call, or the kept row set of a vertex not in ``stale`` (its closure did not change); it
        adds that closure instead (closed under reachability, so nothing beyond it is missed).
        """
        out, rows, done = self.out, self.rows, {}
        for s in sources:
            seen: set = set()
            todo = [s]
            while todo:
                x = todo.pop()
                for y in out.get(x, ()):
                    if y in seen:
                        continue
                    seen.add(y)
                    d = done.get(y)
                    if d is None and y not in stale:
                        d = rows.get(y, ())
                    if d is not None:
                        seen.update(d)
                    else:
                        todo.append(y)
            done[s] = seen
        return done

    def _sources(self, u, done=None) -> list:
        """``u`` and every vertex that reaches it (a backward search); it does not go past a vertex
        ``x`` for which ``done(x)`` holds (nor includes it)."""
        inn, seen, out = self.inn, {u}, [u]
        todo = [u]
        while todo:
            x = todo.pop()
            for y in inn.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    if done is None or not done(y):
                        out.append(y)
                        todo.append(y)
        return out

    def _reach_insert(self, u, v) -> None:
        rows = self.rows
        ru = rows.get(u)
        if ru is not None and v in ru:
            return  # u already reaches v: every source reaching u reaches v and beyond
        gain_v = [v] + [t for t in rows.get(v, ()) if t != v]  # v's closure (v itself first)

        def reaches_v(x):  # and so does every source that reaches x: the search stops there
            rx = rows.get(x)
            return rx is not None and v in rx

        for s in self._sources(u, reaches_v):
            rs = rows.get(s) or ()
            for t in gain_v:
                if t not in rs:
                    self._gain(s, t)
            self.stats_["derivations"] += 1

    def _reach_delete(self, u, v) -> None:
        # Does u still reach v? Search from u, stopping at v.
        out, seen, todo = self.out, {u}, [u]
        while todo:
            x = todo.pop()
            for y in out.get(x, ()):
                if y == v:
                    return  # the closure is unchanged: any walk through u→v goes round
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        self.stats_["searches"] += 1
        sources = self._sources(u)
        for s, now in self._closures(sources, set(sources)).items():
            rs = self.rows.get(s, ())
            if len(now) < len(rs):
                for t in [t for t in rs if t not in now]:
                    self._drop(s, t)

    # -- shortest paths --------------------------------------------------------------------------
    def _entry(self, cost, path, t):
        """Heap entry: (cost, hops, order key, t, path); the key is the path unless int meets str."""
        return (cost, len(path), _vkey(path) if self.mixed else path, t, path)

    def _dijkstra(self, s, heap) -> None:
        """Settle ``s``'s tree from candidate entries: a candidate is kept iff it beats the row."""
        out, rows, n = self.out, self.rows, 0
        mixed = self.mixed
        pop, push = heapq.heappop, heapq.heappush
        rs = rows.get(s)
        tent: dict = {}
        while heap:
            cost, hops, _, t, path = pop(heap)
            cur = rs.get(t) if rs is not None else None
            if cur is not None and not _better(cost, path, cur):
                continue
            self._set(s, t, (s, t, cost, path))
            if rs is None:
                rs = rows[s]
            n += 1
            if t == s:
                continue  # the cycle back to s is a row, not a tree vertex to extend
            hops += 1
            for w, c in out.get(t, {}).items():
                if w in path and w != s:
                    continue  # not simple
                cw = cost + c
                cur = rs.get(w)
                if cur is not None and (cw > cur[2] or (cw == cur[2] and hops >= len(cur[3]))):
                    if cw > cur[2] or hops > len(cur[3]) or not _path_lt(path + (w,), cur[3]):
                        continue
                p = path + (w,)
                e = (cw, hops, _vkey(p) if mixed else p, w, p)
                tw = tent.get(w)
                if tw is not None and tw <= e:
                    continue  # a candidate as good is already queued
                tent[w] = e
                push(heap, e)
        self.stats_["derivations"] += n

    def _sp_insert(self, u, v, c) -> None:
        rows = self.rows
        for s in [u] + [s for s in self.srcs.get(u, ()) if s != u]:
            if s == u:
                cost, path = c, (u, v)
            else:
                r = rows[s][u]
                if v in r[3] and v != s:
                    continue
                cost, path = r[2] + c, r[3] + (v,)
            rs = rows.get(s)
            cur = rs.get(v) if rs is not None else None
            if cur is None or _better(cost, path, cur):
                self._dijkstra(s, [self._entry(cost, path, v)])

    def _sp_delete(self, u, v) -> None:
        rows, inn, out = self.rows, self.inn, self.out
        for s in list(self.srcs.get(v, ())):
            p = rows[s][v][3]
            if p[-2] != u:
                continue  # the arc is not in s's tree
            sub, rs, i = [v], rows[s], 0
            while i < len(sub):  # the subtree below v: a row is in it iff its path's last arc leaves one in it
                t = sub[i]
                i += 1
                if t == s:
                    continue  # the cycle row (s, s) is a leaf
                for w in out.get(t, ()):
                    x = rs.get(w)
                    if x is not None and x[3][-2] == t:
                        sub.append(w)
            self.stats_["overdeleted"] += len(sub)
            before, srcs = self.before, self.srcs
            for t in sub:  # dropped (their sources in srcs are settled after the repair)
                r = rs.pop(t)
                if (s, t) not in before:
                    before[(s, t)] = r
            heap = []
            for t in sub:  # re-derive from the in-edges of vertices still in the tree (or s itself)
                best = None  # (cost, hops, the path up to the in-edge's tail)
                for x, c in inn.get(t, {}).items():
                    if x == s:
                        cand = (c, 1, (s,))
                    else:
                        rx = rs.get(x)
                        if rx is None:  # in the subtree (a row whose path holds t is in it)
                            continue
                        cand = (rx[2] + c, len(rx[3]), rx[3])
                    if best is None or cand[:2] < best[:2] or (cand[:2] == best[:2] and _path_lt(cand[2], best[2])):
                        best = cand
                if best is not None:
                    heap.append(self._entry(best[0], best[2] + (t,), t))
            heapq.heapify(heap)
            self._dijkstra(s, heap)
            for t in sub:
                if t not in rs:  # not derivable any more
                    ss = srcs[t]
                    ss.discard(s)
                    if not ss:
                        del srcs[t]
            if not rs:
                del rows[s]

    # -- from scratch (load, restore) ------------------------------------------------------------
    def _rebuild(self) -> None:
        """Every source's rows from the live arcs, into an empty view (bulk load, restore)."""
        if self.weighted:
            self.quiet = True
            for s in list(self.out):
                self._dijkstra(s, [self._entry(c, (s, v), v) for v, c in self.out[s].items()])
            self.quiet = False
        else:
            self.rows = {s: seen for s, seen in self._closures(list(self.out), set(self.out)).items() if seen}

    # -- impl interface (views.ProvImpl / baselines.SetImpl) -------------------------------------
    def feed(self, ev: Events) -> None:
        if ev.dead:
            self.stats_["deleted_vars"] += len(ev.dead)
        n = len(ev.removed_edges) + len(ev.edges)
        self.stats_["arc_changes"] += n
        if self.consolidate:  # netted at the end of the batch against the front's live arcs
            self.touched.update((e[0], e[1]) for e in ev.removed_edges)
            self.touched.update((e[0], e[1]) for e, _ in ev.edges)
            return
        w = self.weighted
        self._apply([(e[0], e[1], e[2] if w else 1) for e in ev.removed_edges],
                    [(e[0], e[1], e[2] if w else 1) for e, _ in ev.edges])

    def _flush(self) -> None:
        """The batch's net arc changes: each touched arc as the view has it against the front's live one."""
        if not self.touched:
            return
        out, live, w = self.out, self.front.store.live, self.weighted
        dels, adds = [], []
        for u, v in self.touched:
            old = out.get(u, {}).get(v)
            cur = live.get((u, v))
            new = None if cur is None else (cur[1] if w else 1)
            if old == new:
                self.stats_["arcs_netted_out"] += 1
                continue
            if old is not None:
                dels.append((u, v, old))
            if new is not None:
                adds.append((u, v, new))
        self.touched = set()
        self._apply(dels, adds)

    def _apply(self, dels, adds) -> None:
        """Arc deletions, then insertions (or a load from scratch into an empty view)."""
        w = self.weighted
        out, inn = self.out, self.inn
        for u, v, c in dels:
            if out.get(u, {}).get(v) != c:
                continue  # (arc by arc) added and replaced within the batch: it never reached the view
            del out[u][v]
            if not out[u]:
                del out[u]
            del inn[v][u]
            if not inn[v]:
                del inn[v]
            if w:
                self._sp_delete(u, v)
            else:
                self._reach_delete(u, v)
        if w and not self.mixed:
            self.types.update(type(x) for k in adds for x in k[:2])
            self.mixed = len(self.types) > 1
        bulk = not self.rows and not self.before and len(adds) > 1
        for u, v, c in adds:
            out.setdefault(u, {})[v] = c
            inn.setdefault(v, {})[u] = c
            if bulk:
                continue
            if w:
                self._sp_insert(u, v, c)
            else:
                self._reach_insert(u, v)
        if bulk:
            self._rebuild()
            self.bulk = True

    def begin(self) -> None:
        self.before = {}
        self.bulk = False

    def end(self) -> dict:
        self._flush()
        if self.bulk:  # an empty view loaded from scratch: every row is new
            self.bulk, self.before = False, {}
            return _AllNew(self)
        out = {}
        row = self._row
        for (s, t), old in self.before.items():
            new = row(s, t)
            if old != new:
                out[(s, t)] = (old, new)
        self.before = {}
        return out

    def tuples(self):
        if self.weighted:
            return [r for rs in self.rows.values() for r in rs.values()]
        return [(s, t) for s, rs in self.rows.items() for t in rs]

    def current(self, g):
        return self._row(g[0], g[1])

    def witness(self, r):
        """The arcs of one derivation of ``r``: its path (shortest paths) or a fewest-hops path from src."""
        s, t = r[0], r[1]
        if self.weighted:
            p = r[3]
            return list(zip(p, p[1:]))
        prev, todo = {}, deque([s])
        while todo:
            x = todo.popleft()
            for y in self.out.get(x, ()):
                if y == t:
                    arcs = [(x, y)]
                    while x != s:
                        arcs.append((prev[x], x))
                        x = prev[x]
                    return arcs[::-1]
                if y not in prev and y != s:
                    prev[y] = x
                    todo.append(y)
        return None

    def explain(self, r) -> str:
        if self.current(r) is None:
            return "false"
        arcs = self.witness(r)
        if arcs is None:
            return "false"
        labels = self.front.labels
        live = self.front.store.live
        return " ∧ ".join(sorted({labels.get(live[a][0], f"{a[0]}→{a[1]}") for a in arcs}))

    def stats(self) -> dict:
        s = dict(self.stats_)
        s["state_entries"] = (sum(len(r) for r in self.rows.values()) + sum(len(x) for x in self.srcs.values())
                              + 2 * sum(len(x) for x in self.out.values()))
        return s

    def dump(self) -> dict:
        return {"stats": dict(self.stats_)}

    def load(self, d: dict) -> None:
        """Rebuild from the restored front (the rows are a function of the live arcs)."""
        self.stats_.update(d.get("stats", {}))
        for e, _ in self.front.live_edges():
            c = e[2] if self.weighted else 1
            self.out.setdefault(e[0], {})[e[1]] = c
            self.inn.setdefault(e[1], {})[e[0]] = c
        if self.weighted:
            self.types.update(type(x) for x in list(self.out) + list(self.inn))
            self.mixed = len(self.types) > 1
        self.before = {}
        saved = Counter(self.stats_)
        self._rebuild()
        self.stats_, self.before = saved, {}
