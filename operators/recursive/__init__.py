"""Recursive views with absorption provenance (seed 002): reachable, shortest paths, regions.

``ReachabilityView``, ``ShortestPathView`` and ``RegionView`` maintain their view incrementally
from batches of base insertions/deletions/expirations (``apply``), with every derived tuple
annotated by its absorption provenance (a BDD). ``DRed*`` and ``Recompute*`` are the baselines
with the same API; ``workloads`` generates graphs and update streams.
"""

from operators.recursive.region import RegionView
from operators.recursive.views import ReachabilityView, ShortestPathView, ViewDelta, baseline

DRedReachabilityView = baseline(ReachabilityView, "dred")
RecomputeReachabilityView = baseline(ReachabilityView, "recompute")
DRedShortestPathView = baseline(ShortestPathView, "dred")
RecomputeShortestPathView = baseline(ShortestPathView, "recompute")
DRedRegionView = baseline(RegionView, "dred")
RecomputeRegionView = baseline(RegionView, "recompute")

__all__ = [
    "ReachabilityView", "ShortestPathView", "RegionView", "ViewDelta",
    "DRedReachabilityView", "RecomputeReachabilityView",
    "DRedShortestPathView", "RecomputeShortestPathView",
    "DRedRegionView", "RecomputeRegionView",
]
