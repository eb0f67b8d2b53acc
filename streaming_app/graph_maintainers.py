"""Maintainers that keep graph results current: triangle counts and recursive views.

Both follow the job's maintainer contract (streaming_app.job.Maintainer): state is built at
start from the edge mirror as committed, each batch applies the mirror's signed changes
between the version the state reflects and the new one (change data feed), and every Delta
write is idempotent on the batch id. Edges the engine rejects (a self-loop in a graph mode,
a non-integer vertex id) go to the quarantine with code DATA_BAD_EDGE.

Outputs: ``triangle_counts`` (one row per graph and batch in which its edges changed),
``reachability`` and ``shortest_paths`` (the views' current rows, kept by MERGE of each
batch's view delta), ``view_stats`` (one row per view and batch).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa

from connectors import delta_sink as sink
from connectors.debezium import Rejected
from operators import errors as E
from streaming_app.config import GraphConfig, ViewConfig

TRIANGLES_DDL = ("graph STRING, batch_id BIGINT, triangles BIGINT, edges BIGINT, heavy_vertices BIGINT, "
                 "minor_rebalances BIGINT, major_rebalances BIGINT, maintain_ms DOUBLE, mirror_version BIGINT, "
                 "committed_at TIMESTAMP")
REACH_DDL = "view STRING, src STRING, dst STRING"
PATHS_DDL = "view STRING, src STRING, dst STRING, cost DOUBLE, path STRING"
REACH_SCHEMA = pa.schema([("view", pa.string()), ("src", pa.string()), ("dst", pa.string())])
PATHS_SCHEMA = pa.schema(list(REACH_SCHEMA) + [("cost", pa.float64()), ("path", pa.string())])
VIEW_STATS_DDL = ("view STRING, batch_id BIGINT, rows BIGINT, added BIGINT, removed BIGINT, "
                  "maintain_ms DOUBLE, stats STRING, committed_at TIMESTAMP")


class _EdgeSource:
    """The edge mirror of one maintainer and the version its state reflects."""

    def __init__(self, table: str, columns: list[str]):
        self.table = table
        self.columns = columns
        self.version = -1

    def initial(self, spark, job) -> pa.Table:
        self.version = job.versions.get(self.table, 0)
        return sink.read_version(spark, job.lake.mirror(self.table), self.version, self.columns)

    def changes(self, spark, job, ctx) -> pa.Table | None:
        new = ctx.changed_tables.get(self.table)
        if new is None:
            return None
        delta = sink.read_changes(spark, job.lake.mirror(self.table), self.version, new, self.columns)
        self.version = new
        return delta


def _bad_edge_rows(job, table: str, bad) -> list[Rejected]:
    topic = job.cfg.table(table).topic
    return [Rejected(topic, -1, -1, json.dumps({"src": _plain(b.src), "dst": _plain(b.dst)}),
                     json.dumps({"weight": _plain(b.weight)}), E.DATA_BAD_EDGE, b.reason) for b in bad]


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


class TriangleMaintainer:
    def __init__(self, graph: GraphConfig):
        self.graph = graph
        self.name = f"triangles.{graph.name}"
        cols = [graph.src, graph.dst] + ([graph.relation] if graph.relation else [])
        self.source = _EdgeSource(graph.table, cols)
        self.counter = None
        self.edges = 0  # rows of the edge mirror

    def setup(self, spark, job) -> None:
        sink.ensure_table(spark, job.lake.output("triangle_counts"), TRIANGLES_DDL)

    def _apply(self, rows: pa.Table, weights: np.ndarray) -> list:
        g = self.graph
        rel = rows.column(g.relation).to_pylist() if g.relation else None
        return self.counter.apply_batch(rows.column(g.src).to_numpy(zero_copy_only=False),
                                        rows.column(g.dst).to_numpy(zero_copy_only=False),
                                        weights, relation=rel)

    def start(self, spark, job) -> None:
        from operators.triangles import TriangleCounter

        self.counter = TriangleCounter(epsilon=self.graph.epsilon, mode=self.graph.mode)
        edges = self.source.initial(spark, job)
        self.edges = edges.num_rows
        if edges.num_rows:
            bad = self._apply(edges, np.ones(edges.num_rows, dtype=np.int64))
            self.edges -= len(bad)

    def on_batch(self, spark, job, ctx) -> None:
        if self.graph.table not in ctx.changed_tables:
            return
        t = time.perf_counter()
        delta = self.source.changes(spark, job, ctx)
        if delta is not None and delta.num_rows:
            # deletes first: an update's pre-image must leave before its post-image arrives
            order = np.argsort(delta.column(sink.WEIGHT).to_numpy(), kind="stable")
            delta = delta.take(order)
            weights = delta.column(sink.WEIGHT).to_numpy()
            bad = self._apply(delta, weights)
            self.edges += int(weights.sum()) - sum(int(b.weight) for b in bad)
            ctx.rejected.extend(_bad_edge_rows(job, self.graph.table, bad))
        ms = (time.perf_counter() - t) * 1000
        st = self.counter.stats()
        heavy_n = sum(st["heavy_values"].values())
        row = pa.table({
            "graph": [self.graph.name], "batch_id": pa.array([ctx.batch_id], pa.int64()),
            "triangles": pa.array([int(self.counter.count)], pa.int64()),
            "edges": pa.array([self.edges], pa.int64()),
            "heavy_vertices": pa.array([heavy_n], pa.int64()),
            "minor_rebalances": pa.array([int(st["minor_rebalances"])], pa.int64()),
            "major_rebalances": pa.array([int(st["major_rebalances"])], pa.int64()),
            "maintain_ms": [ms], "mirror_version": pa.array([self.source.version], pa.int64()),
            "committed_at": pa.array([sink.utcnow()], pa.timestamp("us", tz="UTC")),
        })
        sink.append(spark, job.lake.output("triangle_counts"), row, f"{ctx.app_id}:{self.name}", ctx.batch_id)
        ctx.metrics[self.name] = {"triangles": int(self.counter.count), "ms": round(ms, 1)}


class ViewMaintainer:
    def __init__(self, view: ViewConfig):
        self.view = view
        self.name = f"view.{view.name}"
        cols = [view.src, view.dst] + [c for c in (view.cost, view.expires) if c]
        self.source = _EdgeSource(view.table, cols)
        self.engine = None

    @property
    def out_table(self) -> str:
        return "reachability" if self.view.kind == "reachability" else "shortest_paths"

    def setup(self, spark, job) -> None:
        sink.ensure_table(spark, job.lake.output(self.out_table),
                          REACH_DDL if self.view.kind == "reachability" else PATHS_DDL)
        sink.ensure_table(spark, job.lake.output("view_stats"), VIEW_STATS_DDL)

    def _edges(self, rows: pa.Table) -> list[tuple]:
        v = self.view
        cols = [rows.column(v.src).to_pylist(), rows.column(v.dst).to_pylist()]
        if v.cost or v.expires:
            cols.append(rows.column(v.cost).to_pylist() if v.cost else [None] * rows.num_rows)
        if v.expires:
            cols.append(rows.column(v.expires).to_pylist())
        return list(zip(*cols))

    def start(self, spark, job) -> None:
        from operators.recursive import ReachabilityView, ShortestPathView

        self.engine = ReachabilityView() if self.view.kind == "reachability" else ShortestPathView()
        edges = self.source.initial(spark, job)
        if edges.num_rows:
            self.engine.apply(inserts=self._edges(edges), deletes=[], now=time.time())
        # The output table may lag the state after a crash between the mirror commit and the
        # view MERGE: write the whole current view once, then go on with deltas.
        self._overwrite(spark, job)

    def _rows_table(self, rows) -> pa.Table:
        name = self.view.name
        if self.view.kind == "reachability":
            pairs = sorted(rows, key=str)
            return pa.table({"view": [name] * len(pairs), "src": [str(a) for a, _ in pairs],
                             "dst": [str(b) for _, b in pairs]}, schema=REACH_SCHEMA)
        items = sorted(rows.items(), key=str)
        return pa.table({
            "view": [name] * len(items), "src": [str(k[0]) for k, _ in items], "dst": [str(k[1]) for k, _ in items],
            "cost": [float(_cost(v)) for _, v in items],
            "path": [json.dumps([_plain(x) for x in _path(v)]) for _, v in items],
        }, schema=PATHS_SCHEMA)

    def _overwrite(self, spark, job) -> None:
        data = self._rows_table(self.engine.rows())
        df = spark.createDataFrame(data) if data.num_rows else spark.createDataFrame([], _ddl(self.view.kind))
        (df.write.format("delta").mode("overwrite").option("replaceWhere", f"view = '{self.view.name}'")
         .save(job.lake.output(self.out_table)))

    def on_batch(self, spark, job, ctx) -> None:
        if self.view.table not in ctx.changed_tables and not self.view.expires:
            return
        t = time.perf_counter()
        delta = self.source.changes(spark, job, ctx)
        inserts, deletes = [], []
        if delta is not None and delta.num_rows:
            w = delta.column(sink.WEIGHT).to_pylist()
            for e, wt in zip(self._edges(delta), w):
                (inserts if wt > 0 else deletes).append(e)
        try:
            vd = self.engine.apply(inserts=inserts, deletes=deletes, now=time.time() if self.view.expires else None)
        except E.IvmError as err:
            ctx.rejected.append(Rejected(job.cfg.table(self.view.table).topic, -1, -1, None,
                                         json.dumps({"inserts": len(inserts), "deletes": len(deletes)}),
                                         E.DATA_BAD_EDGE, str(err)))
            return
        self._merge(spark, job, ctx, vd)
        ms = (time.perf_counter() - t) * 1000
        st = self.engine.stats()
        row = pa.table({
            "view": [self.view.name], "batch_id": pa.array([ctx.batch_id], pa.int64()),
            "rows": pa.array([int(st.get("rows", 0))], pa.int64()),
            "added": pa.array([len(vd.added)], pa.int64()), "removed": pa.array([len(vd.removed)], pa.int64()),
            "maintain_ms": [ms], "stats": [json.dumps(st, default=str)],
            "committed_at": pa.array([sink.utcnow()], pa.timestamp("us", tz="UTC")),
        })
        sink.append(spark, job.lake.output("view_stats"), row, f"{ctx.app_id}:{self.name}", ctx.batch_id)
        ctx.metrics[self.name] = {"added": len(vd.added), "removed": len(vd.removed), "ms": round(ms, 1)}

    def _merge(self, spark, job, ctx, vd) -> None:
        from delta.tables import DeltaTable

        if not vd:
            return
        keyed = self.view.kind != "reachability"
        removed = set(vd.removed) - (set(vd.added) if keyed else set())
        if keyed:
            upserts = self._rows_table(vd.added)
            gone = self._rows_table({k: vd.removed[k] for k in removed})
        else:
            upserts = self._rows_table(set(vd.added))
            gone = self._rows_table(removed)
        src = pa.concat_tables([
            upserts.append_column("__deleted", pa.array([False] * upserts.num_rows, pa.bool_())),
            gone.append_column("__deleted", pa.array([True] * gone.num_rows, pa.bool_())),
        ])
        cond = "t.view = s.view AND t.src = s.src AND t.dst = s.dst"
        cols = [c for c in src.column_names if c != "__deleted"]
        values = {c: f"s.{c}" for c in cols}
        with sink.txn(spark, f"{ctx.app_id}:{self.name}", ctx.batch_id):
            (DeltaTable.forPath(spark, job.lake.output(self.out_table)).alias("t")
             .merge(spark.createDataFrame(src).alias("s"), cond)
             .whenMatchedDelete(condition="s.__deleted")
             .whenMatchedUpdate(condition="NOT s.__deleted", set=values)
             .whenNotMatchedInsert(condition="NOT s.__deleted", values=values)
             .execute())


def _ddl(kind: str) -> str:
    return REACH_DDL if kind == "reachability" else PATHS_DDL


def _cost(v):
    return v[0] if isinstance(v, (tuple, list)) else v


def _path(v):
    return v[1] if isinstance(v, (tuple, list)) and len(v) > 1 else ()

