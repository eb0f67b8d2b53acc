"""Recursive views (seed 002): reachability and shortest paths under edge inserts, deletes and
expirations, maintained by a search tree per source (``onenode.py``), each row explained by a
witness of live base edges. The paper's engine (absorption provenance, partitions, regions)
and the baselines are research code in ``bench/recursive_research``.
"""

from operators.recursive.views import ReachabilityView, ShortestPathView, ViewDelta

__all__ = ["ReachabilityView", "ShortestPathView", "ViewDelta"]
