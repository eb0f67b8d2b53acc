"""The mirror MERGE on a local lake (delta-rs) against a dictionary replay, batch after batch.

Random batches of final images and deletes, a truncate now and then, keys that repeat across
batches and files kept small, so that later MERGEs prune files with the key list in their
condition (``delta_sink._key_list``): after every batch the mirror holds exactly the rows of
the replay, and a replayed batch id changes nothing. No Spark: delta-rs alone (the job's local path).
"""

from __future__ import annotations

import tempfile

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import delta_sink as sink
from streaming_app.settings import parse_config

TABLE = parse_config({"job": {"name": "m"}, "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                      "tables": [{"name": "t", "topic": "t", "primary_key": ["k", "j"],
                                  "columns": {"k": "long", "j": "int", "v": "string"}}]}).tables[0]

FINAL = st.dictionaries(st.tuples(st.integers(0, 3000), st.integers(0, 2)),
                        st.one_of(st.none(), st.text(alphabet="abcxyz", max_size=5)), min_size=1, max_size=40)
# (truncate first?, final image per key: a value, or None for a delete)
HISTORY = st.lists(st.tuples(st.integers(0, 9).map(lambda n: n == 0), FINAL), min_size=1, max_size=8)


def _changes(final: dict) -> pa.Table:
    return sink.mirror_changes_frame(TABLE, {
        key: None if v is None else {"k": key[0], "j": key[1], "v": v} for key, v in final.items()})


def _rows(path: str) -> dict:
    t = DeltaTable(path).to_pyarrow_table()
    return {(r["k"], r["j"]): r["v"] for r in t.to_pylist()}


@settings(max_examples=25, deadline=None)
@given(history=HISTORY, seed_rows=st.integers(0, 4000))
def test_local_merge_equals_replay(history, seed_rows):
    with tempfile.TemporaryDirectory() as tmp:
        lake = sink.Lake(tmp)
        path = sink.ensure_mirror(None, lake, TABLE)
        assert DeltaTable(path).metadata().configuration["delta.targetFileSize"] == str(sink.MIRROR_FILE_BYTES)
        DeltaTable(path).alter.set_table_properties({"delta.targetFileSize": "4096"})  # many small files
        model = {(i, i % 3): f"r{i}" for i in range(seed_rows)}
        if model:
            sink.merge_mirror(None, path, TABLE, _changes(model), "app", 0)
        for batch_id, (truncate, final) in enumerate(history, start=1):
            if truncate:
                model.clear()
            for key, v in final.items():
                if v is None:
                    model.pop(key, None)
                else:
                    model[key] = v
            sink.merge_mirror(None, path, TABLE, _changes(final), "app", batch_id, truncate=truncate)
            before = DeltaTable(path).version()
            sink.merge_mirror(None, path, TABLE, _changes(final), "app", batch_id, truncate=truncate)  # a replay
            assert DeltaTable(path).version() == before
            assert _rows(path) == model


def test_key_list_only_for_few_integer_keys():
    few = _changes({(5, 0): "a", (7, 1): None, (5, 2): "b"})
    assert sink._key_list(TABLE, few) == ' AND t."k" IN (5, 7)'
    many = _changes({(i, 0): "x" for i in range(sink.KEY_LIST_MAX + 1)})
    assert sink._key_list(TABLE, many) == ""
