"""API contract: rejections with DATA_BAD_EDGE, errors, stats, snapshot versioning, workloads."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from core.errors import DATA_BAD_EDGE, ConfigError, StateError
from operators.triangles import BadEdge, ClassicalCounter, TriangleCounter, step
from operators.triangles.reference import check_invariants, reference_triangles
from operators.triangles.workloads import (adversarial_graph, adversarial_stream,
                                           adversarial_updates, churn_updates, power_law_edges)


def test_rejections_in_graph_modes():
    for mode in ("undirected", "directed"):
        tc = TriangleCounter(mode=mode)
        bad = tc.update(3, 3)
        assert isinstance(bad, BadEdge) and bad.code == DATA_BAD_EDGE and "self-loop" in bad.reason
        assert tc.update(1, 2, -1).reason == "delete of an absent edge"
        assert tc.update(2 ** 63, 1) is not None  # outside int64
        assert tc.update(1, 2, 0) is None and tc.stats()["D"] == 0  # weight 0: no-op
        assert tc.stats()["rejected_rows"] == 3 and tc.stats()["D"] == 0
        bad = tc.apply_batch(np.array([1, 5, 1, 7]), np.array([2, 5, 2, 8]),
                             np.array([1, 1, -2, -1]))
        assert [(b.index, b.code) for b in bad] == [(1, DATA_BAD_EDGE), (2, DATA_BAD_EDGE),
                                                    (3, DATA_BAD_EDGE)]
        assert tc.stats()["D"] == (2 if mode == "undirected" else 1)


def test_reference_counts_repeated_inserts():
    tc = TriangleCounter(mode="undirected")
    for u, v in [(1, 2), (2, 3), (3, 1), (2, 1)]:  # (2, 1) is a second reference to {1, 2}
        tc.update(u, v)
    assert tc.count == 1 and tc.stats()["edges_with_extra_refs"] == 1
    tc.update(1, 2, -1)
    assert tc.count == 1  # one reference left
    tc.update(2, 1, -1)
    assert tc.count == 0
    assert tc.update(1, 2, -1) is not None
    check_invariants(tc)


def test_three_relation_accepts_negative_multiplicities_and_rejects_unknown_relation():
    tc = TriangleCounter(mode="three_relation")
    tc.update(1, 2, -2, relation="R")
    tc.update(2, 3, 1, relation="S")
    tc.update(3, 1, 1, relation="T")
    assert tc.count == -2
    assert tc.update(1, 1, 1, relation="X").code == DATA_BAD_EDGE
    bad = tc.apply_batch(np.array([1, 1]), np.array([1, 1]), np.array([1, 1]),
                         np.array(["R", "Q"]))
    assert [b.index for b in bad] == [1]
    check_invariants(tc)


def test_config_errors():
    with pytest.raises(ConfigError):
        TriangleCounter(mode="bipartite")
    with pytest.raises(ConfigError):
        TriangleCounter(epsilon=1.5)
    with pytest.raises(ConfigError):
        TriangleCounter(mode="three_relation").update(1, 2)
    with pytest.raises(ConfigError):
        TriangleCounter(mode="undirected").update(1, 2, relation="R")
    with pytest.raises(ConfigError):
        TriangleCounter().apply_batch(np.array([1, 2]), np.array([2]))


def test_snapshot_versioning_and_corruption():
    tc = TriangleCounter(0.5)
    tc.apply_batch(np.array([1, 2, 3]), np.array([2, 3, 1]))
    data = tc.snapshot()
    assert TriangleCounter.restore(data).count == 1
    bumped = data[:6] + struct.pack(">H", 99) + data[8:]
    with pytest.raises(StateError, match="unknown encoding version 99"):
        TriangleCounter.restore(bumped)
    with pytest.raises(StateError):
        TriangleCounter.restore(b"not a snapshot")
    with pytest.raises(StateError):
        TriangleCounter.restore(data[:-8])


def test_stats_and_step():
    tc = TriangleCounter(0.5, mode="three_relation")
    st = tc.stats()
    for key in ("N", "D", "heavy_values", "view_entries", "major_rebalances",
                "minor_rebalances", "epsilon", "Q"):
        assert key in st
    assert set(st["heavy_values"]) == {"R", "S", "T"}
    assert set(st["view_entries"]) == {"V_RS", "V_ST", "V_TR"}
    tc2 = TriangleCounter(0.5)
    _, out = step(tc2, {"src": np.array([1, 2, 3, 4]), "dst": np.array([2, 3, 1, 4])})
    assert out["count"] == 1 and out["delta"] == 1 and [b.index for b in out["rejected"]] == [3]


def test_workloads_are_deterministic_and_valid():
    s, d, w = power_law_edges(5000, seed=3)
    s2, d2, w2 = power_law_edges(5000, seed=3)
    assert (s == s2).all() and (d == d2).all() and (w == w2).all()
    assert s.dtype == np.int64 and len(s) == 5000 and (s != d).all() and (w == 1).all()
    assert len({(min(a, b), max(a, b)) for a, b in zip(s.tolist(), d.tolist())}) == 5000
    deg = np.bincount(np.concatenate([s, d]))
    assert deg.max() > 20 * np.median(deg[deg > 0])  # heavy-tailed
    tc = TriangleCounter(0.5)
    assert tc.apply_batch(s, d, w) == []
    assert tc.count == reference_triangles(zip(s.tolist(), d.tolist()))
    cs, cd, cw = churn_updates(s, d, 1000, seed=1)
    assert tc.apply_batch(cs, cd, cw) == []
    assert tc.count == reference_triangles(zip(s.tolist(), d.tolist()))
    gs, gd, gw = adversarial_graph(1000, hubs=4)
    us, ud, uw = adversarial_updates(300, hubs=4)
    ss, sd, sw = adversarial_stream(1000, 300, hubs=4)
    assert (np.concatenate([gs, us]) == ss).all() and (np.concatenate([gw, uw]) == sw).all()
    a, b = TriangleCounter(0.5), ClassicalCounter()
    assert a.apply_batch(ss, sd, sw) == [] and b.apply_batch(ss, sd, sw) == []
    assert a.count == b.count
    check_invariants(a)


def test_bad_values_in_batches_are_rejected_rows_not_errors():
    for mode in ("undirected", "directed"):
        tc = TriangleCounter(mode=mode)
        src = np.array([1.0, np.nan, 2.0, 3.0, 0.5])  # e.g. an Arrow int column with a null
        dst = np.array([2.0, 3.0, 3.0, 1.0, 1.0])
        bad = tc.apply_batch(src, dst)
        assert [(b.index, b.code) for b in bad] == [(1, DATA_BAD_EDGE), (4, DATA_BAD_EDGE)]
        assert tc.count == 1
        obj = tc.apply_batch(np.array([1, None, 2 ** 64], dtype=object),
                             np.array([5, 6, 7], dtype=object))
        assert [b.index for b in obj] == [1, 2]
        assert tc.apply_batch(np.array([2 ** 63], dtype=np.uint64), np.array([1]))[0].index == 0
        check_invariants(tc)
