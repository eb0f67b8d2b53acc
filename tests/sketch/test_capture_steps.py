"""A capture fed in chunks (so that it can show progress) builds the state a one-step capture builds.

``streaming_app.sketches.query_state.initialize`` inserts a large capture chunk by chunk; here
every query shape of the demo (HAVING aggregate, top-k over a join) and a MIN/MAX query is
captured both ways over random tables, with chunks of a few rows, and the two engines must
agree on the sketch and the result, then again after the same random batch of changes.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from operators.sketch import RangePartition, SketchMaintainer
from streaming_app.sketches.query_state import initialize

QUERIES = {
    "having": ("SELECT l_orderkey, SUM(l_quantity) AS qty FROM lineitem GROUP BY l_orderkey "
               "HAVING SUM(l_quantity) > 60", {"lineitem": RangePartition("l_orderkey", [0, 10, 20, 35, 50, 80])}),
    "topk_join": ("SELECT o_orderkey, SUM(l_extendedprice) AS revenue FROM orders JOIN lineitem "
                  "ON o_orderkey = l_orderkey GROUP BY o_orderkey ORDER BY revenue DESC LIMIT 5",
                  {"orders": RangePartition("o_orderkey", [0, 20, 40, 60]),
                   "lineitem": RangePartition("l_orderkey", [0, 15, 30, 45, 70])}),
    "minmax": ("SELECT l_orderkey, MAX(l_extendedprice) AS top FROM lineitem GROUP BY l_orderkey "
               "HAVING MAX(l_extendedprice) > 900", {"lineitem": RangePartition("l_orderkey", [0, 25, 50, 75])}),
}


def tables(rng: random.Random) -> dict:
    n_orders, n_lines = 80, 400
    orders = pa.table({"o_orderkey": pa.array(range(n_orders), pa.int64()),
                       "o_custkey": pa.array([rng.randrange(9) for _ in range(n_orders)], pa.int64())})
    lineitem = pa.table({
        "l_orderkey": pa.array([rng.randrange(n_orders) for _ in range(n_lines)], pa.int64()),
        "l_linenumber": pa.array(range(n_lines), pa.int64()),
        "l_quantity": pa.array([rng.randrange(1, 50) for _ in range(n_lines)], pa.int64()),
        "l_extendedprice": pa.array([float(rng.randrange(1, 1000)) for _ in range(n_lines)], pa.float64()),
    })
    return {"orders": orders, "lineitem": lineitem}


def changes(rng: random.Random, data: dict) -> dict:
    """Deletes of some existing lineitem rows and inserts of new ones, as one weighted delta."""
    li = data["lineitem"]
    gone = li.take(pa.array(rng.sample(range(li.num_rows), 40)))
    new = pa.table({"l_orderkey": pa.array([rng.randrange(80) for _ in range(30)], pa.int64()),
                    "l_linenumber": pa.array(range(10_000, 10_030), pa.int64()),
                    "l_quantity": pa.array([rng.randrange(1, 50) for _ in range(30)], pa.int64()),
                    "l_extendedprice": pa.array([float(rng.randrange(1, 1000)) for _ in range(30)], pa.float64())})
    w = np.concatenate([-np.ones(gone.num_rows, np.int64), np.ones(new.num_rows, np.int64)])
    return {"lineitem": pa.concat_tables([gone, new]).append_column("__weight", pa.array(w))}


def rows(m: SketchMaintainer) -> list:
    return sorted(tuple(r.values()) for r in m.result().to_pylist())


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_capture_equals_one_step(name, seed, chunk):
    sql, parts = QUERIES[name]
    rng = random.Random(seed)
    data = tables(rng)
    used = {t: data[t] for t in parts}
    one = SketchMaintainer.from_sql(sql, parts)
    one.initialize(used)
    lines: list[str] = []
    stepped = SketchMaintainer.from_sql(sql, parts)
    initialize(stepped, used, progress=lines.append, chunk_rows=chunk)
    assert stepped.sketch == one.sketch
    assert rows(stepped) == rows(one)
    delta = changes(rng, data)
    one.apply(delta)
    stepped.apply(delta)
    assert stepped.sketch == one.sketch
    assert rows(stepped) == rows(one)


def test_progress_lines_name_rows_share_and_rate(monkeypatch):
    from streaming_app.sketches import query_state

    monkeypatch.setattr(query_state, "PROGRESS_EVERY_S", 0.0)  # a line after every chunk but the last
    sql, parts = QUERIES["having"]
    data = tables(random.Random(1))
    lines: list[str] = []
    initialize(SketchMaintainer.from_sql(sql, parts), {"lineitem": data["lineitem"]}, progress=lines.append,
               chunk_rows=100)
    assert [line.split(" rows/s")[0].rsplit(", ", 1)[0] for line in lines] == [
        "100 of 400 rows (25%)", "200 of 400 rows (50%)", "300 of 400 rows (75%)"]
    assert all(line.endswith(" rows/s") for line in lines)


def test_chunks_that_revisit_groups_switch_to_one_step():
    """Grouped on another column than the partition, the second chunk mostly updates groups the
    first made: the rest goes in as one step, and the state is still the one-step capture's."""
    sql = "SELECT l_quantity, SUM(l_extendedprice) AS s FROM lineitem GROUP BY l_quantity HAVING SUM(l_extendedprice) > 3000"
    parts = {"lineitem": RangePartition("l_orderkey", [0, 20, 40, 60])}
    data = {"lineitem": tables(random.Random(3))["lineitem"]}
    one = SketchMaintainer.from_sql(sql, parts)
    one.initialize(data)
    lines: list[str] = []
    stepped = SketchMaintainer.from_sql(sql, parts)
    initialize(stepped, data, progress=lines.append, chunk_rows=100)
    assert stepped.sketch == one.sketch and rows(stepped) == rows(one)
    assert lines and lines[-1].startswith("200 of 400 rows (50%); the other 200 in one step")
