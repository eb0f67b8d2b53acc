"""Soundness: whenever the check says a sketch attribute is safe, the query over the rows of the
accurate sketch's fragments returns exactly the query's result over all data (DuckDB), on data
without and with NULLs (SQL three-valued logic; a NULL partition value is its own fragment)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.oracles.sketch_reference import reference_result, reference_sketch
from operators.sketch_safety import check_safety
from tests.sketch_safety.gen import case


def _rows(table: pa.Table) -> list:
    out = []
    for row in table.to_pylist():
        out.append(tuple(round(float(v), 6) if isinstance(v, (int, float)) or hasattr(v, "as_integer_ratio") else v
                         for v in row.values()))
    return sorted(out, key=repr)


def _sketch_rows(c) -> pa.Table:
    ids = reference_sketch(c.sql, c.tables, {"r": c.partition})["r"]
    frag = pa.array(c.partition.fragment_of(c.tables["r"].column(c.attribute)))
    return c.tables["r"].filter(pc.is_in(frag, pa.array(ids, type=frag.type)))


def run(c) -> bool:
    """Checks one case; returns whether the check said safe."""
    verdict = check_safety(c.sql, "r", c.attribute, tables=c.tables)
    if not verdict.safe:
        return False
    full = reference_result(c.sql, c.tables)
    over = reference_result(c.sql, {**c.tables, "r": _sketch_rows(c)})
    assert _rows(over) == _rows(full), (
        f"check said safe but the sketch changes the result\n{c.sql}\nattribute {c.attribute} "
        f"bounds {c.partition.boundaries}\nr = {c.tables['r'].to_pylist()}\ns = {c.tables['s'].to_pylist()}"
    )
    return True


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_safe_means_same_result(data):
    run(case(lambda options: data.draw(st.sampled_from(list(options)))))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_safe_means_same_result_with_nulls(data):
    run(case(lambda options: data.draw(st.sampled_from(list(options))), nulls=True))


def test_check_is_not_vacuous():
    """On a seeded stream of cases the check answers both ways and the safe answers hold."""
    rng = random.Random(7)
    verdicts = [run(case(lambda options: rng.choice(list(options)))) for _ in range(120)]
    assert 30 <= sum(verdicts) <= 110, sum(verdicts)


def test_check_with_nulls_is_not_vacuous():
    """The same with NULLs in the data: the check still proves a good share safe, and those hold."""
    rng = random.Random(11)
    cases = [case(lambda options: rng.choice(list(options)), nulls=True) for _ in range(300)]
    with_nulls = [c for c in cases if any(t.column(x).null_count for t in c.tables.values() for x in t.column_names)]
    verdicts = [run(c) for c in with_nulls]
    assert len(with_nulls) >= 200 and 40 <= sum(verdicts) <= len(verdicts) - 40, (len(with_nulls), sum(verdicts))
