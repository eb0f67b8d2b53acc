"""Issue 4 pieces that need neither Spark nor Kafka: [[sketches]] config, CLI partition specs,
typed boundaries in JSON, bitsets and merged ranges."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from core.errors import ConfigError
from operators.sketch import RangePartition
from streaming_app.settings import parse_config
from streaming_app.sketches.cli import parse_partition
from streaming_app.sketches.registry import Part
from streaming_app.sketches.tables import bits_to_ids, bounds_from_json, bounds_to_json
from streaming_app.sketches.query import merged_runs

TABLES = [{"name": "lineitem", "topic": "t.l", "primary_key": ["k"], "columns": {"k": "long", "q": "int"}}]


def test_sketches_section_parses_and_validates():
    cfg = parse_config({"tables": TABLES, "sketches": [
        {"name": "a", "sql": "SELECT k FROM lineitem", "partition": "lineitem.k:12", "mode": "lazy"},
        {"name": "b", "sql": "SELECT k FROM lineitem", "partition": "lineitem.q", "fragments": 4}]})
    a, b = cfg.sketches
    assert (a.table, a.attribute, a.fragments, a.mode) == ("lineitem", "k", 12, "lazy")
    assert (b.fragments, b.mode) == (4, "eager")
    bad = [
        {"name": "c", "sql": "x", "partition": "lineitem.nope"},
        {"name": "c", "sql": "x", "partition": "other.k"},
        {"name": "c", "sql": "x", "partition": "lineitem"},
        {"name": "c", "sql": "x", "partition": "lineitem.k", "mode": "sometimes"},
        {"name": "c", "sql": "x", "partition": "lineitem.k:0"},
        {"name": "c", "partition": "lineitem.k"},
        {"name": "c", "sql": "x", "partition": "lineitem.k", "colour": 1},
    ]
    for s in bad:
        with pytest.raises(ConfigError):
            parse_config({"tables": TABLES, "sketches": [s]})
    with pytest.raises(ConfigError, match="duplicate"):
        parse_config({"tables": TABLES, "sketches": [{"name": "a", "sql": "x", "partition": "lineitem.k"}] * 2})


def test_partition_spec():
    assert parse_partition("lineitem.l_orderkey:32", 16) == ("lineitem", "l_orderkey", 32)
    assert parse_partition("lineitem.l_orderkey", 16) == ("lineitem", "l_orderkey", 16)
    for s in ("lineitem", "lineitem.k:x"):
        with pytest.raises(ConfigError):
            parse_partition(s, 16)


def build_parser_check() -> set[str]:
    """Names of the sketch subcommands and `query` as the main parser registers them."""
    from streaming_app.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command")
    sk = next(a for a in sub.choices["sketch"]._actions if a.dest == "sketch_command")
    return set(sk.choices) | ({"query"} & set(sub.choices))


def test_cli_has_sketch_commands():
    assert build_parser_check() == {"register", "advise", "drop", "show", "filter", "layout", "query"}


@pytest.mark.parametrize("bounds", [
    [1, 5, 9], [0.5, 1.25, 7.0], [dt.date(1995, 1, 1), dt.date(1996, 2, 3)],
    [dt.datetime(2024, 1, 1, 3, 4, 5), dt.datetime(2024, 2, 1)], ["a", "m", "z"]])
def test_bounds_round_trip(bounds):
    back = bounds_from_json(bounds_to_json(bounds))
    assert back == bounds and [type(x) for x in back] == [type(x) for x in bounds]


def test_bitset_and_merged_ranges_agree_with_the_predicate():
    p = RangePartition("k", [0, 10, 20, 30, 40, 50])
    part = Part("t", "k", 5, list(p.boundaries))
    rng = np.random.default_rng(1)
    for _ in range(50):
        ids = sorted(set(rng.integers(0, 6, size=rng.integers(0, 6)).tolist()))
        bits = np.zeros(7, dtype=bool)
        bits[ids] = True
        assert bits_to_ids(np.packbits(bits, bitorder="little").tobytes(), 5) == ids
        runs, has_null = merged_runs(part, ids)
        assert has_null == (5 in ids)
        # every value in a merged run is in the sketch and vice versa (open-ended ends)
        for v in range(-5, 60):
            inside = any((lo is None or v >= lo) and (hi is None or v < hi) for lo, hi in runs)
            assert inside == (int(p.fragment_of([v])[0]) in ids), (ids, v, runs)


def test_registration_refuses_a_partition_the_safety_check_cannot_prove():
    from core.errors import UnsafeSketchError
    from operators.sketch_safety.registration import check_safe

    cfg = parse_config({"tables": [{"name": "cities", "topic": "c", "primary_key": ["city"],
                                    "columns": {"city": "string", "state": "string", "popden": "long"}}]})
    sql = "SELECT state, AVG(popden) AS a FROM cities GROUP BY state HAVING AVG(popden) > 100"
    with pytest.raises(UnsafeSketchError, match="sketch 'dense'.*cities.popden"):
        check_safe(cfg, "dense", sql, [("cities", "popden", 4)])
    assert "is safe" in check_safe(cfg, "dense", sql, [("cities", "state", 4)])[0]


TPCH = [{"name": "orders", "topic": "o", "primary_key": ["o_orderkey"],
         "columns": {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "double"}},
        {"name": "lineitem", "topic": "l", "primary_key": ["l_orderkey", "l_linenumber"],
         "columns": {"l_orderkey": "long", "l_linenumber": "int", "l_quantity": "double"}}]
Q_JOIN = ("SELECT o_orderkey, SUM(l_quantity) AS q FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
          "GROUP BY o_orderkey HAVING SUM(l_quantity) > 10")


def test_sketch_on_several_tables_config_cli_and_checks():
    from core.errors import UnsafeSketchError
    from streaming_app.sketches.cli import parse_partitions
    from operators.sketch_safety.registration import check_query, check_safe
    from streaming_app.sketches.registry import group_registrations

    # config: a list or a comma-separated string, FRAGMENTS per table or the default
    for part in (["orders.o_orderkey:8", "lineitem.l_orderkey"], "orders.o_orderkey:8, lineitem.l_orderkey"):
        cfg = parse_config({"tables": TPCH, "sketches": [
            {"name": "j", "sql": Q_JOIN, "partition": part, "fragments": 32}]})
        assert cfg.sketches[0].partitions == (("orders", "o_orderkey", 8), ("lineitem", "l_orderkey", 32))
    for bad in (["orders.o_orderkey", "orders.o_custkey"], [], "orders.o_orderkey,lineitem.nope"):
        with pytest.raises(ConfigError):
            parse_config({"tables": TPCH, "sketches": [{"name": "j", "sql": Q_JOIN, "partition": bad}]})
    assert parse_partitions(["orders.o_orderkey:8,lineitem.l_orderkey", "x.y:2"], 16) == [
        ("orders", "o_orderkey", 8), ("lineitem", "l_orderkey", 16), ("x", "y", 2)]

    # planning and the safety check per table; one table twice is refused
    parts = [("orders", "o_orderkey", 8), ("lineitem", "l_orderkey", 8)]
    assert sorted(check_query(cfg, "j", Q_JOIN, parts)) == ["lineitem", "orders"]
    assert len(check_safe(cfg, "j", Q_JOIN, parts)) == 2
    with pytest.raises(UnsafeSketchError, match="lineitem.l_quantity"):
        check_safe(cfg, "j", Q_JOIN, [("orders", "o_orderkey", 8), ("lineitem", "l_quantity", 8)])
    with pytest.raises(ConfigError, match="twice"):
        check_query(cfg, "j", Q_JOIN, [("orders", "o_orderkey", 8), ("orders", "o_custkey", 8)])
    with pytest.raises(ConfigError, match="does not read"):
        check_query(cfg, "j", "SELECT o_orderkey FROM orders", parts)

    # registered_queries holds one row per partitioned table; they group back into one query
    row = {"name": "j", "sql": Q_JOIN, "fragments": 8, "mode": "eager", "registered_at": None,
           "capture_version": 3}
    regs = group_registrations([
        {**row, "partition_table": "orders", "attribute": "o_orderkey", "boundaries": bounds_to_json([1, 5])},
        {**row, "name": "k", "partition_table": "orders", "attribute": "o_orderkey", "boundaries": None},
        {**row, "partition_table": "lineitem", "attribute": "l_orderkey", "boundaries": bounds_to_json([2, 9])}])
    j, k = regs["j"], regs["k"]
    assert [(p.table, p.attribute, p.boundaries) for p in j.parts] == [
        ("lineitem", "l_orderkey", [2, 9]), ("orders", "o_orderkey", [1, 5])]
    assert j.captured and not k.captured
    assert set(j.partitions()) == {"lineitem", "orders"} and j.describe() == "lineitem.l_orderkey:8, orders.o_orderkey:8"


def test_declared_not_null_columns_and_ranges_let_the_safety_check_prove_a_top_k():
    from core.errors import UnsafeSketchError
    from operators.sketch_safety.registration import check_safe, declared_stats, may_be_null

    sql = ("SELECT o_custkey, SUM(l_quantity) AS q FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
           "GROUP BY o_custkey ORDER BY q DESC LIMIT 3")
    parts = [("lineitem", "l_orderkey", 8)]
    loose = parse_config({"tables": TPCH})
    with pytest.raises(UnsafeSketchError, match="may be NULL"):  # SUM of NULLs is NULL: sorts differently
        check_safe(loose, "t", sql, parts)
    strict = parse_config({"tables": [TPCH[0], {**TPCH[1], "not_null": ["l_quantity"]}]})
    assert "l_quantity" not in may_be_null(strict)["lineitem"]
    with pytest.raises(UnsafeSketchError, match="rank higher"):  # not NULL, but it could be negative
        check_safe(strict, "t", sql, parts)
    sure = parse_config({"tables": [TPCH[0], {**TPCH[1], "not_null": ["l_quantity"],
                                              "ranges": {"l_quantity": [0, 1e9]}}]})
    assert declared_stats(sure) == {"lineitem": {"l_quantity": (0, 1e9)}}
    assert "is safe" in check_safe(sure, "t", sql, parts)[0]


def test_staleness_counts_versions_each_mirror_is_ahead(tmp_path):
    """Real Delta mirrors (delta-rs): a table the sketch reflects at an older version is listed
    with how far behind it is; a table at its latest version is not."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from connectors.delta_sink import Lake
    from streaming_app.sketches.query import staleness, staleness_line

    lake = Lake(tmp_path / "lake")
    for t, n in (("orders", 1), ("lineitem", 4)):  # versions 0 .. n-1
        for i in range(n):
            write_deltalake(lake.mirror(t), pa.table({"k": [i]}), mode="append")
    written = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    recs = {"lineitem": {"mirror_versions": [("orders", 0), ("lineitem", 1)], "updated_at": written}}
    st = staleness(lake, recs, now=written + dt.timedelta(seconds=90))
    assert st["behind"] == {"lineitem": {"sketch": 1, "mirror": 3, "versions": 2}} and not st["current"]
    assert st["age_s"] == 90
    assert staleness_line(st) == "behind: lineitem v1 of v3 (2 behind), updated 90 s ago"
    recs["lineitem"]["mirror_versions"] = [("orders", 0), ("lineitem", 3)]
    st = staleness(lake, recs, now=written)
    assert st["current"] and st["behind"] == {} and staleness_line(st).startswith("current")


def test_sketch_show_counts_value_ranges_and_keeps_bounds_typed():
    """Issue 42, blocker 4: ``--fragments 512`` reads "n of 512" (the NULL fragment apart), a
    long column's bounds stay numbers, and the text says which bound is excluded."""
    from streaming_app.sketches.cli import fragments_shown, range_text

    p = RangePartition.equi_depth("k", np.arange(0, 100_000, dtype=np.int64), 512)
    assert p.n_fragments == 512
    ids = [0, 1, 2, 7, 300, 511, p.null_fragment]
    shown = fragments_shown(p, ids)
    assert shown["fragments"] == "6 of 512" and shown["null_fragment"] is True
    first, mid, last = shown["ranges"][0], shown["ranges"][2], shown["ranges"][-1]
    assert first == {"lt": p.boundaries[3]} and last == {"ge": p.boundaries[511]}
    assert mid == {"ge": p.boundaries[300], "lt": p.boundaries[301]}
    assert all(type(v) is int for r in shown["ranges"] for v in r.values())
    assert range_text(first) == f"(-inf, {p.boundaries[3]})" and range_text(last).endswith(", +inf)")
    assert range_text({"ge": "a", "lt": "b"}) == "['a', 'b')"
    assert fragments_shown(p, [5])["null_fragment"] is False
