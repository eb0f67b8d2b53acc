"""The snapshot store: engine snapshots in one Delta table, found again by mirror versions.

Table ``state_snapshots`` under the lake root, one row per snapshot: ``maintainer`` (e.g.
``triangles.g``), ``batch_id`` that wrote it, ``versions`` (mirror table -> the version the
state reflects), ``encoding`` and ``state`` (``Engine.snapshot()``), ``bytes`` (its length),
``config`` (the maintainer's settings as JSON: a snapshot is used only under the same
settings), ``snapshot_id`` and ``written_at``.

Exactly once: a write carries the Delta application transaction
(``<app id>:<maintainer>``, batch id), the same ``txn`` action as every other write of the job
(``connectors.delta_sink.append_small``), so a replayed batch does not write its snapshot
twice. A write outside the job (``app_id`` None: ``ivmstream sketch register``, a lazy
sketch's refresh) is a plain append with batch id -1. A snapshot is *consistent* with the mirrors as committed when, for each table it
reflects, its version is at most the committed one; ``latest`` returns the newest such
snapshot (the restart then reads the change feed from there). A snapshot ahead of the
mirrors (a mirror rolled back) is skipped, which is why ``keep`` (default 2) snapshots per
maintainer stay: ``write`` deletes older ones at a writer's first write and every ``keep``
writes after, and removes their files (at most ``keep`` + 1 remain between two prunes).

On a local or s3 lake every read and write goes through delta-rs (no Spark job: a 50 MB
snapshot is read back in tens of milliseconds); another remote lake (abfss://, gs://) uses Spark.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
from deltalake import ColumnProperties, CommitProperties, Transaction, WriterProperties

from connectors import delta_sink as sink
from connectors import object_store as store

TABLE = "state_snapshots"
DDL = ("maintainer STRING, batch_id BIGINT, versions MAP<STRING, BIGINT>, encoding STRING, state BINARY, "
       "bytes BIGINT, config STRING, snapshot_id STRING, written_at TIMESTAMP")
SCHEMA = pa.schema([
    ("maintainer", pa.string()), ("batch_id", pa.int64()), ("versions", pa.map_(pa.string(), pa.int64())),
    ("encoding", pa.string()), ("state", pa.large_binary()), ("bytes", pa.int64()), ("config", pa.string()),
    ("snapshot_id", pa.string()), ("written_at", pa.timestamp("us", tz="UTC")),
])
_META = ["maintainer", "batch_id", "versions", "encoding", "bytes", "config", "snapshot_id", "written_at"]

@dataclass(frozen=True)
class Snapshot:
    maintainer: str
    batch_id: int
    versions: dict
    encoding: str
    state: bytes  # or a memoryview of the bytes as read
    config: str
    snapshot_id: str
    written_at: object

    @property
    def size(self) -> int:
        return len(self.state)

def consistent(versions: dict, at_most: dict) -> bool:
    """Every table the snapshot reflects is committed at least as far as the snapshot."""
    return all(t in at_most and int(v) <= int(at_most[t]) for t, v in versions.items())

class SnapshotStore:
    """Snapshots of every maintainer of one lake (``spark`` only for a remote lake)."""

    def __init__(self, lake_root: str | Path, spark=None, keep: int = 2):
        self.path = sink.Lake(lake_root).output(TABLE)
        self.spark = spark
        self.keep = max(1, int(keep))
        self._writes: dict[str, int] = {}
        self._local = store.rs_reaches(self.path)  # delta-rs reads and writes it (a local or s3 lake)

    # -- the table -------------------------------------------------------------------------
    def ensure(self) -> None:
        if not self._local:
            sink.ensure_table(self.spark, self.path, DDL)
            return
        try:
            store.rs_table(self.path)
        except Exception:  # noqa: BLE001 - absent: create it (a lost race is a harmless error)
            if store.is_local(self.path):
                Path(self.path).mkdir(parents=True, exist_ok=True)
            try:
                store.rs_create(self.path, SCHEMA, mode="ignore")
            except Exception:  # noqa: BLE001 - created meanwhile by another writer
                store.rs_table(self.path)

    # -- write -------------------------------------------------------------------------------
    def write(self, maintainer: str, app_id: str | None, batch_id: int, versions: dict, encoding: str,
              state: bytes, config: dict | str | None = None, fault=None) -> bool:
        """Append one snapshot, idempotent on (``app_id:maintainer``, ``batch_id``); False when
        this writer committed that batch's snapshot before. ``app_id`` None: a plain append
        (a write outside the job). ``fault(step)`` marks kill points."""
        txn_app = None if app_id is None else f"{app_id}:{maintainer}"
        if txn_app is not None and self._local and sink.done_before(self.path, txn_app, batch_id):
            return False
        cfg = config if isinstance(config, str) or config is None else json.dumps(config, sort_keys=True)
        row = pa.table({
            "maintainer": [maintainer], "batch_id": pa.array([batch_id], pa.int64()),
            "versions": pa.array([sorted((str(k), int(v)) for k, v in versions.items())],
                                 pa.map_(pa.string(), pa.int64())),
            "encoding": [encoding], "state": pa.array([bytes(state)], pa.large_binary()),
            "bytes": pa.array([len(state)], pa.int64()), "config": pa.array([cfg], pa.string()),
            "snapshot_id": [uuid.uuid4().hex],
            "written_at": pa.array([sink.utcnow()], pa.timestamp("us", tz="UTC")),
        }, schema=SCHEMA)
        if fault:
            fault("begin")
        if self._local:
            _append_rs(self.path, row, txn_app, batch_id)
        elif txn_app is None:  # Spark has no large_binary in its Arrow conversion
            self.spark.createDataFrame(row.cast(_spark_schema())).write.format("delta").mode("append").save(self.path)
        else:
            sink.append(self.spark, self.path, row.cast(_spark_schema()), txn_app, batch_id)
        if fault:
            fault("written")
        self._writes[maintainer] = self._writes.get(maintainer, 0) + 1
        # a process's first write prunes too: short runs (restarts, `sketch register`) would
        # otherwise each leave one more snapshot than ``keep`` behind
        if self._writes[maintainer] % self.keep == 0 or self._writes[maintainer] == 1:
            try:
                self.prune(maintainer)
            except Exception as e:  # noqa: BLE001 - a concurrent delete won; the next write prunes
                print(f"snapshot store: pruning {maintainer} failed ({type(e).__name__}); kept for now", flush=True)
        return True

    # -- read --------------------------------------------------------------------------------
    def _meta(self, maintainer: str) -> list[dict]:
        if self._local:

            ds = store.rs_table(self.path).to_pyarrow_dataset()

            rows = ds.to_table(columns=_META, filter=pds.field("maintainer") == maintainer).to_pylist()
        else:
            lit = maintainer.replace("'", "''")
            rows = [r.asDict() for r in self.spark.read.format("delta").load(self.path)
                    .where(f"maintainer = '{lit}'").select(*_META).collect()]
        for r in rows:
            r["versions"] = dict(r["versions"] or {})
        rows.sort(key=lambda r: (r["written_at"], r["batch_id"]), reverse=True)
        return rows

    def _state(self, snapshot_id: str) -> bytes:
        if self._local:

            ds = store.rs_table(self.path).to_pyarrow_dataset()
            col = ds.to_table(columns=["state"], filter=pds.field("snapshot_id") == snapshot_id).column("state")
            if col.num_chunks != 1 or len(col) != 1:
                col = col.combine_chunks()
                return col[0].as_py()
            chunk = col.chunk(0)  # the value's bytes in place: no copy of tens of megabytes
            off = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(chunk.type)
                                else np.int32)[chunk.offset: chunk.offset + 2]
            return memoryview(chunk.buffers()[2])[int(off[0]): int(off[1])]
        return bytes(self.spark.read.format("delta").load(self.path)
                     .where(f"snapshot_id = '{snapshot_id}'").select("state").first()[0])

    def list(self, maintainer: str) -> list[dict]:
        """Metadata of this maintainer's snapshots, newest first (no state bytes)."""
        return self._meta(maintainer)

    def latest(self, maintainer: str, at_most_versions: dict) -> Snapshot | None:
        """The newest snapshot of ``maintainer`` consistent with the committed mirror versions."""
        for r in self._meta(maintainer):
            if consistent(r["versions"], at_most_versions):
                return Snapshot(maintainer, int(r["batch_id"]), r["versions"], r["encoding"],
                                self._state(r["snapshot_id"]), r["config"], r["snapshot_id"], r["written_at"])
        return None

    def oldest_versions(self) -> dict[str, int]:
        """Mirror table -> the oldest version any kept snapshot reflects: from there on a restart
        may read the table's change feed, so table maintenance keeps every file of the versions
        after it (``connectors.maintenance``). Empty before the first snapshot."""
        if self._local:
            if not store.rs_is_table(self.path):
                return {}
            rows = store.rs_table(self.path).to_pyarrow_dataset().to_table(columns=["versions"]).to_pylist()
        else:
            if not sink.exists(self.spark, self.path):
                return {}
            rows = [r.asDict() for r in self.spark.read.format("delta").load(self.path).select("versions").collect()]
        out: dict[str, int] = {}
        for r in rows:
            for t, v in dict(r["versions"] or {}).items():
                out[t] = min(out.get(t, int(v)), int(v))
        return out

    # -- bound ---------------------------------------------------------------------------------
    def drop(self, maintainer: str) -> int:
        """Delete every snapshot of ``maintainer`` (a dropped sketch); returns rows deleted."""
        return self.prune(maintainer, keep=0)

    def prune(self, maintainer: str, keep: int | None = None) -> int:
        """Delete all but the newest ``keep`` snapshots of ``maintainer`` (and, on a local or s3
        lake, remove their files: this table is never read at an older version). Returns rows deleted."""
        keep = self.keep if keep is None else keep
        old = [r["snapshot_id"] for r in self._meta(maintainer)[keep:]]
        if not old:
            return 0
        ids = ", ".join(f"'{i}'" for i in old)
        if self._local:
            dt_ = store.rs_table(self.path)
            before = set(dt_.file_uris())
            dt_.delete(f"snapshot_id IN ({ids})")
            # remove only the files this delete unreferenced, not a vacuum: the job and
            # `sketch register` write here from different processes, and a vacuum would also
            # take a concurrent writer's file that is written but not yet committed
            store.remove_files(sorted(before - set(dt_.file_uris())))
        else:
            self.spark.sql(f"DELETE FROM delta.`{self.path}` WHERE snapshot_id IN ({ids})")
        return len(old)

def _append_rs(path: str, row: pa.Table, txn_app: str | None, batch_id: int) -> None:
    """``delta_sink.append_small``'s delta-rs write (same txn action), with the state column
    zstd-compressed and without a dictionary: a 48 MB triangle state is 7 MB on disk and
    reads back in about 0.1 s instead of 0.25 s with the default snappy + dictionary."""

    props = WriterProperties(compression="ZSTD", compression_level=1,
                             column_properties={"state": ColumnProperties(dictionary_enabled=False,
                                                                          statistics_enabled="NONE")})
    txns = [] if txn_app is None else [Transaction(app_id=txn_app, version=batch_id)]
    store.rs_write(path, row, mode="append", writer_properties=props,
                   commit_properties=CommitProperties(app_transactions=txns))

def _spark_schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, pa.binary() if f.name == "state" else f.type) for f in SCHEMA])
