"""The view maintainer: keeps each ``[[views]]`` recursive view current in Delta.

It follows the job's maintainer contract (``streaming_app.job.Maintainer``). Engine:
``operators.recursive`` (``ReachabilityView``, ``ShortestPathView``) behind
``state.engines.ViewEngine``. At start the newest consistent snapshot in ``state_snapshots``
is restored and the link mirror's change feed applied from its version (``state.recovery``),
or, without one, the whole link mirror is read into a fresh view; then the view's output rows
are written whole once (they may lag the state after a crash between the mirror commit and
the view MERGE). Each batch applies the mirror's signed changes, MERGEs the view delta into
``reachability`` or ``shortest_paths`` and appends a ``view_stats`` row (both idempotent on
the batch id); every ``[state] snapshot_every``-th batch that changed the view writes a
snapshot. A batch the engine refuses goes to the quarantine with code DATA_BAD_EDGE.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pyarrow as pa

from connectors import delta_sink as sink
from connectors import object_store as store
from connectors.debezium import Rejected
from core import errors as E
from state.engines import ViewEngine
from state.recovery import MirrorCursor, Recovery
from core.faults import kill_point
from core.config import StateSettings, ViewConfig
from streaming_app.triangles.maintainer import plain

# src and dst take the link table's vertex type (a lake made when they were strings keeps them)
REACH_DDL = "view STRING, src {v}, dst {v}"
PATHS_DDL = "view STRING, src {v}, dst {v}, cost DOUBLE, path STRING"
VIEW_STATS_DDL = ("view STRING, batch_id BIGINT, rows BIGINT, added BIGINT, removed BIGINT, "
                  "maintain_ms DOUBLE, stats STRING, committed_at TIMESTAMP")


class ViewMaintainer:
    def __init__(self, view: ViewConfig, state: StateSettings | None = None):
        self.view = view
        self.name = f"view.{view.name}"
        cols = [view.src, view.dst] + [c for c in (view.cost, view.expires) if c]
        self.source = MirrorCursor(view.table, cols)
        self.recovery = Recovery(self.name, [self.source], (state or StateSettings()).snapshot_every,
                                 dataclasses.asdict(view), fault=kill_point)
        self.engine = self._fresh()

    def _fresh(self) -> ViewEngine:
        v = self.view
        return ViewEngine(v.table, v.kind, v.src, v.dst, v.cost, v.expires)

    @property
    def out_table(self) -> str:
        return "reachability" if self.view.kind == "reachability" else "shortest_paths"

    def setup(self, spark, job) -> None:
        vtype = job.cfg.table(self.view.table).type_of(self.view.src)
        path = job.lake.output(self.out_table)
        sink.ensure_table(spark, path, _ddl(self.view.kind).format(v=sink.spark_ddl_type(vtype)))
        self.schema = _arrow_schema(spark, path)
        want = sink.arrow_type(vtype)
        have = self.schema.field("src").type
        if have != want and have != pa.string():
            raise E.ConfigError(f"view {self.view.name!r}: its vertices are {vtype}, but {path} holds "
                                f"{have} vertices of another view; give the views link tables of one type")
        sink.ensure_table(spark, job.lake.output("view_stats"), VIEW_STATS_DDL)
        self.recovery.setup(spark, job)

    def _now(self) -> float | None:
        return time.time() if self.view.expires else None

    def _rebuild(self, spark, job) -> int:
        self.engine = self._fresh()
        edges = self.source.read_all(spark, job.lake, job.versions.get(self.view.table, 0))
        if edges.num_rows:
            self.engine.view.apply(inserts=self.engine.edges(edges), deletes=[], now=time.time())
        return edges.num_rows

    def start(self, spark, job) -> None:
        self.engine = self._fresh()
        line = self.recovery.start(spark, job, self.engine, self._rebuild)
        print(f"[{job.cfg.name}] {line}", flush=True)
        self._overwrite(spark, job)

    def _rows_table(self, rows) -> pa.Table:
        name = self.view.name
        vt = self.schema.field("src").type
        vertex = (lambda x: str(plain(x))) if vt == pa.string() else plain
        if self.view.kind == "reachability":
            pairs = sorted(rows, key=str)
            cols = {"view": [name] * len(pairs), "src": [vertex(a) for a, _ in pairs],
                    "dst": [vertex(b) for _, b in pairs]}
        else:
            items = sorted(rows.items(), key=str)
            cols = {"view": [name] * len(items), "src": [vertex(k[0]) for k, _ in items],
                    "dst": [vertex(k[1]) for k, _ in items], "cost": [float(_cost(v)) for _, v in items],
                    "path": [json.dumps([plain(x) for x in _path(v)]) for _, v in items]}
        return pa.table({f.name: pa.array(cols[f.name], f.type) for f in self.schema}, schema=self.schema)

    def _overwrite(self, spark, job) -> None:
        """The view's rows, written whole (at start): delta-rs on a local or s3 lake, else Spark."""
        data = self._rows_table(self.engine.view.rows())
        path = job.lake.output(self.out_table)
        where = f"view = '{self.view.name}'"
        if sink.rs_writes(path):
            store.rs_write(path, data, mode="overwrite", predicate=where)
            return
        df = spark.createDataFrame(data) if data.num_rows else spark.createDataFrame([], sink.spark_schema(self.schema))
        df.write.format("delta").mode("overwrite").option("replaceWhere", where).save(path)

    def on_batch(self, spark, job, ctx) -> None:
        table = self.view.table
        if table not in ctx.changed_tables and not self.view.expires:
            return
        t = time.perf_counter()
        delta = self.source.changes(spark, job.lake, ctx.changed_tables.get(table))
        vd = self.engine.apply({table: delta} if delta is not None else {}, now=self._now())
        for n_ins, n_del, err in self.engine.errors:
            ctx.rejected.append(Rejected(job.cfg.table(table).topic, -1, -1, None,
                                         json.dumps({"inserts": n_ins, "deletes": n_del}),
                                         E.DATA_BAD_EDGE, str(err)))
        if self.engine.errors and not vd:
            return
        self._merge(spark, job, ctx, vd)
        ms = (time.perf_counter() - t) * 1000
        st = self.engine.view.stats()
        row = pa.table({
            "view": [self.view.name], "batch_id": pa.array([ctx.batch_id], pa.int64()),
            "rows": pa.array([int(st.get("rows", 0))], pa.int64()),
            "added": pa.array([len(vd.added)], pa.int64()), "removed": pa.array([len(vd.removed)], pa.int64()),
            "maintain_ms": [ms], "stats": [json.dumps(st, default=str)],
            "committed_at": pa.array([sink.utcnow()], pa.timestamp("us", tz="UTC")),
        })
        sink.append_small(spark, job.lake.output("view_stats"), row, f"{ctx.app_id}:{self.name}", ctx.batch_id)
        ctx.metrics[self.name] = {"added": len(vd.added), "removed": len(vd.removed), "ms": round(ms, 1),
                                  "rows_in": 0 if delta is None else delta.num_rows,
                                  "deltas_out": len(vd.added) + len(vd.removed),
                                  "state_size": st.get("state_entries")}
        self.recovery.after_batch(spark, job, ctx, self.engine, changed=table in ctx.changed_tables)

    def _merge(self, spark, job, ctx, vd) -> None:
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
        # delta-rs on a local or s3 lake: one commit, no Spark job (Spark's MERGE ran ~150 jobs a batch)
        sink.merge(spark, job.lake.output(self.out_table), src, ["view", "src", "dst"],
                   app_id=f"{ctx.app_id}:{self.name}", batch_id=ctx.batch_id, deleted="__deleted")


def _ddl(kind: str) -> str:
    return REACH_DDL if kind == "reachability" else PATHS_DDL


def _arrow_schema(spark, path: str) -> pa.Schema:
    """The output table's columns as Arrow types (delta-rs reads the log; Spark elsewhere)."""
    if sink.rs_writes(path):
        schema = pa.schema(store.rs_table(path).schema().to_arrow())
    else:
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(spark.read.format("delta").load(path).schema)
    # large_string / string_view from delta-rs: plain string keeps the rows' arrays simple
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) or
                               str(f.type) == "string_view" else f.type) for f in schema])


def _cost(v):
    return v[0] if isinstance(v, (tuple, list)) else v


def _path(v):
    return v[1] if isinstance(v, (tuple, list)) and len(v) > 1 else ()
