"""Minor and major rebalancing of the IVM^ε partitions (Kara et al., ICDT 2019, Figure 4).

Incremental rule: a *minor* rebalancing moves one value x of relation K_i between its heavy
and light part when its degree leaves [½N^ε, 3/2·N^ε); only the two views that read x's part
change, V_i = K_i,h ⋈ K_j,l (x's row enters or leaves the heavy side) and V_k = K_k,h ⋈ K_i,l
(x's row leaves or enters the light side), and they are patched tuple by tuple.  Q is not
touched: the paper's ApplyUpdate pairs (−m on the source part, +m on the destination) cancel
exactly because Q depends only on K = K_h + K_l.  A *major* rebalancing (N doubled or set to
⌊N/2⌋ − 1) strictly repartitions every relation; since a view is a function of the parts
alone, it moves the values whose status changes when they hold few tuples and recomputes
the views (cheaper loop order) otherwise: both give the same state.

State kept: none of its own; a mixin over ``engine.IvmEpsState``.  Deletions: zero entries
are dropped from every view as they appear.
"""

from __future__ import annotations

from collections import Counter


def add_count_2d(view: dict, z, x, delta: int) -> None:
    """view[z][x] += delta, removing zero entries and empty inner dicts."""
    vz = view.get(z)
    if vz is None:
        if delta:
            view[z] = {x: delta}
        return
    v = vz.get(x, 0) + delta
    if v:
        vz[x] = v
    else:
        vz.pop(x, None)
        if not vz:
            del view[z]


def add_count(d: dict, key, delta: int) -> None:
    """d[key] += delta, removing the entry when it reaches 0."""
    v = d.get(key, 0) + delta
    if v:
        d[key] = v
    else:
        del d[key]



class Rebalancing:
    """Rebalancing steps; mixed into ``IvmEpsState`` (uses its rows, heavy, rev_*, views)."""

    def minor_rebalance(self, i: int, x: int, to_heavy: bool) -> None:
        """Minor rebalancing (Figure 4): move value x of K_i to the other part."""
        self._move(i, x, to_heavy)
        self.minor += 1
        self.moved += len(self.rows[i][x])

    def _move(self, i: int, x: int, to_heavy: bool) -> None:
        """Move all tuples of value x of K_i to the other part and patch V_i and V_k."""
        n = self.nrel
        j, k = (i + 1) % n, (i + 2) % n
        row = self.rows[i][x]
        hk = self.rev_h[k].get(x)  # {z heavy in K_k: K_k(z, x)}; x's own flip is not in it
        if to_heavy:
            # 1. the row leaves K_i,l: V_k(z, y) -= K_k,h(z, x) · K_i(x, y)
            if hk:
                self._view_outer(k, hk, row, -1)
            self._flip(i, x, row, to_heavy=True)
            # 2. the row joins K_i,h: V_i(x, z) += K_i(x, y) · K_j,l(y, z)
            rows_j, heavy_j = self.rows[j], self.heavy[j]
            vi = self.views[i]
            if self.unit:
                cnt: Counter = Counter()
                for y in row:
                    if y not in heavy_j:
                        ny = rows_j.get(y)
                        if ny:
                            cnt.update(ny.keys())
                for z, c in cnt.items():  # add_count_2d inlined: counts are positive
                    vz = vi.get(z)
                    if vz is None:
                        vi[z] = {x: c}
                    else:
                        vz[x] = vz.get(x, 0) + c
            else:
                for y, w in row.items():
                    if y not in heavy_j:
                        ny = rows_j.get(y)
                        if ny:
                            for z, w2 in ny.items():
                                add_count_2d(vi, z, x, w * w2)
        else:
            # 1. the row leaves K_i,h: V_i(x, ·) is exactly its contribution; its keys z
            #    are among the rows K_j,l(y, ·) of x's light neighbours y
            vi, rows_j, heavy_j = self.views[i], self.rows[j], self.heavy[j]
            for y in row:
                if y not in heavy_j:
                    for z in rows_j.get(y, ()):
                        vz = vi.get(z)
                        if vz is not None and x in vz:
                            del vz[x]
                            if not vz:
                                del vi[z]
            self._flip(i, x, row, to_heavy=False)
            # 2. the row joins K_i,l: V_k(z, y) += K_k,h(z, x) · K_i(x, y)
            if hk:
                self._view_outer(k, hk, row, +1)

    def _view_outer(self, k: int, col: dict, row: dict, sign: int) -> None:
        """V_k(z, y) += sign · col[z] · row[y] for all z, y (stored as views[k][y][z])."""
        vk = self.views[k]
        for y, w2 in row.items():
            vy = vk.get(y)
            if vy is None:
                vy = vk[y] = {}
            for z, w in col.items():
                add_count(vy, z, sign * w * w2)
            if not vy:
                del vk[y]

    def _flip(self, i: int, x: int, row: dict, to_heavy: bool) -> None:
        src, dst = (self.rev_l[i], self.rev_h[i]) if to_heavy else (self.rev_h[i], self.rev_l[i])
        for y, w in row.items():
            s = src[y]
            del s[x]
            if not s:
                del src[y]
            d = dst.get(y)
            if d is None:
                d = dst[y] = {}
            d[x] = w
        if to_heavy:
            self.heavy[i].add(x)
        else:
            self.heavy[i].discard(x)

    def major_rebalance(self, rebuild: bool = False) -> None:
        """Strictly repartition every relation with the current N^ε and recompute the views.

        The views depend only on the parts, so when the values whose status changes hold
        few tuples (≤ |D|/8) they are moved one by one like a minor rebalancing, which
        yields exactly the recomputed state; otherwise everything is rebuilt.
        """
        hmin = self.h_strict
        changes = []
        cost = 0
        for i in range(self.nrel):
            rows, heavy = self.rows[i], self.heavy[i]
            strict = {x for x, r in rows.items() if len(r) >= hmin}
            for x in heavy - strict:
                changes.append((i, x, False))
                cost += len(rows[x])
            for x in strict - heavy:
                changes.append((i, x, True))
                cost += len(rows[x])
        self.major += 1
        if not rebuild and 8 * cost <= self.size:
            for i, x, to_heavy in changes:
                self._move(i, x, to_heavy)
            return
        for i in range(self.nrel):
            rows = self.rows[i]
            self.heavy[i] = {x for x, r in rows.items() if len(r) >= hmin}
            self.reindex(i)
        for i in range(self.nrel):
            self.views[i] = self.compute_view(i)
        self.bind()

    def reindex(self, i: int) -> None:
        """Rebuild the reverse indexes of K_i from its rows and heavy set."""
        heavy = self.heavy[i]
        rev_h: dict = {}
        rev_l: dict = {}
        for x, r in self.rows[i].items():
            rev = rev_h if x in heavy else rev_l
            for y, w in r.items():
                d = rev.get(y)
                if d is None:
                    d = rev[y] = {}
                d[x] = w
        self.rev_h[i], self.rev_l[i] = rev_h, rev_l

    def compute_view(self, i: int) -> dict:
        """V_i(x, z) = Σ_y K_i,h(x, y) · K_j,l(y, z), by the cheaper of the two loop orders."""
        n = self.nrel
        j = (i + 1) % n
        rows_i, heavy_i = self.rows[i], self.heavy[i]
        rows_j, heavy_j = self.rows[j], self.heavy[j]
        rev_hi = self.rev_h[i]
        view: dict = {}
        if not heavy_i:
            return view
        # cost of "for (x,y) in K_i,h, for z in K_j,l(y, ·)" vs
        # "for (y,z) in K_j,l, for x with K_i,h(x, y)"
        cost_h = sum(len(rows_j[y]) for x in heavy_i for y in rows_i[x]
                     if y not in heavy_j and y in rows_j)
        cost_l = sum(len(rows_j[y]) * len(rev_hi[y]) for y in rev_hi
                     if y in rows_j and y not in heavy_j)
        if cost_h <= cost_l:
            for x in heavy_i:
                if self.unit:
                    cnt: Counter = Counter()
                    for y in rows_i[x]:
                        if y not in heavy_j:
                            ny = rows_j.get(y)
                            if ny:
                                cnt.update(ny.keys())
                    vx = dict(cnt)
                else:
                    vx = {}
                    for y, w in rows_i[x].items():
                        if y not in heavy_j:
                            ny = rows_j.get(y)
                            if ny:
                                for z, w2 in ny.items():
                                    add_count(vx, z, w * w2)
                if vx:
                    view[x] = vx
        else:
            for y, col in rev_hi.items():
                if y in heavy_j:
                    continue
                ny = rows_j.get(y)
                if not ny:
                    continue
                for x, w in col.items():
                    vx = view.get(x)
                    if vx is None:
                        vx = view[x] = {}
                    for z, w2 in ny.items():
                        add_count(vx, z, w * w2)
                    if not vx:
                        del view[x]
        # stored by the second key: views[i][z][x] = V_i(x, z)
        out: dict = {}
        for x, vx in view.items():
            for z, v in vx.items():
                d = out.get(z)
                if d is None:
                    d = out[z] = {}
                d[x] = v
        return out

