"""``[maintenance]``: what the job does to the tables it writes, between batches, so that a job
that runs for weeks keeps a bounded lake (``connectors.maintenance``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.config.common import check_keys, want_bool, want_int, want_number

_KEYS = {"enabled", "every_batches", "checkpoint_every", "compact_min_files", "target_file_mb", "retention_hours", "purge_share"}


@dataclass(frozen=True)
class MaintenanceConfig:
    enabled: bool = True
    # One table is maintained after every ``every_batches``-th batch, the tables in turn: the
    # work a batch waits for is one table's, not the lake's.
    every_batches: int = 5
    # A log checkpoint once a table has this many commits since its last one (a reader opening
    # the table replays the commits after the newest checkpoint only). Delta Spark's default.
    checkpoint_every: int = 10
    # Compact a table when this many of its files are under half the target size.
    compact_min_files: int = 16
    target_file_mb: int = 128
    # A merge-on-read mirror's file whose deletion vector removes more than this share of its
    # rows is rewritten without them (a reader then skips fewer dead rows).
    purge_share: float = 0.3
    # VACUUM removes a file only once it has been out of the table this long (the time travel
    # the README promises) AND no reader still needs a version that holds it (the oldest version
    # a state snapshot reflects). Delta's own default: 7 days.
    retention_hours: float = 168.0


def parse_maintenance(section: Any, where: str) -> MaintenanceConfig:
    w = f"{where}: [maintenance]"
    check_keys(section, _KEYS, w)
    d = MaintenanceConfig()
    return MaintenanceConfig(
        enabled=want_bool(section.get("enabled", d.enabled), w, "enabled"),
        every_batches=want_int(section.get("every_batches", d.every_batches), w, "every_batches", 1, 1_000_000),
        checkpoint_every=want_int(section.get("checkpoint_every", d.checkpoint_every), w, "checkpoint_every",
                                   1, 1_000_000),
        compact_min_files=want_int(section.get("compact_min_files", d.compact_min_files), w, "compact_min_files",
                                    2, 1_000_000),
        target_file_mb=want_int(section.get("target_file_mb", d.target_file_mb), w, "target_file_mb", 1, 16_384),
        purge_share=float(want_number(section.get("purge_share", d.purge_share), w, "purge_share", 0.01, 1.0)),
        retention_hours=float(want_number(section.get("retention_hours", d.retention_hours), w, "retention_hours",
                                           0, 24 * 3650)),
    )
