"""``[debezium]``: the database (PostgreSQL, or MySQL/MariaDB) Debezium captures into the tables' topics."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from operators.errors import ConfigError
from streaming_app.config.common import _check_keys, _mode, _want_int, _want_options
from streaming_app.config.tables import DECIMAL_MODES, TIME_MODES

CONNECTORS = ("postgres", "mysql")
_DEBEZIUM_KEYS = {"connector", "server_id", "host", "port", "database", "user", "password", "schema", "topic_prefix", "connector_name",
                  "slot_name", "publication_name", "decimal_handling_mode", "time_precision_mode",
                  "connect_url", "properties"}


@dataclass(frozen=True)
class DebeziumConfig:
    """``[debezium]``: the database that Debezium captures into the tables' topics.

    ``ivmstream connect register`` turns it into the connector's properties; the decoder
    reads ``decimal_handling_mode`` and ``time_precision_mode`` as every table's default.
    ``connector``: "postgres" (topics prefix.schema.table) or "mysql" (MySQL and MariaDB,
    topics prefix.database.table; ``server_id`` is the connector's replication client id).
    """

    connector: str = "postgres"
    server_id: int = 5400
    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "postgres"
    user: str = "postgres"
    password: str = ""
    schema: str = "public"
    topic_prefix: str = "dbserver1"
    connector_name: str = "ivmstream"
    slot_name: str = "ivmstream"
    publication_name: str = "ivmstream"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    connect_url: str = "http://127.0.0.1:8083"
    extra: tuple[tuple[str, str], ...] = ()  # further connector properties, passed as given


def _debezium(raw: dict, where: str) -> DebeziumConfig:
    w = f"{where}: [debezium]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{w}: must be a table")
    _check_keys(raw, _DEBEZIUM_KEYS, w)
    d = DebeziumConfig()
    kw: dict[str, Any] = {"connector": _mode(raw.get("connector", d.connector), CONNECTORS, w, "connector")}
    if kw["connector"] == "mysql":  # MySQL's port; Debezium's MySQL default time mode
        d = DebeziumConfig(port=3306, user="root", time_precision_mode="adaptive_time_microseconds")
    if "server_id" in raw:
        kw["server_id"] = _want_int(raw["server_id"], w, "server_id", 1, 2**32 - 1)
    for k in ("host", "database", "user", "password", "schema", "topic_prefix", "connector_name",
              "slot_name", "publication_name", "connect_url"):
        if k in raw:
            if not isinstance(raw[k], str) or (k != "password" and not raw[k]):
                raise ConfigError(f"{w}: {k} must be a non-empty string, got {raw[k]!r}")
            kw[k] = raw[k]
    if "port" in raw:
        if isinstance(raw["port"], bool) or not isinstance(raw["port"], int) or not 0 < raw["port"] < 65536:
            raise ConfigError(f"{w}: port must be an integer in 1..65535, got {raw['port']!r}")
        kw["port"] = raw["port"]
    kw["decimal_handling_mode"] = _mode(raw.get("decimal_handling_mode", d.decimal_handling_mode),
                                        DECIMAL_MODES, w, "decimal_handling_mode")
    kw["time_precision_mode"] = _mode(raw.get("time_precision_mode", d.time_precision_mode),
                                      TIME_MODES, w, "time_precision_mode")
    kw["extra"] = _want_options(raw.get("properties", {}), w, "properties")
    return replace(d, **kw)
