"""Merge-on-read mirrors: Delta tables whose batches mark replaced rows in deletion vectors.

A copy-on-write MERGE rewrites every file that holds a changed key; uniformly random CDC keys
are in every file, so each batch rewrote the whole mirror (31 KB written per change at 1 M
rows). Here a batch writes what it changed and nothing else, in one Delta commit:

- one parquet file with the batch's new row images;
- one deletion-vector file holding, for every data file that had a row the batch replaced or
  deleted, that file's new deletion vector (its old one plus the rows' positions);
- one change-data file (``_change_data/``) with the exact change feed: inserts, update pre- and
  post-images, deletes, each with its whole row;
- the txn action of (app id, batch id), so a replayed batch is skipped.

The table is a standard Delta table with the ``deletionVectors`` feature: Spark reads it
(queries, time travel, the change feed), and so does anything built on delta-kernel. delta-rs
1.6.6 cannot: its reads refuse the feature and its MERGE on such a table brought a deleted row
back, so ``connectors.object_store.rs_table`` refuses these tables and this module is the
project's one reader and writer of them (snapshots, time travel, the change feed, commits).

Finding a changed key's row costs a scan of the key column, kept in memory per data file (data
files never change: a new deletion vector is a new commit, not a new file); the pre-images come
from the rows of the files, kept in a bounded cache (``ROW_CACHE_BYTES``) and read again from
the file when evicted. Maintenance (``connectors.maintenance``) folds the small batch files
and the deletion vectors back into large files (``compact``) and removes what no version a
reader needs still references (``vacuum``).
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

from connectors import object_store as store
from core.errors import StateError

CHANGE_TYPE = "_change_type"
# A deletion vector's bitmap in the file: Delta's RoaringBitmapArray portable format starts with
# this magic number, then the count of 32-bit bitmaps; the file itself starts with a version byte.
DV_MAGIC = 1681511377
FEATURE = "deletionVectors"
# The implicit writer features of the writer version 4 tables delta-rs creates with the change
# data feed, listed when the table moves to writer version 7 (features by name).
WRITER_FEATURES = ["appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", FEATURE]
# Rows of replaced files kept in memory for their pre-images, in bytes of Arrow data.
ROW_CACHE_BYTES = 2 * 2**30
# Compaction's size tiers start here: files under it are tier 0 (a batch's file is ~100 B a change).
TIER_FLOOR = 1 << 20
ENGINE = "ivmstream merge-on-read"

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


class UnsupportedFeature(StateError):
    """The table uses a Delta feature this reader or writer does not implement."""


def check_features(path: str, snap: "Snapshot", write: bool = True) -> None:
    """Refuse a table whose protocol lists a feature this module does not implement (column
    mapping, row tracking, v2 checkpoints...: someone changed the mirror with another engine);
    reading or writing it anyway could return or write wrong rows."""
    p = snap.protocol
    reader = set(p.get("readerFeatures") or []) - {FEATURE}
    writer = set(p.get("writerFeatures") or []) - set(WRITER_FEATURES) if write else set()
    if reader or writer:
        raise UnsupportedFeature(f"{path}: the table uses Delta features {sorted(reader | writer)} that "
                                 "ivmstream's merge-on-read mirrors do not support; it was changed by another "
                                 "engine: rebuild the mirror (delete it and restart the job from the topics)")


class CommitConflict(RuntimeError):
    """Another writer committed the version this writer meant to write."""


class NotMergeOnRead(RuntimeError):
    """A commit this reader cannot turn into a change feed (written by another engine without
    change-data files): the caller reads it through Spark."""


def z85_encode(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        v = int.from_bytes(data[i:i + 4], "big")
        chunk = []
        for _ in range(5):
            v, r = divmod(v, 85)
            chunk.append(_Z85[r])
        out.extend(reversed(chunk))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    out = bytearray()
    for i in range(0, len(text), 5):
        v = 0
        for c in text[i:i + 5]:
            v = v * 85 + _Z85.index(c)
        out += v.to_bytes(4, "big")
    return bytes(out)


def encode_bitmap(bm: BitMap) -> bytes:
    """Row positions (< 2^32) as the serialized deletion vector: magic, one bitmap, key 0."""
    return struct.pack("<IqI", DV_MAGIC, 1, 0) + bm.serialize()


def decode_bitmap(data: bytes) -> BitMap:
    magic, n = struct.unpack_from("<Iq", data, 0)
    if magic != DV_MAGIC:
        raise ValueError("not a deletion vector (bad magic number)")
    out, pos = BitMap(), 12
    for _ in range(n):
        (key,) = struct.unpack_from("<I", data, pos)
        bm = BitMap.deserialize(data[pos + 4:])
        if key:
            raise ValueError("deletion vector addresses rows beyond 2^32 in one file")
        out |= bm
        pos += 4 + len(bm.serialize())
    return out


@dataclass(frozen=True)
class AddFile:
    path: str  # relative to the table root
    size: int
    num_records: int
    stats: dict
    dv: dict | None = None  # the deletion-vector descriptor
    modification_time: int = 0

    @property
    def key(self) -> tuple:  # a file's logical identity: its path and its deletion vector
        return (self.path, json.dumps(self.dv, sort_keys=True) if self.dv else None)

    def live(self) -> int:
        return self.num_records - (self.dv["cardinality"] if self.dv else 0)

    def action(self, data_change: bool = True) -> dict:
        stats = dict(self.stats, numRecords=self.num_records, tightBounds=self.dv is None)
        a = {"path": self.path, "partitionValues": {}, "size": self.size,
             "modificationTime": self.modification_time, "dataChange": data_change, "stats": json.dumps(stats)}
        if self.dv:
            a["deletionVector"] = self.dv
        return {"add": a}

    def remove(self, data_change: bool = True) -> dict:
        r = {"path": self.path, "deletionTimestamp": _now_ms(), "dataChange": data_change,
             "extendedFileMetadata": True, "partitionValues": {}, "size": self.size,
             "stats": json.dumps({"numRecords": self.num_records})}
        if self.dv:
            r["deletionVector"] = self.dv
        return {"remove": r}


@dataclass
class Snapshot:
    version: int = -1
    files: dict[str, AddFile] = field(default_factory=dict)  # by path: one live entry a path
    metadata: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)
    # remove actions still in the log: path -> deletion time (VACUUM's tombstones)
    tombstones: dict[str, int] = field(default_factory=dict)

    def apply(self, actions: list[dict], version: int) -> None:
        for a in actions:
            if "add" in a:
                f = _add_file(a["add"])
                self.files[f.path] = f
                self.tombstones.pop(f.path, None)
            elif "remove" in a:
                r = a["remove"]
                cur = self.files.get(r["path"])
                if cur is not None and (cur.dv or None) == (r.get("deletionVector") or None):
                    del self.files[r["path"]]
                    self.tombstones[r["path"]] = int(r.get("deletionTimestamp") or 0)
            elif "metaData" in a:
                self.metadata = a["metaData"]
            elif "protocol" in a:
                self.protocol = a["protocol"]
            elif "txn" in a:
                self.txns[a["txn"]["appId"]] = int(a["txn"]["version"])
        self.version = version

    @property
    def has_deletion_vectors(self) -> bool:
        return FEATURE in (self.protocol.get("readerFeatures") or [])

    def column_names(self) -> list[str]:
        return [f["name"] for f in json.loads(self.metadata["schemaString"])["fields"]]


def _add_file(a: dict) -> AddFile:
    stats = a.get("stats")
    stats = json.loads(stats) if isinstance(stats, str) and stats else {}
    n = int(stats.pop("numRecords", 0))
    stats.pop("tightBounds", None)
    dv = a.get("deletionVector") or None
    if dv:
        dv = {k: v for k, v in dv.items() if v is not None}
    return AddFile(a["path"], int(a.get("size") or 0), n, stats, dv, int(a.get("modificationTime") or 0))


def _now_ms() -> int:
    return int(time.time() * 1000)


class _LocalFiles:
    """The table's files in a local folder (paths are absolute)."""

    local = True

    def read(self, p: str) -> bytes:
        with open(p, "rb") as fh:
            return fh.read()

    def parquet(self, p: str, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(p, columns=columns)

    def exists(self, p: str) -> bool:
        return os.path.exists(p)

    def list(self, folder: str, recursive: bool = False) -> list[tuple[str, int, float]]:
        """(path, size, modified epoch seconds) of the files in ``folder`` (and below)."""
        out = []
        if not os.path.isdir(folder):
            return out
        walk = os.walk(folder) if recursive else [(folder, [], [f for f in os.listdir(folder)
                                                                if os.path.isfile(os.path.join(folder, f))])]
        for d, _, names in walk:
            for n in names:
                full = os.path.join(d, n)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                out.append((full, st.st_size, st.st_mtime))
        return out

    def write(self, p: str, data: bytes, if_absent: bool = False) -> bool:
        """Write a file; ``if_absent``: atomically, only when it does not exist (a hard link of a
        written temporary file, which fails when the name is taken): False then."""
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if not if_absent:
            with open(p, "wb") as fh:
                fh.write(data)
            return True
        tmp = f"{os.path.dirname(p)}/.{os.path.basename(p)}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, p)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def delete(self, p: str) -> None:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


class _S3Files:
    """The table's objects in an S3 bucket (paths are ``bucket/key``), through the project's own
    signed requests (``object_store.request``): pyarrow's S3 client sends checksum headers that
    S3Proxy refuses (HTTP 501), on reads as on writes."""

    local = False

    def read(self, p: str) -> bytes:
        status, body = store.request("GET", f"s3://{p}")
        if status == 404:
            raise FileNotFoundError(f"s3://{p}")
        if status != 200:
            raise OSError(f"S3 GET s3://{p}: HTTP {status}")
        return body

    def parquet(self, p: str, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(pa.BufferReader(self.read(p)), columns=columns)

    def exists(self, p: str) -> bool:
        status, _ = store.request("HEAD", f"s3://{p}")
        return status == 200

    def list(self, folder: str, recursive: bool = False) -> list[tuple[str, int, float]]:
        prefix = folder.rstrip("/") + "/"
        out = []
        for uri, size, mtime in store.list_objects(f"s3://{prefix}"):
            p = uri[len("s3://"):]
            if recursive or "/" not in p[len(prefix):]:
                out.append((p, size, mtime))
        return out

    def write(self, p: str, data: bytes, if_absent: bool = False) -> bool:
        """One PUT; ``if_absent``: conditional (``If-None-Match: *``), False when the object
        exists. S3Proxy before 2.8 ignores the condition: the lake's lease keeps one writer."""
        if if_absent and self.exists(p):
            return False
        status, body = store.request("PUT", f"s3://{p}", data, {"If-None-Match": "*"} if if_absent else None)
        if status == 412:
            return False
        if status not in (200, 201, 204):
            raise OSError(f"S3 PUT s3://{p}: HTTP {status} {body[:200]!r}")
        return True

    def delete(self, p: str) -> None:
        store.request("DELETE", f"s3://{p}")


def _files(path: str) -> tuple[_LocalFiles | _S3Files, str]:
    """(the files' access, the table's root in it): a local folder or an S3 bucket."""
    p = str(path)
    if store.is_s3(p):
        return _S3Files(), p.split("://", 1)[1].rstrip("/")
    return _LocalFiles(), os.path.abspath(p.removeprefix("file://"))


class _RowCache:
    """Whole data files kept for their pre-images, least recently used first out, within
    ``ROW_CACHE_BYTES`` for the whole process (every table's files together)."""

    def __init__(self):
        self._files: OrderedDict[str, pa.Table] = OrderedDict()
        self.bytes = 0

    def get(self, key: str) -> pa.Table | None:
        t = self._files.get(key)
        if t is not None:
            self._files.move_to_end(key)
        return t

    def put(self, key: str, t: pa.Table) -> None:
        self.drop(key)
        self._files[key] = t
        self.bytes += t.nbytes
        while self.bytes > ROW_CACHE_BYTES and len(self._files) > 1:
            _, old = self._files.popitem(last=False)
            self.bytes -= old.nbytes

    def drop(self, key: str) -> None:
        t = self._files.pop(key, None)
        if t is not None:
            self.bytes -= t.nbytes


_ROWS = _RowCache()


class DVTable:
    """One merge-on-read table: its log replayed once and then followed commit by commit, the
    key columns of its data files, and the writer of its batches."""

    def __init__(self, path: str):
        self.path = str(path)
        self.files, self.root = _files(self.path)
        self._snap: Snapshot | None = None
        # (file path, key columns) -> the file's keys, sorted for lookups
        self._keys: dict[tuple, _KeyIndex] = {}
        self._rows = _ROWS  # whole data files, in the one cache of the process
        self._dvs: dict[str, BitMap] = {}  # descriptor json -> bitmap

    # -- the log -------------------------------------------------------------------------------
    def _log(self, name: str = "") -> str:
        return f"{self.root}/_delta_log/{name}" if name else f"{self.root}/_delta_log"

    def _read_text(self, p: str) -> str:
        return self.files.read(p).decode()

    def _commit_versions(self, after: int) -> list[int]:
        out = []
        for p, _, _ in self.files.list(self._log()):
            name = os.path.basename(p)
            if name.endswith(".json") and len(name) == 25 and name[:20].isdigit():
                v = int(name[:20])
                if v > after:
                    out.append(v)
        return sorted(out)

    def _new_versions(self, after: int) -> list[int]:
        """The commits after ``after``: a listing of the log at the first load, then a probe for
        each next version (a long log is not listed at every batch)."""
        if after < 0:
            return self._commit_versions(after)
        out, v = [], after + 1
        while self.files.exists(self._log(f"{v:020d}.json")):
            out.append(v)
            v += 1
        return out

    def _checkpoint(self, upto: int | None) -> Snapshot | None:
        """The newest classic checkpoint at or before ``upto`` (single or multi-part)."""
        parts: dict[int, list[str]] = {}
        for p, _, _ in self.files.list(self._log()):
            name = os.path.basename(p)
            if ".checkpoint" in name and name.endswith(".parquet") and name[:20].isdigit():
                v = int(name[:20])
                if upto is None or v <= upto:
                    parts.setdefault(v, []).append(p)
        for v in sorted(parts, reverse=True):
            files = sorted(parts[v])
            names = [os.path.basename(f) for f in files]
            if len(files) > 1 and not all(".checkpoint.0" in n for n in names):
                continue  # a v2 or partial checkpoint: an older one, or the JSON commits
            snap = Snapshot()
            for f in files:
                t = self.files.parquet(f)
                cols = [c for c in ("add", "remove", "metaData", "protocol", "txn") if c in t.column_names]
                for row in t.select(cols).to_pylist():
                    snap.apply([{k: _clean(v)} for k, v in row.items() if v is not None], v)
            return snap
        return None

    def snapshot(self, version: int | None = None, *, must_exist: bool = True) -> Snapshot:
        """The table at ``version`` (default: the newest, followed incrementally)."""
        if version is None and self._snap is not None:
            base = self._snap
        else:
            base = self._checkpoint(version) or Snapshot()
            if version is None:
                self._snap = base
        for v in self._new_versions(base.version):
            if version is not None and v > version:
                break
            base.apply(self._actions(v), v)
        if version is not None and base.version != version:
            raise ValueError(f"{self.path}: version {version} is not in the log (newest {base.version})")
        if base.version < 0 and must_exist:
            raise FileNotFoundError(f"{self.path}: not a Delta table")
        return base

    def commit_info(self, version: int) -> dict:
        """The ``commitInfo`` of a commit ({} when it has none)."""
        for a in self._actions(version):
            if "commitInfo" in a:
                return a["commitInfo"]
        return {}

    def _actions(self, version: int) -> list[dict]:
        text = self._read_text(self._log(f"{version:020d}.json"))
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    # -- reading -------------------------------------------------------------------------------
    def _file(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _dv_path(self, dv: dict) -> str:
        p = dv["pathOrInlineDv"]
        if dv["storageType"] == "u":
            prefix, enc = p[:-20], p[-20:]
            name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(enc))}.bin"
            return self._file(f"{prefix}/{name}" if prefix else name)
        if dv["storageType"] == "p":
            return p.split("://", 1)[-1] if store.is_s3(p) else p.removeprefix("file://")
        raise ValueError(f"deletion vector storage {dv['storageType']!r}")

    def deleted(self, f: AddFile) -> BitMap:
        """The row positions of ``f`` its deletion vector removes."""
        if not f.dv:
            return BitMap()
        k = json.dumps(f.dv, sort_keys=True)
        bm = self._dvs.get(k)
        if bm is None:
            if f.dv["storageType"] == "i":
                bm = decode_bitmap(z85_decode(f.dv["pathOrInlineDv"])[:f.dv["sizeInBytes"]])
            else:
                blob = self.files.read(self._dv_path(f.dv))
                at = int(f.dv.get("offset") or 1)
                (size,) = struct.unpack_from(">i", blob, at)
                data = blob[at + 4:at + 4 + size]
                (crc,) = struct.unpack_from(">I", blob, at + 4 + size)
                if zlib.crc32(data) != crc:
                    raise ValueError(f"{self.path}: deletion vector of {f.path} fails its checksum")
                bm = decode_bitmap(data)
            self._dvs[k] = bm
        return bm

    def _read_file(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        return _plain(self.files.parquet(self._file(rel), columns))

    def rows(self, f: AddFile) -> pa.Table:
        """Every physical row of a data file (deleted ones included), through the LRU cache."""
        t = self._rows.get(self._file(f.path))
        if t is None:
            t = self._read_file(f.path)
            self._rows.put(self._file(f.path), t)
        return t

    def live_rows(self, f: AddFile, columns: list[str] | None = None) -> pa.Table:
        t = self._rows.get(self._file(f.path))
        if t is None:
            t = self._read_file(f.path, columns)
        if columns:
            t = t.select(columns)
        return self._without(t, self.deleted(f))

    @staticmethod
    def _without(t: pa.Table, gone: BitMap) -> pa.Table:
        if not gone:
            return t
        keep = np.ones(t.num_rows, dtype=bool)
        keep[np.fromiter(gone, dtype=np.int64, count=len(gone))] = False
        return t.filter(pa.array(keep))

    def read(self, version: int | None = None, columns: list[str] | None = None) -> pa.Table:
        """The table's rows at ``version`` (default the newest), deletion vectors applied."""
        snap = self.snapshot(version)
        check_features(self.path, snap, write=False)
        schema = arrow_schema_of(snap)
        if columns:
            schema = pa.schema([schema.field(c) for c in columns])
        parts = [self.live_rows(f, columns).select(schema.names).cast(schema) for f in snap.files.values()]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def file_actions(self) -> dict[str, list]:
        """The live files as columns, like delta-rs's flattened add actions: ``path``,
        ``size_bytes``, ``num_records`` (physical rows) and ``min.<col>``/``max.<col>``."""
        files = list(self.snapshot().files.values())
        out: dict[str, list] = {"path": [f.path for f in files], "size_bytes": [f.size for f in files],
                                "num_records": [f.num_records for f in files]}
        cols = {c for f in files for c in f.stats.get("minValues", {})}
        for c in sorted(cols):
            out[f"min.{c}"] = [f.stats.get("minValues", {}).get(c) for f in files]
            out[f"max.{c}"] = [f.stats.get("maxValues", {}).get(c) for f in files]
        return out

    def changes(self, after: int, to: int) -> pa.Table:
        """The change feed of commits ``after + 1 .. to``: the table's columns, ``_change_type``
        and ``_commit_version``. Commits with change-data files give those; commits that only
        add files (appends) give their rows as inserts; commits without data changes (compaction,
        metadata) give nothing."""
        snap = self.snapshot()
        schema = arrow_schema_of(snap)
        out_schema = pa.schema(list(schema) + [pa.field(CHANGE_TYPE, pa.string()), pa.field("_commit_version", pa.int64())])
        parts = []
        for v in range(after + 1, to + 1):
            try:
                actions = self._actions(v)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"{self.path}: commit {v} is gone from the log; the change feed does not "
                                        f"cover it") from e
            cdc = [a["cdc"] for a in actions if "cdc" in a]
            for c in cdc:
                t = self._read_file(c["path"])
                parts.append(_with_version(t, schema, v))
            if cdc:
                continue
            if any("remove" in a and a["remove"].get("dataChange", True) for a in actions):
                raise NotMergeOnRead(f"{self.path}: commit {v} removes rows without change-data files")
            for a in actions:
                if "add" in a and a["add"].get("dataChange", True):
                    f = _add_file(a["add"])
                    t = self.live_rows(f).select(schema.names)
                    t = t.append_column(CHANGE_TYPE, pa.array(["insert"] * t.num_rows, pa.string()))
                    parts.append(_with_version(t, schema, v))
        if not parts:
            return out_schema.empty_table()
        return pa.concat_tables([p.cast(out_schema) for p in parts])

    # -- writing -------------------------------------------------------------------------------
    def _key_index(self, f: AddFile, keys: list[str]) -> "_KeyIndex":
        k = (f.path, tuple(keys))
        got = self._keys.get(k)
        if got is None:
            cached = self._rows.get(self._file(f.path))
            t = cached.select(keys) if cached is not None else self._read_file(f.path, keys)
            got = self._keys[k] = _KeyIndex(t, keys)
        return got

    def locate(self, snap: Snapshot, source: pa.Table, keys: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """For each data file holding a live row with one of ``source``'s keys: (row positions in
        the file, the matching source row indices). A binary search of the batch's keys in each
        file's sorted key codes: the batch's size times a logarithm, not the table's size."""
        found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if not snap.files or source.num_rows == 0:
            return found
        codes = _codes(source, keys)
        for f in snap.files.values():
            pos, src = self._key_index(f, keys).find(codes)
            if pos.size == 0:
                continue
            gone = self.deleted(f)
            if gone:
                alive = np.fromiter((p not in gone for p in pos.tolist()), dtype=bool, count=pos.size)
                pos, src = pos[alive], src[alive]
            if pos.size and _hashed(source, keys):  # a hash code: keep the rows whose key is equal indeed
                kt = self._key_index(f, keys).table
                same = np.ones(pos.size, dtype=bool)
                for k in keys:
                    a = kt.column(k).take(pa.array(pos))
                    b = source.column(k).take(pa.array(src))
                    same &= pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
                pos, src = pos[same], src[same]
            if pos.size:
                found[f.path] = (pos, src)
        return found

    def merge(self, source: pa.Table, keys: list[str], *, deleted: str | None = None, truncate: bool = False,
              app_id: str | None = None, batch_id: int | None = None) -> int | None:
        """Upsert ``source`` on ``keys`` in one commit (``delta_sink.merge``'s contract): rows whose
        ``deleted`` flag is true delete their match; ``truncate`` deletes every row the batch does
        not write. Returns the version committed, None when skipped (a replayed batch).

        On a table without deletion vectors (a small output table: ``delta_sink.merge``) it is
        copy-on-write, as delta-rs's MERGE: each file holding a matched key is removed and its
        other rows written again; the protocol is left as it is. Raises ``UnsupportedFeature``
        for such a table that ``append`` would not write either."""
        snap = self.snapshot()
        cow = not snap.has_deletion_vectors
        if cow:
            schema = appendable_schema(self.path, snap)
            snap.tombstones.clear()  # delta-rs vacuums and checkpoints a plain table (see ``append``)
        else:
            check_features(self.path, snap)
        keys = list(keys)
        if app_id is not None and snap.txns.get(app_id, -1) >= batch_id:
            return None
        if not cow:
            schema = arrow_schema_of(snap)
        cdf = (snap.metadata.get("configuration") or {}).get("delta.enableChangeDataFeed") == "true" if cow else True
        names = schema.names
        flag = (source.column(deleted).to_numpy(zero_copy_only=False).astype(bool) if deleted
                else np.zeros(source.num_rows, dtype=bool))
        new = source.select(names).filter(pa.array(~flag)).cast(schema)
        actions: list[dict] = []
        changes: list[pa.Table] = []
        dv_blobs: list[tuple[AddFile, BitMap]] = []
        rewrite: list[tuple[AddFile, np.ndarray]] = []  # copy-on-write: (file, its replaced rows)
        found = self.locate(snap, source, keys)
        matched = np.zeros(source.num_rows, dtype=bool)
        for path, (pos, src) in found.items():
            f = snap.files[path]
            matched[src] = True
            old = self.rows(f).select(names).take(pa.array(pos)).cast(schema)
            changes.append(_typed(old, ["delete" if flag[i] else "update_preimage" for i in src.tolist()]))
            if not truncate and cow:
                rewrite.append((f, pos))
            elif not truncate:
                dv_blobs.append((f, self.deleted(f) | BitMap(pos.tolist())))
        if truncate:  # every file goes; the rows no source row matched are deleted
            for f in list(snap.files.values()):
                actions.append(f.remove())
                gone = self.deleted(f) | BitMap(found[f.path][0].tolist() if f.path in found else [])
                rest = self._without(self.rows(f).select(names), gone).cast(schema)
                if rest.num_rows:
                    changes.append(_typed(rest, "delete"))
        post = source.select(names).cast(schema)
        upd = np.flatnonzero(matched & ~flag)
        ins = np.flatnonzero(~matched & ~flag)
        if upd.size:
            changes.append(_typed(post.take(pa.array(upd)), "update_postimage"))
        if ins.size:
            changes.append(_typed(post.take(pa.array(ins)), "insert"))
        if not actions and not dv_blobs and not rewrite and new.num_rows == 0 and app_id is None:
            return None  # nothing to commit
        for f, pos in rewrite:
            actions.append(f.remove())
            rest = self._without(self.rows(f).select(names), BitMap(pos.tolist())).cast(schema)
            if rest.num_rows:
                actions.append(_plain_add(self._write_data(rest).action(), schema))
        if dv_blobs:
            name = uuid.uuid4()
            blob, offset = bytearray(b"\x01"), 1
            for f, bm in dv_blobs:
                data = encode_bitmap(bm)
                desc = {"storageType": "u", "pathOrInlineDv": z85_encode(name.bytes), "offset": offset,
                        "sizeInBytes": len(data), "cardinality": len(bm)}
                blob += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
                offset = len(blob)
                actions.append(f.remove())
                actions.append(replace(f, dv=desc).action())
                self._forget_dv(f)
                self._dvs[json.dumps(desc, sort_keys=True)] = bm
            self._write_bytes(self._file(f"deletion_vector_{name}.bin"), bytes(blob))
        if new.num_rows:
            a = self._write_data(new).action()
            actions.append(_plain_add(a, schema) if cow else a)
        # A commit that only inserts needs no change-data file: Delta readers (Spark's and
        # ``changes``) read its added files as the inserts.
        only_inserts = not truncate and not dv_blobs and not rewrite  # nothing matched: every change is an insert
        if changes and not only_inserts and cdf:
            cdc = pa.concat_tables([c.cast(pa.schema(list(schema) + [pa.field(CHANGE_TYPE, pa.string())]))
                                    for c in changes])
            rel = f"_change_data/cdc-{uuid.uuid4()}.c000.snappy.parquet"
            size = self._write_parquet(rel, cdc)
            actions.append({"cdc": {"path": rel, "partitionValues": {}, "size": size, "dataChange": False}})
        if app_id is not None:
            actions.append({"txn": {"appId": app_id, "version": int(batch_id), "lastUpdated": _now_ms()}})
        removed = list(snap.files.values()) if truncate else [f for f, _ in rewrite]
        v = self.commit(actions, "MERGE")
        for f in removed:
            self._forget(f.path)
            self._forget_dv(f)
        return v

    def _write_bytes(self, p: str, data: bytes) -> None:
        self.files.write(p, data)

    def _write_parquet(self, rel: str, t: pa.Table) -> int:
        buf = pa.BufferOutputStream()
        pq.write_table(t, buf, compression="snappy")
        data = buf.getvalue().to_pybytes()
        self._write_bytes(self._file(rel), data)
        return len(data)

    def _write_data(self, t: pa.Table, data_change: bool = True) -> AddFile:
        rel = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        size = self._write_parquet(rel, t)
        f = AddFile(rel, size, t.num_rows, file_stats(t), None, _now_ms())
        self._rows.put(self._file(rel), t)
        return f

    def commit(self, actions: list[dict], operation: str, *, read_version: int | None = None,
               parameters: dict[str, str] | None = None, blind_append: bool = False) -> int:
        """Write ``actions`` as the next version, atomically on a local folder (a link that fails
        when the version exists), and under the lake's writer lease on S3."""
        snap = self.snapshot(must_exist=False)
        v = snap.version + 1
        info = {"commitInfo": {"timestamp": _now_ms(), "operation": operation, "operationParameters": parameters or {},
                               "readVersion": snap.version if read_version is None else read_version,
                               "isolationLevel": "Serializable", "isBlindAppend": blind_append, "engineInfo": ENGINE,
                               "txnId": str(uuid.uuid4())}}
        text = "\n".join(json.dumps(a, separators=(",", ":")) for a in [info, *actions]) + "\n"
        target = self._log(f"{v:020d}.json")
        if not self.files.write(target, text.encode(), if_absent=True):
            raise CommitConflict(f"{self.path}: version {v} was written by another writer")
        snap.apply([json.loads(line) for line in text.splitlines()[1:]], v)
        return v

    def append(self, data: pa.Table, *, app_id: str | None = None, batch_id: int | None = None,
               parquet_options: dict | None = None) -> int | None:
        """Append ``data`` to a table of any layout in one commit: one parquet file, its add action
        with statistics, and the txn action of (``app_id``, ``batch_id``). Skipped (None) when the
        table's log holds that app's txn at ``batch_id`` or later (a replayed batch). The protocol
        and metadata are left as they are: a plain Delta table stays one (no deletion vectors), so
        delta-rs and Spark keep reading and writing it.

        Unlike delta-rs, which lists the whole ``_delta_log`` folder each time it opens a table,
        the snapshot is followed by probing for the next version: the cost of a commit does not
        grow with the commits the log keeps. Raises ``UnsupportedFeature`` for a table this writer
        does not write (partitions, column mapping, constraints, generated or identity columns,
        a column type it does not know): the caller writes it through delta-rs. Returns the
        version committed."""
        snap = self.snapshot()
        schema = appendable_schema(self.path, snap)
        if not snap.has_deletion_vectors:
            # delta-rs vacuums and checkpoints a plain table, not this module: its remove actions
            # need not be kept here (one a compacted batch file, for as long as the job runs)
            snap.tombstones.clear()
        missing = [n for n in schema.names if n not in data.column_names]
        if missing or any(n not in schema.names for n in data.column_names):
            raise UnsupportedFeature(f"{self.path}: the rows' columns {data.column_names} are not the table's "
                                     f"{schema.names}")
        if app_id is not None and snap.txns.get(app_id, -1) >= batch_id:
            return None
        t = _plain(data).select(schema.names).cast(schema)
        options = {"compression": "snappy", **(parquet_options or {})}
        rel = f"part-00000-{uuid.uuid4()}-c000.{str(options['compression']).lower()}.parquet"
        buf = pa.BufferOutputStream()
        pq.write_table(t, buf, **options)
        blob = buf.getvalue().to_pybytes()
        self._write_bytes(self._file(rel), blob)  # not kept in the row cache: nothing reads it back here
        add = _plain_add(AddFile(rel, len(blob), t.num_rows, file_stats(t), None, _now_ms()).action(), schema)
        for _ in range(3):  # another writer took the version: follow the log and try the next one
            actions = [add]
            if app_id is not None:
                actions.append({"txn": {"appId": app_id, "version": int(batch_id), "lastUpdated": _now_ms()}})
            try:
                return self.commit(actions, "WRITE", parameters={"mode": "Append"}, blind_append=True)
            except CommitConflict:
                snap = self.snapshot()
                if app_id is not None and snap.txns.get(app_id, -1) >= batch_id:
                    self.files.delete(self._file(rel))  # the other writer committed this batch
                    return None
        raise CommitConflict(f"{self.path}: three commits in a row lost to another writer")

    # -- maintenance ---------------------------------------------------------------------------
    def compact(self, *, target_bytes: int, small_bytes: int, purge_share: float = 0.3,
                min_small: int = 2, tier_floor: int = TIER_FLOOR) -> tuple[int, int]:
        """Fold small files (under ``small_bytes``) by size tier, and rewrite every file whose
        deletion vector removes more than ``purge_share`` of its rows, the deleted rows left out:
        one commit without data change (the change feed is unchanged). Returns (files removed,
        files written).

        A small file's tier is 0 under ``tier_floor``, then one more for each factor
        ``min_small`` above it (``size_tier``). The highest tier
        holding ``min_small`` files is folded together with every smaller one, so a row is
        rewritten about once per tier (log of the table's size), not at every turn: folding
        every small file each time rewrote a whole 15-MB mirror every few batches."""
        snap = self.snapshot()
        tiers: dict[int, list[AddFile]] = {}
        for f in snap.files.values():
            if f.size < small_bytes:
                tiers.setdefault(size_tier(f.size, tier_floor, max(min_small, 2)), []).append(f)
        full = [t for t, fs in tiers.items() if len(fs) >= min_small]
        chosen = [f for t, fs in tiers.items() if full and t <= max(full) for f in fs]
        taken = {f.path for f in chosen}
        chosen += [f for f in snap.files.values() if f.path not in taken and f.dv
                   and f.dv["cardinality"] > purge_share * max(f.num_records, 1)]
        if not chosen:
            return 0, 0
        schema = arrow_schema_of(snap)
        live = pa.concat_tables([self.live_rows(f, schema.names).cast(schema) for f in chosen])
        actions = [f.remove(data_change=False) for f in chosen]
        per_row = max(sum(f.size for f in chosen) / max(sum(f.num_records for f in chosen), 1), 1.0)
        rows_per_file = max(int(target_bytes / per_row), 1)
        written = 0
        for start in range(0, live.num_rows, rows_per_file):
            actions.append(self._write_data(live.slice(start, rows_per_file)).action(data_change=False))
            written += 1
        self.commit(actions, "OPTIMIZE")
        for f in chosen:
            self._forget(f.path)
            self._forget_dv(f)
        return len(chosen), written

    def checkpoint(self) -> int:
        """Write a classic checkpoint of the newest version (one parquet file, then
        ``_last_checkpoint``): a reader replays the commits after it only. Returns its version."""
        snap = self.snapshot()
        rows: list[dict] = [{"protocol": snap.protocol}, {"metaData": snap.metadata}]
        rows += [{"txn": {"appId": a, "version": v, "lastUpdated": _now_ms()}} for a, v in snap.txns.items()]
        rows += [f.action(data_change=False) for f in snap.files.values()]
        rows += [{"remove": {"path": p, "deletionTimestamp": ts, "dataChange": False, "extendedFileMetadata": False,
                             "partitionValues": {}, "size": 0}} for p, ts in snap.tombstones.items()]
        cols = {name: [r.get(name) for r in rows] for name in CHECKPOINT_SCHEMA.names}
        for r in cols["add"]:
            if r is not None:
                r["partitionValues"] = []
        for r in cols["remove"]:
            if r is not None:
                r["partitionValues"] = []
        table = pa.Table.from_pydict({k: [_as_map(x) for x in v] for k, v in cols.items()}, schema=CHECKPOINT_SCHEMA)
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        self._write_bytes(self._log(f"{snap.version:020d}.checkpoint.parquet"), buf.getvalue().to_pybytes())
        self._write_bytes(self._log("_last_checkpoint"),
                          json.dumps({"version": snap.version, "size": table.num_rows}).encode())
        return snap.version

    def cleanup_log(self, retention_hours: float) -> int:
        """Delete the commits and checkpoints older than ``retention_hours`` that the newest
        checkpoint covers (Delta's log retention). Returns how many files went."""
        infos = [(p, os.path.basename(p), mtime) for p, _, mtime in self.files.list(self._log())]
        newest = max((int(name[:20]) for _, name, _ in infos if ".checkpoint" in name and name[:20].isdigit()),
                      default=None)
        if newest is None:
            return 0
        cutoff = time.time() - retention_hours * 3600
        n = 0
        for p, name, mtime in infos:
            if not name[:20].isdigit() or int(name[:20]) >= newest:
                continue
            if mtime < cutoff:
                self.files.delete(p)
                n += 1
        return n

    def _forget_dv(self, f: AddFile) -> None:
        if f.dv:
            self._dvs.pop(json.dumps(f.dv, sort_keys=True), None)

    def _forget(self, rel: str) -> None:
        self._rows.drop(self._file(rel))
        for k in [k for k in self._keys if k[0] == rel]:
            del self._keys[k]

    def vacuum(self, retention_hours: float, keep_from: int | None = None) -> list[str]:
        """Delete the files no version of the last ``retention_hours`` references: data files
        removed before then, deletion-vector and change-data files older than that which the
        current version does not use; with ``keep_from``, also none that version or a later one
        reads (its files and their deletion vectors, and every file the commits after it add:
        what a restart reading the change feed from there needs), however old. Returns the
        paths deleted (relative)."""
        snap = self.snapshot()
        cutoff = _now_ms() - retention_hours * 3600 * 1000
        keep = set(snap.files) | self._dv_files(snap.files.values())
        if keep_from is not None and keep_from < snap.version:
            try:
                old = self.snapshot(keep_from).files.values() if keep_from >= 0 else []
                keep |= {f.path for f in old} | self._dv_files(old)
                for v in range(max(keep_from, -1) + 1, snap.version + 1):
                    for a in self._actions(v):
                        for kind in ("add", "cdc"):
                            if kind in a:
                                keep.add(a[kind]["path"])
                                keep |= self._dv_files([_add_file(a[kind])] if a[kind].get("deletionVector") else [])
            except (FileNotFoundError, ValueError):
                return []  # the log no longer reaches that version: nothing is removed rather than guessed
        gone = []
        for p, _, mtime_s in self.files.list(self.root, recursive=True):
            rel = os.path.relpath(p, self.root)
            if rel.startswith("_delta_log") or rel in keep:
                continue
            mtime = mtime_s * 1000
            removed = snap.tombstones.get(rel)
            if (removed if removed is not None else mtime) < cutoff and mtime < cutoff:
                self.files.delete(p)
                snap.tombstones.pop(rel, None)
                gone.append(rel)
        return gone

    def _dv_files(self, files) -> set[str]:
        """The deletion-vector files (relative paths) of ``files``."""
        return {os.path.relpath(self._dv_path(f.dv), self.root) for f in files if f.dv and f.dv["storageType"] != "i"}


def _plain_add(a: dict, schema: pa.Schema) -> dict:
    """An add action for a table without deletion vectors, with statistics as delta-rs and Spark
    write them there: no ``tightBounds``, null counts of the non-nested columns only."""
    stats = json.loads(a["add"]["stats"])
    stats.pop("tightBounds", None)
    nested = {f.name for f in schema if pa.types.is_nested(f.type)}
    stats["nullCount"] = {k: v for k, v in stats.get("nullCount", {}).items() if k not in nested}
    return {"add": {**a["add"], "stats": json.dumps(stats)}}


def _clean(v):
    """A checkpoint row's struct as the JSON action it stands for (nulls and empty maps out)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items() if x is not None}
    if isinstance(v, list) and v and isinstance(v[0], tuple):  # a map column
        return dict(v)
    return v


_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                 ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
# The checkpoint's columns: the actions a snapshot holds, as Delta's readers expect them.
CHECKPOINT_SCHEMA = pa.schema([
    ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
    ("add", pa.struct([("path", pa.string()), ("partitionValues", _MAP), ("size", pa.int64()),
                       ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
                       ("tags", _MAP), ("deletionVector", _DV)])),
    ("remove", pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                          ("extendedFileMetadata", pa.bool_()), ("partitionValues", _MAP), ("size", pa.int64()),
                          ("deletionVector", _DV)])),
    ("metaData", pa.struct([("id", pa.string()), ("name", pa.string()), ("description", pa.string()),
                            ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
                            ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                            ("configuration", _MAP), ("createdTime", pa.int64())])),
    ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                            ("readerFeatures", pa.list_(pa.string())), ("writerFeatures", pa.list_(pa.string()))])),
])


def _as_map(x):
    """An action as a checkpoint row: JSON objects that are maps become (key, value) lists."""
    if not isinstance(x, dict):
        return x
    out = {}
    for k, v in x.items():
        if k in ("partitionValues", "tags", "options", "configuration") and isinstance(v, dict):
            out[k] = list(v.items())
        elif isinstance(v, dict):
            out[k] = _as_map(v)
        else:
            out[k] = v
    return out


def _plain(t: pa.Table) -> pa.Table:
    """String and binary views (delta-rs writes them) as plain strings and binaries."""
    fields = []
    for f in t.schema:
        if f.type in (pa.string_view(), pa.large_string()):
            f = f.with_type(pa.string())
        elif f.type in (pa.binary_view(), pa.large_binary()):
            f = f.with_type(pa.binary())
        fields.append(f)
    schema = pa.schema(fields)
    return t if schema == t.schema else t.cast(schema)


def _typed(t: pa.Table, kind) -> pa.Table:
    kinds = [kind] * t.num_rows if isinstance(kind, str) else kind
    return t.append_column(CHANGE_TYPE, pa.array(kinds, pa.string()))


def _with_version(t: pa.Table, schema: pa.Schema, v: int) -> pa.Table:
    t = t.select(schema.names + [CHANGE_TYPE])
    return t.append_column("_commit_version", pa.array([v] * t.num_rows, pa.int64()))


def _hashed(t: pa.Table, keys: list[str]) -> bool:
    return len(keys) > 1 or not pa.types.is_integer(t.schema.field(keys[0]).type)


def _codes(t: pa.Table, keys: list[str]) -> np.ndarray:
    """One 64-bit code per row to match keys by: an integer key itself, else a hash of the key
    columns (a match is then checked column by column)."""
    if not _hashed(t, keys):
        return t.column(keys[0]).to_numpy().astype(np.int64, copy=False)
    import pandas as pd  # hashing rows of several columns: pandas has the vectorized hash

    return pd.util.hash_pandas_object(t.select(keys).to_pandas(), index=False).to_numpy().view(np.int64)


class _KeyIndex:
    """A data file's key codes, sorted, with each one's row position."""

    def __init__(self, table: pa.Table, keys: list[str]):
        self.table = table
        codes = _codes(table, keys)
        self.order = np.argsort(codes, kind="stable")
        self.sorted = codes[self.order]
        # the same code twice in one file (a hash collision): a search finds only the first
        self.unique = self.sorted.size < 2 or bool(np.all(self.sorted[1:] != self.sorted[:-1]))
        self.codes = codes

    def find(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row positions in the file, indices into ``codes``) of the codes the file holds."""
        if self.sorted.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if not self.unique:
            hit = np.isin(self.codes, codes)
            pos = np.flatnonzero(hit)
            src = pc.index_in(pa.array(self.codes[pos]), value_set=pa.array(codes)).to_numpy(zero_copy_only=False)
            return pos.astype(np.int64), src.astype(np.int64)
        i = np.searchsorted(self.sorted, codes)
        i[i == self.sorted.size] = 0
        hit = self.sorted[i] == codes
        return self.order[i[hit]].astype(np.int64), np.flatnonzero(hit).astype(np.int64)


_SPARK_TYPES = {"long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
                "double": pa.float64(), "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(),
                "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary(),
                "timestamp_ntz": pa.timestamp("us")}


def arrow_schema_of(snap: Snapshot) -> pa.Schema:
    fields = []
    for f in json.loads(snap.metadata["schemaString"])["fields"]:
        t = f["type"]
        if isinstance(t, str) and t.startswith("decimal("):
            p, s = t[len("decimal("):-1].split(",")
            at = pa.decimal128(int(p), int(s))
        else:
            at = _SPARK_TYPES[t]
        fields.append(pa.field(f["name"], at, f.get("nullable", True)))
    return pa.schema(fields)


def delta_arrow_type(t) -> pa.DataType:
    """A Delta schema type (its JSON form: a name, or an array / map / struct object) as Arrow.
    Raises ValueError for a type this module does not write."""
    if isinstance(t, str):
        if t.startswith("decimal("):
            p, s = t[len("decimal("):-1].split(",")
            return pa.decimal128(int(p), int(s))
        if t not in _SPARK_TYPES:
            raise ValueError(f"Delta type {t!r}")
        return _SPARK_TYPES[t]
    kind = t.get("type") if isinstance(t, dict) else None
    if kind == "array":
        return pa.list_(pa.field("element", delta_arrow_type(t["elementType"]), t.get("containsNull", True)))
    if kind == "map":
        return pa.map_(pa.field("key", delta_arrow_type(t["keyType"]), False),
                       pa.field("value", delta_arrow_type(t["valueType"]), t.get("valueContainsNull", True)))
    if kind == "struct":
        return pa.struct([pa.field(f["name"], delta_arrow_type(f["type"]), f.get("nullable", True))
                          for f in t["fields"]])
    raise ValueError(f"Delta type {t!r}")


def appendable_schema(path: str, snap: "Snapshot") -> pa.Schema:
    """The table's Arrow schema when ``DVTable.append`` can write it: an unpartitioned table
    without column mapping, constraints, generated or identity columns, invariants, or a
    feature or type this module does not know. Raises ``UnsupportedFeature`` otherwise (and
    FileNotFoundError when there is no table)."""
    check_features(path, snap)
    meta, p = snap.metadata, snap.protocol
    conf = meta.get("configuration") or {}
    if not isinstance(conf, dict):
        conf = {}
    fields = json.loads(meta["schemaString"])["fields"]
    why = ("partition columns" if meta.get("partitionColumns") else
           "column mapping" if conf.get("delta.columnMapping.mode", "none") != "none" or p.get("minReaderVersion", 1) == 2 else
           "constraints" if any(k.startswith("delta.constraints.") for k in conf) else
           "column metadata (generated, identity or invariant columns)" if any(f.get("metadata") for f in fields) else
           None)
    if why is None:
        try:
            return pa.schema([pa.field(f["name"], delta_arrow_type(f["type"]), f.get("nullable", True)) for f in fields])
        except ValueError as e:
            why = str(e)
    raise UnsupportedFeature(f"{path}: the table has {why}; the log writer does not append to it")


def spark_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    for name, at in _SPARK_TYPES.items():
        if at == t:
            return name
    raise ValueError(f"no Delta type for {t}")


def file_stats(t: pa.Table) -> dict:
    """Delta file statistics: null counts of every column, bounds of the numeric and date ones
    (Spark skips files by them; strings and timestamps are left unbounded, which is allowed)."""
    mins, maxs, nulls = {}, {}, {}
    for name in t.column_names:
        col = t.column(name)
        nulls[name] = col.null_count
        typ = col.type
        if t.num_rows > col.null_count and (pa.types.is_integer(typ) or pa.types.is_floating(typ)
                                            or pa.types.is_date(typ)):
            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if pa.types.is_floating(typ) and (lo != lo or hi != hi):
                continue  # NaN: no bounds
            if pa.types.is_date(typ):
                lo, hi = lo.isoformat(), hi.isoformat()
            mins[name], maxs[name] = lo, hi
    return {"minValues": mins, "maxValues": maxs, "nullCount": nulls}


# The tables of this process, opened once: their snapshots and key columns live across batches.
_OPEN: dict[str, DVTable] = {}
_LAYOUT: dict[str, bool] = {}


def size_tier(size: int, floor: int, fanout: int) -> int:
    """0 under ``floor``, then one more for each factor ``fanout`` above it."""
    tier = 0
    while size >= floor:
        size //= fanout
        tier += 1
    return tier


def drop_caches() -> None:
    """Forget every table's snapshot, key indexes and cached rows, as a new process would
    start (a bench's restart)."""
    global _ROWS
    _OPEN.clear()
    _ROWS = _RowCache()


def open_table(path: str) -> DVTable:
    t = _OPEN.get(str(path))
    if t is None:
        t = _OPEN[str(path)] = DVTable(path)
    return t


def create(path: str, schema: pa.Schema, configuration: dict[str, str] | None = None) -> None:
    """A new, empty merge-on-read table (version 0): deletion vectors and the change data feed on."""
    schema_string = json.dumps({"type": "struct", "fields": [
        {"name": f.name, "type": spark_type(f.type), "nullable": f.nullable, "metadata": {}} for f in schema]})
    conf = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true", **(configuration or {})}
    _OPEN.pop(str(path), None)
    open_table(path).commit([{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [FEATURE],
                            "writerFeatures": WRITER_FEATURES}},
              {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                            "schemaString": schema_string, "partitionColumns": [], "configuration": conf,
                            "createdTime": _now_ms()}}], "CREATE TABLE")
    _LAYOUT[str(path)] = True


def enable(path: str) -> None:
    """Move an existing table (copy-on-write, written by delta-rs) to merge-on-read: one commit
    that upgrades its protocol to deletion vectors. Later batches write deletion vectors."""
    t = open_table(path)
    snap = t.snapshot()
    if snap.has_deletion_vectors:
        return
    meta = dict(snap.metadata)
    meta["configuration"] = {**meta.get("configuration", {}), "delta.enableDeletionVectors": "true"}
    t.commit([{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [FEATURE],
                            "writerFeatures": WRITER_FEATURES}}, {"metaData": meta}], "SET TBLPROPERTIES")
    _LAYOUT[str(path)] = True


def is_merge_on_read(path: str) -> bool:
    """The table at ``path`` has deletion vectors in its protocol (read from its log once a
    process; a table changes layout only through ``create`` or ``enable``)."""
    known = _LAYOUT.get(str(path))
    if known is not None:
        return known
    try:
        yes = DVTable(path).snapshot().has_deletion_vectors
    except FileNotFoundError:
        return False  # no table yet: not remembered
    except Exception:  # noqa: BLE001 - a log this reader does not follow (a v2 checkpoint...): its protocol
        p = store.rs_protocol(path)
        yes = FEATURE in (p.reader_features or [])
    _LAYOUT[str(path)] = yes
    return yes
