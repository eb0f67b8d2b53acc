"""Per-group aggregate estimates, Haas confidence intervals and sketch-size expectations.

Estimators (digest §6.1, "consistent reading" of Def. 7): with #g the group's population,
#s its sample size, #s_pred the sampled rows passing the WHERE predicate and s̄ the
(bootstrapped) mean of the aggregated attribute over those rows:
SUM = #g·(#s_pred/#s)·s̄, COUNT = #g·#s_pred/#s, AVG = s̄.

Confidence intervals (Haas 1997, digest §6.3): per-tuple Ỹ and σ̃ from the sample
(eqs. 5–7), scaled by #g for SUM/COUNT group totals; half-width ε = z·σ̃/√n. A group passes
``HAVING agg > c`` with probability Φ((EST − c)/se), se = ε/z; a fragment is in the sketch
with probability 1 − Π(1 − P(X_g)) over the groups with rows in it (independent groups),
and E(size) = Σ_r #R_r · P(r ∈ 𝒫) (unequal fragment sizes allowed).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

Z95 = NormalDist().inv_cdf(0.975)


def estimate(f: str, n_group: float, values: np.ndarray, pred: np.ndarray, mean: float | None = None) -> float:
    """One group's estimate of ``f`` from its sampled ``values`` and predicate flags ``pred``.

    ``mean`` is the (bootstrapped) mean of the values passing the predicate; computed from
    the sample when None."""
    values = np.asarray(values, dtype=np.float64)
    pred = np.asarray(pred, dtype=bool)
    n_s, n_pred = len(values), int(pred.sum())
    if n_s == 0:
        return math.nan
    if mean is None:
        mean = float(values[pred].mean()) if n_pred else 0.0
    if f == "count":
        return n_group * n_pred / n_s
    if f == "sum":
        return n_group * (n_pred / n_s) * mean
    if f == "avg":
        return mean if n_pred else math.nan
    raise ValueError(f"no estimator for {f!r} (SUM, COUNT, AVG)")


def haas(f: str, values: np.ndarray, pred: np.ndarray) -> dict:
    """Haas's large-sample quantities for one group's sample (per tuple, not scaled by #g)."""
    v = np.asarray(values, dtype=np.float64)
    u = np.asarray(pred, dtype=np.float64)
    n = len(v)
    uv = u * v

    def t(x):
        return float(x.mean())

    def t2(x, y=None):
        if n < 2:
            return 0.0
        y = x if y is None else y
        return float(((x - x.mean()) * (y - y.mean())).sum() / (n - 1))

    out = {"n": n, "T_uv": t(uv), "T2_uv": t2(uv), "T_u": t(u), "T2_u": t2(u), "T11": t2(uv, u)}
    if f == "sum":
        out["Y"], out["var"] = out["T_uv"], out["T2_uv"]
    elif f == "count":
        out["Y"], out["var"] = out["T_u"], out["T2_u"]
    elif f == "avg":
        if out["T_u"] == 0:
            out["Y"], out["var"] = math.nan, 0.0
        else:
            r = out["T_uv"] / out["T_u"]
            out["Y"] = r
            out["var"] = (out["T2_uv"] - 2 * r * out["T11"] + r * r * out["T2_u"]) / out["T_u"] ** 2
    else:
        raise ValueError(f"no confidence interval for {f!r}")
    return out


def half_width(f: str, n_group: float, values: np.ndarray, pred: np.ndarray, z: float = Z95) -> float:
    """ε of the group's estimate (a group total for SUM/COUNT); 0 when the whole group is sampled."""
    if len(values) >= n_group:
        return 0.0
    h = haas(f, values, pred)
    sigma = math.sqrt(max(h["var"], 0.0))
    if f in ("sum", "count"):
        sigma *= n_group
    return z * sigma / math.sqrt(max(h["n"], 1))


def pass_probability(est: float, se: float, op: str, c: float) -> float:
    """P(group's true aggregate satisfies ``agg op c``) under the normal approximation."""
    if math.isnan(est):
        return 0.0
    if se <= 0:
        return float(_cmp(op, est, c))
    if op in (">", ">="):
        return NormalDist().cdf((est - c) / se)
    if op in ("<", "<="):
        return NormalDist().cdf((c - est) / se)
    return float(_cmp(op, est, c))


def _cmp(op: str, a: float, b: float) -> bool:
    return {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b, "=": a == b, "<>": a != b, "!=": a != b}[op]


def fragment_probability(p_groups) -> float:
    """P(fragment in the sketch) for independent groups: 1 − Π(1 − P(X_g))."""
    return 1.0 - float(np.prod(1.0 - np.asarray(p_groups, dtype=np.float64)))


def frechet_bounds(p_groups) -> tuple[float, float]:
    """Bounds without independence: max_j P(X_j) ≤ P(∪) ≤ min(1, Σ_j P(X_j)) (digest errata 6)."""
    p = np.asarray(p_groups, dtype=np.float64)
    return float(p.max()), float(min(1.0, p.sum()))


def expected_size(fragment_sizes, fragment_probs) -> float:
    return float(np.dot(np.asarray(fragment_sizes, dtype=np.float64), np.asarray(fragment_probs, dtype=np.float64)))
