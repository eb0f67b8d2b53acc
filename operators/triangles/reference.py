"""From-scratch twins of the triangle operators: brute-force counts, views and an invariant check.

Incremental rule: none; everything here is recomputed from the stored tuples, which is the
point: tests compare the incremental state against these definitions.

State kept: none.  Deletions: a tuple with multiplicity 0 does not exist (support semantics).
"""

from __future__ import annotations

from core.errors import InvariantError


def tuples_of(core, i: int) -> dict:
    """K_i as a dict {(x, y): m} read from a core's forward rows."""
    return {(x, y): m for x, row in core.rows[i].items() for y, m in row.items()}


def reference_q(rels: list[dict]) -> int:
    """Q = Σ_{a,b,c} R(a,b)·S(b,c)·T(c,a) by a hash join on B; one dict serves all (self-join)."""
    r, s, t = (rels * 3)[:3] if len(rels) == 1 else rels
    s_by_b: dict = {}
    for (b, c), m in s.items():
        s_by_b.setdefault(b, []).append((c, m))
    q = 0
    for (a, b), m1 in r.items():
        for c, m2 in s_by_b.get(b, ()):
            m3 = t.get((c, a), 0)
            if m3:
                q += m1 * m2 * m3
    return q


def reference_triangles(edges) -> int:
    """Number of triangles (vertex sets) of an undirected simple graph, by brute force."""
    adj: dict = {}
    for u, v in edges:
        if u != v:
            adj.setdefault(u, set()).add(v)
            adj.setdefault(v, set()).add(u)
    return sum(1 for u in adj for v in adj[u] if u < v for w in adj[u] & adj[v] if v < w)


def static_q(rows: list[dict], cols: list[dict]) -> int:
    """Q from forward rows and reverse columns (rows[i][x][y] = cols[i][y][x] = K_i(x, y)).

    Per tuple (x, y) of K_0 a dot product of K_1(y, ·) and K_2(·, x), iterating the shorter
    one: O(|D|^1.5) overall, as the paper's preprocessing needs.
    """
    n = len(rows)
    r0, r1, c2 = rows[0], rows[1 % n], cols[2 % n]
    q = 0
    for x, row in r0.items():
        cx = c2.get(x)
        if not cx:
            continue
        for y, m in row.items():
            ny = r1.get(y)
            if ny:
                q += m * sum([ny[z] * cx[z] for z in ny.keys() & cx.keys()])
    return q


def reference_views(core) -> list[dict]:
    """V_i(x, z) = Σ_y K_i,h(x, y) · K_j,l(y, z) from the tuples and the heavy sets."""
    n = core.nrel
    out = []
    for i in range(n):
        j = (i + 1) % n
        ki, kj = tuples_of(core, i), tuples_of(core, j)
        lj_by_y: dict = {}
        for (y, z), m in kj.items():
            if y not in core.heavy[j]:
                lj_by_y.setdefault(y, []).append((z, m))
        v: dict = {}
        for (x, y), m in ki.items():
            if x in core.heavy[i]:
                for z, m2 in lj_by_y.get(y, ()):
                    v[(x, z)] = v.get((x, z), 0) + m * m2
        out.append({k: val for k, val in v.items() if val})
    return out


def reference_symmetric_view(core) -> dict:
    """Undirected core: V(a, c) = number of light common neighbours b of heavy a ≠ c.

    With ``core.witnesses`` the value is the set {b: 1} of those neighbours.
    """
    rows, heavy = core.rows[0], core.heavy[0]
    v: dict = {}
    for b, row in rows.items():
        if b in heavy:
            continue
        hs = [a for a in row if a in heavy]
        for a in hs:
            for c in hs:
                if a != c:
                    if core.witnesses:  # the light middles themselves
                        v.setdefault((a, c), {})[b] = 1
                    else:
                        v[(a, c)] = v.get((a, c), 0) + 1
    return v


def _fail(what: str) -> None:
    raise InvariantError(f"triangles/ivm_eps: {what}")


def check_invariants(counter, check_q: bool = True) -> None:
    """Recompute every derived piece of an IVM^ε state and raise InvariantError on a mismatch.

    Checks: indexes agree with the rows, no zero entries, the size invariant
    ⌊N/4⌋ ≤ |D| < N, the partition conditions (heavy ≥ ½N^ε, light < 3/2·N^ε; ε = 0 all
    heavy, ε = 1 all light), every view against its definition and Q against brute force.
    """
    core = counter._core
    eps, n = core.epsilon, core.n
    size = 0
    for i in range(core.nrel):
        rows, heavy = core.rows[i], core.heavy[i]
        if not heavy <= rows.keys():
            _fail(f"relation {i}: heavy values without tuples {heavy - rows.keys()}")
        rev_h: dict = {}
        rev_l: dict = {}
        for x, row in rows.items():
            if not row or 0 in row.values():
                _fail(f"relation {i}: empty row or zero multiplicity at x={x}")
            size += len(row)
            deg = len(row)
            if eps == 0.5:
                ok_h, ok_l = 4 * deg * deg >= n, 4 * deg * deg < 9 * n
            else:
                theta = float(n) ** eps
                tol = 1e-9 * max(1.0, theta)  # the engine snaps float error to integers
                ok_h, ok_l = deg >= 0.5 * theta - tol, deg < 1.5 * theta + tol
            if x in heavy and not ok_h:
                _fail(f"relation {i}: heavy x={x} has degree {deg} < ½N^ε (N={n})")
            if x not in heavy and not ok_l:
                _fail(f"relation {i}: light x={x} has degree {deg} ≥ 3/2·N^ε (N={n})")
            for y, m in row.items():
                (rev_h if x in heavy else rev_l).setdefault(y, {})[x] = m
        if getattr(core, "symmetric", False):
            rev_l = {}  # the light column of y is its row minus the heavy index
            if any(rows.get(y, {}).get(x) != m for x, row in rows.items()
                   for y, m in row.items()):
                _fail(f"relation {i}: the undirected edge relation is not symmetric")
        if rev_h != core.rev_h[i] or rev_l != core.rev_l[i]:
            _fail(f"relation {i}: reverse index disagrees with the rows")
        if eps == 0.0 and heavy != rows.keys():
            _fail(f"relation {i}: ε = 0 but some values are light")
        if eps == 1.0 and heavy:
            _fail(f"relation {i}: ε = 1 but some values are heavy")
    if size != core.size:
        _fail(f"|D| counter {core.size} != {size}")
    if not (n // 4 <= size < n):
        _fail(f"size invariant ⌊N/4⌋ ≤ |D| < N broken: N={n}, |D|={size}")
    wants = [reference_symmetric_view(core)] if getattr(core, "symmetric", False) else \
        reference_views(core)
    for i, want in enumerate(wants):
        got = {(x, z): v for z, col in core.views[i].items() for x, v in col.items()}
        if any(not row for row in core.views[i].values()) or got != want:
            diff = set(got.items()) ^ set(want.items())
            _fail(f"view {i} differs from its definition at {sorted(diff)[:5]}")
    if check_q:
        rels = [tuples_of(core, i) for i in range(core.nrel)]
        want_q = reference_q(rels)
        if want_q != core.q:
            _fail(f"Q = {core.q} but brute force gives {want_q}")
