"""Deterministic edge-stream generators for the triangle operators (numpy only).

Every function returns int64 arrays ``(src, dst, weight)`` (weight +1 insert, −1 delete) and
is a pure function of its arguments and ``seed``.  Streams are for the undirected/directed
modes: no self-loops, no delete of an absent edge.

- ``power_law_edges``: a Chung–Lu graph (expected degrees ∝ rank^(−1/(γ−1))), distinct
  undirected edges in random order, vertex ids randomly permuted.
- ``churn_updates``: delete/re-insert pairs of random edges of a loaded graph (hubs are hit in
  proportion to their degree).
- ``adversarial_graph`` / ``adversarial_updates`` / ``adversarial_stream``: a few hubs all
  adjacent to one shared pool of leaves (≈ n_edges / hubs each), then updates that toggle
  hub–hub edges.  Each toggle touches a triangle with every leaf, so first-order IVM pays
  Θ(n_edges / hubs) per update; IVM^ε answers it from its heavy index and view.

Incremental rule, state, deletions: not applicable (data generators).
"""

from __future__ import annotations

import numpy as np

from core.errors import ConfigError


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


def power_law_edges(n_edges: int, seed: int = 0, gamma: float = 2.2,
                    avg_degree: float = 10.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_edges`` distinct undirected edges of a Chung–Lu power-law graph (inserts only)."""
    if n_edges < 1 or gamma <= 2.0:
        raise ConfigError(f"power_law_edges: need n_edges ≥ 1 and gamma > 2 "
                          f"(got {n_edges}, {gamma})")
    rng = np.random.default_rng(seed)
    nv = max(8, int(2 * n_edges / avg_degree))
    w = (np.arange(nv) + 1.0) ** (-1.0 / (gamma - 1.0))
    cdf = np.cumsum(w / w.sum())
    keys = np.empty(0, dtype=np.int64)
    draw = int(n_edges * 1.3) + 16
    for _ in range(50):
        u = np.searchsorted(cdf, rng.random(draw), side="right").clip(0, nv - 1)
        v = np.searchsorted(cdf, rng.random(draw), side="right").clip(0, nv - 1)
        ok = u != v
        lo, hi = np.minimum(u, v)[ok], np.maximum(u, v)[ok]
        keys = np.concatenate([keys, lo.astype(np.int64) * nv + hi])
        _, first = np.unique(keys, return_index=True)
        if len(first) >= n_edges:
            break
        draw *= 2
    else:
        raise ConfigError("power_law_edges: could not draw enough distinct edges")
    keys = keys[np.sort(first)[:n_edges]]
    perm = rng.permutation(nv).astype(np.int64)
    src, dst = perm[keys // nv], perm[keys % nv]
    flip = rng.random(n_edges) < 0.5  # random orientation of each pair
    src, dst = np.where(flip, dst, src), np.where(flip, src, dst)
    return src, dst, _ones(n_edges)


def churn_updates(src: np.ndarray, dst: np.ndarray, n_updates: int,
                  seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_updates`` rows: (delete, re-insert) pairs of random edges of the given graph."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(src), size=(n_updates + 1) // 2)
    s = np.repeat(np.asarray(src, dtype=np.int64)[pick], 2)[:n_updates]
    d = np.repeat(np.asarray(dst, dtype=np.int64)[pick], 2)[:n_updates]
    w = np.tile(np.array([-1, 1], dtype=np.int64), len(pick))[:n_updates]
    return s, d, w


def adversarial_graph(n_edges: int, hubs: int = 4,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hubs 0..hubs−1, each adjacent to every leaf of one pool of ⌈n_edges/hubs⌉ leaves."""
    if hubs < 2 or n_edges < hubs:
        raise ConfigError(f"adversarial_graph: need hubs ≥ 2 and n_edges ≥ hubs "
                          f"(got {hubs}, {n_edges})")
    rng = np.random.default_rng(seed)
    leaves = -(-n_edges // hubs)
    h = np.repeat(np.arange(hubs, dtype=np.int64), leaves)
    leaf = np.tile(np.arange(hubs, hubs + leaves, dtype=np.int64), hubs)
    order = rng.permutation(len(h))[:n_edges]
    return h[order], leaf[order], _ones(len(order))


def adversarial_updates(n_updates: int, hubs: int = 4,
                        seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Toggles of random hub–hub edges (insert if absent, else delete), starting from none."""
    rng = np.random.default_rng(seed + 1)
    a = rng.integers(0, hubs, size=n_updates)
    b = (a + rng.integers(1, hubs, size=n_updates)) % hubs
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    present = np.zeros((hubs, hubs), dtype=bool)
    w = np.empty(n_updates, dtype=np.int64)
    for t in range(n_updates):  # sequential state: toggles depend on the past
        p = present[lo[t], hi[t]]
        w[t] = -1 if p else 1
        present[lo[t], hi[t]] = not p
    return lo.astype(np.int64), hi.astype(np.int64), w


def adversarial_stream(n_edges: int, n_updates: int, hubs: int = 4,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``adversarial_graph`` followed by ``adversarial_updates`` as one stream."""
    g = adversarial_graph(n_edges, hubs, seed)
    u = adversarial_updates(n_updates, hubs, seed)
    return tuple(np.concatenate([x, y]) for x, y in zip(g, u))
