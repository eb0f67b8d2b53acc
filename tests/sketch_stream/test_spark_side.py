"""Selection push-down into change-feed reads and join inputs kept in their Delta mirror
(streaming_app.sketches.delta_side), on real Spark and Delta: random update histories committed to
the mirrors, sketches brought forward batch by batch, compared with the DuckDB lineage
oracle (tests.oracles.sketch_reference) on the mirror's final version."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from connectors import delta_sink as sink
from operators.sketch import SketchMaintainer
from tests.oracles.sketch_reference import reference_sketch
from state.engines import SketchEngine
from streaming_app.sketches import delta_side, pushdown
from streaming_app.sketches.query_state import QueryState
from streaming_app.sketches.registry import Part, Registration, compute_boundaries
from streaming_app.settings import parse_config

pytestmark = [pytest.mark.spark]

TABLES = {
    "orders": (["o_orderkey"], {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)",
                                "o_orderdate": "date", "o_status": "string"}),
    "lineitem": (["l_orderkey", "l_linenumber"], {"l_orderkey": "long", "l_linenumber": "int",
                                                  "l_quantity": "decimal(15,2)", "l_shipdate": "date"}),
}
D0 = dt.date(1995, 1, 1)

QUERIES = {  # name -> (sql, partitioned table, attribute)
    "topk_join": ("SELECT o_orderkey, SUM(l_quantity) AS qty FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
                  "WHERE o_status = 'F' AND l_shipdate > DATE '1995-01-20' GROUP BY o_orderkey "
                  "ORDER BY qty DESC LIMIT 4", "orders", "o_orderkey"),
    "having_join": ("SELECT o_custkey, SUM(l_quantity) AS qty FROM lineitem, orders WHERE l_orderkey = o_orderkey "
                    "AND o_totalprice < 500.5 GROUP BY o_custkey HAVING SUM(l_quantity) > 60", "lineitem",
                    "l_orderkey"),
    "minmax": ("SELECT l_orderkey, MAX(l_quantity) AS m FROM lineitem WHERE l_quantity >= 3 GROUP BY l_orderkey "
               "HAVING MAX(l_quantity) > 40", "lineitem", "l_orderkey"),
}
# the same join with another LIMIT: its Delta-backed probes are the top-k join's, so within a
# batch they come from the shared probe cache
QUERIES["topk_twin"] = (QUERIES["topk_join"][0].replace("LIMIT 4", "LIMIT 2"), "orders", "o_orderkey")


def _cfg(tmp_path, spark_join_rows: int):
    return parse_config({
        "job": {"name": "side", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ckpt")},
        "spark": {"master": "local[2]", "ui": False},
        "sketch": {"spark_join_rows": spark_join_rows},
        "tables": [{"name": t, "topic": f"side.{t}", "primary_key": pk, "columns": cols}
                   for t, (pk, cols) in TABLES.items()],
    })


def _order(rng, k):
    return {"o_orderkey": k, "o_custkey": rng.randrange(6), "o_totalprice": Decimal(f"{rng.uniform(10, 1000):.2f}"),
            "o_orderdate": D0 + dt.timedelta(days=rng.randrange(60)), "o_status": rng.choice("FOP")}


def _line(rng, k, n):
    return {"l_orderkey": k, "l_linenumber": n, "l_quantity": Decimal(f"{rng.randrange(1, 50)}.00"),
            "l_shipdate": D0 + dt.timedelta(days=rng.randrange(60))}


def _write(spark, lake, table, rows, mode):
    from delta.tables import DeltaTable

    cols = TABLES[table][1]
    ddl = ", ".join(f"{c} {t}" for c, t in cols.items())
    df = spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], ddl) if rows else None
    path = lake.mirror(table)
    if mode == "insert" and df is not None:
        df.write.format("delta").mode("append").save(path)
    elif mode == "delete":
        keys = TABLES[table][0]
        cond = " OR ".join("(" + " AND ".join(f"{k} = {r[k]}" for k in keys) + ")" for r in rows)
        DeltaTable.forPath(spark, path).delete(cond)
    elif mode == "update" and df is not None:
        keys = TABLES[table][0]
        on = " AND ".join(f"t.{k} = s.{k}" for k in keys)
        (DeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), on).whenMatchedUpdateAll().execute())


def _mirror(spark, lake, table):
    v = sink.latest_version(spark, lake.mirror(table))
    return sink.read_version(spark, lake.mirror(table), v, list(TABLES[table][1]))


def test_pushdown_translates_only_what_it_can_keep_exact():
    cols = {t: c for t, (_, c) in TABLES.items()}
    m = SketchMaintainer.from_sql(QUERIES["topk_join"][0]).prepare({t: list(c) for t, c in cols.items()})
    pd = pushdown.pushdown(m, cols)
    assert pd["orders"][0] == "(`o_status` = 'F')"
    assert pd["lineitem"][0] == "(`l_shipdate` > DATE '1995-01-20')"
    assert "o_totalprice" not in pd["orders"][1]  # only the columns the query reads
    m = SketchMaintainer.from_sql(QUERIES["having_join"][0]).prepare({t: list(c) for t, c in cols.items()})
    pd = pushdown.pushdown(m, cols)
    assert pd["orders"][0] == "(`o_totalprice` <= 500.5)"  # decimal compared as float: weakened
    assert pd["lineitem"][0] is None
    # anything not translatable is dropped, OR of several queries, None wins
    assert pushdown.union_pushdown([("a", ["x"]), ("b", ["y"])]) == ("(a) OR (b)", ["x", "y"])
    assert pushdown.union_pushdown([("a", ["x"]), (None, ["y"])]) == (None, ["x", "y"])
    m = SketchMaintainer.from_sql("SELECT l_orderkey FROM lineitem WHERE l_quantity * 2 > 10 "
                                  "OR l_linenumber IN (1, 2)").prepare({"lineitem": list(cols["lineitem"])})
    assert pushdown.pushdown(m, cols)["lineitem"][0] is None


@pytest.mark.parametrize("seed", [3, 11])
def test_delta_backed_joins_and_pushdown_match_the_oracle(spark, tmp_path, seed):
    rng = random.Random(seed)
    cfg = _cfg(tmp_path, spark_join_rows=0)  # every join input stays in its mirror
    lake = sink.Lake(cfg.lake_root)
    for t in cfg.tables:
        sink.ensure_mirror(spark, lake, t)
    orders = {k: _order(rng, k) for k in range(1, 41)}
    lines = {(k, n): _line(rng, k, n) for k in orders for n in range(1, rng.randrange(2, 5))}
    _write(spark, lake, "orders", list(orders.values()), "insert")
    _write(spark, lake, "lineitem", list(lines.values()), "insert")
    versions = {t: sink.latest_version(spark, lake.mirror(t)) for t in TABLES}
    states = {}
    shared = delta_side.ProbeCache()
    for name, (sql, table, attr) in QUERIES.items():
        bounds = compute_boundaries(spark, lake, table, attr, 6, versions[table])
        reg = Registration(name, sql, [Part(table, attr, 6, bounds, versions[table])], "eager", sink.utcnow())
        q = QueryState(reg, probe_cache=shared)
        assert q.capture(spark, lake, cfg, versions)
        states[name] = q
    sides = {n: len(delta_side.delta_sides(q.engine)) for n, q in states.items()}
    assert sides == {"topk_join": 2, "having_join": 2, "minmax": 0, "topk_twin": 2}
    probes = 0
    next_key = 41
    for rnd in range(4):
        # one batch = several commits to both mirrors: inserts, updates that move rows across
        # the pushed-down selections, deletes that make groups vanish
        new = {}
        for _ in range(3):
            new[next_key] = _order(rng, next_key)
            next_key += 1
        new_lines = {(k, n): _line(rng, k, n) for k in new for n in (1, 2)}
        upd = [dict(orders[k], o_status=rng.choice("FOP"), o_totalprice=Decimal(f"{rng.uniform(10, 1000):.2f}"))
               for k in rng.sample(sorted(orders), 4)]
        upd_lines = [dict(lines[k], l_quantity=Decimal(f"{rng.randrange(1, 50)}.00"),
                          l_shipdate=D0 + dt.timedelta(days=rng.randrange(60)))
                     for k in rng.sample(sorted(lines), 5)]
        gone = rng.sample(sorted(orders), 3)
        gone_lines = [lines[k] for k in lines if k[0] in gone]
        _write(spark, lake, "orders", list(new.values()), "insert")
        _write(spark, lake, "lineitem", list(new_lines.values()), "insert")
        _write(spark, lake, "orders", upd, "update")
        _write(spark, lake, "lineitem", upd_lines, "update")
        _write(spark, lake, "lineitem", gone_lines, "delete")
        _write(spark, lake, "orders", [orders[k] for k in gone], "delete")
        orders.update(new)
        orders.update({r["o_orderkey"]: r for r in upd})
        lines.update(new_lines)
        lines.update({(r["l_orderkey"], r["l_linenumber"]): r for r in upd_lines})
        for k in gone:
            del orders[k]
        lines = {k: v for k, v in lines.items() if k[0] not in gone}
        target = {t: sink.latest_version(spark, lake.mirror(t)) for t in TABLES}
        cache, reads = {}, {}
        shared.clear()  # what the job does at every batch
        for q in states.values():
            for t, item in q.pushdown(cfg).items():
                reads.setdefault(t, []).append(item)
        reads = {t: pushdown.union_pushdown(v) for t, v in reads.items()}
        data = {t: _mirror(spark, lake, t) for t in TABLES}
        assert data["orders"].num_rows == len(orders) and data["lineitem"].num_rows == len(lines)
        for name, q in states.items():
            before = q.spark_probes()
            q.bring_forward(spark, lake, cfg, target, cache, reads)
            probes += q.spark_probes() - before
            sql, table, attr = QUERIES[name]
            want = reference_sketch(sql, data, q.reg.partitions())[table]
            assert q.fragments(table) == want, (name, rnd)
            assert q.versions == {t: target[t] for t in q.tables}
    assert probes > 0  # the Delta-backed inputs were really probed through Spark
    assert shared.hits > 0 and states["topk_twin"].spark_probes() < states["topk_join"].spark_probes()
    # a snapshot keeps no rows of a Delta-backed input and restores into a working state
    q = states["topk_join"]
    encoding, snap = SketchEngine(q.engine).snapshot()
    engine = SketchEngine(store_factory=delta_side.delta_side_factory(set()))  # as the maintainer restores
    engine.restore(encoding, snap)
    r = QueryState(q.reg)
    r.restored(engine.maintainer, q.versions)
    _write(spark, lake, "lineitem", [_line(rng, k, 9) for k in sorted(orders)[:5]], "insert")
    target = {t: sink.latest_version(spark, lake.mirror(t)) for t in TABLES}
    r.bring_forward(spark, lake, cfg, target)
    data = {t: _mirror(spark, lake, t) for t in TABLES}
    assert r.fragments("orders") == reference_sketch(QUERIES["topk_join"][0], data,
                                                     q.reg.partitions())["orders"]
    assert len(snap) < 20_000


def test_filtered_change_feed_read_keeps_pre_and_post_images(spark, tmp_path):
    cfg = _cfg(tmp_path, spark_join_rows=10**9)
    lake = sink.Lake(cfg.lake_root)
    for t in cfg.tables:
        sink.ensure_mirror(spark, lake, t)
    rng = random.Random(5)
    rows = [dict(_order(rng, k), o_status="F") for k in range(1, 6)]
    _write(spark, lake, "orders", rows, "insert")
    v0 = sink.latest_version(spark, lake.mirror("orders"))
    _write(spark, lake, "orders", [dict(rows[0], o_status="O"), dict(rows[1], o_totalprice=Decimal("1.00"))], "update")
    v1 = sink.latest_version(spark, lake.mirror("orders"))
    got = sink.read_changes(spark, lake.mirror("orders"), v0, v1, ["o_orderkey", "o_status"],
                            where="`o_status` = 'F'")
    pairs = sorted(zip(got.column("o_orderkey").to_pylist(), got.column("__weight").to_pylist()))
    # row 1 left the selection: only its pre-image (-1) passes; row 2 stayed: both images
    assert pairs == [(1, -1), (2, -1), (2, 1)]
    assert isinstance(got, pa.Table)
