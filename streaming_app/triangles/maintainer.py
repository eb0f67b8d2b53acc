"""The triangle maintainer: keeps each ``[[graphs]]`` triangle count current in ``triangle_counts``.

It follows the job's maintainer contract (``streaming_app.job.Maintainer``). Engine:
``operators.triangles.TriangleCounter`` behind ``state.engines.TriangleEngine``. At start the
newest snapshot of ``state_snapshots`` consistent with the committed edge mirror is restored
and the mirror's change feed applied from its version (``state.recovery``); without one the
whole edge mirror is recounted. Each batch applies the mirror's signed changes between the
version the state reflects and the new one, appends one ``triangle_counts`` row (idempotent on
the batch id), and every ``[state] snapshot_every``-th batch that changed the graph writes a
snapshot. Edges the engine rejects (a self-loop in a graph mode, a delete of an absent edge,
a non-integer vertex id) go to the quarantine with code DATA_BAD_EDGE.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pyarrow as pa

from connectors import delta_sink as sink
from connectors.debezium import Rejected
from core import errors as E
from state.engines import TriangleEngine
from state.protocol import WEIGHT
from state.recovery import MirrorCursor, Recovery
from core.faults import kill_point
from core.config import StateSettings, TrianglesConfig

TRIANGLES_DDL = ("graph STRING, batch_id BIGINT, triangles BIGINT, edges BIGINT, heavy_vertices BIGINT, "
                 "minor_rebalances BIGINT, major_rebalances BIGINT, maintain_ms DOUBLE, mirror_version BIGINT, "
                 "committed_at TIMESTAMP")


def bad_edge_rows(job, table: str, bad) -> list[Rejected]:
    """Quarantine rows for the engine's rejected edges (offset -1: they come from the mirror)."""
    topic = job.cfg.table(table).topic
    return [Rejected(topic, -1, -1, json.dumps({"src": plain(b.src), "dst": plain(b.dst)}),
                     json.dumps({"weight": plain(b.weight)}), E.DATA_BAD_EDGE, b.reason) for b in bad]


def plain(v):
    return v.item() if isinstance(v, np.generic) else v


class TriangleMaintainer:
    def __init__(self, graph: TrianglesConfig, state: StateSettings | None = None):
        self.graph = graph
        self.name = f"triangles.{graph.name}"
        cols = [graph.src, graph.dst] + ([graph.relation] if graph.relation else [])
        self.source = MirrorCursor(graph.table, cols)
        self.recovery = Recovery(self.name, [self.source], (state or StateSettings()).snapshot_every,
                                 dataclasses.asdict(graph), fault=kill_point)
        self.engine = self._fresh()

    def _fresh(self) -> TriangleEngine:
        g = self.graph
        return TriangleEngine(g.table, g.src, g.dst, mode=g.mode, epsilon=g.epsilon, relation=g.relation)

    @property
    def counter(self):
        return self.engine.counter

    @property
    def edges(self) -> int:
        return self.engine.edges

    def setup(self, spark, job) -> None:
        sink.ensure_table(spark, job.lake.output("triangle_counts"), TRIANGLES_DDL)
        self.recovery.setup(spark, job)

    def _recount(self, spark, job) -> int:
        self.engine = self._fresh()
        edges = self.source.read_all(spark, job.lake, job.versions.get(self.graph.table, 0))
        if edges.num_rows:
            self.engine.apply({self.graph.table: edges.append_column(
                WEIGHT, pa.array(np.ones(edges.num_rows, dtype=np.int64)))})
        return edges.num_rows

    def start(self, spark, job) -> None:
        self.engine = self._fresh()
        line = self.recovery.start(spark, job, self.engine, self._recount)
        print(f"[{job.cfg.name}] {line}", flush=True)

    def on_batch(self, spark, job, ctx) -> None:
        table = self.graph.table
        if table not in ctx.changed_tables:
            return
        t = time.perf_counter()
        delta = self.source.changes(spark, job.lake, ctx.changed_tables.get(table))
        if delta is not None and delta.num_rows:
            bad = self.engine.apply({table: delta})
            ctx.rejected.extend(bad_edge_rows(job, table, bad))
        ms = (time.perf_counter() - t) * 1000
        st = self.counter.stats()
        heavy_n = sum(st["heavy_values"].values())
        row = pa.table({
            "graph": [self.graph.name], "batch_id": pa.array([ctx.batch_id], pa.int64()),
            "triangles": pa.array([self.engine.count], pa.int64()),
            "edges": pa.array([self.engine.edges], pa.int64()),
            "heavy_vertices": pa.array([heavy_n], pa.int64()),
            "minor_rebalances": pa.array([int(st["minor_rebalances"])], pa.int64()),
            "major_rebalances": pa.array([int(st["major_rebalances"])], pa.int64()),
            "maintain_ms": [ms], "mirror_version": pa.array([self.source.version], pa.int64()),
            "committed_at": pa.array([sink.utcnow()], pa.timestamp("us", tz="UTC")),
        })
        sink.append_small(spark, job.lake.output("triangle_counts"), row, f"{ctx.app_id}:{self.name}", ctx.batch_id)
        ctx.metrics[self.name] = {"triangles": self.engine.count, "ms": round(ms, 1),
                                  "rows_in": 0 if delta is None else delta.num_rows, "deltas_out": 1,
                                  "state_size": int(st["D"]) + sum(st["view_entries"].values())}
        self.recovery.after_batch(spark, job, ctx, self.engine, changed=True)
