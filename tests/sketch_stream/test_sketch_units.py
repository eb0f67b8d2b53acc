"""Issue 4 pieces that need neither Spark nor Kafka: [[sketches]] config, CLI partition specs,
typed boundaries in JSON, bitsets and merged ranges."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from operators.errors import ConfigError
from operators.sketch import RangePartition
from streaming_app.config import parse_config
from streaming_app.sketch_cli import build_parser_check, parse_partition
from streaming_app.sketch_maintainer import Registration, bits_to_ids, bounds_from_json, bounds_to_json
from streaming_app.sketch_query import merged_runs

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
    reg = Registration("q", "SELECT 1", "t", "k", 5, list(p.boundaries))
    rng = np.random.default_rng(1)
    for _ in range(50):
        ids = sorted(set(rng.integers(0, 6, size=rng.integers(0, 6)).tolist()))
        bits = np.zeros(7, dtype=bool)
        bits[ids] = True
        assert bits_to_ids(np.packbits(bits, bitorder="little").tobytes(), 5) == ids
        runs, has_null = merged_runs(reg, ids)
        assert has_null == (5 in ids)
        # every value in a merged run is in the sketch and vice versa (open-ended ends)
        for v in range(-5, 60):
            inside = any((lo is None or v >= lo) and (hi is None or v < hi) for lo, hi in runs)
            assert inside == (int(p.fragment_of([v])[0]) in ids), (ids, v, runs)


def test_registration_refuses_a_partition_the_safety_check_cannot_prove():
    from operators.errors import UnsafeSketchError
    from streaming_app.sketch_maintainer import check_safe

    cfg = parse_config({"tables": [{"name": "cities", "topic": "c", "primary_key": ["city"],
                                    "columns": {"city": "string", "state": "string", "popden": "long"}}]})
    sql = "SELECT state, AVG(popden) AS a FROM cities GROUP BY state HAVING AVG(popden) > 100"
    with pytest.raises(UnsafeSketchError, match="sketch 'dense'.*cities.popden"):
        check_safe(cfg, "dense", sql, "cities", "popden")
    assert "is safe" in check_safe(cfg, "dense", sql, "cities", "state")
