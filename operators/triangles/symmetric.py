"""IVM^ε for undirected graphs: a symmetric edge relation, refined view, one step per edge.

Incremental rule: an undirected edge {u, v} is the two single-tuple updates δR(u, v) and
δR(v, u) of the self-join form (Appendix B).  R is symmetric without self-loops, so both
orientations see the same s = Σ_w R(v, w)·R(w, u) = |N(u) ∩ N(v)| and δQ = 6·m·s.  Since the
partition is on the vertex, it is at once the partition on the first and on the second
attribute, and the view is the refined-partition one of Appendix D (Theorem 16; digest
§8.2 and §11), heavy on both exported variables and light on the summed one:

    V(a, c) = Σ_b R_hl(a, b) · R_lh(b, c)   (a ≠ c heavy, b light)

s is split by the status of u, v and w, each part within the paper's bounds:

    u or v light:  |N(u) ∩ N(v)|, iterating the light row (< 3/2·N^ε; the column of a
                   light vertex is its row, which is what makes V(β, α) for a light α
                   unnecessary here)
    both heavy:    |H(u) ∩ N(v)| (at most 2N^(1−ε) heavy vertices) + V(u, v) (one lookup)

View maintenance: only an edge between a heavy a and a light b changes V, by ±1 on
V(a, c) and V(c, a) for each heavy neighbour c ≠ a of b: O(N^(1−ε)).  So an update costs
O(N^max(ε, 1−ε)) before rebalancing, as in Theorem 3.  Rebalancing is checked once per
edge, after both orientations are written: N doubles (halves) while |D| is out of
[⌊N/4⌋, N), else each endpoint whose degree left [½N^ε, 3/2·N^ε) gets a minor move, which
patches V over the pairs of x's heavy neighbours and the heavy neighbours of x's light
neighbours: O(N) at ε = ½, amortised over the Ω(N^ε) updates between two moves.

State kept: ``rows[0][x] = {y: 1}`` (the adjacency), ``heavy[0]``, ``rev_h[0][y] = {x: 1}``
for heavy x (H(y), the heavy neighbours of y; there is no light reverse index: the light
column of y is its row minus H(y)), ``views[0][a][c]`` = V(a, c) stored both ways
(V is symmetric), O(min(|D|, |heavy|²)) entries: linear space.  Deletions: m = −1 through
the same path; entries reaching 0 are dropped.  Multiplicities are always 1 (the
frontend keeps the reference counts).
"""

from __future__ import annotations

from collections import _count_elements  # C helper behind Counter.update(iterable)
from itertools import compress, repeat
from operator import eq, sub

from operators.triangles.engine import IvmEpsState


def _row_decr(view: dict, a, cs) -> None:
    """V(a, c) −= 1 for every c in cs (all present), dropping zeros and an empty row."""
    d = view[a]
    cs = list(cs)
    old = list(map(d.__getitem__, cs))
    d.update(zip(cs, map(sub, old, repeat(1))))
    for c in compress(cs, map(eq, old, repeat(1))):
        del d[c]
    if not d:
        del view[a]


def _row_incr(view: dict, a, cs) -> None:
    """V(a, c) += 1 for every c in cs (non-empty)."""
    d = view.get(a)
    if d is None:
        d = view[a] = {}
    _count_elements(d, cs)


class SymmetricState(IvmEpsState):
    """IVM^ε state of an undirected graph (``nrel`` = 1, unit multiplicities)."""

    symmetric = True

    def __init__(self, epsilon: float, witnesses: bool = False):
        super().__init__(epsilon, 1, unit=True)
        # witnesses=True keeps V(a, c) as the set {b: 1} of its light middles instead of the
        # number (V(a, c) = its length): the same patches, O(|D|^1.5) space in the worst
        # case (Theorem 21's bound), and constant-delay listing of a heavy–heavy edge
        self.witnesses = witnesses

    def update_edge(self, u: int, v: int, m: int) -> None:
        """Insert (m = 1) or delete (m = −1) the undirected edge {u, v}, u ≠ v.

        The caller guarantees the edge is absent before an insert and present before a
        delete.  O(N^max(ε, 1−ε)) before rebalancing.
        """
        rows = self.rows[0]
        heavy = self.heavy[0]
        hn = self.rev_h[0]
        view = self.views[0]
        ru = rows.get(u)
        if ru is None:
            ru = rows[u] = {}
            if self.epsilon == 0.0:  # ε = 0: every value is heavy
                heavy.add(u)
        rv = rows.get(v)
        if rv is None:
            rv = rows[v] = {}
            if self.epsilon == 0.0:
                heavy.add(v)
        uh = u in heavy
        vh = v in heavy
        if m < 0:  # work on the graph without the edge: remove it first
            del ru[v], rv[u]
            if uh:
                hv = hn[v]
                del hv[u]
                if not hv:
                    del hn[v]
            if vh:
                hu = hn[u]
                del hu[v]
                if not hu:
                    del hn[u]
        # s = |N(u) ∩ N(v)| (the edge itself does not change it)
        if uh and vh:
            vu = view.get(u)
            s = vu.get(v, 0) if vu else 0  # light common neighbours: V(u, v)
            if self.witnesses and s:
                s = len(s)
            hu = hn.get(u)
            if hu:  # heavy common neighbours: scan at most the heavy vertices
                s += len(hu.keys() & rv.keys())
        else:  # the light row is the shorter side of the C-level intersection
            s = len(ru.keys() & rv.keys())
        self.q += 6 * m * s
        if uh != vh:  # heavy a, light b: V(a, c) and V(c, a) for heavy c ~ b, c ≠ a
            a, b, hb = (u, v, hn.get(v)) if uh else (v, u, hn.get(u))
            if hb and self.witnesses:
                for c in hb:
                    (_w_add if m > 0 else _w_del)(view, a, c, b)
            elif hb:
                if m > 0:
                    _row_incr(view, a, hb)
                    for c in hb:
                        d = view.get(c)
                        if d is None:
                            view[c] = {a: 1}
                        else:
                            d[a] = d.get(a, 0) + 1
                else:
                    _row_decr(view, a, hb)
                    for c in hb:
                        d = view[c]
                        k = d[a] - 1
                        if k:
                            d[a] = k
                        else:
                            del d[a]
                            if not d:
                                del view[c]
        if m > 0:
            ru[v] = 1
            rv[u] = 1
            if uh:
                d = hn.get(v)
                if d is None:
                    hn[v] = {u: 1}
                else:
                    d[u] = 1
            if vh:
                d = hn.get(u)
                if d is None:
                    hn[u] = {v: 1}
                else:
                    d[v] = 1
            self.size += 2
        else:
            self.size -= 2
            if not ru:
                del rows[u]
                heavy.discard(u)
            if not rv:
                del rows[v]
                heavy.discard(v)
        # OnUpdate (Figure 4), once for the two tuples
        size = self.size
        if size >= self.n:
            n = self.n
            while size >= n:
                n *= 2
            self.set_n(n)
            self.major_rebalance()
            return
        if size < self.n // 4:
            n = self.n
            while size < n // 4:
                n = n // 2 - 1
            self.set_n(n)
            self.major_rebalance()
            return
        if uh:
            if len(ru) < self.h_down and ru:
                self.minor_rebalance(0, u, to_heavy=False)
        elif len(ru) >= self.h_up:
            self.minor_rebalance(0, u, to_heavy=True)
        if vh:
            if len(rv) < self.h_down and rv:
                self.minor_rebalance(0, v, to_heavy=False)
        elif len(rv) >= self.h_up:
            self.minor_rebalance(0, v, to_heavy=True)

    # ---- rebalancing, symmetric form ------------------------------------------------------
    def _move(self, i: int, x: int, to_heavy: bool) -> None:
        """Move vertex x between the parts and patch V."""
        rows, heavy, hn, view = self.rows[0], self.heavy[0], self.rev_h[0], self.views[0]
        row = rows[x]
        hx = hn.get(x)
        if self.witnesses:
            self._move_witnesses(x, row, hx, to_heavy)
            return
        if to_heavy:
            if hx and len(hx) > 1:  # x stops being a light middle: V(a, c) −= 1, a ≠ c ∈ H(x)
                for a in hx:
                    _row_decr(view, a, [c for c in hx if c != a])
            for y in row:
                d = hn.get(y)
                if d is None:
                    hn[y] = {x: 1}
                else:
                    d[x] = 1
            heavy.add(x)
            # x becomes a heavy end: V(x, c) += 1, V(c, x) += 1 for light b ~ x, heavy c ~ b
            acc: dict = {}
            for b in row:
                if b not in heavy:
                    _count_elements(acc, hn[b])  # contains x itself, dropped below
            acc.pop(x, None)
            if acc:
                view[x] = acc
                for c, k in acc.items():
                    d = view.get(c)
                    if d is None:
                        view[c] = {x: k}
                    else:
                        d[x] = k
        else:
            self._drop_heavy(x, row)
            if hx and len(hx) > 1:  # x becomes a light middle: V(a, c) += 1, a ≠ c ∈ H(x)
                for a in hx:
                    _row_incr(view, a, [c for c in hx if c != a])

    def _drop_heavy(self, x, row: dict) -> None:
        """x stops being heavy: its view row and column go, and so do its reverse-index entries."""
        heavy, hn, view = self.heavy[0], self.rev_h[0], self.views[0]
        for c in view.pop(x, ()):
            d = view[c]
            del d[x]
            if not d:
                del view[c]
        for y in row:
            d = hn[y]
            del d[x]
            if not d:
                del hn[y]
        heavy.discard(x)

    def _move_witnesses(self, x, row: dict, hx, to_heavy: bool) -> None:
        """``_move`` with V kept as witness sets (same steps, one middle at a time)."""
        heavy, hn, view = self.heavy[0], self.rev_h[0], self.views[0]
        pairs = [(a, c) for a in hx for c in hx if a != c] if hx else []
        if to_heavy:
            for a, c in pairs:  # x stops being a light middle
                _w_del1(view, a, c, x)
            for y in row:
                hn.setdefault(y, {})[x] = 1
            heavy.add(x)
            for b in row:  # x becomes a heavy end
                if b not in heavy:
                    for c in hn[b]:
                        if c != x:
                            _w_add(view, x, c, b)
        else:
            self._drop_heavy(x, row)
            for a, c in pairs:  # x becomes a light middle
                _w_add1(view, a, c, x)

    def reindex(self, i: int) -> None:
        hn: dict = {}
        rows = self.rows[0]
        for x in self.heavy[0]:
            for y in rows[x]:
                d = hn.get(y)
                if d is None:
                    hn[y] = {x: 1}
                else:
                    d[x] = 1
        self.rev_h[0] = hn
        self.rev_l[0] = {}

    def compute_view(self, i: int) -> dict:
        """V(a, c) over all light b: every ordered pair a ≠ c of H(b) (C-level counts)."""
        view: dict = {}
        heavy = self.heavy[0]
        if self.witnesses:
            for b, hb in self.rev_h[0].items():
                if b not in heavy:
                    for a in hb:
                        for c in hb:
                            if a != c:
                                _w_add1(view, a, c, b)
            return view
        for b, hb in self.rev_h[0].items():
            if b not in heavy and len(hb) > 1:
                for a in hb:
                    d = view.get(a)
                    if d is None:
                        d = view[a] = {}
                    _count_elements(d, hb)
        for a, d in list(view.items()):  # the diagonal a = c is not part of V
            del d[a]
            if not d:
                del view[a]
        return view

    # ---- read access ----------------------------------------------------------------------
    def third_vertices(self, u, v):
        """The common neighbours w of an edge {u, v} (present), as C-built collections.

        Preprocessing by the partition: with a light endpoint, one C-level intersection that
        iterates its row (< 3/2·N^ε); with two heavy endpoints, the heavy thirds from the
        heavy index H(u) (≤ 2N^(1−ε)) and the light thirds from the witness view W(u, v)
        in O(1) (``witnesses=True``), or else from the light rows (O(min degree)).
        """
        rows, heavy = self.rows[0], self.heavy[0]
        ru, rv = rows[u], rows[v]
        if u not in heavy or v not in heavy:
            return (ru.keys() & rv.keys(),)
        hu = self.rev_h[0].get(u)
        hthird = hu.keys() & rv.keys() if hu else ()
        if self.witnesses:
            vu = self.views[0].get(u)
            return (hthird, (vu.get(v) or {}) if vu else {})
        vu = self.views[0].get(u)
        if not (vu and vu.get(v)):
            return (hthird,)  # V(u, v) = 0: no light third, nothing to scan
        return (hthird, [w for w in (ru.keys() & rv.keys()) if w not in heavy])

    def column(self, i: int, y) -> dict:
        return dict(self.rows[0].get(y, ()))

    def column_index(self, i: int) -> dict:
        return self.rows[0]



def _w_add(view: dict, a, c, b) -> None:
    """Witness view: b joins W(a, c) and W(c, a)."""
    _w_add1(view, a, c, b)
    _w_add1(view, c, a, b)


def _w_del(view: dict, a, c, b) -> None:
    _w_del1(view, a, c, b)
    _w_del1(view, c, a, b)


def _w_add1(view: dict, a, c, b) -> None:
    d = view.get(a)
    if d is None:
        view[a] = {c: {b: 1}}
        return
    w = d.get(c)
    if w is None:
        d[c] = {b: 1}
    else:
        w[b] = 1


def _w_del1(view: dict, a, c, b) -> None:
    d = view[a]
    w = d[c]
    del w[b]
    if not w:
        del d[c]
        if not d:
            del view[a]
