"""IMP's Crimes queries (synthetic crimes table) and synthetic query shapes: engine == oracle under deltas."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from operators.sketch import RangePartition, SketchMaintainer
from bench.harness.datasets import (
    CRIMES_BEAT_BOUNDARIES,
    focused_delta,
    make_crimes,
    make_groups,
    make_r500,
    make_tjoinhelp,
    random_delta,
)
from tests.sketch_tpch.queries import crimes_queries, synthetic_queries

from tests.oracles.sketch_reference import fragment_ids

from .engine_check import check_state, step

CRIMES_ROWS = 20_000
CQ = crimes_queries(threshold=60)  # 1000 in the artifact, for the ~6.7M-row real table
SQ = synthetic_queries()
SCHEDULE = [(size, kind) for size in (10, 100, 1000) for kind in ("insert", "delete", "mix")]
FOCUSED = [(100, "lineage_delete"), (3, "wipe"), (300, "lineage_insert"), (400, "lineage_mix")]
CRIME_GROUPS = (("beat", "district", "ward", "community_area"),)


@pytest.fixture(scope="module")
def crimes():
    return {"crimes": make_crimes(CRIMES_ROWS, seed=3)}


@pytest.fixture(scope="module")
def synthetic():
    helper = make_tjoinhelp(5000)
    ttid = helper.column("ttid").to_numpy()
    return {
        "r500": make_r500(20_000, seed=1),
        "t1gb1000g": make_groups(20_000, 1000, seed=2),
        "t1gbjoin": make_groups(20_000, 5000, seed=4),
        "tjoinhelp": helper,
        "tjoinhelppercent5": helper.filter(ttid % 20 == 0),
    }


def equal_width(lo: int, hi: int, n: int) -> list[int]:
    return sorted(set(int(x) for x in np.linspace(lo, hi, n + 1)))


def run_schedule(name, sql, tables, partitions, groups_of=None):
    m = SketchMaintainer.from_sql(sql, partitions=partitions)
    m.initialize(dict(tables))
    ref = check_state(m, sql, tables, partitions, f"{name} initial")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    (table,) = partitions
    part = partitions[table]
    key_group = next((g for g in (groups_of or ()) if part.attribute in g), (part.attribute,))
    changed = 0
    for i, (size, kind) in enumerate(SCHEDULE + FOCUSED):
        if kind.startswith(("lineage", "wipe")):
            frags = fragment_ids(tables[table].column(part.attribute), part.boundaries).to_numpy()
            delta, after = focused_delta(tables[table], frags, ref[table], size, kind, rng, groups_of, key_group)
        else:
            delta, after = random_delta(tables[table], size, kind, rng, groups_of)
        before = ref
        tables, ref = step(m, sql, tables, partitions, {table: delta}, ref, f"{name} delta {i} ({kind} {size})", after={table: after})
        changed += before != ref
    return changed


@pytest.mark.parametrize("name", sorted(CQ))
def test_crimes_query_under_deltas(name, crimes):
    q = CQ[name]
    parts = {"crimes": RangePartition("beat", CRIMES_BEAT_BOUNDARIES)}
    assert run_schedule(name, q.sql, crimes, parts, CRIME_GROUPS) > 0


@pytest.mark.parametrize("name", sorted(SQ))
def test_synthetic_query_under_deltas(name, synthetic):
    q = SQ[name]
    n_frag = 1000 if q.table == "r500" else 500
    parts = {q.table: RangePartition("a", equal_width(1, 5001 if q.table != "t1gb1000g" else 1001, n_frag))}
    changed = run_schedule(name, q.sql, synthetic, parts)
    assert changed > 0, "the deltas never changed the sketch: the test would not notice a frozen engine"
