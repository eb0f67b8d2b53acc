"""The sketch feature's output tables under the lake root (all Delta), and their value encodings.

* ``registered_queries`` - one row per registered query and partitioned table (a sketch may
  partition several of the query's tables, one attribute each): name, SQL, table and
  attribute, fragment count, the equi-depth boundaries (JSON, typed) computed from the mirror,
  mode (eager | lazy), the mirror version the boundaries were taken at. Written by
  ``register.register_query`` (CLI ``ivmstream sketch register`` or a ``[[sketches]]`` config
  entry); ``register.drop_query`` deletes. The job checks the table's Delta version every batch
  (delta-rs, milliseconds) and re-reads it only when it moved: a registration takes effect at
  the next batch.
* ``sketch_deltas`` - (query, batch_id, table_name, fragment, change +1/-1, lower, upper):
  the fragments a batch added to / removed from a sketch. One append per batch (txn).
* ``sketches`` - the current sketch per query and partitioned table: fragment ids, ranges,
  bitset, predicate, the batch and mirror version it reflects. Kept by MERGE on (query,
  table) (txn on the batch id).

Engine snapshots are not here: they live in the one snapshot store, ``state_snapshots``
(``snapshots.py``). A lake written before that has a ``sketch_state`` table, no longer read.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np

from connectors import delta_sink as sink

REGISTERED_DDL = ("name STRING, sql STRING, partition_table STRING, attribute STRING, fragments INT, "
                  "boundaries STRING, mode STRING, capture_version BIGINT, registered_at TIMESTAMP")
DELTAS_DDL = ("query STRING, batch_id BIGINT, table_name STRING, fragment INT, change INT, "
              "lower STRING, upper STRING, mirror_version BIGINT, committed_at TIMESTAMP")
SKETCHES_DDL = ("query STRING, table_name STRING, attribute STRING, fragments ARRAY<INT>, ranges STRING, "
                "bitset BINARY, n_fragments INT, predicate STRING, batch_id BIGINT, mirror_version BIGINT, "
                "mirror_versions MAP<STRING, BIGINT>, updated_at TIMESTAMP")

REGISTERED, DELTAS, SKETCHES = "registered_queries", "sketch_deltas", "sketches"

def ensure_tables(spark, lake: sink.Lake) -> None:
    for name, ddl in ((REGISTERED, REGISTERED_DDL), (DELTAS, DELTAS_DDL), (SKETCHES, SKETCHES_DDL)):
        sink.ensure_table(spark, lake.output(name), ddl)


# -- boundaries: typed values <-> JSON ---------------------------------------------------------

def bounds_to_json(bounds) -> str:
    b0 = bounds[0]
    if isinstance(b0, dt.datetime):
        return json.dumps({"kind": "timestamp", "values": [b.isoformat() for b in bounds]})
    if isinstance(b0, dt.date):
        return json.dumps({"kind": "date", "values": [b.isoformat() for b in bounds]})
    if isinstance(b0, str):
        return json.dumps({"kind": "str", "values": list(bounds)})
    if isinstance(b0, (int, np.integer)) and all(isinstance(b, (int, np.integer)) for b in bounds):
        return json.dumps({"kind": "int", "values": [int(b) for b in bounds]})
    return json.dumps({"kind": "float", "values": [float(b) for b in bounds]})


def bounds_from_json(text: str) -> list:
    d = json.loads(text)
    k, vs = d["kind"], d["values"]
    if k == "timestamp":
        return [dt.datetime.fromisoformat(v) for v in vs]
    if k == "date":
        return [dt.date.fromisoformat(v) for v in vs]
    return list(vs)


def fmt(v) -> str | None:
    """A boundary or range end as text (ISO for dates and timestamps)."""
    if v is None:
        return None
    return v.isoformat() if isinstance(v, (dt.date, dt.datetime)) else str(v)


def bits_to_ids(bitset: bytes, n: int) -> list[int]:
    bits = np.unpackbits(np.frombuffer(bitset, dtype=np.uint8), bitorder="little")[: n + 1]
    return [int(i) for i in np.flatnonzero(bits)]
