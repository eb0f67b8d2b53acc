"""Stratified reservoir sampling on the group-by columns (cost-based selection digest §5).

Each group g (stratum) keeps a uniform sample of ``k_g = max(1, ceil(θ·#g))`` of its rows, so
every group is represented; when there are more groups than ``θ·|R|`` the sampler falls back
to one uniform reservoir of ``ceil(θ·|R|)`` rows over the whole table (not every group can be
represented anyway). A query without GROUP BY is a single stratum, i.e. plain reservoir
sampling. The per-group reservoir is drawn as "the k_g rows with the smallest random keys",
which has the same distribution as Algorithm R over the group's rows and vectorises.
The bootstrap (B = 50 resamples of each stratum, with replacement, of the stratum's size)
averages the resample means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Sample:
    rows: np.ndarray  # indices into the input rows, sorted by group
    group: np.ndarray  # group id of each sampled row
    group_sizes: np.ndarray  # #g for every group (population)
    fallback: bool  # True: uniform whole-table reservoir instead of strata
    theta: float

    def per_group(self) -> np.ndarray:
        """#s: number of sampled rows of every group."""
        return np.bincount(self.group, minlength=len(self.group_sizes))


def stratified_sample(group_ids: np.ndarray, theta: float, rng: np.random.Generator) -> Sample:
    """Sample rows stratified by ``group_ids`` (ints 0..G-1) at rate ``theta``."""
    if not 0 < theta <= 1:
        raise ValueError(f"sample rate theta must be in (0, 1], got {theta}")
    group_ids = np.asarray(group_ids, dtype=np.int64)
    n = len(group_ids)
    n_groups = int(group_ids.max()) + 1 if n else 0
    sizes = np.bincount(group_ids, minlength=n_groups)
    keys = rng.random(n)
    if n_groups > theta * n:
        k = min(n, math.ceil(theta * n))
        rows = np.sort(np.argsort(keys, kind="stable")[:k])
        rows = rows[np.argsort(group_ids[rows], kind="stable")]
        return Sample(rows, group_ids[rows], sizes, True, theta)
    order = np.lexsort((keys, group_ids))  # by group, then random key
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.arange(n) - np.repeat(starts, sizes)
    quota = np.maximum(1, np.ceil(theta * sizes - 1e-9)).astype(np.int64)
    take = rank < np.repeat(quota, sizes)
    rows = order[take]
    return Sample(rows, group_ids[rows], sizes, False, theta)


def bootstrap_means(values: np.ndarray, group: np.ndarray, n_groups: int, rng: np.random.Generator,
                    resamples: int = 50) -> np.ndarray:
    """Per group, the average over ``resamples`` bootstrap resamples of the resample mean.

    ``values``/``group`` are the sampled rows sorted by group. Every resample of a stratum has
    the stratum's size, so the average of the B resample means is the mean of all B·#s draws.
    Groups without sampled rows get NaN."""
    values = np.asarray(values, dtype=np.float64)
    counts = np.bincount(group, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    m = len(values)
    if m == 0:
        return np.full(n_groups, np.nan)
    draw_group = np.tile(group, resamples)
    offs = np.floor(rng.random(m * resamples) * counts[draw_group]).astype(np.int64)
    drawn = values[starts[draw_group] + offs]
    sums = np.bincount(draw_group, weights=drawn, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / (counts * resamples)
