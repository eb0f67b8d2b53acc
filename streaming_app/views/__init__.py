"""Recursive views (``[[views]]``: reachability, shortest paths): the job's wiring of the views engine."""
