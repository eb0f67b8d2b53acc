"""Fragment boundaries from a sort on Spark's executors (the statestore backend's path for big
mirrors) equal the driver's equi-depth boundaries, value for value: duplicates, NULLs, fewer
distinct values than fragments, and each column type that path takes."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from operators.sketch import RangePartition
from streaming_app.sketches.registry import _rows, spark_equi_depth_picks

pytestmark = [pytest.mark.spark]


def _column(rnd: random.Random, kind: str, n: int, distinct: int):
    def one():
        if rnd.random() < 0.1:
            return None
        x = rnd.randrange(distinct)
        return {"long": x - distinct // 2, "double": x / 7, "string": f"k{x:05d}",
                "date": dt.date(2000, 1, 1) + dt.timedelta(days=x), "decimal": Decimal(x) / 100}[kind]

    typ = {"long": pa.int64(), "double": pa.float64(), "string": pa.string(), "date": pa.date32(),
           "decimal": pa.decimal128(12, 2)}[kind]
    return pa.array([one() for _ in range(n)], typ)


@pytest.mark.parametrize("kind", ["long", "double", "string", "date", "decimal"])
def test_executor_boundaries_equal_the_drivers(spark, tmp_path, kind):
    rnd = random.Random(kind)
    # keep the sort's partitions (adaptive execution would merge a small table's into one), so that
    # positions are mapped across several of them
    key = "spark.sql.adaptive.coalescePartitions.enabled"
    was = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        _compare(spark, tmp_path, kind, rnd)
    finally:
        spark.conf.set(key, was)


def _compare(spark, tmp_path, kind, rnd):
    for case, (n, distinct, fragments) in enumerate([(3000, 5000, 16), (2000, 40, 32), (500, 3, 8), (1, 1, 4)]):
        col = _column(rnd, kind, n, distinct)
        if col.null_count == len(col):
            col = pa.array([_column(rnd, kind, 20, distinct).drop_null()[0].as_py()], col.type)
        path = str(tmp_path / f"{kind}{case}")
        write_deltalake(path, pa.table({"a": col}))
        assert _rows(path, 0) == len(col)
        picks = spark_equi_depth_picks(spark, path, 0, "a", fragments)
        driver = RangePartition.equi_depth("a", col, fragments).boundaries
        assert RangePartition.from_picks("a", *picks).boundaries == driver, (kind, case)


def test_no_values_and_an_unsupported_type(spark, tmp_path):
    write_deltalake(str(tmp_path / "nulls"), pa.table({"a": pa.array([None, None], pa.int64())}))
    assert spark_equi_depth_picks(spark, str(tmp_path / "nulls"), 0, "a", 4) is None
    ts = pa.array([dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC"))
    write_deltalake(str(tmp_path / "ts"), pa.table({"a": ts}))
    assert spark_equi_depth_picks(spark, str(tmp_path / "ts"), 0, "a", 4) is False  # the driver's path
