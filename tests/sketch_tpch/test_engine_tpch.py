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
from tests.oracles.sketch_reference import fragment_ids
from bench.harness.datasets import LINEITEM_GROUPS, focused_delta, random_delta
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


@pytest.mark.parametrize("name", ["tpch_q03", "tpch_q04", "tpch_q10", "tpch_q12"])
def test_orders_and_lineitem_updated_in_one_batch(name, tpch, lineitem_partition):
    """Beyond IMP (one updated table per round): every batch updates orders (o_orderdate and
    o_orderpriority moved to another order's values, so orders cross the date predicates) and
    applies a random lineitem mix, both in one ``apply``."""
    import pyarrow as pa

    from bench.harness.datasets import with_weight

    sql = Q[name].sql
    m = SketchMaintainer.from_sql(sql, partitions=lineitem_partition)
    m.initialize(dict(tpch))
    tables = dict(tpch)
    ref = check_state(m, sql, tables, lineitem_partition, f"{name} initial")
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    moved = 0
    for i in range(4):
        orders = tables["orders"]
        # half the updated orders belong to the current lineage, so the sketch can lose them
        frags = fragment_ids(orders.column("o_orderkey"), lineitem_partition["lineitem"].boundaries).to_numpy()
        inside = np.flatnonzero(np.isin(frags, ref["lineitem"]))
        pick = np.unique(np.concatenate([rng.choice(orders.num_rows, 40, replace=False), rng.choice(inside, min(40, len(inside)), replace=False)]))
        old = orders.take(pa.array(pick))
        donors = orders.take(pa.array(rng.integers(0, orders.num_rows, len(pick))))
        new = old.set_column(old.schema.get_field_index("o_orderdate"), "o_orderdate", donors.column("o_orderdate"))
        new = new.set_column(new.schema.get_field_index("o_orderpriority"), "o_orderpriority", donors.column("o_orderpriority"))
        keep = np.ones(orders.num_rows, dtype=bool)
        keep[pick] = False
        orders_after = pa.concat_tables([orders.filter(pa.array(keep)), new])
        orders_delta = pa.concat_tables([with_weight(old, -1), with_weight(new, 1)])
        li_delta, li_after = random_delta(tables["lineitem"], 100, "mix", rng, LINEITEM_GROUPS)
        before = ref
        tables, ref = step(
            m, sql, tables, lineitem_partition, {"orders": orders_delta, "lineitem": li_delta}, ref,
            f"{name} batch {i}", after={"orders": orders_after, "lineitem": li_after},
        )
        moved += before != ref
    assert moved >= 1, f"{name}: order updates never moved the sketch"


@pytest.mark.parametrize("name", ["tpch_q01", "tpch_q03", "tpch_q09", "tpch_q10"])
def test_lineitem_streamed_in_from_empty(name, tpch, lineitem_partition):
    """Capture on an empty lineitem, then the whole table arrives in 4 insert batches (and the
    last batch also deletes a slice of the first): incremental == capture at every step."""
    import pyarrow as pa

    from bench.harness.datasets import with_weight

    sql = Q[name].sql
    li = tpch["lineitem"]
    tables = dict(tpch, lineitem=li.slice(0, 0))
    m = SketchMaintainer.from_sql(sql, partitions=lineitem_partition)
    m.initialize(dict(tables))
    ref = check_state(m, sql, tables, lineitem_partition, f"{name} empty lineitem")
    cuts = np.linspace(0, li.num_rows, 5).astype(int)
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        part = li.slice(a, b - a)
        delta = with_weight(part, 1)
        after = pa.concat_tables([tables["lineitem"], part])
        if i == 3:  # drop the first 5000 rows again in the same batch
            gone = li.slice(0, 5000)
            delta = pa.concat_tables([delta, with_weight(gone, -1)])
            after = pa.concat_tables([li.slice(5000, a - 5000), part])
        tables, ref = step(m, sql, tables, lineitem_partition, {"lineitem": delta}, ref, f"{name} chunk {i}", after={"lineitem": after})
