"""The state backend ``[state] backend = "statestore"``: sketch operators inside the streaming query.

One batch::

    Kafka source
      -> decode (mapInArrow, on the executors): CDC events keyed by (table, bucket of the key)
      -> transformWithState CdcProcessor   (key table, bucket)   state cdc_image_pages_v2
      [-> transformWithState JoinProcessor (key query, join key) state sketch_join_v1]
      -> transformWithState GroupBucketProcessor (key set of queries, bucket) state imp_groups_v3
      [-> transformWithState TopKProcessor (key query)           state topk_ordered_v2]
      -> transformWithState MuProcessor    (key query, fragment) state mu_fragment_v1
      -> foreachBatch (driver, the job of streaming_app.job): mirror MERGE per table, other
         maintainers (triangles, views), sketch_deltas and sketches, quarantine, the batches
         row; each write idempotent on (app id, batch id) as in the memory backend.

The join and top-k operators are in the plan only when a registered query needs them.

The state lives in Spark's state store (RocksDB provider, changelog checkpointing; one state
partition per shuffle partition, pinned by the checkpoint) on the executors. What reaches the
driver per batch is that batch's changed keys (for the mirror), its sketch changes and counts,
never operator state. The current sketch of each query (at most its fragment count of ids) is
an output the driver keeps to write ``sketches``; it is read back from that table at start.

A fresh checkpoint over mirrors that hold rows starts from a capture (``capture``): Spark jobs
build the keyed operators' initial state from the mirrors at pinned versions, and batch 0 loads
it through ``transformWithState(initialState=...)``. A changed set of queries starts a new
checkpoint generation from the offsets of the last finished batch, with a capture at the mirror
versions it left (``generations``).

The job is given a ``StatestoreBackend`` (``state.backends`` lists its hooks); the sketch feature's
tables (registrations, ``sketch_deltas``, ``sketches``) are reached through a ``SketchTables``
the caller gives it (``streaming_app.sketches.keyed``).
"""

from __future__ import annotations

import pickle
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from connectors import delta_sink as sink
from connectors import spark_labels
from connectors.debezium import DecodedBatch, decode_batch
from connectors.decode_stage import KAFKA_COLUMNS, offset_ranges
from core.errors import ConfigError
from core.faults import kill_point
from core.mirror_plan import TablePlan
from operators.keyed.cdc import bucket_of
from operators.keyed.sketch import GROUP_BUCKETS, KeyedQuery
from state.backends import elapsed_ms
from state.statestore import capture, generations
from state.statestore import processors as P

CAPTURE_READ_ROWS = 256  # parquet rows per reader batch while batch 0 loads a capture
READER_ROWS = "spark.sql.parquet.columnarReaderBatchSize"

def state_operators(queries) -> tuple:
    """The keyed operators in the plan for these ``KeyedQuery``s as the query's progress lists its
    stateOperators: from the sink back (measured: the first has the fragment counters, the last
    the MapState of last images)."""
    ops = ["mu.fragment"]
    if any(q.topk is not None for q in queries):
        ops.append("topk.ordered")
    ops.append("imp.group")
    if any(q.join is not None for q in queries):
        ops.append("sketch.join")
    return tuple(ops + ["cdc.last_image"])

def _decoder(cfg, buckets: int):
    """mapInArrow: Kafka records -> rows keyed for the CdcProcessor, and pass-through rows."""

    def decode(batches):
        for rb in batches:
            if rb.num_rows == 0:
                continue
            cols = [rb.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")]
            headers = [[(h["key"], h["value"]) for h in hs] if hs else None
                       for hs in rb.column("headers").to_pylist()]
            d = decode_batch(cfg, zip(*cols, headers))
            k1, k2, kind, a = [], [], [], []

            def add(x1, x2, k, payload):
                k1.append(x1)
                k2.append(x2)
                kind.append(k)
                a.append(P.dumps(payload))

            n = 0
            for table, evs in d.events.items():
                n += len(evs)
                for ev in evs:
                    if ev.op == "t":  # every bucket of the table empties
                        for b in range(buckets):
                            add(table, str(b), P.EVENT, ev)
                    else:
                        add(table, str(bucket_of(ev.key, buckets)), P.EVENT, ev)
            part = str(cols[1][0])
            for r in d.rejected:
                add(P.PASS, part, P.REJECTED, r)
            for ch in d.schema_changes:
                add(P.PASS, part, P.SCHEMA, ch)
            add(P.PASS, part, P.SLICE, (d.records, d.tombstones, n, offset_ranges(cols[0], cols[1], cols[2])))
            yield pa.RecordBatch.from_pydict({"k1": k1, "k2": k2, "kind": kind,
                                              "w": pa.array([0] * len(k1), pa.int64()), "a": pa.array(a, pa.binary())})

    return decode

class SketchTables(Protocol):
    """The sketch feature's tables as this backend reads and writes them (``registered_queries``,
    ``sketch_deltas``, ``sketches``); ``streaming_app.sketches.keyed.KeyedSketchTables`` is the one."""

    def prepare(self, spark, lake) -> None:
        """Create the tables and register the config's sketches that are not registered yet."""

    def eager(self, spark, lake) -> dict:
        """The eager registrations: query name -> registration (``sql``, ``parts``, ``captured``,
        ``partitions()``, ``part(table)``)."""

    def take_boundaries(self, spark, lake, regs: dict, versions: dict) -> list[str]:
        """Boundaries from the mirrors at ``versions`` for the registrations of ``regs`` that have
        none (set on them and recorded); the names that now have all theirs."""

    def pinned_partitions(self, regs: dict) -> dict:
        """query -> its partitions as a checkpoint pin records them (JSON values)."""

    def from_pin(self, pin: dict) -> dict:
        """The registrations a pin (``pinned_partitions`` under "partitions") records."""

    def load_current(self, spark, lake, regs: dict) -> dict:
        """query -> {table: fragment ids} as the ``sketches`` table holds them."""

    def write_sketches(self, spark, lake, regs: dict, queries: dict, current: dict, names, versions: dict,
                       batch_id: int, app_id: str | None) -> None:
        """The ``sketches`` rows of the queries ``names``: ``current`` their fragments, ``versions``
        the mirror versions they reflect; with ``app_id`` idempotent on the batch."""

    def write_deltas(self, spark, lake, regs: dict, queries: dict, changes: list, versions: dict,
                     batch_id: int, app_id: str) -> int:
        """The ``sketch_deltas`` rows of ``changes`` [(query, global fragment, +1/-1)]; returns their count."""

class StatestoreBackend:
    """The job's sketch operators run in the streaming query (see the module docstring)."""

    name = "statestore"

    def __init__(self, cfg, sketches: SketchTables, finishing: tuple | None = None):
        self.cfg = cfg
        self.sketches = sketches
        self.specs: list = []  # (name, sql, {table: RangePartition}, {table: pa.Schema})
        self.regs: dict = {}  # query -> registration
        self.current: dict | None = None  # query -> {table: set(local fragment ids)}
        self._rows: pa.Table | None = None
        self._plans: dict = {}
        self._events = 0
        self._sketch_changes: list = []
        self._operators_ms = 0.0
        self._keyed_queries: dict | None = None
        self._reader_rows = False  # False: stream() did not change the setting
        self.gen = None  # the checkpoint generation (setup; state/statestore/generations.py)
        # (generation, registrations) of a replaced generation finishing its last batch (_finish)
        self._finishing = finishing
        self.waiting: dict = {}  # query -> registration still without fragment boundaries (_wait_for_rows)
        self.restart_wanted = False  # a waiting query got its boundaries: the query starts again (restarted)
        self._last_batch: int | None = None  # the job's last batch id that set boundaries

    def maintainers(self, maintainers: list) -> list:
        """The keyed operators keep the sketches: the sketch maintainer does not run."""
        return [m for m in maintainers if m.name != "sketches"]

    # -- set-up --------------------------------------------------------------------------------
    def setup(self, job) -> None:
        spark, lake = job.spark, job.lake
        self.sketches.prepare(spark, lake)
        root = Path(self.cfg.checkpoint_dir)
        if self._finishing is not None:  # a replaced generation finishing its pending batch
            self.gen, self.regs = self._finishing
        else:
            self.gen = generations.current(root)
            self.regs = self.sketches.eager(spark, lake)
        if self._finishing is None:
            self._wait_for_rows(spark, lake)
        schemas = {t.name.lower(): sink.arrow_schema(t) for t in self.cfg.tables}
        for n, r in sorted(self.regs.items()):
            KeyedQuery(n, r.sql, r.partitions(), schemas)  # refuses unsupported shapes here, on the driver
            self.specs.append((n, r.sql, r.partitions(), schemas))
        now, was = self._pin(), generations.read_pin(self.gen.dir)
        old = None
        if self._finishing is None and was is not None and generations.differs(was, now):
            old, t0 = self.gen, time.perf_counter()
            self.gen = self._successor(job, root, was, now)
        fresh = old is not None or not (self.gen.path / "commits").exists()
        if fresh or was is None:
            generations.write_pin(self.gen.dir, now)
        if fresh:
            latest = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in self.cfg.tables}
            self._capture(spark, lake, {**latest, **(self.gen.versions or {})})
        if old is not None:  # the capture is complete: the switch commits, the replaced state goes
            generations.commit(root, self.gen)
            generations.remove(root, old)
            where = (f"from offsets {self.gen.starting_offsets} (after batch {self.gen.base - 1})"
                     if self.gen.starting_offsets else "from where the replaced one started (it finished no batch)")
            print(f"[{self.cfg.name}] statestore: {generations.describe(was, now)}; new state generation "
                  f"{self.gen.number} {where}, captured in {time.perf_counter() - t0:.1f} s; generation "
                  f"{old.number}'s checkpoint removed", flush=True)
        job.checkpoint_location = self.gen.dir
        job.starting_offsets = self.gen.starting_offsets or self.cfg.kafka.starting_offsets
        job.writer_id = self.gen.app_id

    def _wait_for_rows(self, spark, lake) -> None:
        """Registrations without fragment boundaries (registered on an empty mirror) get them
        from the mirrors now if these have values; the others wait, out of the keyed operators,
        until a batch gives their mirrors values (``after_maintainers``), as the memory backend
        captures such a query at the first batch after its mirror has rows."""
        waiting = {n: r for n, r in self.regs.items() if not r.captured}
        if not waiting:
            return
        latest = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in self.cfg.tables}
        self.sketches.take_boundaries(spark, lake, waiting, latest)
        self.waiting = {n: r for n, r in waiting.items() if not r.captured}
        self.regs = {n: r for n, r in self.regs.items() if n not in self.waiting}
        if self.waiting:
            print(f"[{self.cfg.name}] statestore: sketches {sorted(self.waiting)} have no fragment boundaries yet "
                  f"(their mirrors had no values at registration); each waits for rows: the batch that gives its "
                  f"mirror values sets them, and the query then starts a new state generation with it", flush=True)

    def _pin(self) -> dict:
        """What the keyed state is built for: the queries (SQL and partitions), the buckets and the
        state variables' layout (an older layout, per-key images and groups, is not read as empty
        state: a changed one starts a new generation)."""
        return {"queries": {n: r.sql for n, r in self.regs.items()},
                "partitions": self.sketches.pinned_partitions(self.regs),
                "cdc_buckets": self.cfg.state.cdc_buckets, "state": [P.CDC_STATE, P.GROUP_STATE, P.MU_STATE],
                "group_buckets": GROUP_BUCKETS}

    def _successor(self, job, root: Path, was: dict, now: dict):
        """The generation after the current one, continuing where the mirrors stand; a batch the
        current one planned but did not finish is finished first, by it (``_finish``)."""
        spark = job.spark
        gen = self.gen
        app = generations.writer_id(gen, self.cfg.name)
        done, versions = job.last_batch_of(spark, app) if app else (-1, {})
        pos = generations.position(gen, done)
        refused = generations.unfinished_layout(was, now, pos)
        if refused:
            raise ConfigError(f"[state] backend = \"statestore\": {refused}")
        if generations.pending(pos):
            self._finish(job, gen, was, pos)
            done, versions = job.last_batch_of(spark, app)
            pos = generations.position(gen, done)
            if generations.pending(pos):
                raise ConfigError(f"[state] backend = \"statestore\": batch {pos.last_planned} of the previous state "
                                  "generation did not finish; the job stops rather than start a new one over it")
        offsets = generations.source_offsets(gen.dir, done - gen.base) if done >= gen.base else None
        new = generations.successor(root, gen, app, pos, offsets, versions, generations.added(was, now))
        if new.path.exists():  # a switch that crashed before it committed: start it again
            shutil.rmtree(new.path)
        return new

    def _finish(self, job, gen, was: dict, pos) -> None:
        """Run the replaced generation, with its own queries and state, until its pending batch
        (``pos.last_planned``) is done: Spark re-runs a planned batch first, with the same offsets,
        and its writes skip what already landed (their txn), as on any restart."""
        if was.get("partitions") is None:  # a pin from before pins named partitions: the registry's, if unchanged
            regs = {n: r for n, r in self.regs.items() if was["queries"].get(n) == r.sql}
            if set(regs) != set(was["queries"]):
                raise ConfigError(f"[state] backend = \"statestore\": batch {pos.last_planned} did not finish and the "
                                  f"checkpoint does not record the queries it ran with; restart once with the sketches "
                                  f"{sorted(was['queries'])} registered, then change them")
        else:
            regs = self.sketches.from_pin(was)
        print(f"[{self.cfg.name}] statestore: batch {pos.last_planned} of state generation {gen.number} did not "
              "finish; finishing it with that generation's queries before the new one starts", flush=True)
        finishing = job.with_backend(StatestoreBackend(self.cfg, self.sketches, finishing=(gen, regs)))
        finishing.trigger_once = True
        query = finishing.start()
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query '{self.cfg.name}' failed finishing batch {pos.last_planned}: "
                               f"{query.exception()}")

    def _capture(self, spark, lake, versions: dict) -> None:
        """A fresh generation over non-empty mirrors: the keyed operators' initial state from the
        mirrors at ``versions``, built on the executors (``capture``), and the captured sketch of
        the queries the generation adds (the others' ``sketches`` rows hold it already)."""
        pin = self.gen.path / capture.FILE
        if not any(v > 0 for v in versions.values()):
            pin.unlink(missing_ok=True)
            return
        queries = self._keyed()
        rec = capture.run_capture(spark, self.cfg, lake, self.specs, versions, checkpoint_dir=self.gen.dir)
        current: dict = {n: {} for n in queries}
        for name, g in rec["sketch"]:
            table, frag = queries[name].split_fragment(g)
            current[name].setdefault(table, set()).add(frag)
        added = queries if self.gen.added is None else [n for n in queries if n in self.gen.added]
        self.sketches.write_sketches(spark, lake, self.regs, queries, current, sorted(added), rec["versions"],
                                     batch_id=-1, app_id=None)
        print(f"[{self.cfg.name}] statestore capture: {rec['images']:,} last images, {rec['groups']:,} groups, "
              f"{rec['fragments']:,} sketch fragments from the mirrors at versions {rec['versions']} in "
              f"{rec['seconds']['total']} s (executors)", flush=True)

    # -- the streaming query -------------------------------------------------------------------
    def stream(self, job, kafka_df):
        """The Kafka records decoded on the executors and run through the keyed operators."""
        cfg, spark = self.cfg, job.spark
        rows = kafka_df.select(*KAFKA_COLUMNS).mapInArrow(
            _decoder(cfg, cfg.state.cdc_buckets), P.ROW_SCHEMA)
        init: dict = {}
        rec = self._first_batch_capture()
        if rec is not None:  # Spark loads an initial state in batch 0 only
            init = capture.initial_states(spark, rec)
            # The capture's pages are blobs of up to ~160 KB (SF10's group pages): Spark's parquet
            # reader takes 4,096 rows a batch, ~640 MB of one executor's heap (it died so at SF10).
            # This query run reads them 256 at a time: the query clones the session's settings
            # when it starts, and started() gives the driver's session its own value back.
            self._reader_rows = spark.conf.get(READER_ROWS, None)
            spark.conf.set(READER_ROWS, str(CAPTURE_READ_ROWS))
        pin = capture.pinned(self.gen.dir) or {}
        pages = pin.get("pages", {})  # fixed for the checkpoint's life, as the group pages per bucket
        ops = state_operators(self._keyed().values())
        procs = [(P.CdcProcessor(self.specs, cfg.state.cdc_buckets, pages), init.get("cdc")),
                 (P.GroupBucketProcessor(self.specs, pin.get("group_pages", {})), init.get("group")),
                 (P.MuProcessor(), init.get("mu"))]
        if "sketch.join" in ops:
            procs.insert(1, (P.JoinProcessor(self.specs), init.get("join")))
        if "topk.ordered" in ops:
            procs.insert(-1, (P.TopKProcessor(self.specs), init.get("topk")))
        for proc, state in procs:
            rows = rows.groupBy("k1", "k2").transformWithState(proc, P.ROW_SCHEMA, "Append", "None",
                                                               initialState=state)
        return rows

    def started(self, job) -> None:
        """The driver's session gets its parquet reader setting back (``stream``)."""
        if self._reader_rows is not False:
            if self._reader_rows is None:
                job.spark.conf.unset(READER_ROWS)
            else:
                job.spark.conf.set(READER_ROWS, self._reader_rows)
            self._reader_rows = False

    def _first_batch_capture(self) -> dict | None:
        """The pinned capture while batch 0 has not committed (a re-run of batch 0 loads it again)."""
        if (self.gen.path / "commits" / "0").exists():
            return None
        return capture.pinned(self.gen.dir)

    # -- one batch -------------------------------------------------------------------------------
    def begin_batch(self, job, batch_df, batch_id: int) -> int:
        """Spark's batch of this generation -> the job's batch id, after the keyed operators ran.

        They run in this one action, also for a batch committed before a restart: the state
        store must reach this batch's version either way."""
        batch_id += self.gen.base
        t = time.perf_counter()
        spark_labels.label(batch_df.sparkSession, f"ivmstream batch {batch_id}: keyed operators")
        self._rows = batch_df.toArrow()
        self._operators_ms = elapsed_ms(t)
        kill_point("operators", batch_id)
        return batch_id

    def end_batch(self, job) -> None:
        self._rows = None

    def read(self, job, batch_df, batch_id: int, steps: dict) -> tuple:
        steps["operators"] = self._operators_ms
        rows = self._rows
        kinds = rows.column("kind").to_pylist()
        blobs = rows.column("a").to_pylist()
        ws = rows.column("w").to_pylist()
        decoded = DecodedBatch(events={}, rejected=[])
        offsets: dict = {}
        self._plans = defaultdict(TablePlan)
        self._sketch_changes = []
        self._events = 0
        seen_schema: set = set()
        for kind, a, w in zip(kinds, blobs, ws):
            if kind == P.MIRROR:
                table, key, img = pickle.loads(a)
                self._plans[table].final[key] = img
            elif kind == P.TRUNCATED:
                self._plans[pickle.loads(a)].truncate = True
            elif kind == P.SKETCH:
                self._sketch_changes.append((*pickle.loads(a), int(w)))
            elif kind == P.REJECTED:
                r = pickle.loads(a)
                if isinstance(r, tuple):  # from the last-image state (TOAST): coordinates, no raw record
                    table, part, off, code, reason = r
                    self._plans[table].rejected.append((_Coords(part, off), code, reason))
                else:
                    decoded.rejected.append(r)
            elif kind == P.SLICE:
                records, tombstones, events, offs = pickle.loads(a)
                decoded.records += records
                decoded.tombstones += tombstones
                self._events += events
                for topic, parts in offs.items():
                    for part, (lo, hi) in parts.items():
                        lo_hi = offsets.setdefault(topic, {}).setdefault(part, [lo, hi])
                        lo_hi[0], lo_hi[1] = min(lo_hi[0], lo), max(lo_hi[1], hi)
            elif kind == P.SCHEMA:
                ch = pickle.loads(a)
                if ch[:2] not in seen_schema:
                    seen_schema.add(ch[:2])
                    decoded.schema_changes.append(ch)
        return decoded, offsets, lambda coords: {}

    def plan(self, job, spark, table, decoded, before: int):
        p = self._plans.get(table.name)
        return p if p is not None and (p.final or p.truncate or p.rejected) else None

    def events_in(self, decoded) -> int:
        return self._events

    def after_maintainers(self, job, spark, ctx) -> None:
        """The batch's ``sketch_deltas`` and ``sketches`` rows, from the keyed operators' changes."""
        t = time.perf_counter()
        lake = job.lake
        if self.current is None:
            self.current = self.sketches.load_current(spark, lake, self.regs)
        queries = self._keyed()
        for name, g, change in sorted(self._sketch_changes):  # a fragment's -1 before its +1
            table, frag = queries[name].split_fragment(g)
            cur = self.current.setdefault(name, {}).setdefault(table, set())
            (cur.add if change > 0 else cur.discard)(frag)
        # every query whose table changed gets its row (the mirror version moves), as the memory backend
        touched = {n for n, q in queries.items() if any(q.reads(t) for t in ctx.changed_tables)}
        if ctx.batch_id == self.gen.base and self._first_batch_capture() is not None:
            touched = set(queries)  # as the memory backend writes every captured query's row in its first batch
        app = f"{ctx.app_id}:sketches"
        n = self.sketches.write_deltas(spark, lake, self.regs, queries, self._sketch_changes, ctx.mirror_versions,
                                       ctx.batch_id, f"{app}:deltas")
        kill_point("sketch.deltas", ctx.batch_id)
        self.sketches.write_sketches(spark, lake, self.regs, queries, self.current, sorted(touched),
                                     ctx.mirror_versions, ctx.batch_id, f"{app}:sketches")
        kill_point("sketch.merge", ctx.batch_id)
        if self.waiting:
            self._take_boundaries(job, spark, ctx)
        ctx.metrics["sketches"] = {"queries": len(self.regs), "sketch_changes": n,
                                   "ms": round((time.perf_counter() - t) * 1000, 1), "backend": "statestore",
                                   "state_operators": self._state_figures(job)}

    def _take_boundaries(self, job, spark, ctx) -> None:
        """Boundaries for waiting queries whose mirrors this batch gave values: recorded in the
        registry, and the job refuses its next batch, so that the streaming query starts again
        (``restarted``) with them captured from the mirrors as this batch leaves them."""
        got = self.sketches.take_boundaries(spark, job.lake, self.waiting, ctx.mirror_versions)
        if not got:
            return
        for n in got:
            del self.waiting[n]
        self.restart_wanted, self._last_batch = True, ctx.batch_id
        job.request_stop()
        print(f"[{self.cfg.name}] statestore: sketches {got} got fragment boundaries from the mirrors at batch "
              f"{ctx.batch_id}; the streaming query starts again after it, with them", flush=True)

    def restarted(self, job) -> "StatestoreBackend":
        """The backend for the streaming query's next start, once it stopped after the batch that
        set a waiting query's boundaries: the batch Spark planned after it was refused before it
        began, so it leaves the offsets log and the new generation starts right after that batch."""
        if self._last_batch is not None:
            generations.unplan_after(self.gen.dir, self._last_batch - self.gen.base)
        return StatestoreBackend(self.cfg, self.sketches)

    def _state_figures(self, job) -> dict:
        """The previous batch's stateOperators of Spark's progress, under our operator names."""
        q = job.query
        p = q.lastProgress if q is not None else None
        if not p:
            return {}
        ops = p.get("stateOperators", []) if isinstance(p, dict) else []
        if hasattr(p, "prettyJson"):  # the whole progress, for a look without the UI (README)
            (Path(self.cfg.checkpoint_dir) / "ivmstream_last_progress.json").write_text(p.prettyJson)
        return {name: {k: op.get(k) for k in ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "memoryUsedBytes",
                                              "commitTimeMs", "allUpdatesTimeMs")}
                for name, op in zip(state_operators(self._keyed().values()), ops)}

    def _keyed(self) -> dict:
        if self._keyed_queries is None:
            self._keyed_queries = {n: KeyedQuery(n, sql, parts, schemas) for n, sql, parts, schemas in self.specs}
        return self._keyed_queries

class _Coords:
    """A rejected event's coordinates, as the job's quarantine rows read them (partition, offset)."""

    def __init__(self, partition: int, offset: int):
        self.partition, self.offset = partition, offset
