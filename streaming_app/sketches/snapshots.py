"""``sketch_state``: engine snapshots of each query with the mirror versions they reflect.

The job writes one every ``[sketch] snapshot_every`` batches (and at a query's first capture);
at start-up it restores the newest one whose versions the mirrors have reached and brings it
forward from the change feed (``query_state.QueryState.bring_forward``). The bytes are
``SketchMaintainer.snapshot()`` (``state/sketch_codec.py``).
"""

from __future__ import annotations

import pyarrow as pa

from connectors import delta_sink as sink
from streaming_app.sketches.registry import Registration
from streaming_app.sketches.tables import STATE


def write_snapshots(spark, lake, queries: list, batch_id: int, app_id: str | None) -> None:
    if not queries:
        return
    now = sink.utcnow()
    t = pa.table({
        "query": [q.name for q in queries], "batch_id": pa.array([batch_id] * len(queries), pa.int64()),
        "registered_at": pa.array([q.reg.registered_at for q in queries], pa.timestamp("us", tz="UTC")),
        "versions": pa.array([list(q.versions.items()) for q in queries], pa.map_(pa.string(), pa.int64())),
        "state": pa.array([q.engine.snapshot() for q in queries], pa.binary()),
        "taken_at": pa.array([now] * len(queries), pa.timestamp("us", tz="UTC")),
    })
    if app_id is None:
        spark.createDataFrame(t).write.format("delta").mode("append").save(lake.output(STATE))
    else:
        sink.append_small(spark, lake.output(STATE), t, app_id, batch_id)


def latest_snapshot(spark, lake, reg: Registration, max_versions: dict | None):
    """Newest snapshot of this registration whose versions are all <= ``max_versions``."""
    from pyspark.sql import functions as F

    lit = reg.name.replace("'", "''")
    rows = (spark.read.format("delta").load(lake.output(STATE)).where(f"query = '{lit}'")
            .orderBy(F.col("taken_at").desc()).collect())
    for r in rows:  # drop_query deletes a query's snapshots, so these belong to this registration
        vs = dict(r["versions"] or {})
        if max_versions is None or all(v <= max_versions.get(t, -1) for t, v in vs.items()):
            return bytes(r["state"]), vs
    return None
