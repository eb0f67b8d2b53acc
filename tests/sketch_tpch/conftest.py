"""Shared fixtures: TPC-H SF 0.01 (generated once into bench/data/, git-ignored) and its lineitem partition."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bench.harness.datasets import load_tpch

TEST_SF = 0.01
N_FRAGMENTS = 1000  # as IMP: 1000 equi-depth fragments of lineitem.l_orderkey


def equi_depth_boundaries(values, n: int) -> list:
    """Our own equi-depth boundaries (not the engine's): n quantiles, duplicates merged, max+1 last."""
    v = np.sort(np.asarray(values))
    pos = (np.arange(n) * len(v)) // n
    b = list(dict.fromkeys(int(x) for x in v[pos]))
    b.append(int(v[-1]) + 1)
    return b


def make_partition(attribute: str, boundaries: list):
    try:
        from operators.sketch import RangePartition  # a plain data holder for the oracle
    except ImportError:
        try:
            from operators.sketch.partition import RangePartition
        except ImportError:
            return SimpleNamespace(attribute=attribute, boundaries=tuple(boundaries), n_fragments=len(boundaries) - 1)
    return RangePartition(attribute, boundaries)


@pytest.fixture(scope="session")
def tpch():
    return load_tpch(TEST_SF)


@pytest.fixture(scope="session")
def lineitem_partition(tpch):
    b = equi_depth_boundaries(tpch["lineitem"].column("l_orderkey").to_numpy(), N_FRAGMENTS)
    return {"lineitem": make_partition("l_orderkey", b)}
