"""RandomUpdates picks the keys it updates and deletes uniformly among the live ones (no hot
spot a bench would hide its cost behind), or with a Zipf skew when asked."""

from __future__ import annotations

from collections import Counter

import pytest

from core.config import parse_schema
from devstack.producer import RandomUpdates

TABLE = parse_schema({"tables": [{"name": "t", "topic": "t", "primary_key": "id",
                                  "columns": {"id": "long", "v": "long"}}]}).tables[0]


def _touched(gen: RandomUpdates, n: int) -> Counter:
    hits = Counter()
    for _ in range(n):
        op, before, after = gen.next()
        if op in ("u", "d"):
            hits[before["id"]] += 1
    return hits


def test_updates_and_deletes_are_uniform_over_a_large_table():
    live = [{"id": i, "v": 0} for i in range(20_000)]
    gen = RandomUpdates(TABLE, seed=3, live=live, mix=(0.0, 1.0, 0.0))
    hits = _touched(gen, 40_000)
    # every quarter of the key space gets about a quarter of the changes (a hot spot of 64
    # keys would put them all in the first)
    quarters = Counter(k * 4 // 20_000 for k in hits.elements())
    assert all(9_000 < quarters[q] < 11_000 for q in range(4)), quarters
    assert len(hits) > 17_000  # 40k uniform draws over 20k keys reach ~86% of them


def test_live_keys_stay_exact_under_deletes():
    gen = RandomUpdates(TABLE, seed=5, live=[{"id": i, "v": 0} for i in range(6_000)])
    for _ in range(30_000):
        gen.next()
    assert sorted(gen._keys) == sorted(gen.live) and len(set(gen._keys)) == len(gen._keys)
    assert all(gen._keys[gen._pos[k]] == k for k in gen.live)


def test_zipf_puts_a_hot_spot_on_request():
    gen = RandomUpdates(TABLE, seed=7, live=[{"id": i, "v": 0} for i in range(10_000)], mix=(0.0, 1.0, 0.0),
                        zipf=1.2)
    hits = _touched(gen, 20_000)
    top = sum(c for _, c in hits.most_common(64))
    assert top > 10_000  # most changes on a few keys
    with pytest.raises(ValueError):
        RandomUpdates(TABLE, zipf=0)
