"""Table maintenance between batches: compaction, VACUUM inside the window readers need, log
checkpoints and log cleanup, on every table the job writes.

The job calls ``Maintenance.after_batch`` once a batch has committed everything. After every
``every_batches``-th batch one table gets its turn (the tables in order, one a turn), so a batch
waits for one table's maintenance, never the lake's. A turn does, each only when it is due:

* **compaction** when ``compact_min_files`` of the table's files are under half the target size
  (delta-rs ``optimize.compact``; a commit with ``dataChange = false``: the change data feed and
  every reader see the same rows);
* **VACUUM** of the files that left the table more than ``retention`` hours ago, where the
  retention is the configured one (the time travel the README promises) or longer: no file of a
  version that a reader still needs is removed. ``needed(path)`` names that version (the job
  answers with the oldest version a state snapshot reflects: recovery reads the change feed
  from there): a merge-on-read mirror keeps exactly every file that version and the later ones
  read (``dv_table.vacuum(keep_from=...)``); on a delta-rs table, whose VACUUM knows only a
  retention, the retention is stretched to cover the commits after it. Change-data files
  (``_change_data/``), which delta-rs's VACUUM never removes, go by the same rule on a local lake;
* a **log checkpoint** once ``checkpoint_every`` commits have passed since the last one, then
  **log cleanup** (commits older than the table's ``delta.logRetentionDuration``, 30 days by
  default, and covered by a checkpoint).

Every action is one line through ``say``. A SIGKILL in the middle loses nothing: compaction and
the checkpoint are single commits (the table is as before or as after), VACUUM deletes only files
no version in the window references, and a file it had not reached yet goes at the next turn.
Tables delta-rs cannot write (another remote store, or a table with deletion vectors) get the
same actions through Spark SQL (``OPTIMIZE``, ``VACUUM ... RETAIN``; Spark checkpoints its own).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from connectors import delta_sink as sink
from connectors import dv_table as dv
from connectors import object_store as store
from core.config import MaintenanceConfig
from core.faults import kill_point

MB = 1 << 20
# Delta's default delta.logRetentionDuration: commits older than this, covered by a checkpoint, go.
LOG_RETENTION_HOURS = 30 * 24


@dataclass(frozen=True)
class Action:
    """One maintenance action on one table, as the job's line and metrics show it."""

    table: str
    kind: str  # compact | vacuum | checkpoint
    ms: float
    detail: str

    def line(self) -> str:
        return f"maintenance: {self.kind} {self.table}: {self.detail} ({self.ms:,.0f} ms)"


class Maintenance:
    """The maintenance of one job's tables (``sink.tables_ensured()``: every table the job made
    or opened through ``ensure_table``)."""

    def __init__(self, cfg: MaintenanceConfig, spark=None, needed: Callable[[str], int | None] | None = None,
                 say: Callable[[str], None] = print, root: str | Path | None = None):
        self.cfg = cfg
        self.spark = spark
        self.needed = needed or (lambda path: None)
        self.say = say
        self.root = str(root) if root is not None else None
        self._turn = 0
        self._batch = -1
        self._checkpointed: dict[str, int] = {}  # table -> version of the last checkpoint we know of

    def tables(self) -> list[str]:
        return sorted(p for p in sink.tables_ensured() if self.root is None or p.startswith(self.root))

    def after_batch(self, batch_id: int) -> list[Action]:
        """Maintain the next table when this batch is the ``every_batches``-th since the last turn."""
        if not self.cfg.enabled or (batch_id + 1) % self.cfg.every_batches:
            return []
        tables = self.tables()
        if not tables:
            return []
        path = tables[self._turn % len(tables)]
        self._turn += 1
        return self.maintain(path, batch_id)

    def maintain(self, path: str, batch_id: int = -1) -> list[Action]:
        """Every due action on the table at ``path`` (``batch_id``: the kill points' batch)."""
        self._batch = batch_id
        try:
            if sink.merge_on_read(path):
                actions = self._maintain_mor(path)
            elif sink.rs_writes(path) and not sink.has_deletion_vectors(path):
                actions = self._maintain_rs(path)
            elif self.spark is not None:
                actions = self._maintain_spark(path)
            else:
                return []
        except Exception as e:  # noqa: BLE001 - a concurrent writer won the commit: the next turn retries
            self.say(f"maintenance: {_name(path)}: skipped this turn ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
            return []
        for a in actions:
            self.say(a.line())
        return actions

    # -- delta-rs ----------------------------------------------------------------------------
    def _maintain_rs(self, path: str) -> list[Action]:
        out = []
        table = store.rs_table(path)
        target = self.cfg.target_file_mb * MB
        sizes = table.get_add_actions(flatten=True).column("size_bytes").to_pylist()
        small = sum(1 for s in sizes if s < target // 2)
        if small >= self.cfg.compact_min_files:
            t = time.perf_counter()
            kill_point("maintenance.compact", self._batch)
            m = table.optimize.compact(target_size=target)
            out.append(Action(_name(path), "compact", _ms(t), f"{m.get('numFilesRemoved', 0)} files into "
                                                               f"{m.get('numFilesAdded', 0)}"))
            table = store.rs_table(path)
        t = time.perf_counter()
        hours = self.retention_hours(path, table)
        kill_point("maintenance.vacuum", self._batch)
        gone = table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
        cdf = self._remove_change_data(path, hours)
        if gone or cdf:
            out.append(Action(_name(path), "vacuum", _ms(t), f"{len(gone)} data files and {cdf} change-data files "
                                                             f"removed (retention {hours} h)"))
        out += self._checkpoint(path, table.version(), lambda: (table.create_checkpoint(), table.cleanup_metadata()))
        return out

    def _checkpoint(self, path: str, version: int, write: Callable[[], object]) -> list[Action]:
        """A log checkpoint (``write``: the checkpoint, then log cleanup) once ``checkpoint_every``
        commits have passed since the table's last one."""
        last = self._checkpointed.get(path)
        if last is None:
            last = self._checkpointed[path] = _last_checkpoint(path)
        if version - last < self.cfg.checkpoint_every:
            return []
        t = time.perf_counter()
        kill_point("maintenance.checkpoint", self._batch)
        write()
        self._checkpointed[path] = version
        return [Action(_name(path), "checkpoint", _ms(t), f"log checkpoint at version {version}")]

    # -- merge-on-read mirrors (connectors.dv_table) --------------------------------------------
    def _maintain_mor(self, path: str) -> list[Action]:
        out = []
        table = dv.open_table(path)
        target = self.cfg.target_file_mb * MB
        t = time.perf_counter()
        kill_point("maintenance.compact", self._batch)
        removed, written = table.compact(target_bytes=target, small_bytes=target // 2,
                                         min_small=self.cfg.compact_min_files, purge_share=self.cfg.purge_share)
        if removed:
            out.append(Action(_name(path), "compact", _ms(t), f"{removed} files (small, or with many deleted rows) "
                                                               f"into {written}"))
        t = time.perf_counter()
        hours, need = self.cfg.retention_hours, self.needed(path)
        kill_point("maintenance.vacuum", self._batch)
        gone = table.vacuum(hours, keep_from=need)  # exact: every file of the versions from ``need`` on
        if gone:
            kept = "" if need is None else f", every file of version {need} on kept"
            out.append(Action(_name(path), "vacuum", _ms(t), f"{len(gone)} data, deletion-vector and change-data "
                                                             f"files removed (retention {hours} h{kept})"))
        out += self._checkpoint(path, table.snapshot().version,
                                lambda: (table.checkpoint(), table.cleanup_log(LOG_RETENTION_HOURS)))
        return out

    def retention_hours(self, path: str, table=None) -> int:
        """The configured retention, stretched so that every commit after the version a reader
        still needs keeps its files: whole hours, one more than the age of that commit."""
        hours = self.cfg.retention_hours
        need = self.needed(path)
        if need is not None:
            stamp = _commit_time(path, need + 1, table)
            if stamp is not None:
                age_h = (time.time() * 1000 - stamp) / 3_600_000
                hours = max(hours, age_h + 1)
        return max(0, math.ceil(hours))

    def _remove_change_data(self, path: str, hours: int) -> int:
        """Change-data files older than the retention (a local lake; delta-rs's VACUUM leaves them)."""
        if not store.is_local(path):
            return 0
        folder = Path(path.removeprefix("file://")) / "_change_data"
        if not folder.is_dir():
            return 0
        cutoff = time.time() - hours * 3600
        n = 0
        for f in folder.rglob("*.parquet"):
            if f.stat().st_mtime < cutoff:
                f.unlink(missing_ok=True)
                n += 1
        return n

    # -- Spark (another remote store, or deletion vectors) ------------------------------------
    def _maintain_spark(self, path: str) -> list[Action]:
        out = []
        spark = self.spark
        d = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
        target = self.cfg.target_file_mb * MB
        if d["numFiles"] >= self.cfg.compact_min_files and d["sizeInBytes"] / max(1, d["numFiles"]) < target // 2:
            t = time.perf_counter()
            spark.sql(f"OPTIMIZE delta.`{path}`")
            out.append(Action(_name(path), "compact", _ms(t), f"{d['numFiles']} files optimized"))
        t = time.perf_counter()
        hours = self.cfg.retention_hours
        need = self.needed(path)
        if need is not None:  # as on delta-rs: keep every commit after the version a reader needs
            row = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version = {need + 1}").select("timestamp").collect()
            if row and row[0]["timestamp"] is not None:
                age_h = (time.time() - row[0]["timestamp"].timestamp()) / 3600
                hours = max(hours, age_h + 1)
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        spark.sql(f"VACUUM delta.`{path}` RETAIN {math.ceil(hours)} HOURS")
        out.append(Action(_name(path), "vacuum", _ms(t), f"retention {math.ceil(hours)} h"))
        return out


def _commit_time(path: str, version: int, table=None) -> int | None:
    """When the commit ``version`` of the table was written (ms since the epoch), or None."""
    if sink.merge_on_read(path):
        try:
            info = dv.open_table(path).commit_info(version)
        except FileNotFoundError:
            return None
        return info.get("timestamp")
    table = table or store.rs_table(path)
    after = [c for c in table.history(max(1, table.version() - version + 1)) if c.get("version", -1) == version]
    return after[0].get("timestamp") if after else None


def _last_checkpoint(path: str) -> int:
    """Version of the table's newest log checkpoint (-1: none), from ``_last_checkpoint``."""
    if store.is_local(path):
        f = Path(path.removeprefix("file://")) / "_delta_log" / "_last_checkpoint"
        try:
            return int(json.loads(f.read_text())["version"])
        except (OSError, ValueError, KeyError):
            return -1
    status, body = store.request("GET", store.join(path, "_delta_log", "_last_checkpoint"))
    if status != 200:
        return -1
    try:
        return int(json.loads(body)["version"])
    except (ValueError, KeyError):
        return -1


def _name(path: str) -> str:
    parts = str(path).rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 and parts[-2] == "mirrors" else parts[-1]


def _ms(t: float) -> float:
    return (time.perf_counter() - t) * 1000
