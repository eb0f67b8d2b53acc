"""Bring an engine's state back at start, and snapshot it every k batches.

At start (``Recovery.start``): the newest snapshot in the store consistent with the mirrors
as committed is restored, then the change feed of each mirror is applied from the version
the snapshot reflects to the committed one (commit by commit, deletes first). When there is
no such snapshot, it does not decode, it was taken under other settings, or the change feed
no longer covers the gap (vacuumed, log cleaned), the state is rebuilt from the mirrors as
committed (``rebuild``), and the one line printed says why. After each batch that changed
the engine's tables (``Recovery.after_batch``), every ``every``-th one writes a snapshot
(idempotent on the batch id, see ``state.snapshot_store``).

``restore_newest`` is the first half of the start on its own (find, check, restore): the
sketch maintainer uses it and brings each query forward with its own change-feed reads
(selections pushed down, Delta-backed join inputs).

``MirrorCursor`` is one mirror and the version the engine's state reflects: whole-table
reads (time travel) and signed changes between versions. On a local or s3 lake both go through
delta-rs (no Spark job); elsewhere, or when delta-rs cannot read it, through Spark.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa

from connectors import delta_sink as sink
from core.errors import StateError
from state.protocol import VERSION
from state.snapshot_store import SnapshotStore


class MirrorCursor:
    """One mirror table, the columns an engine reads, and the version its state reflects."""

    def __init__(self, table: str, columns: list[str]):
        self.table = table
        self.columns = list(columns)
        self.version = -1

    def read_all(self, spark, lake, version: int) -> pa.Table:
        self.version = version
        return sink.read_version(spark, lake.mirror(self.table), version, self.columns)

    def changes(self, spark, lake, new: int | None) -> pa.Table | None:
        """Signed changes from the version the state reflects to ``new``; the cursor moves there."""
        if new is None:
            return None
        delta = sink.read_changes(spark, lake.mirror(self.table), self.version, new, self.columns,
                                  version_column=VERSION)
        self.version = new
        return delta

class Recovery:
    """Snapshot schedule and start-up of one maintainer's engine.

    ``config``: the maintainer's settings (a dict); a snapshot taken under others is not used."""

    def __init__(self, name: str, cursors: list[MirrorCursor], every: int, config: dict, keep: int = 2,
                 fault=None):
        self.name = name
        self.fault = fault  # fault(step, batch_id): the job's kill points (IVMSTREAM_KILL_AT)
        self.cursors = cursors
        self.every = max(1, int(every))
        self.config = config
        self.keep = keep
        self.store: SnapshotStore | None = None
        self.since = 0  # batches that changed the engine since its last snapshot
        self.last_start: dict = {}

    def setup(self, spark, job) -> None:
        self.store = SnapshotStore(job.lake.root, spark, keep=self.keep)
        self.store.ensure()

    def _store(self, spark, job) -> SnapshotStore:
        if self.store is None:
            self.setup(spark, job)
        self.store.spark = spark
        return self.store

    def start(self, spark, job, engine, rebuild) -> str:
        """Restore ``engine`` (protocol) and catch up, or ``rebuild(spark, job) -> rows read``
        into a fresh state; returns the one line to print."""
        t0 = time.perf_counter()
        committed = {c.table: int(job.versions.get(c.table, 0)) for c in self.cursors}
        snap, why = restore_newest(self._store(spark, job), self.name, committed, self.config, engine)
        caught = 0
        if snap is not None:
            try:
                deltas = {}
                for c in self.cursors:
                    c.version = int(snap.versions.get(c.table, -1))
                    d = c.changes(spark, job.lake, committed[c.table])
                    if d is not None and d.num_rows:
                        deltas[c.table] = d
            except Exception as e:  # noqa: BLE001 - the feed is gone: only a recount is exact
                why = (f"the change feed of {c.table} does not cover versions {c.version}..{committed[c.table]}: "
                       f"{_first_line(e)}")
                snap = None
        if snap is not None:
            caught = sum(d.num_rows for d in deltas.values())
            if deltas:
                engine.apply(deltas)  # rows the engine rejects were quarantined when they first came
            ms = (time.perf_counter() - t0) * 1000
            self.last_start = {"restored": True, "batch_id": snap.batch_id, "ms": ms, "caught_up": caught,
                               "snapshot_bytes": snap.size}
            return (f"{self.name}: restored from snapshot of batch {snap.batch_id} ({_versions(snap.versions)}) "
                    f"in {ms:.0f} ms, caught up {caught:,} changes")
        rows = rebuild(spark, job)
        for c in self.cursors:
            c.version = committed[c.table]
        ms = (time.perf_counter() - t0) * 1000
        self.since = self.every if rows else 0  # a recount is worth a snapshot at the next batch
        self.last_start = {"restored": False, "ms": ms, "rows": rows, "why": why}
        return f"{self.name}: recounted {rows:,} edges in {ms:.0f} ms ({why})"

    def after_batch(self, spark, job, ctx, engine, changed: bool) -> bool:
        """Snapshot every ``every``-th batch that changed the engine; True when one was written."""
        if changed:
            self.since += 1
        if self.since < self.every:
            return False
        t0 = time.perf_counter()
        encoding, data = engine.snapshot()
        # kill points: snapshot.begin.<name> just before the Delta commit, snapshot.<name> after it
        fault = None if self.fault is None else (lambda step: self.fault(
            f"snapshot.begin.{self.name}" if step == "begin" else f"snapshot.{self.name}", ctx.batch_id))
        wrote = self._store(spark, job).write(
            self.name, ctx.app_id, ctx.batch_id, {c.table: c.version for c in self.cursors}, encoding, data,
            self.config, fault=fault)
        self.since = 0
        ctx.metrics.setdefault(self.name, {})["snapshot"] = {
            "bytes": len(data), "ms": round((time.perf_counter() - t0) * 1000, 1), "written": wrote}
        return wrote

def restore_newest(store: SnapshotStore, name: str, committed: dict, config: dict, engine):
    """Restore into ``engine`` the newest snapshot of ``name`` that is consistent with the
    ``committed`` mirror versions and was taken under ``config``: (the snapshot, None), or
    (None, why there is none to use). The caller catches up from the snapshot's versions."""

    try:
        snap = store.latest(name, committed)
    except Exception as e:  # noqa: BLE001 - an unreadable store only costs a rebuild
        return None, f"snapshot store not readable: {_first_line(e)}"
    if snap is None:
        return None, "no snapshot consistent with the mirrors"
    if snap.config != json.dumps(config, sort_keys=True):
        return None, f"the snapshot of batch {snap.batch_id} was taken with other settings"
    try:
        engine.restore(snap.encoding, snap.state)
    except StateError as e:
        return None, f"the snapshot of batch {snap.batch_id} does not decode: {_first_line(e)}"
    return snap, None

def _versions(versions: dict) -> str:
    if len(versions) == 1:
        return f"mirror v{next(iter(versions.values()))}"
    return "mirrors " + ", ".join(f"{t} v{v}" for t, v in sorted(versions.items()))

def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]
