"""The job's sketch maintainer: keeps every eager registered query's sketch current, batch by batch.

It follows the job contract (streaming_app.job.Maintainer): state at start is built for the
committed mirror versions (``job.versions``); each batch reads the change data feed of every
changed mirror from the version a query's state reflects, once per table and batch for all
queries, with the queries' selections pushed into the Spark read and only the columns they use
(``pushdown.union_pushdown``). Output tables: ``tables.py``; per-query state: ``query_state.py``;
engine snapshots in the one snapshot store, ``state_snapshots`` (``snapshots.py``).
"""

from __future__ import annotations

import time

from core.faults import kill_point
from streaming_app.sketches import outputs
from streaming_app.sketches.delta_side import ProbeCache
from streaming_app.sketches.progress import progress_listener
from streaming_app.sketches.pushdown import union_pushdown
from streaming_app.sketches.query_state import QueryState
from streaming_app.sketches.register import register_query
from streaming_app.sketches.registry import Registration, read_registry, registry_version
from streaming_app.sketches.snapshots import open_store, restore_latest, store_name, write_snapshot
from streaming_app.sketches.tables import ensure_tables
from connectors import spark_labels


class SketchStreamMaintainer:
    """Keeps every eager registered query's sketch current, batch by batch."""

    name = "sketches"

    def __init__(self, cfg, snapshot_every: int | None = None):
        self.cfg = cfg
        self.snapshot_every = max(1, int(snapshot_every or cfg.sketch.snapshot_every))
        self.queries: dict[str, QueryState] = {}
        self.registry_version = -2
        self.batches_since_snapshot = 0
        self.recent: dict[int, dict] = {}  # batch id -> metrics, for the progress listener
        # queries joining the same Delta-backed table with the same keys share one Spark read
        self.probe_cache = ProbeCache()
        self.store = None  # state.snapshot_store.SnapshotStore, opened at setup

    # setup: output tables and the config's [[sketches]] entries
    def setup(self, spark, job) -> None:
        # here, on the session that starts the query: foreachBatch gets a per-stream clone
        # whose listener bus never hears this query's progress
        progress_listener(spark, self)
        lake = job.lake
        self.store = open_store(spark, lake)  # also when no query is configured: `sketch register` may add one
        if not self.cfg.sketches:
            return  # tables appear with the first `sketch register`; _refresh looks for them
        ensure_tables(spark, lake)
        have = read_registry(spark, lake)
        for s in self.cfg.sketches:
            if s.name in have:
                continue
            register_query(spark, self.cfg, s.name, s.sql, s.partitions, s.mode, capture=False,
                           boundaries=s.boundaries)

    def _store(self, spark, lake):
        if self.store is None:
            self.store = open_store(spark, lake)
        self.store.spark = spark
        return self.store

    def _state_for(self, spark, job, reg: Registration, versions: dict, tables_cache: dict) -> QueryState | None:
        """The query's state at ``versions``: its newest usable snapshot brought forward from
        the change feed, or a capture from the mirrors (saying why)."""
        q = QueryState(reg, probe_cache=self.probe_cache)
        t0 = time.perf_counter()
        why = "not captured yet"
        if reg.captured:
            engine, snap, why = restore_latest(self._store(spark, job.lake), reg, versions)
            if snap is not None:
                q.restored(engine.maintainer, snap.versions)
                try:
                    _, rows = q.bring_forward(spark, job.lake, self.cfg, versions)
                except Exception as e:  # noqa: BLE001 - e.g. the change feed was vacuumed: a capture is exact
                    why = f"the change feed since the snapshot of batch {snap.batch_id} is not readable: " + \
                          (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                    q = QueryState(reg, probe_cache=self.probe_cache)
                else:
                    print(f"[{job.cfg.name}] {store_name(reg.name)}: restored from snapshot of batch {snap.batch_id} "
                          f"in {(time.perf_counter() - t0) * 1000:.0f} ms, caught up {rows:,} changes", flush=True)
                    return q
        def say(line: str) -> None:
            print(f"[{job.cfg.name}] {store_name(reg.name)}: capturing from the mirrors, {line}", flush=True)

        if q.capture(spark, job.lake, self.cfg, versions, tables_cache, progress=say):
            s = time.perf_counter() - t0
            print(f"[{job.cfg.name}] {store_name(reg.name)}: captured from the mirrors, {q.capture_rows:,} rows in "
                  f"{s * 1000:.0f} ms ({q.capture_rows / max(s, 1e-3):,.0f} rows/s; {why})", flush=True)
        return q

    def _refresh(self, spark, job, versions: dict) -> list[QueryState]:
        """Pick up registrations and drops; returns newly captured queries."""
        v = registry_version(job.lake)
        if v < 0:
            return []
        pending = [q for q in self.queries.values() if not q.ready()]
        if v == self.registry_version and not pending:
            return []
        regs = read_registry(spark, job.lake) if v != self.registry_version else \
            {n: q.reg for n, q in self.queries.items()}
        self.registry_version = v
        for n in list(self.queries):
            if n not in regs:
                del self.queries[n]
        new = []
        tables_cache: dict = {}  # captures of several new queries read each mirror once
        for n, reg in regs.items():
            if reg.mode != "eager":
                continue
            q = self.queries.get(n)
            if q is not None and q.ready():
                continue
            q = self._state_for(spark, job, reg, versions, tables_cache)
            self.queries[n] = q
            if q.ready():
                new.append(q)
        return new

    def _reads(self, queries: list) -> dict:
        """table -> (condition, columns) covering every given query's needs on the table."""
        per: dict = {}
        for q in queries:
            for t, item in q.pushdown(self.cfg).items():
                per.setdefault(t, []).append(item)
        return {t: union_pushdown(items) for t, items in per.items()}

    def start(self, spark, job) -> None:
        self.queries, self.registry_version = {}, -2
        self._refresh(spark, job, dict(job.versions))

    def on_batch(self, spark, job, ctx) -> None:
        t_all = time.perf_counter()
        lake = job.lake
        self.probe_cache.clear()
        hits0 = self.probe_cache.hits
        new = self._refresh(spark, job, dict(ctx.mirror_versions))
        cache: dict = {}
        deltas: list[dict] = []
        metrics: dict = {}
        todo = [q for q in self.queries.values()
                if q.ready() and q not in new and set(q.tables) & set(ctx.changed_tables)]
        reads = self._reads(todo)
        sc = spark.sparkContext
        for q in todo:
            # label this query's Spark jobs (change-feed reads, Delta-backed joins) in the UI
            spark_labels.label(sc, f"ivmstream batch {ctx.batch_id}: sketch {q.name}")
            t = time.perf_counter()
            q.last_apply_ms = 0.0
            probes = q.spark_probes()
            res, rows = q.bring_forward(spark, lake, self.cfg, ctx.mirror_versions, cache, reads)
            q.batch_id = ctx.batch_id
            q.dirty = True  # the row records the mirror version even when no fragment changed
            if res is not None:
                deltas += outputs.delta_rows(q, ctx.batch_id, *res)
            metrics[q.name] = {"delta_rows": rows, "apply_ms": round(q.last_apply_ms if res is not None else 0.0, 2),
                               "added": sum(map(len, res[0].values())) if res else 0,
                               "removed": sum(map(len, res[1].values())) if res else 0,
                               "spark_probes": q.spark_probes() - probes, "state_size": q.state_size(),
                               "ms": round((time.perf_counter() - t) * 1000, 1)}
        spark_labels.label(sc, f"ivmstream batch {ctx.batch_id}: sketch outputs")
        app = f"{ctx.app_id}:{self.name}"
        outputs.write_deltas(spark, lake, deltas, ctx.batch_id, f"{app}:deltas")
        kill_point("sketch.deltas", ctx.batch_id)
        dirty = [q for q in self.queries.values() if q.ready() and q.dirty]
        outputs.write_sketch_rows(spark, lake, dirty, ctx.batch_id, f"{app}:sketches")
        kill_point("sketch.merge", ctx.batch_id)
        self.batches_since_snapshot += 1
        snap = [q for q in self.queries.values() if q.ready() and (q in new or self.batches_since_snapshot
                                                                     >= self.snapshot_every)]
        if snap:
            spark_labels.label(sc, f"ivmstream batch {ctx.batch_id}: sketch snapshots")
            store = self._store(spark, lake)
            kill_point("sketch.state.begin", ctx.batch_id)  # the kill campaign's points inside these writes
            for q in snap:  # one row per query, each idempotent on (app id:sketch.<query>, batch)
                write_snapshot(store, q, ctx.batch_id, ctx.app_id)
            kill_point("sketch.state", ctx.batch_id)
            if self.batches_since_snapshot >= self.snapshot_every:
                self.batches_since_snapshot = 0
        ctx.metrics[self.name] = {
            "queries": len(self.queries), "captured": [q.name for q in new],
            "delta_rows_in": sum(m["delta_rows"] for m in metrics.values()),
            "sketch_changes": len(deltas), "ms": round((time.perf_counter() - t_all) * 1000, 1),
            "probe_cache_hits": self.probe_cache.hits - hits0, "per_query": metrics,
            # the job's per-operator figures (its operators column)
            "rows_in": sum(m["delta_rows"] for m in metrics.values()), "deltas_out": len(deltas),
            "state_size": sum(q.state_size() for q in self.queries.values() if q.ready()),
            "snapshots": len(snap),
        }
        self.probe_cache.clear()  # hold probe rows for one batch only
        if self.queries:  # the listener prints a line for batches that maintained sketches
            self.recent[ctx.batch_id] = ctx.metrics[self.name]
            for b in sorted(self.recent)[:-16]:
                del self.recent[b]
        spark_labels.label(sc, None)
