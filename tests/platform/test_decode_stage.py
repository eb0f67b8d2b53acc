"""Decoding on the executors equals decoding on the driver.

The job decodes each Spark task's slice of a batch separately (connectors.decode_stage) and
merges the slices in log order. Here random batches, poison records included, are cut into
random slices, each slice goes through the very function the tasks run, and the merge must
equal ``decode_batch`` over the whole batch: events, rejected records, counts, schema changes
and Kafka offsets.
"""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.debezium import decode_batch
from devstack.producer import RandomUpdates, envelope, key_of
from streaming_app.settings import parse_config
from connectors.decode_stage import _slice_decoder, merge, offset_ranges

TABLE = {"name": "orders", "topic": "t.orders", "primary_key": "id", "decimal_handling_mode": "string",
         "columns": {"id": "long", "status": "string", "amount": "decimal(12,2)", "day": "date"}}
CFG = parse_config({"job": {"name": "x"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"}, "tables": [TABLE]})
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _records(seed: int, n: int, partitions: int, poison_every: int) -> list[tuple]:
    t = CFG.tables[0]
    gen = RandomUpdates(t, seed=seed, domain=max(5, n // 3))
    next_off = [0] * partitions
    out = []
    for i in range(n):
        op, before, after = gen.next()
        p = i % partitions
        value = envelope(t, op, before, after)
        if poison_every and i % poison_every == 0:
            value = (b"{not json", json.dumps({"payload": {"op": "c", "after": {"id": "x"}}}).encode(), None)[i % 3]
        out.append((t.topic, p, next_off[p], key_of(t, after or before), value, None))
        next_off[p] += 1
    return out


def _slice(recs: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "topic": [r[0] for r in recs], "partition": pa.array([r[1] for r in recs], pa.int32()),
        "offset": pa.array([r[2] for r in recs], pa.int64()), "key": [r[3] for r in recs],
        "value": [r[4] for r in recs], "headers": pa.array([None] * len(recs), HEADERS)})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), partitions=st.integers(1, 3),
       cuts=st.lists(st.integers(0, 300), max_size=4), poison_every=st.sampled_from([0, 7, 23]))
def test_slices_merged_in_log_order_equal_the_whole_batch(seed, n, partitions, cuts, poison_every):
    recs = _records(seed, n, partitions, poison_every)
    whole = decode_batch(CFG, recs)
    decode_slice = _slice_decoder(CFG)
    parts = []
    for p in range(partitions):
        mine = [r for r in recs if r[1] == p]
        bounds = sorted({0, len(mine), *[c for c in cuts if c < len(mine)]})
        for lo, hi in zip(bounds, bounds[1:]):
            # a task may get its slice as several Arrow batches
            pieces = [_slice(mine[lo:hi][i:i + 50]) for i in range(0, hi - lo, 50)]
            for out in decode_slice(iter(pieces)):
                first = (out.column(0)[0].as_py(), out.column(1)[0].as_py(), out.column(2)[0].as_py())
                parts.append((first, pickle.loads(out.column(3)[0].as_py())))
    parts.sort(key=lambda x: x[0])
    merged, offsets = merge([p for _, p in parts], CFG)
    assert merged.events == whole.events
    assert merged.rejected == whole.rejected
    assert (merged.records, merged.tombstones, merged.schema_changes) == \
        (whole.records, whole.tombstones, whole.schema_changes)
    assert offsets == offset_ranges(*zip(*[r[:3] for r in recs]))


def test_an_empty_slice_yields_nothing():
    assert list(_slice_decoder(CFG)(iter([_slice([])]))) == []
    assert list(_slice_decoder(CFG)(iter([]))) == []
