"""Debezium JSON change events -> typed CDC events per table, or quarantine rows.

Format only: no Kafka, no Spark. Input is a micro-batch of Kafka records (key, value, topic,
partition, offset); output is, per declared table, the events in log order, plus one
``Rejected`` per record that cannot be applied (with a stable ``DATA_*`` code and a reason),
plus the count of tombstones (null values after a delete, skipped by design).

Accepted: values with or without the ``{"schema":..., "payload":...}`` wrapper; ops ``c``
(create), ``r`` (snapshot read), ``u`` (update), ``d`` (delete); the message key (JSON
object, wrapped or not) as the primary key, falling back to the row image when the key is
absent. Column values are coerced strictly to the declared type:

  int/long   JSON integer (int is 32-bit)          double   JSON number
  decimal    JSON number or numeric string          string   JSON string
  boolean    JSON true/false                        date     days since epoch or "YYYY-MM-DD"
  timestamp  epoch milliseconds or ISO-8601 text (naive text is UTC)

A column missing from an image is an error (Debezium always sends every column); columns
the config does not declare are ignored.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable

from operators import errors as E
from streaming_app.config import JobConfig, TableConfig

OPS = {"c", "r", "u", "d"}
EPOCH = dt.date(1970, 1, 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


@dataclass(frozen=True)
class CdcEvent:
    """One change to one row: ``after`` is None for a delete, ``before`` may be None."""

    table: str
    op: str
    key: tuple
    before: dict | None
    after: dict | None
    ts_ms: int | None
    partition: int
    offset: int


@dataclass(frozen=True)
class Rejected:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: str | None
    code: str
    reason: str


@dataclass
class DecodedBatch:
    events: dict[str, list[CdcEvent]]
    rejected: list[Rejected]
    tombstones: int = 0
    records: int = 0


class _Bad(Exception):
    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def _text(b: bytes | str | None) -> str | None:
    if b is None:
        return None
    return b if isinstance(b, str) else b.decode("utf-8", errors="replace")


def _unwrap(doc: Any) -> Any:
    if isinstance(doc, dict) and "payload" in doc and set(doc) <= {"schema", "payload"}:
        return doc["payload"]
    return doc


def coerce(value: Any, typ: str, column: str) -> Any:
    """Convert one JSON value to the Python value of the declared type, or raise _Bad."""
    if value is None:
        return None
    bad = _Bad(E.DATA_WRONG_TYPE, f"column {column!r}: {value!r} is not a valid {typ}")
    if typ in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        lo, hi = INT32 if typ == "int" else INT64
        if not lo <= value <= hi:
            raise _Bad(E.DATA_WRONG_TYPE, f"column {column!r}: {value} is out of range for {typ}")
        return value
    if typ == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if typ == "string":
        if not isinstance(value, str):
            raise bad
        return value
    if typ == "boolean":
        if not isinstance(value, bool):
            raise bad
        return value
    if typ == "date":
        if isinstance(value, int) and not isinstance(value, bool):
            return EPOCH + dt.timedelta(days=value)
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value[:10])
            except ValueError:
                raise bad from None
        raise bad
    if typ == "timestamp":
        if isinstance(value, int) and not isinstance(value, bool):
            return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=value)
        if isinstance(value, str):
            try:
                ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise bad from None
            return ts if ts.tzinfo else ts.replace(tzinfo=dt.timezone.utc)
        raise bad
    m = _DECIMAL.match(typ)
    if m:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise bad
        try:
            d = Decimal(str(value))
        except InvalidOperation:
            raise bad from None
        precision, scale = int(m.group(1)), int(m.group(2))
        q = d.quantize(Decimal(1).scaleb(-scale))
        if len(q.as_tuple().digits) > precision:
            raise _Bad(E.DATA_WRONG_TYPE, f"column {column!r}: {value!r} exceeds {typ}")
        return q
    raise _Bad(E.DATA_WRONG_TYPE, f"column {column!r}: unsupported type {typ}")


def _image(raw: Any, table: TableConfig, which: str) -> dict | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _Bad(E.DATA_WRONG_TYPE, f"'{which}' image must be a JSON object, got {type(raw).__name__}")
    missing = [c for c in table.column_names if c not in raw]
    if missing:
        raise _Bad(E.DATA_WRONG_TYPE, f"'{which}' image lacks column(s) {missing}")
    return {c: coerce(raw[c], t, c) for c, t in table.columns}


def _key(raw_key: Any, images: Iterable[dict | None], table: TableConfig) -> tuple:
    key = _unwrap(raw_key)
    if isinstance(key, dict) and all(k in key for k in table.primary_key):
        vals = tuple(coerce(key[k], table.type_of(k), k) for k in table.primary_key)
        if all(v is not None for v in vals):
            return vals
    for img in images:
        if img is not None:
            vals = tuple(img[k] for k in table.primary_key)
            if all(v is not None for v in vals):
                return vals
    raise _Bad(E.DATA_MISSING_KEY, f"no primary key {list(table.primary_key)} in the message key or row images")


def _pick_table(payload: dict, candidates: list[TableConfig], topic: str) -> TableConfig:
    if not candidates:
        raise _Bad(E.DATA_UNKNOWN_TABLE, f"topic {topic!r} is not declared for any table")
    source = payload.get("source") if isinstance(payload.get("source"), dict) else {}
    name = source.get("table")
    if len(candidates) == 1:
        t = candidates[0]
        if name is not None and t.source_table is not None and name != t.source_table:
            raise _Bad(E.DATA_UNKNOWN_TABLE, f"source.table {name!r} is not {t.source_table!r} declared for {topic!r}")
        return t
    for t in candidates:
        if t.source_table == name:
            return t
    raise _Bad(E.DATA_UNKNOWN_TABLE, f"source.table {name!r} matches no table declared on topic {topic!r}")


def decode_record(cfg: JobConfig, topic: str, partition: int, offset: int,
                  key: bytes | None, value: bytes | None) -> list[CdcEvent] | None:
    """Decode one Kafka record: events (two for a key-changing update), None for a tombstone.

    Raises _Bad for a record that must be quarantined.
    """
    if value is None:
        return None
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise _Bad(E.DATA_INVALID_JSON, f"value is not JSON: {e}") from None
    payload = _unwrap(doc)
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise _Bad(E.DATA_INVALID_JSON, "value is not a JSON object")
    table = _pick_table(payload, cfg.tables_for_topic(topic), topic)
    op = payload.get("op")
    if op not in OPS:
        raise _Bad(E.DATA_UNKNOWN_OP, f"op {op!r} is not one of c, r, u, d")
    before = _image(payload.get("before"), table, "before")
    after = _image(payload.get("after"), table, "after")
    if op in ("c", "r", "u") and after is None:
        raise _Bad(E.DATA_MISSING_IMAGE, f"op {op!r} without an 'after' image")
    if after is not None and table.not_null:
        nulls = [c for c in table.not_null if after[c] is None]
        if nulls:  # only 'after': a delete's 'before' may carry the key alone (REPLICA IDENTITY DEFAULT)
            raise _Bad(E.DATA_NULL, f"'after' image has NULL in not_null column(s) {nulls}")
    if after is not None:
        for c, lo, hi in table.ranges:
            v = after[c]
            if v is not None and not lo <= v <= hi:
                raise _Bad(E.DATA_OUT_OF_RANGE, f"column {c!r}: {v} is outside the declared range [{lo}, {hi}]")
    raw_key = None
    if key is not None:
        try:
            raw_key = json.loads(key)
        except (ValueError, UnicodeDecodeError):
            raise _Bad(E.DATA_MISSING_KEY, "message key is not JSON") from None
    ts = payload.get("ts_ms") if isinstance(payload.get("ts_ms"), int) else None
    if op == "d":
        k = _key(raw_key, [before], table)
        return [CdcEvent(table.name, op, k, before, None, ts, partition, offset)]
    if op == "u" and before is not None:
        old_k = tuple(before[c] for c in table.primary_key)
        new_k = tuple(after[c] for c in table.primary_key)
        if old_k != new_k and None not in old_k:
            # A primary-key change: delete the old row, then insert the new one.
            return [CdcEvent(table.name, "d", old_k, before, None, ts, partition, offset),
                    CdcEvent(table.name, "c", new_k, None, after, ts, partition, offset)]
    # For c/r/u the after image is authoritative for the key (the message key may be stale
    # only if the producer is broken; the row is what will be stored).
    k = _key(None, [after], table) if after is not None else _key(raw_key, [before], table)
    return [CdcEvent(table.name, op, k, before, after, ts, partition, offset)]


def decode_batch(cfg: JobConfig, records: Iterable[tuple]) -> DecodedBatch:
    """Records are (topic, partition, offset, key, value); events come out in log order."""
    out = DecodedBatch(events={t.name: [] for t in cfg.tables}, rejected=[])
    for topic, partition, offset, key, value in sorted(records, key=lambda r: (r[0], r[1], r[2])):
        out.records += 1
        try:
            evs = decode_record(cfg, topic, partition, offset, key, value)
        except _Bad as bad:
            out.rejected.append(Rejected(topic, partition, offset, _text(key), _text(value), bad.code, bad.reason))
            continue
        if evs is None:
            out.tombstones += 1
            continue
        for ev in evs:
            out.events[ev.table].append(ev)
    return out


def net_changes(events: list[CdcEvent]) -> dict[tuple, dict | None]:
    """Final image per primary key after the batch, in log order: a row, or None (deleted)."""
    final: dict[tuple, dict | None] = {}
    for ev in events:
        final[ev.key] = ev.after
    return final
