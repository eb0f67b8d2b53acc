"""From-scratch twin of the recursive views: naive evaluation to a fixpoint.

Not incremental: every call evaluates the rules to a fixpoint over the live base tuples by
naive iteration (all tuples against all edges until nothing changes). State kept: none.
Deletions: not applicable (the caller passes the live base tuples). The tests' oracle for the
views' rows (the provenance oracle is ``bench/recursive_research/provenance_reference.py``).
"""

from __future__ import annotations

from collections import defaultdict

from operators.recursive.spec import Spec


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
