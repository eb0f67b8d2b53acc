"""The advisor picks (nearly) the truly smallest safe sketch on generated TPC-H and synthetic data.

Small versions of ``bench.harness.advisor_accuracy`` (the full figures are in
bench/results/advisor.md): random Q-AGH queries with selective HAVING thresholds; true sizes
from the DuckDB lineage oracle. Seeds are fixed, so the rates are reproducible."""

from __future__ import annotations

import pytest

from bench.harness.advisor_accuracy import crimes_queries, evaluate, rates, tpch_queries
from bench.harness.datasets import load_tpch, make_crimes


@pytest.fixture(scope="module")
def tpch():
    return load_tpch(0.01, ("lineitem", "orders"))


def test_tpch_top3(tpch):
    outs = evaluate(tpch_queries(tpch, 8, seed=11, n_group=3), tpch)
    assert len(outs) == 8
    r = rates(outs)
    assert r[3] >= 0.75, r
    # the chosen sketch is never much bigger than the optimal one
    assert all(o.true[o.ranked[0]] <= o.best_true + 0.15 for o in outs)


def test_crimes_top1():
    crimes = {"crimes": make_crimes(6000, seed=5)}
    outs = evaluate(crimes_queries(crimes, 8, seed=12), crimes)
    assert len(outs) == 8
    r = rates(outs)
    assert r[1] >= 0.75 and r[3] == 1.0, r
