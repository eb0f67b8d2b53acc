"""From-scratch provenance of the recursive views: naive evaluation with PosBool formulas (BDDs).

The oracle for the research engine's formulas (eager mode must match it exactly) and what
``explain(row, complete=True)`` evaluates. Exponential in the number of paths: small graphs.
"""

from __future__ import annotations

from collections import defaultdict

from bench.recursive_research.provenance import Provenance
from operators.recursive.spec import Spec


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
