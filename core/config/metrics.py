"""``[metrics]``: the job's Prometheus endpoint (``streaming_app.metrics``) and ``[catalog]``:
the Spark catalog database its tables are registered in (``streaming_app.catalog``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.config.common import check_keys, want_bool, want_int, want_str

_METRICS_KEYS = {"enabled", "host", "port", "spark"}
_CATALOG_KEYS = {"database"}
_HOST = re.compile(r"[A-Za-z0-9_.:-]+")
_DATABASE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = False  # off by default: an endpoint is opened only when asked for
    # The figures name topics, tables and queries: loopback unless the config says otherwise
    # (a Prometheus on another host scrapes through a tunnel, or host = "0.0.0.0" on purpose).
    host: str = "127.0.0.1"
    port: int = 9464  # 0: a free port, printed at start
    # Spark's own metrics too (its Prometheus servlet on the Spark UI: /metrics/prometheus and
    # /metrics/executors/prometheus), when the UI is on.
    spark: bool = True


@dataclass(frozen=True)
class CatalogConfig:
    database: str | None = None  # None: tables by path only


def parse_metrics(section: Any, where: str) -> MetricsConfig:
    w = f"{where}: [metrics]"
    check_keys(section, _METRICS_KEYS, w)
    d = MetricsConfig()
    host = want_str(section.get("host", d.host), w, "host")
    if not _HOST.fullmatch(host):
        raise ConfigError(f"{w}: host {host[:80]!r} is not a host name or address")
    return MetricsConfig(enabled=want_bool(section.get("enabled", d.enabled), w, "enabled"), host=host,
                         port=want_int(section.get("port", d.port), w, "port", 0, 65535),
                         spark=want_bool(section.get("spark", d.spark), w, "spark"))


def parse_catalog(section: Any, where: str) -> CatalogConfig:
    w = f"{where}: [catalog]"
    check_keys(section, _CATALOG_KEYS, w)
    db = section.get("database")
    if db is not None:
        db = want_str(db, w, "database")
        if not _DATABASE.fullmatch(db):
            raise ConfigError(f"{w}: database {db[:80]!r} must be an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return CatalogConfig(database=db)
