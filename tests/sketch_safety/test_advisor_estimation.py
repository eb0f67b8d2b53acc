"""Cost-based digest §11 oracles (E1–E8): sketch sizes, estimators, Haas intervals, sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.errors import UnsupportedSqlError
from operators.sketch import RangePartition
from operators.sketch_advisor import (advise, advise_for_cli, bootstrap_means, candidates_for, estimate,
                                      expected_size, fragment_probability, haas, half_width, pass_probability,
                                      size_from_groups, stratified_sample, verify)
from operators.sketch_advisor.estimate import frechet_bounds
from tests.oracles.sketch_reference import reference_sketch

E1_SQL = "SELECT sum(numcrimes), pid, month, year FROM crimes GROUP BY pid, month, year HAVING sum(numcrimes) >= 100"
PARTS = {
    ("crimes", "pid"): RangePartition("pid", [1, 4, 7, 10]),
    ("crimes", "month"): RangePartition("month", [1, 5, 9, 13]),
    ("crimes", "year"): RangePartition("year", [2010, 2013, 2021, 2025]),
}
GID = np.array([0, 1, 1, 2, 2, 3, 4, 5])  # row -> group of E1
GROUP_SIZES = np.array([1, 2, 2, 1, 1, 1])
SAMPLE = np.array([88, 101, 86, 157, 83, 58])  # Fig. 5: one tuple per group


def _sizes(crimes, selected):
    out = {}
    for (t, a), part in PARTS.items():
        frag = part.fragment_of(crimes["crimes"].column(a))
        sizes = np.bincount(frag, minlength=part.n_fragments + 1)
        out[a] = size_from_groups(selected, GID, frag, sizes)
    return out


def test_e1_exact_sketches_and_choice(crimes):
    cands = advise(E1_SQL, crimes, theta=1.0, candidates=[("crimes", a) for a in ("pid", "month", "year")],
                   partitions=PARTS)
    assert [(c.attribute, c.estimate) for c in cands] == [("year", 5 / 8), ("month", 7 / 8), ("pid", 1.0)]
    assert all(c.ci_low == c.estimate == c.ci_high for c in cands)  # θ = 1: the sample is the data
    checked = verify(E1_SQL, crimes, cands, partitions=PARTS, how=reference_sketch)
    assert [c.true for c in checked] == [5 / 8, 7 / 8, 1.0]
    # E6: a random choice covers (8 + 7 + 5) / 3 rows on average, CB-OPT-GB 5
    assert sum(c.true for c in checked) / 3 * 8 == pytest.approx(6.667, abs=1e-3)


def test_e2_estimates_from_the_fig5_sample(crimes):
    est = np.array([estimate("sum", n, [v], [True]) for n, v in zip(GROUP_SIZES, SAMPLE)])
    assert est.tolist() == [88, 202, 172, 157, 83, 58]
    selected = est >= 100
    assert selected.tolist() == [False, True, True, True, False, False]
    assert _sizes(crimes, selected) == {"pid": 8, "month": 7, "year": 5}


def test_e3_estimation_error_flips_the_choice(crimes):
    est = GROUP_SIZES * SAMPLE
    true = np.array([88, 174, 182, 157, 83, 58])
    true_sizes = _sizes(crimes, true >= 180)
    est_sizes = _sizes(crimes, est >= 180)
    assert true_sizes == {"pid": 4, "month": 3, "year": 5}
    assert est_sizes == {"pid": 2, "month": 4, "year": 5}
    rse = {a: abs(est_sizes[a] - true_sizes[a]) / true_sizes[a] for a in true_sizes}
    assert rse["pid"] == 0.5 and rse["month"] == pytest.approx(1 / 3) and rse["year"] == 0
    ranked = sorted(est_sizes, key=est_sizes.get)
    opt = min(true_sizes, key=true_sizes.get)
    assert ranked[0] == "pid" and ranked[0] != opt and opt in ranked[:2]  # top-1 miss, top-2 hit


def test_e4_estimators_and_haas():
    values, pred = [4, 6, 8], [False, True, True]
    assert estimate("sum", 10, values, pred) == pytest.approx(46.667, abs=1e-3)
    assert estimate("count", 10, values, pred) == pytest.approx(6.667, abs=1e-3)
    assert estimate("avg", 10, values, pred) == 7
    h = haas("avg", values, pred)
    assert h["T_uv"] == pytest.approx(4.6667, abs=1e-4)
    assert h["T2_uv"] == pytest.approx(17.3333, abs=1e-4)
    assert h["T_u"] == pytest.approx(0.6667, abs=1e-4)
    assert h["T2_u"] == pytest.approx(0.3333, abs=1e-4)
    assert h["T11"] == pytest.approx(2.3333, abs=1e-4)
    assert h["var"] == pytest.approx(2.25, abs=1e-4)
    eps = half_width("sum", 10, values, pred)
    assert eps == pytest.approx(47.11, abs=0.01)
    se = 10 * math.sqrt(17.3333333) / math.sqrt(3)
    assert pass_probability(46.667, se, ">", 40) == pytest.approx(0.609, abs=1e-3)
    assert pass_probability(46.667, se, ">", 100) == pytest.approx(0.0133, abs=1e-3)
    assert half_width("sum", 3, values, pred) == 0  # the whole group is sampled


def test_e5_fragment_probability_and_expected_size():
    assert fragment_probability([0.6, 0.5]) == pytest.approx(0.8)
    assert frechet_bounds([0.6, 0.5]) == (0.6, 1.0)
    p = fragment_probability([0.95] * 3)
    assert p == pytest.approx(0.999875)
    assert expected_size([1000, 1000], [0.8, p]) == pytest.approx(1799.875)


def test_e7_sampler():
    rng = np.random.default_rng(1)
    gid = np.repeat(np.arange(5), [1, 2, 40, 100, 57])
    s = stratified_sample(gid, 0.1, rng)
    assert not s.fallback
    assert s.per_group().tolist() == [max(1, math.ceil(0.1 * n)) for n in (1, 2, 40, 100, 57)]
    assert len(set(s.rows.tolist())) == len(s.rows) and (gid[s.rows] == s.group).all()
    many = np.arange(50)  # 50 groups > 0.1 * 50 rows: whole-table reservoir
    f = stratified_sample(many, 0.1, rng)
    assert f.fallback and len(f.rows) == 5
    assert bootstrap_means(np.full(7, 3.5), np.zeros(7, dtype=int), 1, rng)[0] == 3.5
    # over many seeds the bootstrapped SUM estimate is unbiased for the group total
    values = np.arange(1, 101, dtype=float)
    ests = []
    for seed in range(300):
        r = np.random.default_rng(seed)
        smp = stratified_sample(np.zeros(100, dtype=int), 0.1, r)
        mean = bootstrap_means(values[smp.rows], smp.group, 1, r)[0]
        ests.append(100 * mean)
    assert np.mean(ests) == pytest.approx(values.sum(), rel=0.03)


def test_e8_prefilter(crimes):
    assert candidates_for(E1_SQL, crimes, fragments=3) == [("crimes", "pid"), ("crimes", "month"),
                                                            ("crimes", "year"), ("crimes", "numcrimes")]
    assert candidates_for(E1_SQL, crimes, fragments=1000) == []
    assert candidates_for(E1_SQL, crimes, strategy="gb", fragments=3) == [("crimes", "pid"), ("crimes", "month"),
                                                                           ("crimes", "year")]


def test_topk_and_cli(crimes):
    q = "SELECT pid, sum(numcrimes) AS s FROM crimes GROUP BY pid ORDER BY s DESC LIMIT 1"
    cands = advise(q, crimes, theta=1.0, candidates=[("crimes", "pid"), ("crimes", "year")], partitions=PARTS)
    # pid 8 wins (182): pid fragment [7,10) holds 4 rows (pids 7, 8); year 2015 → [2013, 2021) holds 5
    assert [(c.attribute, c.estimate) for c in cands] == [("pid", 4 / 8), ("year", 5 / 8)]
    text = advise_for_cli(E1_SQL, crimes, verify=True, fragments=3, how=reference_sketch)
    assert "chosen:" in text and "true" in text.splitlines()[0]
    unsafe = "SELECT pid, avg(numcrimes) AS s FROM crimes GROUP BY pid HAVING avg(numcrimes) < 90"
    assert [c.attribute for c in advise(unsafe, crimes, fragments=3)] == ["pid"]
    with pytest.raises(UnsupportedSqlError):
        advise("SELECT pid, s FROM (SELECT pid, sum(numcrimes) AS s FROM crimes GROUP BY pid) x", crimes)
