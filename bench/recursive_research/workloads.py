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


def transit_stub(links: int = 200, seed: int = 0, transit: int = 4, stubs_per_transit: int = 3,
                 stub_size: int = 8, costs: tuple = (50, 10, 2)) -> Graph:
    """GT-ITM-style transit-stub topology (seed 002, Sec. 7): ``links`` bidirectional links.

    One transit domain of ``transit`` nodes (a ring plus chords), ``stubs_per_transit`` stubs of
    ``stub_size`` nodes hanging off each transit node by one link, every stub a random connected
    graph. The seed's default is 4 / 3 / 8: 100 nodes and ~200 bidirectional links = ~400 link
    tuples; ``links=400`` is its dense 800-link-tuple variant (stubs made complete first, then extra
    stub–stub links inside a transit node's group and extra stub–transit links). Latency costs:
    transit–transit 50, transit–stub 10, intra-stub 2 (extra stub–stub links 10). Every link is
    returned in both directions, so the graph is strongly connected.
    """
    rng = random.Random(seed)
    c_tt, c_ts, c_ss = costs
    und: dict = {}

    def add(u, v, c):
        if u != v and (u, v) not in und and (v, u) not in und:
            und[(u, v)] = c
            return True
        return False

    T = list(range(transit))
    for i in T:
        add(T[i], T[(i + 1) % transit], c_tt)
    stubs = []  # (transit node, [members])
    nxt = transit
    for t in T:
        for _ in range(stubs_per_transit):
            members = list(range(nxt, nxt + stub_size))
            nxt += stub_size
            stubs.append((t, members))
            add(t, members[0], c_ts)
            for k in range(1, stub_size):  # random spanning tree
                add(members[k], members[rng.randrange(k)], c_ss)
    chords = [(a, b) for a in T for b in T if a < b]
    rng.shuffle(chords)
    for a, b in chords[: max(0, min(len(chords), links // 40))]:
        add(a, b, c_tt)
    intra = [(u, v) for _, ms in stubs for i, u in enumerate(ms) for v in ms[i + 1:]]
    rng.shuffle(intra)
    for u, v in intra:
        if len(und) >= links:
            break
        add(u, v, c_ss)
    by_t: dict = {}
    for t, ms in stubs:
        by_t.setdefault(t, []).append(ms)
    tries = 0
    while len(und) < links and tries < 100 * links:
        tries += 1
        t = rng.choice(T)
        if rng.random() < 0.5 and len(by_t[t]) > 1:
            a, b = rng.sample(by_t[t], 2)
            add(rng.choice(a), rng.choice(b), c_ts)
        else:
            add(rng.choice(rng.choice(by_t[t])), t, c_ts)
    edges = [(u, v, c) for (u, v), c in und.items()] + [(v, u, c) for (u, v), c in und.items()]
    n = nxt
    pairs = list(und.items())

    def sampler(r: random.Random):
        (u, v), c = r.choice(pairs)
        return (u, v, c) if r.random() < 0.5 else (v, u, c)

    return Graph(f"transit-stub(n={n},links={len(edges)})", edges, n, sampler)


def strongly_connected(n: int, m: int, seed: int = 0, cost: tuple = (1, 10)) -> Graph:
    """A random strongly connected digraph: a random Hamiltonian cycle plus m - n random arcs."""
    rng = random.Random(seed)
    order = list(range(n))
    rng.shuffle(order)
    arcs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    while len(arcs) < m:
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            arcs.add((u, v))
    edges = [(u, v, rng.randint(*cost)) for u, v in sorted(arcs)]

    def sampler(r: random.Random):
        u, v = r.randrange(n), r.randrange(n)
        while u == v:
            v = r.randrange(n)
        return (u, v, r.randint(*cost))

    return Graph(f"strongly-connected(n={n},m={len(edges)})", edges, n, sampler)


def road_network(n_edges: int, seed: int = 0, town: int = 8, streets: int = 12, depth: int = 2,
                 cost: tuple = (1, 10)) -> Graph:
    """Road-like sparse graph with one giant (weakly) connected component.

    Towns of ``town`` vertices joined by ``streets`` two-way streets (a random spanning tree plus
    extras: strongly connected, several routes per pair); each town but the first has a one-way
    highway from a random vertex to a random vertex of a parent town, parents drawn among towns
    less than ``depth`` highways from the first one. Every vertex is connected to every other
    (ignoring direction), but a vertex reaches only its town and the towns on its way to the
    root, so the closure is ~town * (depth + 1) rows per vertex: a strongly connected sparse graph
    of this size would have a closure of n^2 (10^9 rows at 3*10^4 vertices), beyond memory here.
    """
    rng = random.Random(seed)
    per_town = 2 * streets + 1
    n_towns = max(1, n_edges // per_town)
    edges = []
    level = [0] * n_towns
    shallow = [0]
    for t in range(n_towns):
        base = t * town
        und = set()
        for k in range(1, town):
            und.add((base + k, base + rng.randrange(k)))
        while len(und) < streets:
            u, v = base + rng.randrange(town), base + rng.randrange(town)
            if u != v and (u, v) not in und and (v, u) not in und:
                und.add((u, v))
        for u, v in und:
            c = rng.randint(*cost)
            edges += [(u, v, c), (v, u, c)]
        if t:
            p = rng.choice(shallow)
            level[t] = level[p] + 1
            if level[t] < depth:
                shallow.append(t)
            edges.append((base + rng.randrange(town), p * town + rng.randrange(town), rng.randint(*cost) * 5))
    n = n_towns * town
    live = {(u, v) for u, v, _ in edges}

    def sampler(r: random.Random):  # a new street inside a town (keeps the closure's shape)
        base = r.randrange(n_towns) * town
        u, v = base + r.randrange(town), base + r.randrange(town)
        while u == v:
            v = base + r.randrange(town)
        return (u, v, r.randint(*cost))

    return Graph(f"road(n={n},m={len(edges)})", edges, n, sampler)


def delete_one_at_a_time(graph: Graph, n_deletes: int, seed: int = 0, start: int = 1) -> list:
    """The seed's deletion stream: after loading every link, delete ``n_deletes`` random links,
    one per batch ``([], [(src, dst)], now)``."""
    rng = random.Random(seed)
    keys = [(u, v) for u, v, _ in graph.edges]
    rng.shuffle(keys)
    return [([], [k], start + i) for i, k in enumerate(keys[:n_deletes])]
