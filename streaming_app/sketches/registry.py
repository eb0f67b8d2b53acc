"""The registry of sketched queries: ``Part`` and ``Registration``, read from and written to
``registered_queries`` (one row per query and partitioned table)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa

from connectors import delta_sink as sink
from connectors import object_store as store
from operators.sketch import RangePartition
from operators.sketch.partition import equi_depth_positions
from operators.sketch_safety.registration import table_attributes
from streaming_app.sketches.tables import REGISTERED, bounds_from_json, bounds_to_json


@dataclass
class Part:
    """One range-partitioned table of a registration (one ``registered_queries`` row)."""

    table: str
    attribute: str
    fragments: int
    boundaries: list | None = None  # None until the mirror has values (capture computes them)
    capture_version: int | None = None

    def partition(self):

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
    table_attributes(parts)  # at least one, one attribute per table
    return parts

def read_registry(spark, lake: sink.Lake) -> dict[str, Registration]:
    path = lake.output(REGISTERED)
    if sink.rs_writes(path):  # delta-rs reads it without a Spark job
        return group_registrations(store.rs_table(path).to_pyarrow_table().to_pylist())
    rows = spark.read.format("delta").load(path).collect()
    return group_registrations([r.asDict() for r in rows])

# Above this many rows a mirror's boundaries come from a sort on the executors, not from its
# column read into the driver (SF10's lineitem: 60 M keys, ~2.3 GB of driver memory that way).
SPARK_BOUNDARIES_ROWS = 4_000_000
_SPARK_SORTABLE = ("byte", "short", "integer", "long", "float", "double", "decimal", "string", "date")

def compute_boundaries(spark, lake: sink.Lake, table: str, attribute: str, fragments: int, version: int,
                       spark_above: int | None = None):
    """Equi-depth boundaries of the mirror's attribute at ``version``; None if it has no values.
    With ``spark_above``, a mirror of more rows is sorted by Spark on the executors
    (``spark_equi_depth_picks``) instead of read into the driver."""

    path = lake.mirror(table)
    if spark is not None and spark_above is not None and _rows(path, version) > spark_above:
        picked = spark_equi_depth_picks(spark, path, version, attribute, fragments)
        if picked is not False:
            return None if picked is None else list(RangePartition.from_picks(attribute, *picked).boundaries)
    col = sink.read_version(spark, path, version, [attribute]).column(attribute)  # delta-rs: no Spark job
    if len(col) - col.null_count == 0:
        return None
    return list(RangePartition.equi_depth(attribute, col, fragments).boundaries)

def _rows(path: str, version: int) -> int:
    """The table's row count at ``version`` from its log (0 when the log does not say)."""
    try:
        actions = store.rs_table(path, version=version).get_add_actions(flatten=True)
        return int(sum(v or 0 for v in actions.column("num_records").to_pylist()))
    except Exception:  # noqa: BLE001 - no statistics: the driver's path
        return 0

def spark_equi_depth_picks(spark, path: str, version: int, attribute: str, fragments: int):
    """``RangePartition.equi_depth``'s picks (the sorted values at its positions, and the maximum)
    of the mirror's attribute, by Spark jobs on the executors: a sort, kept by a local
    checkpoint; the rows of each sorted partition; the picked rows. The same values the driver's
    sort gives. None: no non-NULL value; False: a type this path does not take (the driver's)."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    kind = df.schema[attribute].dataType.typeName()
    if not kind.startswith(_SPARK_SORTABLE):
        return False
    v = F.col(f"`{attribute}`")
    if kind.startswith("decimal"):  # the driver's sort too compares decimals as floats
        v = v.cast("double")
    sc = spark.sparkContext
    sc.setJobDescription(f"ivmstream: fragment boundaries of {attribute}")
    srt = df.select(v.alias("v")).where(F.col("v").isNotNull()).orderBy("v").localCheckpoint(eager=True)
    try:
        counts = dict(sorted((r[0], r[1]) for r in srt.groupBy(F.spark_partition_id()).count().collect()))
        n = sum(counts.values())
        if n == 0:
            return None
        mids, start = {}, 0  # global position -> monotonically_increasing_id of its row
        wanted = [*equi_depth_positions(n, fragments), n - 1]
        for part, c in counts.items():
            for p in wanted:
                if start <= p < start + c:
                    mids[p] = (part << 33) + (p - start)
            start += c
        rows = (srt.select("v", F.monotonically_increasing_id().alias("mid"))
                .where(F.col("mid").isin(sorted(set(mids.values())))).collect())
        value = {r["mid"]: r["v"] for r in rows}
        picks = [value[mids[p]] for p in wanted]
        return picks[:-1], picks[-1]
    finally:
        srt.unpersist()
        sc.setJobDescription(None)

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

def append_registration(spark, lake, reg: Registration) -> None:
    path = lake.output(REGISTERED)
    if sink.rs_writes(path):
        store.rs_write(path, _reg_rows(reg), mode="append")
        return
    spark.createDataFrame(_reg_rows(reg)).write.format("delta").mode("append").save(path)

def store_boundaries(spark, lake, name: str, part: Part) -> None:
    """Record boundaries computed at a later capture (the mirror had no values at registration)."""
    lit, tlit = name.replace("'", "''"), part.table.replace("'", "''")
    bounds = bounds_to_json(part.boundaries).replace("'", "''")
    path = lake.output(REGISTERED)
    if sink.rs_writes(path):  # delta-rs: one commit, no Spark job
        store.rs_table(path).update(
            predicate=f""""name" = '{lit}' AND "partition_table" = '{tlit}' AND "boundaries" IS NULL""",
            updates={'"boundaries"': f"'{bounds}'", '"capture_version"': f"CAST({int(part.capture_version)} AS BIGINT)"})
        return
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).update(
        f"name = '{lit}' AND partition_table = '{tlit}' AND boundaries IS NULL",
        {"boundaries": f"'{bounds}'", "capture_version": str(part.capture_version)})

def registry_version(lake) -> int:
    """Version of ``registered_queries`` from its log (delta-rs, no Spark job); -1 if absent."""
    try:
        return int(store.rs_table(lake.output(REGISTERED)).version())
    except Exception:  # noqa: BLE001 - not created yet (nothing registered)
        return -1
