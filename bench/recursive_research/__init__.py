"""The recursive-view research engine of seed 002 (absorption provenance, partitioned
semi-naive evaluation, MinShip, AggSel, regions), its DRed and recompute baselines, and graph
workloads: what the benchmarks compare the job's views with. The job never imports it."""

from bench.recursive_research.region import RegionView
from bench.recursive_research.views import ReachabilityView, ShortestPathView, ViewDelta, baseline

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
