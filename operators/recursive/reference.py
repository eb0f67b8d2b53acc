"""From-scratch twins of the recursive views: naive evaluation with and without provenance.

Not incremental: every call evaluates the rules to a fixpoint over the live base tuples by
naive iteration (all tuples against all edges until nothing changes). State kept: none.
Deletions: not applicable (the caller passes the live base tuples). Used by the baselines'
``explain`` and by the tests as an oracle for provenance formulas (eager mode must match
it exactly: the PosBool provenance, i.e. the minimal witnesses over live base tuples).
"""

from __future__ import annotations

from collections import defaultdict

from operators.recursive.engine import Spec
from operators.recursive.provenance import Provenance


def reference_provenance(spec: Spec, labels: dict, bases, edges):
    """(Provenance, {tuple: formula}) for every derivable tuple (all paths, not only the best).

    ``bases``/``edges``: lists of (tuple, variable names); ``labels``: variable -> readable name
    (default: the variable name). For shortest paths the tuples are simple paths, so it is finite.
    """
    prov = Provenance()
    for _, names in list(bases) + list(edges):
        for v in names:
            if v not in prov.labels:
                prov.declare(v, labels.get(v, v))
    P: dict = {}
    for r, vs in bases:
        P[r] = P.get(r, prov.false) | prov.conj(vs)
    by_j = defaultdict(list)
    for e, vs in edges:
        by_j[spec.j(e)].append((e, prov.conj(vs)))
    changed = True
    while changed:
        changed = False
        for r, f in list(P.items()):
            for e, ef in by_j.get(r[0], ()):
                out = spec.combine(e, r)
                if out is None:
                    continue
                old = P.get(out, prov.false)
                new = old | (f & ef)
                if new != old:
                    P[out] = new
                    changed = True
    return prov, P


def reference_view(spec: Spec, bases, edges) -> dict:
    """{group: tuple} by naive iteration; with AggSel the best tuple (by ``spec.rank``) per group."""
    tuples = {r for r, _ in bases}
    by_j = defaultdict(list)
    for e, _ in edges:
        by_j[spec.j(e)].append(e)
    frontier = set(tuples)
    while frontier:
        new = set()
        for r in tuples:
            for e in by_j.get(r[0], ()):
                out = spec.combine(e, r)
                if out is not None and out not in tuples:
                    new.add(out)
        tuples |= new
        frontier = new
    view: dict = {}
    for r in tuples:
        g = spec.gkey(r)
        if g not in view or (spec.rank is not None and spec.rank(r) < spec.rank(view[g])):
            view[g] = r
    return view
