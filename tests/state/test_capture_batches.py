"""The capture's Arrow batches back to the JVM stay bounded (an SF10 bucket's group pages came
back as one ~500 MB batch, more direct memory than an executor had)."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.keyed.capture import ARROW_SCHEMA
from state.statestore.capture import bounded_batches


def _table(sizes: list[int | None]) -> pa.Table:
    n = len(sizes)
    return pa.table({"k1": [f"g:q{i % 3}" for i in range(n)], "k2": [str(i) for i in range(n)],
                     "pk": [None] * n, "w": list(range(n)),
                     "a": [None if s is None else bytes([i % 251]) * s for i, s in enumerate(sizes)]},
                    schema=ARROW_SCHEMA)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 5000)), max_size=60), st.integers(1, 20_000))
def test_batches_are_bounded_and_keep_every_row_in_order(sizes, max_bytes):
    t = _table(sizes)
    batches = list(bounded_batches(t, max_bytes))
    assert pa.Table.from_batches(batches, schema=ARROW_SCHEMA).equals(t) if batches else t.num_rows == 0
    if t.nbytes > max_bytes:
        for b in batches:  # over the bound only as a row of its own
            blob = sum(len(v) for v in b.column(4).to_pylist() if v is not None) + 64 * b.num_rows
            assert blob <= max_bytes or b.num_rows == 1


def test_a_small_table_is_one_batch():
    t = _table([10, 20, None])
    assert len(list(bounded_batches(t, 1 << 20))) == 1
