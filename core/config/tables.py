"""``[[tables]]``: the CDC-fed base tables, their topics, typed columns and keys."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import ConfigError
from core.config.common import (check_keys, entry_name, want_mode, shown, want_name, want_names,
                                         want_str)

if TYPE_CHECKING:
    from core.config.debezium import DebeziumConfig

# Column types a table may declare, and the Spark / Arrow types they map to.
SIMPLE_TYPES = ("int", "long", "double", "string", "date", "timestamp", "boolean", "binary")
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
_TABLE_KEYS = {"name", "topic", "columns", "primary_key", "source_table", "not_null", "ranges",
               "decimal_handling_mode", "time_precision_mode", "format", "encoding"}


def parse_type(spec: str, where: str) -> str:
    if not isinstance(spec, str):
        raise ConfigError(f"{where}: the column type must be a string such as \"long\", got {shown(spec)}")
    spec = spec.strip().lower()
    if spec in SIMPLE_TYPES:
        return spec
    m = _DECIMAL.match(spec)
    if m:
        # Spark's DecimalType: 1..38 digits, of which 0..precision after the point
        p, s = int(m.group(1)), int(m.group(2))
        if not 1 <= p <= 38 or not 0 <= s <= p:
            raise ConfigError(f"{where}: {spec} is not a valid decimal: precision must lie in 1..38 "
                              f"and scale in 0..precision")
        return f"decimal({p},{s})"
    raise ConfigError(
        f"{where}: unknown column type {spec!r}; use one of {', '.join(SIMPLE_TYPES)} or decimal(p,s)"
    )


@dataclass(frozen=True)
class TableConfig:
    """A CDC-fed base table: its topic, columns in order with types, and primary key."""

    name: str
    topic: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    source_table: str | None = None  # Debezium source.table, when several tables share a topic
    # columns declared NOT NULL in the source: a row image with NULL there is quarantined,
    # and the sketch safety check may rely on them never being NULL
    not_null: tuple[str, ...] = ()
    # declared value ranges (CHECK col BETWEEN lo AND hi) of numeric columns: enforced like
    # not_null, and facts the safety check may use (e.g. SUM over a non-negative column)
    ranges: tuple[tuple[str, float, float], ...] = ()
    # How the connector encodes numerics and times (Debezium's decimal.handling.mode and
    # time.precision.mode). The decoder follows a record's own schema when it carries one
    # (JsonConverter schemas.enable=true); these say how to read records that do not.
    decimal_mode: str = "precise"  # precise | string | double
    time_mode: str = "adaptive"  # adaptive | adaptive_time_microseconds | connect | microseconds | nanoseconds | isostring
    # "envelope": Debezium's change events (op, before, after, source); "unwrapped": rows
    # flattened by the ExtractNewRecordState transform (a delete is "__deleted": "true" or a
    # tombstone).
    format: str = "envelope"
    # How the topic's bytes are written: "json" (JsonConverter) or "avro" (the Confluent wire
    # format, schemas from [registry]); [debezium] encoding is the default.
    encoding: str = "json"

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]

    def type_of(self, column: str) -> str:
        return dict(self.columns)[column]


DECIMAL_MODES = ("precise", "string", "double")
# How the records' bytes are written: Connect's JsonConverter, or Avro in the Confluent wire
# format (magic byte 0, a 4-byte schema id, the Avro body) with the schema in a registry.
ENCODINGS = ("json", "avro")
FORMATS = ("envelope", "unwrapped")
TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect", "microseconds", "nanoseconds", "isostring")


def parse_table(raw: dict, i: int, where: str, dbz: DebeziumConfig | None = None) -> TableConfig:
    w = entry_name(raw, "tables", i, where)
    check_keys(raw, _TABLE_KEYS, w)
    for k in ("name", "topic", "columns", "primary_key"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    name = want_name(raw["name"], w, "name")
    w = f"{where}: table {name!r}"
    topic = want_str(raw["topic"], w, "topic")
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigError(f"{w}: topic {topic[:60]!r} is not a legal Kafka topic name "
                          "(letters, digits, '.', '_', '-', at most 249)")
    if not isinstance(raw["columns"], dict) or not raw["columns"]:
        raise ConfigError(f"{w}: 'columns' must be a non-empty table of name = \"type\", "
                          f"got {shown(raw['columns'])}")
    for c in raw["columns"]:
        want_name(c, w, "column name")
    lower = [c.lower() for c in raw["columns"]]
    clash = sorted({c for c in raw["columns"] if lower.count(c.lower()) > 1})
    if clash:  # Spark and the SQL front end resolve column names without regard to case
        raise ConfigError(f"{w}: columns {clash} differ only in case")
    columns = tuple((c, parse_type(t, f"{w}, column {c!r}")) for c, t in raw["columns"].items())
    names = {c for c, _ in columns}
    pk = want_names(raw["primary_key"], w, "primary_key", allow_empty=False)
    missing = [k for k in pk if k not in names]
    if missing:
        raise ConfigError(f"{w}: primary_key {list(pk)} must name declared columns (missing: {missing})")
    nn = want_names(raw.get("not_null", []), w, "not_null")
    unknown = [c for c in nn if c not in names]
    if unknown:
        raise ConfigError(f"{w}: not_null names undeclared column(s) {unknown}")
    ranges = []
    raw_ranges = raw.get("ranges", {})
    if not isinstance(raw_ranges, dict):
        raise ConfigError(f"{w}: 'ranges' must be a table of column = [min, max], got {shown(raw_ranges)}")
    types = dict(columns)
    for c, r in raw_ranges.items():
        if c not in types:
            raise ConfigError(f"{w}: ranges names undeclared column {c!r}")
        if types[c] not in ("int", "long", "double") and not _DECIMAL.match(types[c]):
            raise ConfigError(f"{w}: ranges: column {c!r} is {types[c]}; ranges apply to numeric columns")
        ok = (isinstance(r, list) and len(r) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x == x
                      and (isinstance(x, float) or abs(x) <= 10**38) for x in r)  # no NaN; ints a decimal(38) holds
              and r[0] <= r[1])
        if not ok:
            raise ConfigError(f"{w}: ranges: {c!r} must be [min, max] with min <= max, got {r!r}")
        ranges.append((str(c), r[0], r[1]))
    source_table = raw.get("source_table")
    if source_table is not None:
        want_str(source_table, w, "source_table")
    # [debezium]'s modes are every table's default (DebeziumConfig's defaults are TableConfig's)
    decimal_mode = dbz.decimal_handling_mode if dbz else TableConfig.decimal_mode
    time_mode = dbz.time_precision_mode if dbz else TableConfig.time_mode
    return TableConfig(name=name, topic=topic, columns=columns, primary_key=pk,
                       source_table=source_table, not_null=nn, ranges=tuple(ranges),
                       decimal_mode=want_mode(raw.get("decimal_handling_mode", decimal_mode),
                                          DECIMAL_MODES, w, "decimal_handling_mode"),
                       time_mode=want_mode(raw.get("time_precision_mode", time_mode),
                                       TIME_MODES, w, "time_precision_mode"),
                       format=want_mode(raw.get("format", "envelope"), FORMATS, w, "format"),
                       encoding=want_mode(raw.get("encoding", dbz.encoding if dbz else "json"), ENCODINGS, w, "encoding"))


def check_columns(where: str, table: str, columns: list[str], tables: tuple[TableConfig, ...]) -> None:
    found = [t for t in tables if t.name == table]
    if not found:
        raise ConfigError(f"{where}: table {table!r} is not declared in [[tables]]")
    missing = [c for c in columns if c not in found[0].column_names]
    if missing:
        raise ConfigError(f"{where}: table {table!r} has no column(s) {missing}")
