"""Helpers that drive the engine and compare it with the oracle after every delta."""

from __future__ import annotations

import pyarrow as pa

from tests.oracles.sketch_reference import reference_result, reference_sketch
from tests.oracles.sketch_reference.capture import order_columns
from bench.harness.datasets import apply_delta

from .compare import diff_tables


def has_limit(sql: str) -> bool:
    import sqlglot
    import sqlglot.expressions as exp

    tree = sqlglot.parse_one(sql, read="postgres")
    return tree.args.get("limit") is not None


def check_result(got: pa.Table, expected: pa.Table, sql: str, where: str) -> None:
    """Same bag of rows; under LIMIT also the same sequence of ORDER BY key values (rows tied on
    the keys may come in any order, as in SQL)."""
    d = diff_tables(got, expected, ordered=False)
    assert d is None, f"{where}: result differs: {d}"
    if has_limit(sql):
        keys = order_columns(sql)
        lower = [c.lower() for c in expected.column_names]
        if keys and all(k.lower() in lower for k in keys):
            idx = [lower.index(k.lower()) for k in keys]
            d = diff_tables(got.select(idx), expected.select(idx), ordered=True, names=False)
            assert d is None, f"{where}: result rows are not in ORDER BY order: {d}"


def engine_sketch(m) -> dict[str, list[int]]:
    return {t: list(v) for t, v in m.sketch.items()}


def check_state(m, sql: str, tables: dict[str, pa.Table], partitions: dict, where: str, *, results: bool = True) -> dict[str, list[int]]:
    """Assert engine sketch == reference sketch (and result == DuckDB's); returns the reference."""
    ref = reference_sketch(sql, tables, partitions)
    got = engine_sketch(m)
    for t in partitions:
        g, r = got.get(t, []), ref[t]
        if g != r:
            extra, missing = sorted(set(g) - set(r)), sorted(set(r) - set(g))
            raise AssertionError(
                f"{where}: sketch of {t} differs: engine has {len(g)} fragments, reference {len(r)}; "
                f"engine-only {extra[:20]}, reference-only {missing[:20]}"
            )
    if results:
        check_result(m.result(), reference_result(sql, tables), sql, where)
    return ref


def check_sketch_delta(d, before: dict[str, list[int]], after: dict[str, list[int]], where: str) -> None:
    for t in after:
        added, removed = set(after[t]) - set(before[t]), set(before[t]) - set(after[t])
        got_a, got_r = set(d.added.get(t, set())), set(d.removed.get(t, set()))
        assert (got_a, got_r) == (added, removed), (
            f"{where}: SketchDelta of {t}: added {sorted(got_a)[:10]} removed {sorted(got_r)[:10]}, "
            f"expected added {sorted(added)[:10]} removed {sorted(removed)[:10]}"
        )


def step(m, sql, tables, partitions, deltas: dict[str, pa.Table], before, where, *, results=True, after=None):
    """Apply ``deltas`` to engine and tables, check everything; returns (tables, reference sketch).

    ``after`` (table name → table after the delta) skips the generic, slow ``apply_delta``."""
    d = m.apply(deltas)
    tables = dict(tables)
    for t, delta in deltas.items():
        tables[t] = after[t] if after and t in after else apply_delta(tables[t], delta)
    ref = check_state(m, sql, tables, partitions, where, results=results)
    check_sketch_delta(d, before, ref, where)
    return tables, ref
