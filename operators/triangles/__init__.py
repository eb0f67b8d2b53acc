"""Triangle counting under edge inserts and deletes with IVM^ε (Kara et al., ICDT 2019).

Incremental rule: heavy/light partitions with threshold N^ε, three skew-aware 2-way views and
four delta terms per single-tuple update (``engine``), amortised O(|D|^max(ε,1−ε)) per
update, O(1) count.  Undirected graphs use ``symmetric``: both orientations of an edge in one
step and the refined heavy–light–heavy view of the paper's Appendix D (linear space).  State kept: ``engine.IvmEpsState`` plus graph-mode reference counts,
snapshot as ``triangles.ivm_eps.v2``.  Deletions are negative weights; graph modes reject
self-loops and deletes of absent edges as ``BadEdge`` rows (``DATA_BAD_EDGE``).

Modes: ``undirected`` (each edge stored both ways, count = triangles as vertex sets),
``directed`` (count = directed 3-cycles), ``three_relation`` (R(A,B), S(B,C), T(C,A) with
integer multiplicities; count = Q = Σ R·S·T).

Use from the streaming job::

    tc = TriangleCounter(epsilon=0.5, mode="undirected")
    bad = tc.apply_batch(src, dst, weight)        # int64 numpy arrays, weight ±1
    quarantine(bad)                                # BadEdge rows, code DATA_BAD_EDGE
    emit(tc.count); checkpoint(tc.snapshot())      # TriangleCounter.restore(bytes)

Baselines with the same API: ``ClassicalCounter`` (first-order IVM), ``RecountCounter``.
Generators for ``ivmstream produce``: ``operators.triangles.workloads``.
"""

from operators.triangles.baselines import ClassicalCounter, RecountCounter
from operators.triangles.counter import TriangleCounter, step
from operators.triangles.frontend import BadEdge

__all__ = ["TriangleCounter", "ClassicalCounter", "RecountCounter", "BadEdge", "step"]
