"""Delta sinks: mirror tables kept by MERGE, idempotent appends, and the lake's layout.

Every write carries the micro-batch id as a Delta application transaction
(``txnAppId``/``txnVersion``): a batch that Spark replays after a crash finds its earlier
commit recorded in the table's log and Delta skips it, so nothing is written twice. MERGE,
which takes no writer options, gets the same pair through the session confs
``spark.databricks.delta.write.txnAppId/txnVersion``, set for that one command only.

Layout under the lake root: ``mirrors/<table>`` (one per CDC base table, change data feed
on, so maintainers can read exact signed deltas between versions) and one folder per output
table (``quarantine``, ``batches``, ``sketches``...).
"""

from __future__ import annotations

import datetime as dt
import re
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import duckdb
import pyarrow.compute as pc
import sqlglot
from deltalake import CommitProperties, Transaction
from deltalake.exceptions import DeltaProtocolError

from connectors import dv_table as dv
from connectors import object_store as store
from core.config import TableConfig

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
DELETED = "__deleted"


def arrow_type(typ: str) -> pa.DataType:
    m = _DECIMAL.match(typ)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return {
        "int": pa.int32(), "long": pa.int64(), "double": pa.float64(), "string": pa.string(),
        "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
        "binary": pa.binary(),
    }[typ]


def spark_ddl_type(typ: str) -> str:
    m = _DECIMAL.match(typ)
    if m:
        return f"DECIMAL({m.group(1)},{m.group(2)})"
    return {"int": "INT", "long": "BIGINT", "double": "DOUBLE", "string": "STRING",
            "boolean": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMP", "binary": "BINARY"}[typ]


def arrow_schema(table: TableConfig) -> pa.Schema:
    return pa.schema([pa.field(c, arrow_type(t), nullable=c not in table.primary_key)
                      for c, t in table.columns])


def table_ddl(table: TableConfig) -> str:
    return ", ".join(f"`{c}` {spark_ddl_type(t)}" for c, t in table.columns)


class Lake:
    """Paths of the lake's tables under one root: a folder, or an ``s3a://bucket/path`` URI."""

    def __init__(self, root: str | Path):
        self.root = str(root) if "://" in str(root) else Path(root)

    def mirror(self, table: str) -> str:
        return store.join(self.root, "mirrors", table)

    def output(self, name: str) -> str:
        return store.join(self.root, name)


def exists(spark, path: str) -> bool:
    if rs_writes(path):  # the log answers through delta-rs; no Spark job
        return store.rs_is_table(path)
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


# Every table this process made or opened through ``ensure_table``: the tables the job writes,
# which table maintenance (``connectors.maintenance``) keeps.
_ENSURED: set[str] = set()


def tables_ensured() -> set[str]:
    return set(_ENSURED)


def has_deletion_vectors(path: str) -> bool:
    """The table's protocol lists deletion vectors (delta-rs must not write it: a MERGE of
    deltalake 1.6.6 on such a table brought a deleted row back)."""
    if rs_writes(path):
        return dv.is_merge_on_read(path)
    try:
        p = store.rs_table(path).protocol()
    except (DeltaProtocolError, store.MergeOnReadTable):
        return True
    return "deletionVectors" in (p.reader_features or []) or "deletionVectors" in (p.writer_features or [])


def merge_on_read(path: str) -> bool:
    """This process reads and writes the table through ``connectors.dv_table`` (a local or s3
    table with deletion vectors: a merge-on-read mirror)."""
    return rs_writes(path) and dv.is_merge_on_read(path)


def ensure_table(spark, path: str, ddl: str, *, cdf: bool = False,
                 partition_by: Iterable[str] = (), properties: dict[str, str] | None = None) -> None:
    """Create the Delta table at ``path`` with the DDL column list unless it exists.

    On a local or s3 lake delta-rs writes the first commit (milliseconds; Spark's CREATE TABLE
    took 0.7-1 s a table and 5.7 s for the first, the larger part of a fresh job's start-up).
    The table is the same to Spark: same schema, nullable columns, the same property."""
    _ENSURED.add(str(path))
    if exists(spark, path):
        return
    parts = list(partition_by)
    if rs_writes(path):
        try:
            from connectors.ddl import ddl_schema

            schema = ddl_schema(ddl)
        except ValueError:
            schema = None  # a type the small parser does not know: Spark creates it below
        if schema is not None:
            store.rs_create(path, schema, mode="ignore", partition_by=parts or None,
                            configuration={"delta.enableChangeDataFeed": "true" if cdf else "false",
                                           **(properties or {})})
            return
    props = ", ".join(f"'{k}' = '{v}'" for k, v in
                      {"delta.enableChangeDataFeed": "true" if cdf else "false", **(properties or {})}.items())
    part = f" PARTITIONED BY ({', '.join(parts)})" if parts else ""
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({ddl}) USING DELTA{part} "
              f"TBLPROPERTIES ({props})")


def ensure_columns(spark, path: str, columns: dict[str, str]) -> list[str]:
    """Add to an existing table the columns (name -> SQL type) that a newer release writes,
    so a lake made by an older release keeps working. Returns the names added."""
    if rs_writes(path):
        have = {f.name for f in store.rs_table(path).schema().fields}
    else:
        have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [c for c in columns if c not in have]
    if missing:
        cols = ", ".join(f"`{c}` {columns[c]}" for c in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
    return missing


# Files of about this size in the mirrors that delta-rs rewrites: a MERGE rewrites every file
# holding a changed key, and left to itself it writes one file per MERGE (a 6M-row mirror became
# one file, so every later batch, even of 11 keys, copied all 6M rows on one core). Files of a
# few MB keep the key ranges apart (an 11-key batch copied 0.9M of 6M rows) and the scan parallel.
MIRROR_FILE_BYTES = 4 * 2**20
# A batch with at most this many distinct leading-key values names them in the MERGE condition,
# so delta-rs skips the files whose key statistics exclude them (a longer list cost more than
# it saved: 20,000 keys touch every file of a 6M-row mirror anyway).
KEY_LIST_MAX = 1000


# An output table up to this size on disk is merged by ``connectors.dv_table`` (copy-on-write,
# the log followed by probing); a larger one by delta-rs, which prunes files by their statistics.
SMALL_TABLE_BYTES = 64 * 2**20

COPY_ON_WRITE, MERGE_ON_READ = "copy-on-write", "merge-on-read"


def ensure_mirror(spark, lake: Lake, table: TableConfig, layout: str = COPY_ON_WRITE) -> str:
    """The mirror of ``table``, made if missing. ``layout``: ``merge-on-read`` keeps it with
    deletion vectors (``connectors.dv_table``: a batch writes its changes, not the files they
    fall in); a copy-on-write mirror moves to it on the next start; a merge-on-read one stays so.
    On a lake delta-rs cannot reach, Spark keeps it copy-on-write."""
    path = lake.mirror(table.name)
    if rs_writes(path) and (layout == MERGE_ON_READ or dv.is_merge_on_read(path)):
        _ENSURED.add(str(path))
        if not dv.is_merge_on_read(path):
            if store.rs_is_table(path):
                dv.enable(path)
            else:
                dv.create(path, arrow_schema(table), {"delta.targetFileSize": str(MIRROR_FILE_BYTES)})
        return path
    ensure_table(spark, path, table_ddl(table), cdf=True, properties={"delta.targetFileSize": str(MIRROR_FILE_BYTES)})
    if rs_writes(path):
        dt_ = store.rs_table(path)
        if "delta.targetFileSize" not in dt_.metadata().configuration:  # also a mirror made before it was set
            dt_.alter.set_table_properties({"delta.targetFileSize": str(MIRROR_FILE_BYTES)})
    return path


@contextmanager
def txn(spark, app_id: str, batch_id: int):
    """Make the Delta command(s) inside idempotent on (app_id, batch_id)."""
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def latest_version(spark, path: str) -> int:
    """The table's newest version. delta-rs reads it from the log in milliseconds; a URI that
    delta-rs cannot open (abfss://, gs://) falls back to Spark."""
    try:
        if merge_on_read(path):
            return dv.open_table(path).snapshot().version
        return int(store.rs_table(path).version())
    except Exception:  # noqa: BLE001 - any delta-rs failure: ask Spark instead
        from delta.tables import DeltaTable

        return int(DeltaTable.forPath(spark, path).history(1).select("version").first()[0])


def mirror_changes_frame(table: TableConfig, final: dict[tuple, dict | None]) -> pa.Table:
    """One row per changed key: the final image, or the key alone flagged deleted."""
    schema = arrow_schema(table)
    cols: dict[str, list] = {c: [] for c in table.column_names}
    deleted: list[bool] = []
    for key, row in final.items():
        if row is None:
            keyed = dict(zip(table.primary_key, key))
            for c in table.column_names:
                cols[c].append(keyed.get(c))
            deleted.append(True)
        else:
            for c in table.column_names:
                cols[c].append(row[c])
            deleted.append(False)
    arrays = [pa.array(cols[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays + [pa.array(deleted, pa.bool_())],
                                schema=pa.schema(list(schema) + [pa.field(DELETED, pa.bool_())]))


def merge_mirror(spark, path: str, table: TableConfig, changes: pa.Table,
                 app_id: str, batch_id: int, truncate: bool = False) -> None:
    """Apply one batch's final images (``mirror_changes_frame``) to the mirror in one MERGE commit
    (idempotent): rows flagged ``__deleted`` are deleted, the rest upserted on the primary key.

    ``truncate``: the batch truncated the table before these images, so every row the
    batch does not write is deleted in the same commit (the change feed shows each one)."""
    # a truncate's MERGE must see every row; a merge-on-read mirror finds its keys by index
    prune = "" if truncate or merge_on_read(path) else _key_list(table, changes)
    merge(spark, path, changes, table.primary_key, app_id=app_id, batch_id=batch_id, deleted=DELETED,
          truncate=truncate, prune=prune, small=False)


def merge(spark, path: str, source: pa.Table, keys: list[str], *, app_id: str | None = None,
          batch_id: int | None = None, deleted: str | None = None, truncate: bool = False,
          prune: str = "", small: bool = True) -> None:
    """The one MERGE of the lake: upsert ``source`` into the Delta table at ``path`` on ``keys``,
    in one commit.

    ``deleted``: a boolean column of ``source``; its true rows delete their match instead (the
    column is not written). ``truncate``: target rows no source row matches are deleted too.
    ``app_id``/``batch_id``: the commit carries that application transaction and is skipped
    when the table already holds it (a replayed batch). ``prune``: a further condition on the
    target (``t."k" IN (...)``, DataFusion quoting) that lets delta-rs skip files.
    On a local or s3 lake delta-rs runs it (no Spark job: tens of milliseconds where Spark's
    MERGE took seconds), its commit with the same txn action and a change feed that Spark reads
    row for row as its own; elsewhere (abfss://, gs://... through Hadoop) Spark's MERGE.

    ``small``: an output table (not a mirror) of at most ``SMALL_TABLE_BYTES`` is merged by
    ``connectors.dv_table``'s copy-on-write writer instead of delta-rs: the same files rewritten
    and change-data files, without listing the whole ``_delta_log`` at each commit (delta-rs
    1.6.6 does, and the log keeps a commit a batch for 30 days)."""
    if source.num_rows == 0 and not truncate:
        return
    columns = [c for c in source.column_names if c != deleted]
    if merge_on_read(path):
        dv.open_table(path).merge(source, keys, deleted=deleted, truncate=truncate, app_id=app_id, batch_id=batch_id)
        return
    if small and rs_writes(path):
        try:
            t = dv.open_table(path)
            if sum(f.size for f in t.snapshot().files.values()) <= SMALL_TABLE_BYTES:
                t.merge(source, keys, deleted=deleted, truncate=truncate, app_id=app_id, batch_id=batch_id)
                return
        except (dv.UnsupportedFeature, FileNotFoundError):
            pass  # a table the log writer does not write: delta-rs
    if rs_writes(path):
        table = store.rs_table(path)  # opened once: loading a table reads its log
        done = table.transaction_version(app_id) if app_id is not None else None
        if done is not None and done >= batch_id:
            return  # a replayed batch whose MERGE committed before the crash
        props = (CommitProperties(app_transactions=[Transaction(app_id=app_id, version=batch_id)])
                 if app_id is not None else None)
        # Double quotes: DataFusion folds unquoted names to lower case.
        cond = " AND ".join(f't."{k}" = s."{k}"' for k in keys) + prune
        values = {f'"{c}"': f's."{c}"' for c in columns}
        keep = f'NOT s."{deleted}"' if deleted else None
        m = table.merge(source, cond, source_alias="s", target_alias="t", commit_properties=props)
        if deleted:
            m = m.when_matched_delete(predicate=f's."{deleted}"')
        m = m.when_matched_update(updates=values, predicate=keep).when_not_matched_insert(updates=values,
                                                                                          predicate=keep)
        if truncate:
            m = m.when_not_matched_by_source_delete()
        m.execute()
        return
    from delta.tables import DeltaTable  # Spark's side of the lake: only where delta-rs cannot write

    src = spark.createDataFrame(source) if source.num_rows else spark.createDataFrame([], spark_schema(source.schema))
    cond = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    values = {f"`{c}`": f"s.`{c}`" for c in columns}
    keep = f"NOT s.`{deleted}`" if deleted else None
    with txn(spark, app_id, batch_id) if app_id is not None else nullcontext():
        m = DeltaTable.forPath(spark, path).alias("t").merge(src.alias("s"), cond)
        if deleted:
            m = m.whenMatchedDelete(condition=f"s.`{deleted}`")
        m = m.whenMatchedUpdate(condition=keep, set=values).whenNotMatchedInsert(condition=keep, values=values)
        if truncate:
            m = m.whenNotMatchedBySourceDelete()
        m.execute()


def _key_list(table: TableConfig, changes: pa.Table) -> str:
    """`` AND t."k" IN (...)`` over the batch's values of the leading key column when it is an
    integer column and they are few: implied by the key equality (a target row that matches a
    source row has one of these values), it lets delta-rs prune files by their statistics."""
    k = table.primary_key[0]
    if table.type_of(k) not in ("int", "long"):
        return ""
    values = pc.unique(changes.column(k)).to_pylist()
    if not values or len(values) > KEY_LIST_MAX:
        return ""
    return f' AND t."{k}" IN ({", ".join(str(int(v)) for v in sorted(values))})'


def spark_schema(schema: pa.Schema):
    """An Arrow schema as Spark's StructType (an empty DataFrame's columns)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def lookup_rows(spark, path: str, table: TableConfig, version: int, keys: set) -> tuple[dict, dict]:
    """Full rows of the mirror as of ``version`` for the given primary keys: (live, gone).

    A key absent at that version (its row was deleted in an earlier batch) is looked up in the
    change feed: ``gone`` holds the image its newest delete removed. One or two Spark reads,
    whatever the number of keys."""
    if not keys:
        return {}, {}
    pk = list(table.primary_key)
    schema = arrow_schema(table)
    key_tab = pa.table({k: pa.array([key[i] for key in keys], schema.field(k).type) for i, k in enumerate(pk)})
    key_df = spark.createDataFrame(key_tab)
    cols = [f"`{c}`" for c in table.column_names]
    cur = (spark.read.format("delta").option("versionAsOf", version).load(path)
           .join(key_df, on=pk, how="left_semi").select(*cols).toArrow().to_pylist())
    out = {tuple(r[k] for k in pk): r for r in cur}
    gone_rows: dict = {}
    missing = [k for k in keys if k not in out]
    if missing and version > 0:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        miss_df = spark.createDataFrame(pa.table(
            {k: pa.array([key[i] for key in missing], schema.field(k).type) for i, k in enumerate(pk)}))
        w = Window.partitionBy(*pk).orderBy(F.col("_commit_version").desc())
        gone = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
                .option("endingVersion", version).load(path)
                .where("_change_type = 'delete'").join(miss_df, on=pk, how="left_semi")
                .withColumn("__n", F.row_number().over(w)).where("__n = 1").select(*cols)
                .toArrow().to_pylist())
        gone_rows = {tuple(r[k] for k in pk): r for r in gone}
    return out, gone_rows


def append(spark, path: str, data: pa.Table | "DataFrame", app_id: str, batch_id: int) -> None:
    """Append rows to a Delta table, skipped if this (app_id, batch_id) was written before."""
    df = spark.createDataFrame(data) if isinstance(data, pa.Table) else data
    (df.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", batch_id)
     .save(path))


def rs_writes(path: str) -> bool:
    """delta-rs writes this table (a local or s3 lake); Spark elsewhere."""
    return store.rs_reaches(path)


def done_before(path: str, app_id: str, batch_id: int) -> bool:
    """The table's log (read by delta-rs) holds a txn action of ``app_id`` at ``batch_id`` or later."""
    v = _txn_version(path, app_id)
    return v is not None and v >= batch_id


def maybe_written_by(path: str, app_id: str) -> bool:
    """False when the table's log surely holds no txn action of ``app_id`` (a local or s3 table,
    read by delta-rs without a Spark job); True when it does or when only Spark could tell."""
    if not rs_writes(path):
        return True
    return _txn_version(path, app_id) is not None


def _txn_version(path: str, app_id: str) -> int | None:
    if merge_on_read(path):
        return dv.open_table(path).snapshot().txns.get(app_id)
    return store.rs_table(path).transaction_version(app_id)


def append_small(spark, path: str, data: pa.Table, app_id: str, batch_id: int) -> None:
    """``append`` for a few rows: on a local or s3 lake one commit without a Spark job (tens of
    milliseconds instead of seconds), with the same txn action Spark writes, so either writer
    skips a batch the other committed.

    ``connectors.dv_table`` writes it (a parquet file, its add and txn actions): it follows the
    log by probing for the next version, where delta-rs 1.6.6 lists the whole ``_delta_log``
    folder at each open, so a 1-row append went from 11 ms to 29-39 ms once the log kept 1,890
    commits. A table it does not write (partitioned, column mapping...) goes through delta-rs."""
    if not rs_writes(path):
        return append(spark, path, data, app_id, batch_id)
    try:
        dv.open_table(path).append(data, app_id=app_id, batch_id=batch_id)
        return
    except (dv.UnsupportedFeature, FileNotFoundError):
        pass  # a table the log writer does not write, or none yet: delta-rs (creates one on append)
    if done_before(path, app_id, batch_id):
        return
    store.rs_write(path, data, mode="append", commit_properties=CommitProperties(
        app_transactions=[Transaction(app_id=app_id, version=batch_id)]))


def merge_small(spark, path: str, data: pa.Table, keys: list[str], app_id: str | None = None,
                batch_id: int | None = None) -> None:
    """Upsert a few rows on ``keys`` (``merge``); with ``app_id`` idempotent on (app_id, batch_id)."""
    merge(spark, path, data, keys, app_id=app_id, batch_id=batch_id)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


WEIGHT = "__weight"
# The change feed's row kinds as weights: the one sign table of the lake.
SIGN = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
_WEIGHT_SQL = ("CASE WHEN _change_type IN ('insert', 'update_postimage') THEN 1 "
               "WHEN _change_type IN ('delete', 'update_preimage') THEN -1 END")


def read_changes(spark, path: str, after_version: int, to_version: int, columns: list[str] | None = None,
                 where: str | None = None, version_column: str | None = None) -> pa.Table | None:
    """Signed changes of the table between two versions, from its change data feed: the one
    change-feed reader of the job, its maintainers and state recovery.

    Rows of commits ``after_version + 1 .. to_version``: inserts and update post-images with
    ``__weight`` +1, deletes and update pre-images with -1; None when nothing was committed.
    ``where``: a Spark SQL condition on the table's columns, applied before anything reaches
    the driver (each pre- and post-image is kept or dropped on its own). ``version_column``:
    also each row's commit version, as a long column of that name. Raises when the feed does
    not cover the versions (a vacuumed or never-written range). ``spark`` may be None on a
    local or s3 lake (delta-rs reads it, no Spark job).
    """
    if to_version <= after_version:
        return None
    if rs_writes(path):
        try:
            return _read_changes_rs(path, after_version, to_version, columns, where, version_column)
        except Exception:  # noqa: BLE001 - a table or condition delta-rs / duckdb cannot read: Spark can
            if spark is None:
                raise
    from pyspark.sql import functions as F  # Spark's side of the lake: only where delta-rs cannot read

    df = (spark.read.format("delta").option("readChangeFeed", "true")
          .option("startingVersion", after_version + 1).option("endingVersion", to_version)
          .load(path))
    cols = columns or [c for c in df.columns if not c.startswith("_")]
    if where:
        df = df.where(where)
    out = [F.col(f"`{c}`") for c in cols] + [F.expr(_WEIGHT_SQL).cast("long").alias(WEIGHT)]
    if version_column:
        out.append(F.col("_commit_version").cast("long").alias(version_column))
    return df.select(*out).toArrow()


def _read_changes_rs(path: str, after_version: int, to_version: int, columns: list[str] | None,
                     where: str | None, version_column: str | None) -> pa.Table:
    """``read_changes`` on a local or s3 lake without a Spark job: delta-rs reads the change feed,
    duckdb applies ``where`` (Spark SQL, translated by sqlglot). Strings come back as plain
    ``string``, as Spark hands them over."""
    if merge_on_read(path):
        t = dv.open_table(path).changes(after_version, to_version)
        cols = list(columns or [c for c in t.column_names if not c.startswith("_")])
    else:
        dt_ = store.rs_table(path)
        cols = list(columns or [f.name for f in dt_.schema().fields])
        # with a condition every column is read: it may test columns the caller does not keep
        reader = dt_.load_cdf(starting_version=after_version + 1, ending_version=to_version,
                              columns=None if where else cols + ["_change_type", "_commit_version"])
        t = pa.RecordBatchReader.from_stream(reader).read_all()
    if where:
        con = duckdb.connect()
        con.register("changes", t)
        res = con.sql(f"SELECT * FROM changes WHERE {sqlglot.transpile(where, read='spark', write='duckdb')[0]}")
        res = res.arrow()
        t = res.read_all() if hasattr(res, "read_all") else res
        con.close()
    w = pa.array([SIGN[k] for k in t.column("_change_type").to_pylist()], pa.int64())
    version = pc.cast(t.column("_commit_version"), pa.int64())
    t = t.select(cols)
    plain = pa.schema([pa.field(f.name, pa.string() if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                                or str(f.type) == "string_view" else f.type) for f in t.schema])
    t = t.cast(plain).append_column(WEIGHT, w)
    return t.append_column(version_column, version) if version_column else t


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """The newest rows of a local or s3 table without Spark: delta-rs, or ``connectors.dv_table``
    for a merge-on-read mirror. Raises when there is no table."""
    if merge_on_read(path):
        return dv.open_table(path).read(None, columns)
    return store.rs_table(path).to_pyarrow_table(columns=columns)


def file_actions(path: str) -> dict[str, list]:
    """The live files of a local or s3 table as columns: ``path``, ``size_bytes`` and the
    ``min.<col>``/``max.<col>`` bounds (delta-rs's flattened add actions)."""
    if merge_on_read(path):
        return dv.open_table(path).file_actions()
    return pa.table(store.rs_table(path).get_add_actions(flatten=True)).to_pydict()


def read_version(spark, path: str, version: int, columns: list[str] | None = None) -> pa.Table:
    """The whole table as of ``version`` (Delta time travel); delta-rs on a local or s3 lake (no
    Spark job: a sketch's capture at the first batch read its mirrors through Spark), where
    ``spark`` may be None."""
    if rs_writes(path):
        try:
            if merge_on_read(path):
                return dv.open_table(path).read(version, columns)
            return store.rs_table(path, version=version).to_pyarrow_table(columns=columns)
        except Exception:  # noqa: BLE001 - a table delta-rs cannot read: Spark can
            if spark is None:
                raise
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    if columns:
        df = df.select(*[f"`{c}`" for c in columns])
    return df.toArrow()
