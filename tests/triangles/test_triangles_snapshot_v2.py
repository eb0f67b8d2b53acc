"""Snapshot encoding v2 (``triangles.ivm_eps.v2``): the heavy index and the view are stored
and restored as they were, not rebuilt; bytes whose derived parts do not fit their tuples, or
that name any class or function, are refused; snapshots written by the v1 encoder (fixtures
made with it) still restore."""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from core.errors import StateError
from operators.triangles import TriangleCounter
from operators.triangles.reference import check_invariants, reference_triangles

FIXTURES = Path(__file__).parent / "fixtures"
MODES = ["undirected", "directed", "three_relation"]


def skewed(mode: str) -> TriangleCounter:
    """The stream the v1 fixtures were written from: a few hubs (heavy) among light vertices."""
    rng = np.random.default_rng(7)
    n = 600 if mode == "three_relation" else 300
    s = np.concatenate([rng.integers(0, 4, n // 2), rng.integers(0, 40, n - n // 2)])
    d = rng.integers(0, 40, n)
    rel = list(rng.choice(["R", "S", "T"], n)) if mode == "three_relation" else None
    tc = TriangleCounter(0.5, mode=mode)
    tc.apply_batch(s, d, relation=rel, consolidate=False)  # in row order, as the fixtures were written
    return tc


def same_state(a: TriangleCounter, b: TriangleCounter) -> None:
    assert a.stats() == b.stats()
    ca, cb = a._core, b._core
    assert (ca.rows, ca.heavy, ca.rev_h, ca.rev_l, ca.views) == (cb.rows, cb.heavy, cb.rev_h, cb.rev_l, cb.views)
    assert a._extra == b._extra


def header(data: bytes) -> tuple[int, dict]:
    version, hlen = struct.unpack(">HI", data[6:12])
    return version, json.loads(data[12:12 + hlen])


def body(data: bytes):
    return pickle.loads(data[12 + struct.unpack(">HI", data[6:12])[1]:])


def with_body(data: bytes, parts) -> bytes:
    return data[:12 + struct.unpack(">HI", data[6:12])[1]] + pickle.dumps(parts, protocol=5)


@pytest.mark.parametrize("mode", MODES)
def test_v2_stores_the_derived_structures_and_restores_them_equal(mode):
    tc = skewed(mode)
    data = tc.snapshot()
    version, h = header(data)
    assert version == 2 and h["name"] == "triangles.ivm_eps.v2"
    rows, heavy, rev_h, rev_l, views, extra = body(data)
    assert (rows, heavy, rev_h, rev_l, views) == (tc._core.rows, tc._core.heavy, tc._core.rev_h, tc._core.rev_l,
                                                  tc._core.views)
    back = TriangleCounter.restore(data)
    same_state(back, tc)
    check_invariants(back)
    for u, v in [(0, 5), (1, 7), (2, 3), (0, 5)]:  # both go on identically
        rel = "R" if mode == "three_relation" else None
        assert (tc.update(u, v, relation=rel) is None) == (back.update(u, v, relation=rel) is None)
        assert tc.count == back.count
    check_invariants(back)


@pytest.mark.parametrize("mode", MODES)
def test_v1_fixtures_still_restore(mode):
    """Bytes written by the v1 encoder (rebuilds the index and view) before v2 existed."""
    data = (FIXTURES / f"ivm_eps_v1_{mode}.bin").read_bytes()
    assert header(data)[0] == 1
    back = TriangleCounter.restore(data)
    check_invariants(back)
    same_state(back, skewed(mode))
    if mode == "undirected":
        assert back._core.heavy[0] and back._core.views[0]  # the fixture exercises both
    again = TriangleCounter.restore(back.snapshot())  # and it moves to v2 at its next snapshot
    same_state(again, back)


def test_undirected_count_of_the_fixture_is_the_brute_force_one():
    rng = np.random.default_rng(7)
    s = np.concatenate([rng.integers(0, 4, 150), rng.integers(0, 40, 150)])
    d = rng.integers(0, 40, 300)
    back = TriangleCounter.restore((FIXTURES / "ivm_eps_v1_undirected.bin").read_bytes())
    assert back.count == reference_triangles({(min(u, v), max(u, v)) for u, v in zip(s.tolist(), d.tolist())
                                              if u != v})


def test_witness_views_are_stored_too():
    tc = TriangleCounter(0.5, mode="undirected", witnesses=True)
    rng = np.random.default_rng(3)
    tc.apply_batch(rng.integers(0, 6, 400), rng.integers(0, 60, 400))
    data = tc.snapshot()
    assert body(data)[4] == tc._core.views and any(tc._core.views[0].values())
    back = TriangleCounter.restore(data)
    same_state(back, tc)
    check_invariants(back)


def test_bytes_that_do_not_fit_or_name_code_are_refused():
    tc = skewed("undirected")
    data = tc.snapshot()
    rows, heavy, rev_h, rev_l, views, extra = body(data)
    y = next(iter(rev_h[0]))
    short = {k: dict(v) for k, v in rev_h[0].items()}
    short[y].popitem()  # one heavy-index entry lost
    with pytest.raises(StateError, match="reverse index sizes"):
        TriangleCounter.restore(with_body(data, (rows, heavy, [short], rev_l, views, extra)))
    with pytest.raises(StateError, match="tuple count differs"):
        TriangleCounter.restore(with_body(data, ([{**rows[0], 10 ** 6: {1: 1}}], heavy, rev_h, rev_l, views, extra)))
    with pytest.raises(StateError, match="is not part of a triangle state"):
        TriangleCounter.restore(with_body(data, (rows, heavy, rev_h, rev_l, views, np.int64(3))))
    with pytest.raises(StateError, match="six state parts"):
        TriangleCounter.restore(with_body(data, (rows, heavy)))
    with pytest.raises(StateError):
        TriangleCounter.restore(data[:-20])
    with pytest.raises(StateError, match="this build reads 1: triangles.ivm_eps.v1, 2: triangles.ivm_eps.v2"):
        TriangleCounter.restore(data[:6] + struct.pack(">H", 3) + data[8:])
