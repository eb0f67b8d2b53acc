"""Streaming provenance-sketch maintenance (issue 4): registered queries kept current by the job.

Tables under the lake root (all Delta):

* ``registered_queries`` - one row per registered query and partitioned table (a sketch may
  partition several of the query's tables, one attribute each): name, SQL, table and
  attribute, fragment count, the equi-depth boundaries (JSON, typed) computed from the mirror,
  mode (eager | lazy), the mirror version the boundaries were taken at. Written by
  ``register_query`` (CLI ``ivmstream sketch register`` or a ``[[sketches]]`` config entry);
  ``drop_query`` deletes. The job checks the table's Delta version every batch (delta-rs,
  milliseconds) and re-reads it only when it moved: a registration takes effect at the next batch.
* ``sketch_deltas`` - (query, batch_id, table_name, fragment, change +1/-1, lower, upper):
  the fragments a batch added to / removed from a sketch. One append per batch (txn).
* ``sketches`` - the current sketch per query and partitioned table: fragment ids, ranges,
  bitset, predicate, the batch and mirror version it reflects. Kept by MERGE on (query,
  table) (txn on the batch id).
* ``sketch_state`` - engine snapshots (``SketchMaintainer.snapshot()`` bytes) with the mirror
  versions they reflect, every ``snapshot_every`` batches; the job restores the newest usable
  one at start-up and brings it forward from the change feed (else recaptures from the mirror).

The maintainer follows the job contract (streaming_app.job.Maintainer): state at start is
built for the committed mirror versions (``job.versions``); each batch reads the change data
feed of every changed mirror from the version a query's state reflects, once per table and
batch for all queries, with the queries' selections pushed into the Spark read and only the
columns they use (streaming_app.sketches.delta_side.pushdown). Joins: an input that is a plain scan
of a table with at least ``[sketch] spark_join_rows`` rows at capture stays in its Delta
mirror and is probed with Spark at the version the state reflects (sketch_spark.DeltaSide);
other inputs live in the engine's in-memory index.

Crash safety of ``sketches``: the row written in batch N is the state after N. After a crash
the state is rebuilt for the last completed batch's versions and batch N is replayed; if N's
MERGE had committed, its txn makes the replayed MERGE a no-op and the row is already right.
The table is therefore never overwritten at start (which would roll it back behind a
committed txn).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from connectors import delta_sink as sink
from operators.errors import ConfigError, StateError
from streaming_app.sketches import delta_side as sketch_spark

REGISTERED_DDL = ("name STRING, sql STRING, partition_table STRING, attribute STRING, fragments INT, "
                  "boundaries STRING, mode STRING, capture_version BIGINT, registered_at TIMESTAMP")
DELTAS_DDL = ("query STRING, batch_id BIGINT, table_name STRING, fragment INT, change INT, "
              "lower STRING, upper STRING, mirror_version BIGINT, committed_at TIMESTAMP")
SKETCHES_DDL = ("query STRING, table_name STRING, attribute STRING, fragments ARRAY<INT>, ranges STRING, "
                "bitset BINARY, n_fragments INT, predicate STRING, batch_id BIGINT, mirror_version BIGINT, "
                "mirror_versions MAP<STRING, BIGINT>, updated_at TIMESTAMP")
STATE_DDL = ("query STRING, batch_id BIGINT, registered_at TIMESTAMP, versions MAP<STRING, BIGINT>, "
             "state BINARY, taken_at TIMESTAMP")

REGISTERED, DELTAS, SKETCHES, STATE = "registered_queries", "sketch_deltas", "sketches", "sketch_state"


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


def _fmt(v) -> str | None:
    if v is None:
        return None
    return v.isoformat() if isinstance(v, (dt.date, dt.datetime)) else str(v)


# -- registration ---------------------------------------------------------------------------------

@dataclass
class Part:
    """One range-partitioned table of a registration (one ``registered_queries`` row)."""

    table: str
    attribute: str
    fragments: int
    boundaries: list | None = None  # None until the mirror has values (capture computes them)
    capture_version: int | None = None

    def partition(self):
        from operators.sketch import RangePartition

        return RangePartition(self.attribute, self.boundaries)

    def __str__(self) -> str:
        return f"{self.table}.{self.attribute}:{self.fragments}"


@dataclass
class Registration:
    """A registered query and its partitioned tables. A sketch on several tables restricts
    each of them when the query runs again; PBDS's safety check is made per table and holds
    for any data, so restricting one table leaves the other tables' sketches valid and the
    restrictions compose."""

    name: str
    sql: str
    parts: list
    mode: str = "eager"
    registered_at: dt.datetime | None = None

    @property
    def captured(self) -> bool:
        return all(p.boundaries is not None for p in self.parts)

    @property
    def capture_version(self) -> int | None:
        return self.parts[0].capture_version

    def partitions(self) -> dict:
        return {p.table.lower(): p.partition() for p in self.parts}

    def part(self, table: str) -> Part:
        return next(p for p in self.parts if p.table.lower() == table.lower())

    def describe(self) -> str:
        return ", ".join(map(str, self.parts))

    @classmethod
    def from_rows(cls, rows: list) -> "Registration":
        """From the ``registered_queries`` rows of one name (one per partitioned table)."""
        r0 = rows[0]
        parts = [Part(r["partition_table"], r["attribute"], int(r["fragments"]),
                      bounds_from_json(r["boundaries"]) if r["boundaries"] else None, r["capture_version"])
                 for r in sorted(rows, key=lambda r: r["partition_table"])]
        return cls(r0["name"], r0["sql"], parts, r0["mode"] or "eager", r0["registered_at"])


def group_registrations(rows) -> dict[str, Registration]:
    by: dict = {}
    for r in rows:
        by.setdefault(r["name"], []).append(r)
    return {n: Registration.from_rows(rs) for n, rs in by.items()}


def as_parts(partitions) -> list[Part]:
    """``[(table, attribute, fragments), ...]`` (or Parts) -> Parts; one per table."""
    parts = [p if isinstance(p, Part) else Part(p[0], p[1], int(p[2])) for p in partitions]
    if not parts:
        raise ConfigError("a sketch needs at least one partitioned table")
    seen = [p.table.lower() for p in parts]
    dup = sorted({t for t in seen if seen.count(t) > 1})
    if dup:
        raise ConfigError(f"one partition attribute per table: {', '.join(dup)} given twice")
    return parts


def ensure_tables(spark, lake: sink.Lake) -> None:
    for name, ddl in ((REGISTERED, REGISTERED_DDL), (DELTAS, DELTAS_DDL), (SKETCHES, SKETCHES_DDL),
                      (STATE, STATE_DDL)):
        sink.ensure_table(spark, lake.output(name), ddl)


def read_registry(spark, lake: sink.Lake) -> dict[str, Registration]:
    rows = spark.read.format("delta").load(lake.output(REGISTERED)).collect()
    return group_registrations([r.asDict() for r in rows])


def compute_boundaries(spark, lake: sink.Lake, table: str, attribute: str, fragments: int, version: int):
    """Equi-depth boundaries of the mirror's attribute at ``version``; None if it has no values."""
    from operators.sketch import RangePartition

    col = sink.read_version(spark, lake.mirror(table), version, [attribute]).column(attribute)
    if len(col) - col.null_count == 0:
        return None
    return list(RangePartition.equi_depth(attribute, col, fragments).boundaries)


def check_query(cfg, name: str, sql: str, parts) -> list[str]:
    """Parse and plan the query against the config's table schemas with its partitions
    (``Part``s or (table, attribute, ...) tuples); the tables it reads."""
    from operators.sketch import RangePartition, SketchMaintainer

    names = {t.name for t in cfg.tables}
    for p in parts:
        table, attribute = (p.table, p.attribute) if isinstance(p, Part) else (p[0], p[1])
        if table not in names:
            raise ConfigError(f"sketch {name!r}: table {table!r} is not declared in [[tables]]")
        if attribute not in cfg.table(table).column_names:
            raise ConfigError(f"sketch {name!r}: table {table!r} has no column {attribute!r}")
    parts = as_parts(parts)
    m = SketchMaintainer.from_sql(sql, {p.table: RangePartition(p.attribute, [0, 1]) for p in parts})
    m.prepare({t.name: t.column_names for t in cfg.tables})
    for p in parts:
        if p.table.lower() not in m.tables:
            raise ConfigError(f"sketch {name!r}: the query does not read the partitioned table {p.table!r}")
    return list(m.tables)


def _reg_rows(reg: Registration) -> pa.Table:
    n = len(reg.parts)
    return pa.table({
        "name": [reg.name] * n, "sql": [reg.sql] * n, "partition_table": [p.table for p in reg.parts],
        "attribute": [p.attribute for p in reg.parts],
        "fragments": pa.array([p.fragments for p in reg.parts], pa.int32()),
        "boundaries": pa.array([bounds_to_json(p.boundaries) if p.boundaries else None for p in reg.parts],
                               pa.string()),
        "mode": [reg.mode] * n, "capture_version": pa.array([p.capture_version for p in reg.parts], pa.int64()),
        "registered_at": pa.array([reg.registered_at] * n, pa.timestamp("us", tz="UTC")),
    })


def may_be_null(cfg) -> dict:
    """table -> columns a CDC record may set to NULL (all but the primary key and the
    declared ``not_null`` columns, which the decoder enforces): the safety check must hold
    for the mirror after any future batch, not only for today's rows."""
    return {t.name.lower(): set(t.column_names) - set(t.primary_key) - set(t.not_null) for t in cfg.tables}


def declared_stats(cfg) -> dict:
    """table -> column -> (min, max) from the tables' declared ``ranges``: the decoder
    quarantines values outside them, so they hold for the mirror after any future batch
    (PBDS's pred(R) for the safety check)."""
    return {t.name.lower(): {c: (lo, hi) for c, lo, hi in t.ranges} for t in cfg.tables if t.ranges}


def check_partition(sql: str, schema: dict, table: str, attr: str, nullable: dict | None = None,
                    stats: dict | None = None) -> str:
    """The safety check for an explicit --partition (``schema``: table -> column names;
    ``stats``: declared ranges); UnsafeSketchError with the reason if refused."""
    from operators.errors import UnsafeSketchError, UnsupportedSqlError
    from operators.sketch_safety import check_safety

    if table.lower() not in schema:
        raise ConfigError(f"--partition {table}.{attr}: the query does not read {table!r}")
    try:
        r = check_safety(sql, table, attr, schema=schema, stats=stats or {}, nullable=nullable or {})
    except UnsupportedSqlError as e:  # not proven safe is not safe
        raise UnsafeSketchError(f"refused --partition {table}.{attr}: the safety check cannot analyse "
                                f"this query ({e})") from None
    if not r.safe:
        raise UnsafeSketchError(f"refused --partition {table}.{attr}: {r.reason}")
    return r.reason


def check_safe(cfg, name: str, sql: str, parts) -> list[str]:
    """The PBDS safety check for a registration, per partitioned table, for any future data
    (every non-key column may become NULL, no statistics of today's rows); UnsafeSketchError
    names the reason. Returns each table's reason for being safe."""
    from operators.errors import UnsafeSketchError

    schema = {t.name.lower(): t.column_names for t in cfg.tables}
    out = []
    for p in as_parts(parts):
        try:
            out.append(check_partition(sql, schema, p.table, p.attribute, may_be_null(cfg), declared_stats(cfg)))
        except UnsafeSketchError as e:
            raise UnsafeSketchError(f"sketch {name!r}: {e}") from None
    return out


def register_query(spark, cfg, name: str, sql: str, partitions, mode: str = "eager", *,
                   replace: bool = False, capture: bool = True, check: bool = True) -> Registration:
    """Store the query in ``registered_queries`` (one row per partitioned table of
    ``partitions`` = [(table, attribute, fragments), ...]) with boundaries from each mirror's
    current version; with ``capture`` also capture the initial sketch and state there
    (``sketches`` and ``sketch_state`` rows). The running job picks the rows up at its next
    batch. A partition attribute the safety check cannot prove safe is refused
    (UnsafeSketchError)."""
    lake = sink.Lake(cfg.lake_root)
    for t in cfg.tables:
        sink.ensure_mirror(spark, lake, t)
    ensure_tables(spark, lake)
    if mode not in ("eager", "lazy"):
        raise ConfigError(f"sketch {name!r}: mode {mode!r} is not eager or lazy")
    parts = as_parts(partitions)
    if any(p.fragments < 1 for p in parts):
        raise ConfigError(f"sketch {name!r}: fragments must be >= 1")
    check_query(cfg, name, sql, parts)
    if check:
        check_safe(cfg, name, sql, parts)
    existing = read_registry(spark, lake)
    if name in existing and not replace:
        raise ConfigError(f"sketch {name!r} is already registered (drop it first)")
    if name in existing:
        drop_query(spark, cfg, name)
    for p in parts:
        p.capture_version = sink.latest_version(spark, lake.mirror(p.table))
        p.boundaries = compute_boundaries(spark, lake, p.table, p.attribute, p.fragments, p.capture_version)
    reg = Registration(name, sql, parts, mode, sink.utcnow())
    _fault("register.begin", -1)  # the kill campaign times kills into the writes below
    append_registration(spark, lake, reg)
    if capture and reg.captured:
        _fault("register.capture", -1)
        q = QueryState(reg)
        versions = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in cfg.tables}
        q.capture(spark, lake, cfg, versions)
        write_sketch_rows(spark, lake, [q], batch_id=-1, app_id=None)
        write_snapshots(spark, lake, [q], batch_id=-1, app_id=None)
    return reg


def append_registration(spark, lake, reg: Registration) -> None:
    spark.createDataFrame(_reg_rows(reg)).write.format("delta").mode("append").save(lake.output(REGISTERED))


def drop_query(spark, cfg, name: str) -> bool:
    from delta.tables import DeltaTable

    lake = sink.Lake(cfg.lake_root)
    ensure_tables(spark, lake)
    if name not in read_registry(spark, lake):
        return False
    lit = name.replace("'", "''")
    DeltaTable.forPath(spark, lake.output(REGISTERED)).delete(f"name = '{lit}'")
    DeltaTable.forPath(spark, lake.output(SKETCHES)).delete(f"query = '{lit}'")
    DeltaTable.forPath(spark, lake.output(STATE)).delete(f"query = '{lit}'")
    return True


# -- one query's state --------------------------------------------------------------------------------

@dataclass
class QueryState:
    reg: Registration
    engine: object = None
    versions: dict = field(default_factory=dict)  # table -> mirror version the state reflects
    tables: list = field(default_factory=list)
    batch_id: int = -1
    dirty: bool = False  # sketch changed since the last `sketches` write
    last_apply_ms: float = 0.0  # engine time of the last bring_forward (no I/O)
    bound: bool = False  # Delta-backed join inputs attached to Spark
    probe_cache: object = None  # sketch_spark.ProbeCache shared by the job's queries in a batch
    _pushdown: dict | None = None

    @property
    def name(self) -> str:
        return self.reg.name

    def ready(self) -> bool:
        return self.engine is not None

    def capture(self, spark, lake, cfg, versions: dict, tables_cache: dict | None = None) -> bool:
        """Capture sketch and state from the mirrors at ``versions``. False if the partitioned
        mirror has no values yet to compute boundaries from (the query stays pending).
        ``tables_cache``: (table, version) -> full table, shared by several captures."""
        from operators.sketch import SketchMaintainer

        reg = self.reg
        for p in reg.parts:
            if p.boundaries is None:
                v = versions.get(p.table, 0)
                bounds = compute_boundaries(spark, lake, p.table, p.attribute, p.fragments, v)
                if bounds is None:
                    return False
                p.boundaries, p.capture_version = bounds, v
                _store_boundaries(spark, lake, reg.name, p)
        self.tables = check_query(cfg, reg.name, reg.sql, reg.parts)
        data = {}
        for t in self.tables:
            key = (t, versions[t])
            if tables_cache is not None and key in tables_cache:
                data[t] = tables_cache[key]
            else:
                data[t] = sink.read_version(spark, lake.mirror(t), versions[t], cfg.table(t).column_names)
                if tables_cache is not None:
                    tables_cache[key] = data[t]
        large = {t for t, d in data.items() if d.num_rows >= cfg.sketch.spark_join_rows}
        self.engine = SketchMaintainer.from_sql(reg.sql, reg.partitions(),
                                                store_factory=sketch_spark.delta_side_factory(large))
        self.versions = {t: versions[t] for t in self.tables}
        self.engine.initialize(data)
        del data
        self._bind(spark, lake, cfg)
        self.dirty = True
        return True

    def restore(self, state: bytes, versions: dict) -> None:
        from operators.sketch import SketchMaintainer

        self.engine = SketchMaintainer.restore(state, store_factory=sketch_spark.delta_side_factory(set()))
        self.tables = list(self.engine.tables)
        self.versions = {t: int(versions[t]) for t in self.tables}
        self.bound, self._pushdown = False, None

    def _bind(self, spark, lake, cfg) -> None:
        types = {t.name.lower(): dict(t.columns) for t in cfg.tables}
        sketch_spark.bind_sides(self.engine, sketch_spark.Binding(spark, lake, lambda t: self.versions[t], types,
                                                                  self.probe_cache))
        self.bound, self._pushdown = True, None

    def pushdown(self, cfg) -> dict:
        """table -> (Spark condition or None, columns) for this query's change-feed reads."""
        if self._pushdown is None:
            types = {t.name.lower(): dict(t.columns) for t in cfg.tables}
            self._pushdown = sketch_spark.pushdown(self.engine, types)
        return self._pushdown

    def spark_probes(self) -> int:
        return sum(s.probes for s, _ in sketch_spark.delta_sides(self.engine)) if self.engine else 0

    def fragments(self, table: str) -> list[int]:
        return list(self.engine.sketch.get(table.lower(), []))

    def all_fragments(self) -> dict:
        return {p.table.lower(): set(self.fragments(p.table)) for p in self.reg.parts}

    def sketch_rows(self, batch_id: int) -> list[dict]:
        """One ``sketches`` row per partitioned table."""
        out = []
        for part in self.reg.parts:
            p = self.engine.partitions[part.table.lower()]
            frags = self.fragments(part.table)
            bits = np.zeros(p.n_fragments + 1, dtype=bool)
            bits[frags] = True
            out.append({
                "query": self.name, "table_name": part.table, "attribute": part.attribute,
                "fragments": frags,
                "ranges": json.dumps([[_fmt(x) for x in p.range_of(i)] for i in frags]),
                "bitset": np.packbits(bits, bitorder="little").tobytes(), "n_fragments": p.n_fragments,
                "predicate": p.predicate(frags), "batch_id": batch_id,
                "mirror_version": self.versions.get(part.table.lower(), self.versions.get(part.table)),
                "mirror_versions": list(self.versions.items()),
            })
        return out

    def bring_forward(self, spark, lake, cfg, target: dict, cache: dict | None = None,
                      reads: dict | None = None):
        """Apply the change feed from the state's versions to ``target``; the SketchDelta
        (None if nothing changed; else (added, removed), each table -> fragment ids) and the
        number of delta rows read.  ``reads``: table ->
        (Spark condition, columns) to read with (several queries' push-downs combined, so
        that one read in ``cache`` serves them all); default: this query's own."""
        from operators.sketch import RecaptureRequired

        if not self.bound:
            self._bind(spark, lake, cfg)
        reads = reads or self.pushdown(cfg)
        deltas, rows = {}, 0
        for t in self.tables:
            lo, hi = self.versions[t], target.get(t, self.versions[t])
            if hi <= lo:
                continue
            key = (t, lo, hi)
            if cache is not None and key in cache:
                d = cache[key]
            else:
                where, cols = reads.get(t, (None, cfg.table(t).column_names))
                d = sink.read_changes(spark, lake.mirror(t), lo, hi, cols, where=where)
                if cache is not None:
                    cache[key] = d
            if d is not None and d.num_rows:
                deltas[t] = d
                rows += d.num_rows
        new_versions = {t: max(self.versions[t], target.get(t, self.versions[t])) for t in self.tables}
        if not deltas:
            self.versions = new_versions
            return None, 0
        before = self.all_fragments()
        t_apply = time.perf_counter()
        try:
            sd = self.engine.apply(deltas)
            self.last_apply_ms = (time.perf_counter() - t_apply) * 1000
            self.versions = new_versions
            added = {t: set(sd.added.get(t, set())) for t in before}
            removed = {t: set(sd.removed.get(t, set())) for t in before}
        except RecaptureRequired:
            self.capture(spark, lake, cfg, {**self.versions, **new_versions})
            after = self.all_fragments()
            added = {t: after[t] - before[t] for t in before}
            removed = {t: before[t] - after[t] for t in before}
        if any(added.values()) or any(removed.values()):
            self.dirty = True
        return (added, removed), rows


def _store_boundaries(spark, lake, name: str, part: Part) -> None:
    from delta.tables import DeltaTable

    lit, tlit = name.replace("'", "''"), part.table.replace("'", "''")
    DeltaTable.forPath(spark, lake.output(REGISTERED)).update(
        f"name = '{lit}' AND partition_table = '{tlit}' AND boundaries IS NULL",
        {"boundaries": f"'{bounds_to_json(part.boundaries)}'", "capture_version": str(part.capture_version)})


# -- writes ---------------------------------------------------------------------------------------

_SKETCH_SCHEMA = pa.schema([
    ("query", pa.string()), ("table_name", pa.string()), ("attribute", pa.string()),
    ("fragments", pa.list_(pa.int32())), ("ranges", pa.string()), ("bitset", pa.binary()),
    ("n_fragments", pa.int32()), ("predicate", pa.string()), ("batch_id", pa.int64()),
    ("mirror_version", pa.int64()), ("mirror_versions", pa.map_(pa.string(), pa.int64())),
    ("updated_at", pa.timestamp("us", tz="UTC")),
])


def write_sketch_rows(spark, lake, queries: list[QueryState], batch_id: int, app_id: str | None) -> None:
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


def delta_rows(q: QueryState, batch_id: int, added: dict, removed: dict) -> list[dict]:
    """``sketch_deltas`` rows of one query's batch (``added``/``removed``: table -> ids)."""
    out = []
    for part in q.reg.parts:
        t = part.table.lower()
        p = q.engine.partitions[t]
        for change, ids in ((1, added.get(t, ())), (-1, removed.get(t, ()))):
            for i in sorted(ids):
                lo, hi = p.range_of(i)
                out.append({"query": q.name, "batch_id": batch_id, "table_name": part.table, "fragment": int(i),
                            "change": change, "lower": _fmt(lo), "upper": _fmt(hi),
                            "mirror_version": q.versions.get(t)})
    return out


_DELTA_SCHEMA = pa.schema([
    ("query", pa.string()), ("batch_id", pa.int64()), ("table_name", pa.string()), ("fragment", pa.int32()),
    ("change", pa.int32()), ("lower", pa.string()), ("upper", pa.string()), ("mirror_version", pa.int64()),
    ("committed_at", pa.timestamp("us", tz="UTC")),
])


def write_snapshots(spark, lake, queries: list[QueryState], batch_id: int, app_id: str | None) -> None:
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


# -- the job's maintainer ------------------------------------------------------------------------------

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
        self.probe_cache = sketch_spark.ProbeCache()

    # setup: output tables and the config's [[sketches]] entries
    def setup(self, spark, job) -> None:
        # here, on the session that starts the query: foreachBatch gets a per-stream clone
        # whose listener bus never hears this query's progress
        _progress_listener(spark, self)
        lake = job.lake
        if not self.cfg.sketches:
            return  # tables appear with the first `sketch register`; _refresh looks for them
        ensure_tables(spark, lake)
        have = read_registry(spark, lake)
        for s in self.cfg.sketches:
            if s.name in have:
                continue
            register_query(spark, self.cfg, s.name, s.sql, s.partitions, s.mode, capture=False)

    def _state_for(self, spark, job, reg: Registration, versions: dict, tables_cache: dict) -> QueryState | None:
        q = QueryState(reg, probe_cache=self.probe_cache)
        if reg.captured:
            snap = latest_snapshot(spark, job.lake, reg, versions)
            if snap is not None:
                try:
                    q.restore(*snap)
                except StateError as e:  # written by an older build: its encoding is not read any more
                    print(f"sketches: {reg.name}: snapshot not usable ({e}); recapturing from the mirrors",
                          flush=True)
                else:
                    q.bring_forward(spark, job.lake, self.cfg, versions)
                    return q
                q = QueryState(reg, probe_cache=self.probe_cache)
        q.capture(spark, job.lake, self.cfg, versions, tables_cache)
        return q

    def _refresh(self, spark, job, versions: dict) -> list[QueryState]:
        """Pick up registrations and drops; returns newly captured queries."""
        v = _registry_version(job.lake)
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
        return {t: sketch_spark.union_pushdown(items) for t, items in per.items()}

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
            sc.setJobDescription(f"ivmstream batch {ctx.batch_id}: sketch {q.name}")
            t = time.perf_counter()
            q.last_apply_ms = 0.0
            probes = q.spark_probes()
            res, rows = q.bring_forward(spark, lake, self.cfg, ctx.mirror_versions, cache, reads)
            q.batch_id = ctx.batch_id
            q.dirty = True  # the row records the mirror version even when no fragment changed
            if res is not None:
                deltas += delta_rows(q, ctx.batch_id, *res)
            metrics[q.name] = {"delta_rows": rows, "apply_ms": round(q.last_apply_ms if res is not None else 0.0, 2),
                               "added": sum(map(len, res[0].values())) if res else 0,
                               "removed": sum(map(len, res[1].values())) if res else 0,
                               "spark_probes": q.spark_probes() - probes,
                               "ms": round((time.perf_counter() - t) * 1000, 1)}
        sc.setJobDescription(f"ivmstream batch {ctx.batch_id}: sketch outputs")
        app = f"{ctx.app_id}:{self.name}"
        if deltas:
            now = sink.utcnow()
            sink.append_small(spark, lake.output(DELTAS),
                        pa.Table.from_pylist([{**d, "committed_at": now} for d in deltas], schema=_DELTA_SCHEMA),
                        f"{app}:deltas", ctx.batch_id)
        _fault("sketch.deltas", ctx.batch_id)
        dirty = [q for q in self.queries.values() if q.ready() and q.dirty]
        write_sketch_rows(spark, lake, dirty, ctx.batch_id, f"{app}:sketches")
        _fault("sketch.merge", ctx.batch_id)
        self.batches_since_snapshot += 1
        snap = [q for q in self.queries.values() if q.ready() and (q in new or self.batches_since_snapshot
                                                                     >= self.snapshot_every)]
        if snap:
            _fault("sketch.state.begin", ctx.batch_id)
            write_snapshots(spark, lake, snap, ctx.batch_id, f"{app}:state")
            _fault("sketch.state", ctx.batch_id)
            if self.batches_since_snapshot >= self.snapshot_every:
                self.batches_since_snapshot = 0
        ctx.metrics[self.name] = {
            "queries": len(self.queries), "captured": [q.name for q in new],
            "delta_rows_in": sum(m["delta_rows"] for m in metrics.values()),
            "sketch_changes": len(deltas), "ms": round((time.perf_counter() - t_all) * 1000, 1),
            "probe_cache_hits": self.probe_cache.hits - hits0, "per_query": metrics,
        }
        self.probe_cache.clear()  # hold probe rows for one batch only
        if self.queries:  # the listener prints a line for batches that maintained sketches
            self.recent[ctx.batch_id] = ctx.metrics[self.name]
            for b in sorted(self.recent)[:-16]:
                del self.recent[b]
        sc.setJobDescription(None)


_LISTENERS: dict = {}


def _progress_listener(spark, maintainer) -> None:
    """Print each batch's sketch metrics with the streaming query's progress (one listener per
    session; it follows the latest maintainer)."""
    from pyspark.sql.streaming import StreamingQueryListener

    key = id(spark)
    if key in _LISTENERS:
        _LISTENERS[key].maintainer = maintainer
        return

    class _Listener(StreamingQueryListener):
        def __init__(self):
            self.maintainer = maintainer
            self.lines: list = []  # the last lines printed (tests read them)

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            p = event.progress
            m = self.maintainer.recent.get(p.batchId)
            if m:
                per = ", ".join(f"{q} {v['delta_rows']} rows +{v['added']}/-{v['removed']} {v['ms']:.0f}ms"
                                for q, v in m["per_query"].items())
                line = (f"[{p.name}] batch {p.batchId} progress: {p.numInputRows} input rows, "
                        f"{p.processedRowsPerSecond:.0f} rows/s; sketches: {m['delta_rows_in']} delta rows, "
                        f"{m['sketch_changes']} fragment changes, {m['ms']:.0f} ms ({per})")
                self.lines = (self.lines + [line])[-64:]
                print(line, flush=True)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = _Listener()
    spark.streams.addListener(listener)
    _LISTENERS[key] = listener


def _fault(step: str, batch_id: int) -> None:
    """Fault points inside this maintainer (IVMSTREAM_KILL_AT="sketch.deltas:<batch>" etc.)."""
    from streaming_app.job import _fault as job_fault

    job_fault(step, batch_id)


def _registry_version(lake) -> int:
    """Version of ``registered_queries`` from its log (delta-rs, no Spark job); -1 if absent."""
    try:
        import deltalake

        return int(deltalake.DeltaTable(lake.output(REGISTERED)).version())
    except Exception:  # noqa: BLE001 - not created yet (nothing registered)
        return -1


def bits_to_ids(bitset: bytes, n: int) -> list[int]:
    bits = np.unpackbits(np.frombuffer(bitset, dtype=np.uint8), bitorder="little")[: n + 1]
    return [int(i) for i in np.flatnonzero(bits)]
