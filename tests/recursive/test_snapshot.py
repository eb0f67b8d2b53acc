"""snapshot()/restore(): versioned, exact round trip, and the restored view keeps maintaining."""

from __future__ import annotations

import json
import random

import pytest

from core.errors import StateError
from bench.recursive_research import (
    DRedReachabilityView,
    ReachabilityView,
    RecomputeShortestPathView,
    RegionView,
    ShortestPathView,
)
from operators.recursive.views import ENCODING


def _stream(seed, n=7, steps=12, weighted=True):
    rng = random.Random(seed)
    live, out = set(), []
    for now in range(1, steps + 1):
        ins = [(rng.randrange(n), rng.randrange(n), rng.randint(1, 4),
                rng.choice([None, None, now + rng.randint(1, 4)])) for _ in range(rng.randint(0, 5))]
        dels = rng.sample(sorted(live), min(len(live), rng.randint(0, 2)))
        live |= {(a, b) for a, b, *_ in ins}
        live -= set(dels)
        out.append((ins, dels, now))
    return out


CASES = [
    (ReachabilityView, dict()),  # the defaults (one node): onenode.py, rebuilt from the front
    (ShortestPathView, dict()),
    (ReachabilityView, dict(nodes=3, ship="lazy")),
    (ReachabilityView, dict(nodes="vertex", ship="eager")),
    (ShortestPathView, dict(nodes=3)),
    (ShortestPathView, dict(nodes=2, aggregates=("cost", "hops"))),
    (DRedReachabilityView, dict(nodes=2)),
    (RecomputeShortestPathView, dict(nodes=2)),
]


@pytest.mark.parametrize("cls,kw", CASES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_round_trip_then_continue(cls, kw, seed):
    stream = _stream(seed)
    a = cls(**kw)
    for ins, dels, now in stream[:6]:
        a.apply(ins, dels, now=now)
    blob = a.snapshot()
    assert json.loads(blob)["encoding"] == ENCODING
    b = cls(**kw)
    b.restore(blob)
    assert b.rows() == a.rows()
    assert b.snapshot() == blob  # nothing lost or invented
    for ins, dels, now in stream[6:]:  # expiries armed before the snapshot still fire
        da, db = a.apply(ins, dels, now=now), b.apply(ins, dels, now=now)
        assert da == db and a.rows() == b.rows()
    for row in sorted(a.rows(), key=repr)[:5]:
        assert a.explain(row) == b.explain(row)


def test_region_round_trip():
    a = RegionView(k=2.5, nodes=2)
    a.apply([("sensor", i, (i, 0)) for i in range(6)] + [("trigger", i, 10) for i in range(4)]
            + [("seed", "r", 0)])
    b = RegionView(k=2.5, nodes=2)
    b.restore(a.snapshot())
    assert b.rows() == a.rows() and b.sizes() == a.sizes() == {"r": 6}
    assert a.apply(now=10) == b.apply(now=10)
    assert b.sizes() == {} and b.rows() == set()


def test_unknown_version_and_wrong_view():
    v = ReachabilityView()
    v.apply([(1, 2)])
    doc = json.loads(v.snapshot())
    doc["encoding"] = "ivmstream.recursive.v0"
    with pytest.raises(StateError):
        ReachabilityView().restore(json.dumps(doc).encode())
    with pytest.raises(StateError):
        ReachabilityView().restore(b"\x00not json")
    with pytest.raises(StateError):
        ShortestPathView().restore(v.snapshot())
    with pytest.raises(StateError):  # another partitioning would misplace every tuple
        ReachabilityView(nodes=2).restore(v.snapshot())
    s = ShortestPathView(aggregates=("cost", "hops"))
    s.apply([(1, 2, 1)])
    with pytest.raises(StateError):
        ShortestPathView().restore(s.snapshot())
