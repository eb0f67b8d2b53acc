"""Deterministic (by seed) graphs and update streams for tests and benchmarks of the recursive views.

Not an operator: no incremental rule and no state beyond the generator's own. Shapes are chosen so
that the transitive closure and the provenance stay bounded at 10^5 edges:

* ``random_components``: many disjoint random digraphs of ``comp_size`` vertices and
  ``comp_edges`` arcs each (cycles allowed, so tuples have several witnesses); the closure is at
  most ``comp_size``² per component, i.e. linear in the number of edges.
* ``scale_free_dag``: a layered DAG (``layers`` layers, each vertex has ``out_deg`` arcs to the next
  layer) whose targets are drawn by preferential attachment (Pólya urn: P ∝ in-degree + 1), so
  in-degrees are heavy-tailed with hubs; reach is bounded by out_deg + out_deg² + … because the
  depth is bounded, while hubs make deletions touch many tuples.

``update_stream`` yields single-operation batches ``(inserts, deletes, now)``: deletions of live
edges, insertions of new edges of the same shape, and insertions with an expiry a few ticks later
(which then expire inside later batches).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Graph:
    name: str
    edges: list  # (src, dst, cost)
    n_vertices: int
    sampler: Callable = field(repr=False)

    def sample_edge(self, rng: random.Random):
        return self.sampler(rng)


def random_components(n_edges: int, seed: int = 0, comp_size: int = 8, comp_edges: int = 10) -> Graph:
    rng = random.Random(seed)
    n_comp = max(1, n_edges // comp_edges)
    arcs = [(u, v) for u in range(comp_size) for v in range(comp_size) if u != v]
    edges = []
    for c in range(n_comp):
        base = c * comp_size
        for u, v in rng.sample(arcs, comp_edges):
            edges.append((base + u, base + v, rng.randint(1, 10)))

    def sampler(r: random.Random):
        base = r.randrange(n_comp) * comp_size
        u, v = r.choice(arcs)
        return (base + u, base + v, r.randint(1, 10))

    return Graph(f"random(n={n_comp * comp_size},m={len(edges)})", edges, n_comp * comp_size, sampler)


def scale_free_dag(n_edges: int, seed: int = 0, layers: int = 3, out_deg: int = 2) -> Graph:
    rng = random.Random(seed)
    width = max(2, n_edges // (out_deg * (layers - 1)))
    urns = [list(range(i * width, (i + 1) * width)) for i in range(layers)]
    edges = []
    seen = set()
    for i in range(layers - 1):
        for u in range(i * width, (i + 1) * width):
            for _ in range(out_deg):
                v = rng.choice(urns[i + 1])
                if (u, v) in seen:
                    continue
                seen.add((u, v))
                urns[i + 1].append(v)
                edges.append((u, v, rng.randint(1, 10)))

    def sampler(r: random.Random):
        i = r.randrange(layers - 1)
        u = r.randrange(i * width, (i + 1) * width)
        return (u, r.choice(urns[i + 1]), r.randint(1, 10))

    return Graph(f"scale-free-dag(n={layers * width},m={len(edges)})", edges, layers * width, sampler)


def update_stream(graph: Graph, n_updates: int, seed: int = 0, p_delete: float = 0.4,
                  p_expiring: float = 0.2, ttl: tuple = (1, 5), start: int = 1) -> list:
    """``n_updates`` batches ``(inserts, deletes, now)`` of one operation each, after ``graph.edges``.

    Deletions pick a live edge; insertions a new edge of the same shape; an expiring insertion
    carries ``expires_at = now + randint(*ttl)``. ``now`` starts at ``start`` and ticks by one.
    """
    rng = random.Random(seed)
    live = {(u, v): None for u, v, _ in graph.edges}
    keys = list(live)
    out = []
    for k in range(n_updates):
        now = start + k
        for key in [key for key, exp in live.items() if exp is not None and exp <= now - 1]:
            del live[key]
        x = rng.random()
        if x < p_delete and live:
            while True:  # keys may hold edges that already left: resample
                key = keys[rng.randrange(len(keys))]
                if key in live:
                    break
            del live[key]
            out.append(([], [key], now))
            continue
        u, v, c = graph.sample_edge(rng)
        exp = now + rng.randint(*ttl) if x > 1 - p_expiring else None
        if (u, v) in live:  # a refresh: the later expiry wins, None = never
            cur = live[(u, v)]
            live[(u, v)] = None if cur is None or exp is None else max(cur, exp)
        else:
            keys.append((u, v))
            live[(u, v)] = exp
        out.append(([(u, v, c, exp)], [], now))
    return out


# -- connected workloads (issue 17) ---------------------------------------------------------------

def dense_growth_stream(n: int = 60, per_batch: int = 36, deletes: tuple = (1, 3), max_edges: int = 420,
                        seed: int = 0, cost: tuple = (1, 10)) -> list:
    """Batches ``(inserts, deletes, now)`` growing a random digraph on ``n`` vertices.

    Every batch inserts ``per_batch`` new arcs (uniform over absent pairs, cost uniform in ``cost``)
    and deletes ``randint(*deletes)`` live arcs (none in the first batch), until ``max_edges`` live
    arcs. With n=60 the closure is nearly all 3,600 pairs after the second batch, each reachable
    through very many paths: the shape that made provenance blow up (issue 17).
    """
    rng = random.Random(seed)
    live: list = []
    present: set = set()
    out = []
    now = 0
    while len(live) < max_edges:
        now += 1
        dels = []
        if live:
            for _ in range(rng.randint(*deletes)):
                k = live.pop(rng.randrange(len(live)))
                present.discard(k)
                dels.append(k)
        ins = []
        while len(ins) < per_batch and len(live) < max_edges:
            u, v = rng.randrange(n), rng.randrange(n)
            if u == v or (u, v) in present:
                continue
            present.add((u, v))
            live.append((u, v))
            ins.append((u, v, rng.randint(*cost)))
        out.append((ins, dels, now))
    return out
