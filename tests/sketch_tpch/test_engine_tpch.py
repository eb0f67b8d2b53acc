"""The 12 IMP TPC-H queries on SF 0.01 under random lineitem deltas: engine == oracle after every delta.

IMP's delta schedule (anchor §2.1): 10, 50, 100, 500, 1000 rows × insert, delete, 50/50 mix,
applied one after the other to lineitem (1000 equi-depth fragments on l_orderkey). After every
delta the engine's sketch must equal the accurate (Lineage) sketch captured from scratch by the
oracle, its SketchDelta must be the difference of consecutive reference sketches, and its
result must equal DuckDB's (order-insensitive except under LIMIT).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from operators.sketch import SketchMaintainer
from operators.sketch_reference import fragment_ids
from operators.sketch_reference.datasets import LINEITEM_GROUPS, focused_delta, random_delta
from tests.sketch_tpch.queries import tpch_queries

from .engine_check import check_state, step

Q = tpch_queries()
SCHEDULE = [(size, kind) for size in (10, 50, 100, 500, 1000) for kind in ("insert", "delete", "mix")]
# Random deltas rarely move these sketches (most fragments hold many contributing tuples), so a
# second schedule aims at the current sketch: deletes inside it, whole sketch fragments wiped,
# inserts built from contributing rows with orderkeys from anywhere (new fragments can enter).
FOCUSED = [(200, "lineage_delete"), (3, "wipe"), (200, "lineage_insert"), (400, "lineage_mix"), (1000, "lineage_delete"), (5, "wipe"), (300, "lineage_insert")]


@pytest.mark.parametrize("name", sorted(Q))
def test_imp_tpch_query_under_lineitem_deltas(name, tpch, lineitem_partition):
    sql = Q[name].sql
    m = SketchMaintainer.from_sql(sql, partitions=lineitem_partition)
    m.initialize(dict(tpch))
    tables = dict(tpch)
    ref = check_state(m, sql, tables, lineitem_partition, f"{name} initial")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for i, (size, kind) in enumerate(SCHEDULE):
        delta, after = random_delta(tables["lineitem"], size, kind, rng, LINEITEM_GROUPS)
        tables, ref = step(m, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} delta {i} ({kind} {size})", after={"lineitem": after})
    part = lineitem_partition["lineitem"]
    moved = 0
    for i, (size, kind) in enumerate(FOCUSED):
        frags = fragment_ids(tables["lineitem"].column("l_orderkey"), part.boundaries).to_numpy()
        delta, after = focused_delta(tables["lineitem"], frags, ref["lineitem"], size, kind, rng, LINEITEM_GROUPS)
        before = ref
        tables, ref = step(m, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} focused {i} ({kind} {size})", after={"lineitem": after})
        moved += before != ref
    assert moved >= 1, f"{name}: the focused deltas never moved the sketch; the test lost its teeth"


@pytest.mark.parametrize("name", ["tpch_q03", "tpch_q10", "tpch_q12"])
def test_snapshot_restore_mid_history(name, tpch, lineitem_partition):
    """A restored maintainer continues exactly like the original (and like the oracle)."""
    sql = Q[name].sql
    m = SketchMaintainer.from_sql(sql, partitions=lineitem_partition)
    m.initialize(dict(tpch))
    rng = np.random.default_rng(5)
    tables = dict(tpch)
    ref = check_state(m, sql, tables, lineitem_partition, f"{name} initial", results=False)
    delta, after = random_delta(tables["lineitem"], 300, "mix", rng, LINEITEM_GROUPS)
    tables, ref = step(m, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} before snapshot", after={"lineitem": after})
    m2 = SketchMaintainer.restore(m.snapshot())
    delta, after = random_delta(tables["lineitem"], 500, "mix", rng, LINEITEM_GROUPS)
    t1, ref1 = step(m, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} original after snapshot", after={"lineitem": after})
    t2, ref2 = step(m2, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} restored", after={"lineitem": after})
    assert ref1 == ref2


def test_empty_delta_changes_nothing(tpch, lineitem_partition):
    sql = Q["tpch_q03"].sql
    m = SketchMaintainer.from_sql(sql, partitions=lineitem_partition)
    m.initialize(dict(tpch))
    before = {t: list(v) for t, v in m.sketch.items()}
    empty = tpch["lineitem"].slice(0, 0)
    import pyarrow as pa

    empty = empty.append_column("__weight", pa.array([], pa.int64()))
    d = m.apply({"lineitem": empty})
    assert not any(d.added.values()) and not any(d.removed.values())
    assert {t: list(v) for t, v in m.sketch.items()} == before
