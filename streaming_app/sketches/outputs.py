"""The rows a batch writes for the sketches it maintained: ``sketch_deltas`` (fragments added
and removed) and ``sketches`` (the current sketch per query and table).

Crash safety of ``sketches``: the row written in batch N is the state after N. After a crash
the state is rebuilt for the last completed batch's versions and batch N is replayed; if N's
MERGE had committed, its txn makes the replayed MERGE a no-op and the row is already right.
The table is therefore never overwritten at start (which would roll it back behind a
committed txn). On a local or s3 lake both writes go through delta-rs (``sink.*_small``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from connectors import delta_sink as sink
from streaming_app.sketches.tables import DELTAS, SKETCHES, fmt

# -- writes ---------------------------------------------------------------------------------------

_SKETCH_SCHEMA = pa.schema([
    ("query", pa.string()), ("table_name", pa.string()), ("attribute", pa.string()),
    ("fragments", pa.list_(pa.int32())), ("ranges", pa.string()), ("bitset", pa.binary()),
    ("n_fragments", pa.int32()), ("predicate", pa.string()), ("batch_id", pa.int64()),
    ("mirror_version", pa.int64()), ("mirror_versions", pa.map_(pa.string(), pa.int64())),
    ("updated_at", pa.timestamp("us", tz="UTC")),
])


def write_sketch_rows(spark, lake, queries: list, batch_id: int, app_id: str | None) -> None:
    """Upsert the queries' current sketches into ``sketches`` (on query and table); with an
    ``app_id`` (the job) idempotent on the batch."""
    if not queries:
        return
    now = sink.utcnow()
    rows = [{**r, "updated_at": now} for q in queries for r in q.sketch_rows(batch_id)]
    src = pa.Table.from_pylist(rows, schema=_SKETCH_SCHEMA)
    sink.merge_small(spark, lake.output(SKETCHES), src, ["query", "table_name"], app_id, batch_id)
    for q in queries:
        q.dirty = False


def sketch_rows(reg, partitions: dict, fragments_of, batch_id: int, versions: dict) -> list[dict]:
    """One ``sketches`` row per partitioned table of a registered query: ``partitions`` table ->
    RangePartition, ``fragments_of(table)`` the sorted fragment ids in its sketch, ``versions``
    the mirror versions (of the query's tables) the sketch reflects."""
    out = []
    for part in reg.parts:
        p = partitions[part.table.lower()]
        frags = list(fragments_of(part.table))
        bits = np.zeros(p.n_fragments + 1, dtype=bool)
        bits[frags] = True
        out.append({
            "query": reg.name, "table_name": part.table, "attribute": part.attribute,
            "fragments": frags,
            "ranges": json.dumps([[fmt(x) for x in p.range_of(i)] for i in frags]),
            "bitset": np.packbits(bits, bitorder="little").tobytes(), "n_fragments": p.n_fragments,
            "predicate": p.predicate(frags), "batch_id": batch_id,
            "mirror_version": versions.get(part.table.lower(), versions.get(part.table)),
            "mirror_versions": list(versions.items()),
        })
    return out


def delta_rows(q, batch_id: int, added: dict, removed: dict) -> list[dict]:
    """``sketch_deltas`` rows of one query's batch (``added``/``removed``: table -> ids)."""
    out = []
    for part in q.reg.parts:
        t = part.table.lower()
        p = q.engine.partitions[t]
        for change, ids in ((1, added.get(t, ())), (-1, removed.get(t, ()))):
            for i in sorted(ids):
                lo, hi = p.range_of(i)
                out.append({"query": q.name, "batch_id": batch_id, "table_name": part.table, "fragment": int(i),
                            "change": change, "lower": fmt(lo), "upper": fmt(hi),
                            "mirror_version": q.versions.get(t)})
    return out


_DELTA_SCHEMA = pa.schema([
    ("query", pa.string()), ("batch_id", pa.int64()), ("table_name", pa.string()), ("fragment", pa.int32()),
    ("change", pa.int32()), ("lower", pa.string()), ("upper", pa.string()), ("mirror_version", pa.int64()),
    ("committed_at", pa.timestamp("us", tz="UTC")),
])


def write_deltas(spark, lake, deltas: list[dict], batch_id: int, app_id: str) -> None:
    """Append a batch's ``sketch_deltas`` rows (idempotent on the batch)."""
    if not deltas:
        return
    now = sink.utcnow()
    sink.append_small(spark, lake.output(DELTAS),
                      pa.Table.from_pylist([{**d, "committed_at": now} for d in deltas], schema=_DELTA_SCHEMA),
                      app_id, batch_id)
