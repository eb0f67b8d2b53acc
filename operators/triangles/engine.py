"""IVM^ε state and single-tuple update procedure for the triangle count (Kara et al., ICDT 2019).

Incremental rule: a single-tuple update δK_i = {(x, y) ↦ m} changes the count by
m · Σ_z K_j(y, z) · K_k(z, x) (j, k the next relations in the cycle R→S→T→R).  That sum is
split by the heavy/light status of y in K_j and of z in K_k into the paper's four skew-aware
delta terms (Figure 3): heavy-heavy and light-* are dot products of two index rows, always
iterating the shorter row (a C-level dict-keys intersection), and heavy-light is one lookup
in the materialised view V_j.  Then exactly one view is patched (V_i when x is heavy in K_i,
V_k when it is light) and the tuple is written.  In the self-join form (one relation, graph
modes) every relation is the same object, there is one view V(a, c) = Σ_b R_h(a,b)·R_l(b,c),
the delta gets the factor 3 and, for a self-loop (x, x), the terms 3m²R(x,x) + m³
(Appendix B, Figure 5 with the typo of line 13 fixed: the factor is R_h(a, α)).

State kept (per relation i, partitioned on its first attribute with threshold θ = N^ε):
``rows[i][x] = {y: m}`` (forward index, whole row; the row is in the heavy part iff
``x in heavy[i]`` so the domain-partition condition holds by construction), ``rev_h[i][y]`` /
``rev_l[i][y] = {x: m}`` (reverse index split by the status of x), ``views[i][z][x]`` =
V_i(x, z) = Σ_y K_i,h(x, y) · K_j,l(y, z) (stored by its second key, so the patch for a
light x touches one small inner dict; the C helper behind ``Counter`` does a +1 patch), the
count ``q`` (Q of the paper), ``size`` = |D| (support size) and the threshold base ``n`` with
⌊N/4⌋ ≤ |D| < N.  The undirected mode uses the symmetric variant in ``symmetric``.

Deletions are negative multiplicities through the same path; an entry whose multiplicity
reaches 0 is removed from every index and view, so degrees and |D| count the support.
After the write, OnUpdate (Figure 4) checks, as one else-if chain: |D| reached N (N := 2N,
major rebalancing), |D| < ⌊N/4⌋ (N := ⌊N/2⌋ − 1, major), else x's degree left
[½N^ε, 3/2·N^ε) (minor); the steps themselves are in ``rebalance``.
"""

from __future__ import annotations

import math
from collections import _count_elements  # C helper behind Counter.update(iterable)

from core.errors import ConfigError
from operators.triangles.rebalance import Rebalancing, add_count, add_count_2d


def _smallest_root(num: int, k: int) -> int:
    """Smallest integer d ≥ 0 with k·d² ≥ num (exact integer arithmetic)."""
    if num <= 0:
        return 0
    d = math.isqrt(num // k)
    while k * d * d < num:
        d += 1
    while d > 0 and k * (d - 1) * (d - 1) >= num:
        d -= 1
    return d


def thresholds(n: int, epsilon: float) -> tuple[int, int, int]:
    """Integer degree thresholds for θ = N^ε: (strict heavy ≥, light→heavy ≥, heavy→light <).

    Degrees are integers, so deg ≥ t ⟺ deg ≥ ⌈t⌉ and deg < t ⟺ deg < ⌈t⌉ for any real t.
    ε = ½ is computed exactly (deg² ≥ N, 4deg² ≥ 9N, 4deg² < N); other ε use floats.
    """
    if epsilon == 0.5:
        return _smallest_root(n, 1), _smallest_root(9 * n, 4), _smallest_root(n, 4)
    theta = float(n) ** epsilon
    return _ceil(theta), _ceil(1.5 * theta), _ceil(0.5 * theta)


def _ceil(t: float) -> int:
    """⌈t⌉, snapping t to an integer within float error (e.g. 4096 ** 0.75 = 512.0000000001)."""
    r = round(t)
    if abs(t - r) <= 1e-9 * max(1.0, abs(t)):
        return int(r)
    return math.ceil(t)


def _dot(a: dict, b: dict) -> int:
    """Σ_k a[k]·b[k], iterating the shorter of the two rows (the intersection does)."""
    return sum([a[k] * b[k] for k in a.keys() & b.keys()])


class IvmEpsState(Rebalancing):
    """Partitions, indexes, views and counters of IVM^ε; ``nrel`` is 1 (self-join) or 3."""

    def __init__(self, epsilon: float, nrel: int, unit: bool = False):
        if not (0.0 <= float(epsilon) <= 1.0) or isinstance(epsilon, bool):
            raise ConfigError(f"triangles: epsilon must be in [0, 1], got {epsilon!r}")
        if nrel not in (1, 3):
            raise ConfigError(f"triangles: nrel must be 1 or 3, got {nrel!r}")
        self.epsilon = float(epsilon)
        self.nrel = nrel
        # unit=True promises every multiplicity is exactly 1 (graph modes): dot products
        # become intersection sizes.
        self.unit = unit
        self.rows: list[dict] = [{} for _ in range(nrel)]
        self.heavy: list[set] = [set() for _ in range(nrel)]
        self.rev_h: list[dict] = [{} for _ in range(nrel)]
        self.rev_l: list[dict] = [{} for _ in range(nrel)]
        self.views: list[dict] = [{} for _ in range(nrel)]
        self.q = 0
        self.size = 0
        self.n = 1
        self.major = 0
        self.minor = 0
        self.moved = 0
        self.set_n(1)
        self.bind()

    def bind(self) -> None:
        """Cache the self-join structures (call after replacing any of them)."""
        self._c0 = (self.rows[0], self.heavy[0], self.rev_h[0], self.rev_l[0], self.views[0])

    # ---- thresholds -------------------------------------------------------------------
    def set_n(self, n: int) -> None:
        self.n = n
        self.h_strict, self.h_up, self.h_down = thresholds(n, self.epsilon)

    # ---- single-tuple update, self-join form (Figure 5) --------------------------------
    def update_self(self, x: int, y: int, m: int, known: int | None = None) -> int:
        """OnUpdate for the one-relation (self-join) form: δR = {(x, y) ↦ m}.

        Returns s = Σ_c R(y, c)·R(c, x) (pre-update).  ``known`` passes s in when the caller
        knows it (the preprocessing adapter and the baselines' undirected fallback).
        """
        rows, heavy, rev_h, rev_l, view = self._c0
        unit = self.unit
        ry = rows.get(y)
        hx = rev_h.get(x)
        y_heavy = y in heavy
        if known is not None:
            s = known
        else:
            s = 0
            if ry:
                if y_heavy:
                    if hx:  # line 3: heavy y, heavy z
                        s = len(ry.keys() & hx.keys()) if unit else _dot(ry, hx)
                    vx = view.get(x)
                    if vx:  # line 4: heavy y, light z via V(y, x), stored as view[x][y]
                        s += vx.get(y, 0)
                else:
                    if hx:  # line 5: light y, heavy z
                        s = len(ry.keys() & hx.keys()) if unit else _dot(ry, hx)
                    lx = rev_l.get(x)
                    if lx:  # line 6: light y, light z
                        s += len(ry.keys() & lx.keys()) if unit else _dot(ry, lx)
        rx = rows.get(x)
        dq = 3 * m * s
        if x == y:  # lines 7-9: only a self-loop binds all three variables
            dq += 3 * m * m * (rx.get(x, 0) if rx else 0) + m * m * m
        self.q += dq
        if rx is None:
            rx = rows[x] = {}
            if self.epsilon == 0.0:  # paper: ε = 0 routes every tuple to the heavy part
                heavy.add(x)
        x_heavy = x in heavy
        if x_heavy:
            if ry and not y_heavy:  # line 11: V(x, c) += m·R_l(y, c), i.e. view[c][x]
                if unit and m == 1:  # counts only grow: no zero to drop
                    for c in ry:
                        vc = view.get(c)
                        if vc is None:
                            view[c] = {x: 1}
                        else:
                            vc[x] = vc.get(x, 0) + 1
                else:
                    for c, w in ry.items():
                        vc = view.get(c)
                        if vc is None:
                            view[c] = {x: m * w}
                            continue
                        v = vc.get(x, 0) + m * w
                        if v:
                            vc[x] = v
                        else:
                            del vc[x]
                            if not vc:
                                del view[c]
            rev = rev_h
        else:
            if hx:  # line 13 (fixed): V(a, y) += R_h(a, x)·m, i.e. view[y][a]
                vy = view.get(y)
                if vy is None:
                    vy = view[y] = {}
                if unit and m == 1:
                    _count_elements(vy, hx)  # C loop: vy[a] += 1 for a in hx
                else:
                    for a, w in hx.items():
                        v = vy.get(a, 0) + w * m
                        if v:
                            vy[a] = v
                        else:
                            del vy[a]
                if not vy:
                    del view[y]
            rev = rev_l
        # write the tuple (inlined _write: this is the hot path of the graph modes)
        old = rx.get(y, 0)
        new = old + m
        ry = rev.get(y)
        if ry is None:
            ry = rev[y] = {}
        if new and old:
            rx[y] = ry[x] = new
            return s
        if new:
            rx[y] = ry[x] = new
            self.size += 1
            if self.size == self.n:
                self.set_n(2 * self.n)
                self.major_rebalance()
                return s
            if x_heavy:
                return s  # a heavy degree only grows here
            if len(rx) >= self.h_up:
                self.minor_rebalance(0, x, to_heavy=True)
            return s
        self._write(0, rows, rev, rx, x, y, m, x_heavy, old)
        return s

    # ---- single-tuple update, three-relation form (Figure 3) ---------------------------
    def update_three(self, i: int, x: int, y: int, m: int) -> None:
        """OnUpdate for δK_i = {(x, y) ↦ m}, K_0 = R(A,B), K_1 = S(B,C), K_2 = T(C,A)."""
        j = (i + 1) % 3
        k = (i + 2) % 3
        rows = self.rows[i]
        ny = self.rows[j].get(y)  # K_j(y, ·)
        hx = self.rev_h[k].get(x)  # {z heavy in K_k: K_k(z, x)}
        s = 0
        y_heavy = y in self.heavy[j]
        if ny:
            if hx:  # δQ_{r h h} / δQ_{r l h}
                s = _dot(ny, hx)
            if y_heavy:
                vx = self.views[j].get(x)
                if vx:  # δQ_{r h l} = m · V_j(y, x), stored as views[j][x][y]
                    s += vx.get(y, 0)
            else:
                lx = self.rev_l[k].get(x)
                if lx:  # δQ_{r l l}
                    s += _dot(ny, lx)
        self.q += m * s
        rx = rows.get(x)
        if rx is None:
            rx = rows[x] = {}
            if self.epsilon == 0.0:
                self.heavy[i].add(x)
        x_heavy = x in self.heavy[i]
        if x_heavy:
            if ny and not y_heavy:  # V_i(x, z) += m · K_j,l(y, z)
                vi = self.views[i]
                for z, w in ny.items():
                    add_count_2d(vi, z, x, m * w)
            rev = self.rev_h[i]
        else:
            if hx:  # V_k(z, y) += K_k,h(z, x) · m: one inner dict views[k][y]
                vk = self.views[k]
                vy = vk.get(y)
                if vy is None:
                    vy = vk[y] = {}
                for z, w in hx.items():
                    add_count(vy, z, w * m)
                if not vy:
                    del vk[y]
            rev = self.rev_l[i]
        self._write(i, rows, rev, rx, x, y, m, x_heavy)

    # ---- write the tuple, then rebalance (Figure 4) ------------------------------------
    def _write(self, i, rows, rev, rx, x, y, m, x_heavy, old=None) -> None:
        if old is None:
            old = rx.get(y, 0)
        new = old + m
        ry = rev.get(y)
        if ry is None:
            ry = rev[y] = {}
        if new:
            rx[y] = new
            ry[x] = new
            if not old:
                self.size += 1
                if self.size == self.n:
                    self.set_n(2 * self.n)
                    self.major_rebalance()
                    return
        else:
            del rx[y]
            del ry[x]
            if not ry:
                del rev[y]
            self.size -= 1
            if not rx:
                del rows[x]
                self.heavy[i].discard(x)
            if self.size < self.n // 4:
                self.set_n(self.n // 2 - 1)
                self.major_rebalance()
                return
        if not rx:
            return
        if x_heavy:
            if len(rx) < self.h_down:
                self.minor_rebalance(i, x, to_heavy=False)
        elif len(rx) >= self.h_up:
            self.minor_rebalance(i, x, to_heavy=True)

    # ---- read access for listing and snapshots -------------------------------------------
    def column(self, i: int, y) -> dict:
        """{x: K_i(x, y)} over both parts (a merged copy; O(|column|))."""
        col = dict(self.rev_l[i].get(y, ()))
        col.update(self.rev_h[i].get(y, ()))
        return col

    def bulk_write(self, i: int, x: int, y: int, m: int) -> None:
        """Preprocessing path: write a tuple without deltas; call ``finish_bulk`` afterwards."""
        row = self.rows[i].setdefault(x, {})
        old = row.get(y, 0)
        new = old + m
        if new:
            row[y] = new
            self.size += not old
        else:
            self.size -= bool(old)
            row.pop(y, None)
            if not row:
                del self.rows[i][x]

    def finish_bulk(self, static_q) -> None:
        """Paper's preprocessing: N = 2|D| + 1, strict partition, Q by a static count, views."""
        self.set_n(2 * self.size + 1)
        self.major_rebalance(rebuild=True)  # bulk_write kept no reverse index
        self.major -= 1  # preprocessing, not a rebalancing
        self.q = static_q(self.rows, [self.column_index(i) for i in range(self.nrel)])

    def column_index(self, i: int) -> dict:
        cols: dict = {}
        for y in self.rev_h[i].keys() | self.rev_l[i].keys():
            cols[y] = self.column(i, y)
        return cols
