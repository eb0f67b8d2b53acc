"""Debezium JSON change events -> typed CDC events per table, or quarantine rows.

Format only: no Kafka, no Spark. Input is a micro-batch of Kafka records ``(topic,
partition, offset, key, value[, headers])``; output is, per declared table, the events in
log order, one ``Rejected`` per record that cannot be applied (a stable ``DATA_*`` code and
a reason), the count of tombstones (null values after a delete, skipped by design) and the
declared columns seen missing from images (``schema_changes``).

``decode_batch`` is total: for any bytes in key, value and headers it returns; an
unexpected exception inside one record becomes a DATA_DECODER_ERROR rejection.

Values. With the ``{"schema", "payload"}`` wrapper (JsonConverter ``schemas.enable=true``)
each field is decoded by its Connect schema; without it, by the table's ``decimal_mode`` and
``time_mode``. Then it is converted into the declared type exactly or quarantined (see
connectors.debezium_types). Ops: ``c``/``r``/``u``/``d``, and ``t`` (truncate) as an event
with an empty key; anything else (``m`` logical messages, non-strings) is DATA_UNKNOWN_OP.

Key vs image. The message key is the record's identity: Debezium partitions by it, so it is
what orders a row's changes. When the key is present it must name every primary-key column
(else DATA_MISSING_KEY), and a ``c``/``r``/``u`` whose after image, or a ``d`` whose before
image, carries a different key is DATA_KEY_MISMATCH. Without a message key the image's key
is used. A primary-key change is Debezium's delete(old key), tombstone, create(new key); the
create's message key is the new key, like its after image, and the old key comes from the
``__debezium.oldkey`` header (``CdcEvent.old_key``). An update whose before image has
another key (as MySQL-style producers may send) becomes a delete of the old key and a create
of the new one.

TOAST. The unavailable-value placeholder never becomes a value: the column is None in
``after`` and listed in ``CdcEvent.unavailable``; the job keeps the mirror's current value.

Schema changes. Undeclared columns are ignored. A declared column missing from an image is
None and noted once per batch in ``schema_changes``; missing from an after image, a
``not_null`` or primary-key column is DATA_COLUMN_DROPPED. (A REPLICA IDENTITY DEFAULT
delete's before image has every field, nulls outside the key: not a drop.)
"""

from __future__ import annotations

import base64
import gc
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

import msgspec

from connectors import avro as AV
from connectors import unwrap as U
from connectors.debezium_types import (BITS, CONNECT_DECIMAL, DATE_NAMES, PLACEHOLDER, PLACEHOLDER_B64,
                                       PLACEHOLDER_BYTES, TIME_UNITS, TS_UNITS, VARIABLE_DECIMAL, ZONED_TIME,
                                       ZONED_TIMESTAMP, Bad, FieldSpec, Modes, column_decoder, field_spec,
                                       image_maker, is_placeholder, key_maker)
from core import errors as E
from core.errors import RegistryRefused, RegistryUnavailable
from core.config import JobConfig, TableConfig

OPS = ("c", "r", "u", "d", "t")
OLD_KEY_HEADER = "__debezium.oldkey"
_Bad = Bad  # the name older code raised


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Fractions and exponents parse as Decimal (no digit lost); bare NaN/Infinity are not JSON.
_JSON = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)
# The same document model from msgspec's C parser, 3-4x faster. It accepts a subset of what
# _JSON accepts (no lone-surrogate escapes) and, where it accepts, builds the same values;
# whatever it refuses goes to _JSON, which decides and words the reason as before.
_FAST = msgspec.json.Decoder(float_hook=Decimal)
_FAST_REFUSES = (msgspec.DecodeError, RecursionError, ValueError)  # ValueError: bad UTF-8 inside a string
_HEAD_B = re.compile(b"[ \t\n\r]*\\{[ \t\n\r]*\"schema\"")
_WS = "[ \t\n\r]*"
_HEAD = re.compile(_WS + r'\{' + _WS + r'"schema"' + _WS + ":" + _WS)
_MID = re.compile(_WS + "," + _WS + r'"payload"' + _WS + ":" + _WS)
_TAIL = re.compile(_WS + r"\}" + _WS)
_SCHEMA_CACHE: dict[str, Any] = {}  # kind + schema text -> field specs (or the Bad it raised)
_SCHEMA_CACHE_MAX = 4096
_RECENT: dict[str, list[str]] = {"v": [], "k": [], "u": []}  # schema texts of recent wrappers, newest first
_RECENT_MAX = 16
KNOWN = object()  # stands for a schema whose text is in the cache


@dataclass(frozen=True)
class CdcEvent:
    """One change to one row: ``after`` is None for a delete and a truncate (op ``t``, key ``()``).

    ``unavailable``: columns of ``after`` that Debezium sent as the TOAST placeholder (None in
    ``after``; keep the current value). ``old_key``: on the create of a primary-key change,
    the key the row had before.
    """

    table: str
    op: str
    key: tuple
    before: dict | None
    after: dict | None
    ts_ms: int | None
    partition: int
    offset: int
    unavailable: frozenset[str] = frozenset()
    old_key: tuple | None = None


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
    schema_changes: list[tuple[str, str, str]] = field(default_factory=list)  # (table, column, "dropped")
    # non-key values of before images that could not be decoded: set to None, the change applied
    before_ignored: int = 0


# ---------------------------------------------------------------- JSON and schemas

def _parse(data: Any, what: str, kind: str = "v") -> tuple[Any, str | None]:
    """A JSON document and, when it is a schema wrapper, the raw text of its schema.

    A wrapper whose schema text was seen recently is not parsed again: its ``schema`` is
    ``KNOWN`` and the field specs come from the cache by text.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        if data.__class__ is memoryview:
            data = bytes(data)
        if not _HEAD_B.match(data):  # no schema wrapper: one parse, nothing to cache
            try:
                return _FAST.decode(data), None
            except _FAST_REFUSES:
                pass  # the exact path below decides
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise Bad(E.DATA_INVALID_JSON, f"{what} is not UTF-8: {e}") from None
    elif isinstance(data, str):
        text = data
    else:
        raise Bad(E.DATA_INVALID_JSON, f"{what} is a {type(data).__name__}, not bytes")
    try:
        m = _HEAD.match(text)
        if m:  # the usual wrapper {"schema":..., "payload":...}: keep the schema text for the cache
            start = m.end()
            try:
                schema, end = KNOWN, -1
                for known in _RECENT[kind]:
                    # a JSON object is self-delimiting, and ',"payload":' must follow it
                    if text.startswith(known, start) and _MID.match(text, start + len(known)):
                        end = start + len(known)
                        break
                if end < 0:
                    schema, end = _JSON.raw_decode(text, start)
                m2 = _MID.match(text, end)
                if m2:
                    close = len(text.rstrip(" \t\n\r")) - 1  # the wrapper's closing brace
                    if close > m2.end() and text[close] == "}":
                        try:  # exactly one value between ':' and the brace, as below
                            return {"schema": schema, "payload": _FAST.decode(text[m2.end():close])}, text[start:end]
                        except _FAST_REFUSES:
                            pass
                    payload, end2 = _JSON.raw_decode(text, m2.end())
                    if _TAIL.fullmatch(text, end2):
                        return {"schema": schema, "payload": payload}, text[start:end]
            except ValueError:
                pass  # the full parse below reports it
        doc = _JSON.decode(text)
    except RecursionError:
        raise Bad(E.DATA_INVALID_JSON, f"{what} is nested too deeply") from None
    except ValueError as e:
        raise Bad(E.DATA_INVALID_JSON, f"{what} is not JSON: {e}") from None
    return doc, None


def _is_wrapper(doc: Any) -> bool:
    return isinstance(doc, dict) and "payload" in doc and set(doc) <= {"schema", "payload"}


def _struct_fields(fields: Any, where: str) -> dict[str, FieldSpec]:
    if not isinstance(fields, list):
        raise Bad(E.DATA_WRONG_TYPE, f"{where}: 'fields' is not a list")
    out = {}
    for f in fields:
        name = f.get("field") if isinstance(f, dict) else None
        if not isinstance(name, str):
            raise Bad(E.DATA_WRONG_TYPE, f"{where}: a field without a name")
        out[name] = field_spec(f, f"{where} field {name!r}")
    return out


def _value_fields(schema: Any) -> dict[str, FieldSpec] | None:
    """Field specs of the row images in an Envelope schema (None: decode by the table's modes)."""
    if schema is None or (isinstance(schema, dict) and "fields" not in schema):
        return None
    if not isinstance(schema, dict):
        raise Bad(E.DATA_WRONG_TYPE, "value schema is not an object")
    fields = schema["fields"]
    if not isinstance(fields, list):
        raise Bad(E.DATA_WRONG_TYPE, "value schema: 'fields' is not a list")
    for f in fields:
        if isinstance(f, dict) and f.get("field") in ("after", "before") and "fields" in f:
            return _struct_fields(f["fields"], f"value schema {f['field']!r}")
    return None


def _row_fields(schema: Any) -> dict[str, FieldSpec] | None:
    """Field specs of an unwrapped row (the value schema is the row struct itself)."""
    if schema is None or (isinstance(schema, dict) and "fields" not in schema):
        return None
    if not isinstance(schema, dict):
        raise Bad(E.DATA_WRONG_TYPE, "value schema is not an object")
    return _struct_fields(schema["fields"], "value schema")


def _key_fields(schema: Any) -> dict[str, FieldSpec] | None:
    if schema is None or (isinstance(schema, dict) and "fields" not in schema):
        return None
    if not isinstance(schema, dict):
        raise Bad(E.DATA_WRONG_TYPE, "key schema is not an object")
    return _struct_fields(schema["fields"], "key schema")


def _cached(kind: str, schema: Any, text: str | None, build) -> dict[str, FieldSpec] | None:
    """Parsed field specs per schema text: records of one table share one schema text (an
    Avro record's writer schema keeps its own)."""
    if schema is None:
        return None
    if schema.__class__ is AV.Writer:
        hit = schema.specs.get(kind, _MISSING)
        if hit is _MISSING:
            try:
                hit = build(schema.connect)
            except Bad as bad:
                hit = Bad(E.DATA_AVRO_BAD_SCHEMA, f"schema id {schema.schema_id}: {bad.reason}")
            schema.specs[kind] = hit
        if isinstance(hit, Bad):
            raise hit
        return hit
    k = kind + (text if text is not None else json.dumps(schema, sort_keys=True, default=str))
    hit = _SCHEMA_CACHE.get(k)
    if hit is None and schema is KNOWN:  # evicted meanwhile: parse the text again
        schema = _JSON.decode(text)
    if hit is None:
        try:
            hit = build(schema)
        except Bad as bad:
            hit = bad
        if len(_SCHEMA_CACHE) >= _SCHEMA_CACHE_MAX:
            _SCHEMA_CACHE.clear()
        _SCHEMA_CACHE[k] = hit if hit is not None else False
    if text is not None:
        recent = _RECENT[kind]
        if not recent or recent[0] != text:
            if text in recent:
                recent.remove(text)
            recent.insert(0, text)
            del recent[_RECENT_MAX:]
    if isinstance(hit, Bad):
        raise hit
    return hit or None


# ---------------------------------------------------------------- keys and images

def _modes(table: TableConfig) -> Modes:
    return Modes(getattr(table, "decimal_mode", "precise"), getattr(table, "time_mode", "adaptive"))


class _Plans:
    """Per batch: one column decoder per (table, column, schema field), built on first use;
    and the schema registry that Avro values and keys name (None: JSON only)."""

    def __init__(self, registry=None) -> None:
        self._plans: dict[tuple, list] = {}
        self._images: dict[tuple, tuple] = {}
        self.registry = registry

    def image(self, table: TableConfig, fields: dict[str, FieldSpec], which: str, lenient: bool):
        """The maker of a row image from the Avro reader's row tuple (fields in ``fields``'
        order: both come from the writer's row record); a writer schema that does not fit the
        columns raises here, as ``get`` does for a dict."""
        k = (table.name, id(fields), which, lenient)
        hit = self._images.get(k)
        if hit is None or hit[0] is not fields:
            plan = self.get(table, fields, "row")
            types = dict(table.columns)
            hit = (fields, image_maker(plan, tuple(types[c] for c, _, _ in plan), _modes(table), tuple(fields),
                                       which, lenient, _Image))
            self._images[k] = hit
        return hit[1]

    def images(self, table: TableConfig, fields: dict[str, FieldSpec]) -> tuple:
        """The makers of an envelope's before (lenient) and after images from row tuples."""
        k = (table.name, id(fields))
        hit = self._images.get(k)
        if hit is None or hit[0] is not fields:
            hit = (fields, (self.image(table, fields, "before", True), self.image(table, fields, "after", False)))
            self._images[k] = hit
        return hit[1]

    def key(self, table: TableConfig, fields: dict[str, FieldSpec], what: str):
        """The maker of a primary key from the Avro reader's key tuple (fields in ``fields``'
        order); a writer schema that does not fit the key columns raises here, as in ``get``."""
        k = (table.name, id(fields), what)
        hit = self._images.get(k)
        if hit is None or hit[0] is not fields:
            plan = self.get(table, fields, "key")
            types = dict(table.columns)
            hit = (fields, key_maker(plan, tuple(types[c] for c, _, _ in plan), _modes(table), tuple(fields), what))
            self._images[k] = hit
        return hit[1]

    def get(self, table: TableConfig, fields: dict[str, FieldSpec] | None, columns: str) -> list:
        k = (table.name, id(fields), columns)
        hit = self._plans.get(k)
        if hit is None or hit[0] is not fields:
            modes = _modes(table)
            names = table.primary_key if columns == "key" else table.column_names
            types = dict(table.columns)
            plan = [(c, (fields.get(c) if fields else None)) for c in names]
            wrong = [(c, spec) for c, spec in plan if spec is not None and not _can_fill(spec, types[c])] \
                if table.encoding == "avro" else []
            absent = [c for c in table.primary_key if fields is not None and c not in fields] \
                if table.encoding == "avro" else []
            if absent:  # a writer schema, not one record's image: every record of it lacks the key
                hit = (fields, Bad(E.DATA_AVRO_SCHEMA_MISMATCH,
                                   f"the writer schema's {'key' if columns == 'key' else 'rows'} have no field for "
                                   f"primary-key column(s) {absent}"))
            elif wrong:
                c, spec = wrong[0]
                hit = (fields, Bad(E.DATA_AVRO_SCHEMA_MISMATCH,
                                   f"the writer schema makes column {c!r} a {spec.type}"
                                   f"{' ' + spec.name if spec.name else ''}, which no value of the declared "
                                   f"{types[c]} comes from"))
            else:
                hit = (fields, [(c, spec, column_decoder(types[c], spec, modes)) for c, spec in plan])
            self._plans[k] = hit
        if hit[1].__class__ is Bad:
            raise hit[1]
        return hit[1]


def _can_fill(spec: FieldSpec, typ: str) -> bool:
    """False when no value of a schema field can become the declared type (an Avro writer
    schema is checked once, not value by value); True does not promise every value fits.
    What each kind of source value fills follows connectors.debezium_types' ``from_schema``
    and ``fit``."""
    kinds = _source_kinds(spec, typ)
    if kinds is None:
        return True
    family = "decimal" if typ.startswith("decimal") else "int" if typ in ("int", "long") else typ
    return bool(kinds & _FILLS.get(family, kinds))


# declared type -> the kinds of source value it takes (debezium_types.fit; text reaches a decimal
# under decimal.handling.mode=string, a double as "NaN" or "Infinity")
_FILLS = {"int": {"int", "dec", "time"}, "double": {"int", "dec", "str"}, "decimal": {"int", "dec", "str"},
          "string": {"str", "time"}, "boolean": {"bool", "int"}, "binary": {"bytes"}, "date": {"date", "str"},
          "timestamp": {"ts", "str"}}
_SCHEMA_KINDS = {"boolean": {"bool"}, "int8": {"int"}, "int16": {"int"}, "int32": {"int"}, "int64": {"int"},
                 "float": {"dec"}, "double": {"dec"}, "string": {"str"}, "bytes": {"bytes"},
                 "struct": set(), "array": set(), "map": set()}


def _source_kinds(spec: FieldSpec, typ: str) -> set | None:
    """The kinds of value ``from_schema`` makes of an Avro value of this field (an Avro bytes
    value is bytes, not base64 text: it fills a binary column only); None: not known."""
    name = spec.name
    if name in (CONNECT_DECIMAL, VARIABLE_DECIMAL):
        return {"dec"}
    if name in DATE_NAMES:
        return {"date"}
    if name in TIME_UNITS:
        return {"time"}
    if name in TS_UNITS:
        return {"ts"}
    if name == ZONED_TIMESTAMP:
        return {"str"} if typ == "string" else {"ts"}
    if name == ZONED_TIME:
        return {"str"} if typ == "string" else {"time"}
    if name == BITS:
        return {"int"} if typ in ("int", "long") else {"bytes"}
    return _SCHEMA_KINDS.get(spec.type)


def _key_from(doc: Any, fields: dict[str, FieldSpec] | None, table: TableConfig, what: str, plans: _Plans) -> tuple:
    if not isinstance(doc, dict):
        raise Bad(E.DATA_MISSING_KEY, f"{what} is not a JSON object")
    vals = []
    for k, spec, dec in plans.get(table, fields, "key"):
        raw = doc.get(k)
        if raw is None:
            raise Bad(E.DATA_MISSING_KEY, f"{what} has no value for primary-key column {k!r}")
        if is_placeholder(raw, spec):
            raise Bad(E.DATA_MISSING_KEY, f"{what}: primary-key column {k!r} is unavailable")
        vals.append(dec(raw, f"{what} column {k!r}"))
    return tuple(vals)


def _message_key(data: Any, table: TableConfig, plans: _Plans, what: str = "message key", pre: Any = None) -> tuple | None:
    """The primary key a message key (or the old-key header) names; None when there is none.
    ``pre``: what ``AV.read_all`` made of the key, if it read it (raised here, if it raised)."""
    if data is None:
        return None
    if plans.registry is not None and isinstance(data, (bytes, bytearray)) and data[:1] == b"\0":  # an Avro key
        if pre is None:
            pre = AV.read(data, plans.registry, as_tuple=True)
        elif pre.__class__ is not tuple:
            raise pre
        doc, writer = pre
        fields = _cached("k", writer, None, _key_fields)
        if doc.__class__ is tuple and fields is not None:  # the key record's fields in its order
            return plans.key(table, fields, what)(doc)
        return _key_from(doc, fields, table, what, plans)
    try:
        doc, text = _parse(data, what, "k")
    except Bad as bad:
        raise Bad(E.DATA_MISSING_KEY, bad.reason) from None
    fields = None
    if _is_wrapper(doc):
        fields = _cached("k", doc.get("schema"), text, _key_fields)
        doc = doc["payload"]
    if doc is None:
        return None
    return _key_from(doc, fields, table, what, plans)


@dataclass
class _Image:
    row: dict
    unavailable: list[str]
    missing: list[str]
    ignored: int = 0  # values that did not decode (lenient images only): None in ``row``


def _image(raw: Any, table: TableConfig, fields: dict[str, FieldSpec] | None, which: str,
           plans: _Plans, lenient: bool = False) -> _Image | None:
    """A row image decoded into the declared types. ``lenient`` (a before image, a rewritten
    delete): a value that does not decode is None and counted, never a rejection; the
    change needs only the key from it."""
    if raw is None:
        return None
    if raw.__class__ is tuple and fields is not None:  # an Avro row record (connectors.avro: Writer.envelope)
        return plans.image(table, fields, which, lenient)(raw)
    if not isinstance(raw, dict):
        raise Bad(E.DATA_WRONG_TYPE, f"'{which}' image must be a JSON object, got {type(raw).__name__}")
    img = _Image({}, [], [])
    row = img.row
    if lenient:
        for col, spec, dec in plans.get(table, fields, "row"):
            v = raw.get(col, _MISSING)
            if v is _MISSING:
                img.missing.append(col)
                v = None
            if v is None or is_placeholder(v, spec):
                row[col] = None
                continue
            try:
                row[col] = dec(v, f"'{which}' column {col!r}")
            except Bad:
                row[col] = None
                img.ignored += 1
        return img
    for col, spec, dec in plans.get(table, fields, "row"):
        v = raw.get(col, _MISSING)
        if v is None:
            row[col] = None
        elif v is _MISSING:
            img.missing.append(col)
            row[col] = None
        elif ((v.__class__ is str and (v == PLACEHOLDER or v == PLACEHOLDER_B64)) or v.__class__ is list
              or (v.__class__ is bytes and v == PLACEHOLDER_BYTES)) \
                and is_placeholder(v, spec):  # only a string, an array or Avro bytes can be the placeholder
            img.unavailable.append(col)
            row[col] = None
        else:
            row[col] = dec(v, f"'{which}' column {col!r}")
    return img


_MISSING = object()


def _image_key(img: _Image, table: TableConfig) -> tuple | None:
    """The image's primary key, or None if a key column is null or unavailable."""
    vals = tuple(img.row[k] for k in table.primary_key)
    if None in vals:
        return None
    return vals


def _pick_table(payload: dict, candidates: list[TableConfig], topic: str) -> TableConfig:
    if not candidates:
        raise Bad(E.DATA_UNKNOWN_TABLE, f"topic {topic!r} is not declared for any table")
    source = payload.get("source") if isinstance(payload.get("source"), dict) else {}
    name = source.get("table")
    if len(candidates) == 1:
        t = candidates[0]
        if name is not None and t.source_table is not None and name != t.source_table:
            raise Bad(E.DATA_UNKNOWN_TABLE, f"source.table {name!r} is not {t.source_table!r} declared for {topic!r}")
        return t
    for t in candidates:
        if t.source_table is not None and t.source_table == name:
            return t
    raise Bad(E.DATA_UNKNOWN_TABLE, f"source.table {name!r} matches no table declared on topic {topic!r}")


def _old_key_header(headers: Any, table: TableConfig, plans: _Plans) -> tuple | None:
    if not isinstance(headers, (list, tuple)):
        return None
    found = None
    for h in headers:
        if isinstance(h, dict):  # Spark's Kafka source (includeHeaders): {"key": name, "value": bytes}
            h = (h.get("key"), h.get("value"))
        if isinstance(h, (list, tuple)) and len(h) == 2 and h[0] == OLD_KEY_HEADER:
            found = h
    if found is None or found[1] is None:
        return None
    return _message_key(found[1], table, plans, f"header {OLD_KEY_HEADER}")


# ---------------------------------------------------------------- one record

def _check_after(after: _Image, table: TableConfig) -> None:
    """The table's contract on a row that goes into the mirror."""
    gone = [c for c in after.missing if c in table.not_null or c in table.primary_key]
    if gone:
        raise Bad(E.DATA_COLUMN_DROPPED, f"'after' image lacks not_null column(s) {gone}: dropped in the source?")
    unavailable = set(after.unavailable)
    if unavailable & set(table.primary_key):
        raise Bad(E.DATA_TOAST_UNKNOWN, f"primary-key column(s) {sorted(unavailable & set(table.primary_key))} "
                                        "sent as the unavailable-value placeholder")
    nulls = [c for c in table.not_null if after.row[c] is None and c not in unavailable]
    if nulls:  # only 'after': a delete's 'before' may carry the key alone (REPLICA IDENTITY DEFAULT)
        raise Bad(E.DATA_NULL, f"'after' image has NULL in not_null column(s) {nulls}")
    for c, lo, hi in table.ranges:
        v = after.row[c]
        if v is not None and not lo <= v <= hi:
            raise Bad(E.DATA_OUT_OF_RANGE, f"column {c!r}: {v} is outside the declared range [{lo}, {hi}]")


def _looks_unwrapped(payload: dict, table: TableConfig) -> bool:
    return "op" not in payload and "after" not in payload and "before" not in payload and (
        U.DELETED in payload or any(c in payload for c in table.column_names))


def decode_record(cfg: JobConfig, topic: str, partition: int, offset: int, key: Any, value: Any,
                  headers: Any = None, dropped: list | None = None,
                  plans: _Plans | None = None, ignored: list | None = None, pre: Any = None,
                  pre_key: Any = None) -> list[CdcEvent] | None:
    """Decode one Kafka record: its events (two for a key-changing update), None for a tombstone.

    Raises Bad for a record that must be quarantined; appends (table, column) pairs of declared
    columns missing from an image to ``dropped``, and the count of before-image values that
    did not decode (ignored: the change needs only the key from that image) to ``ignored``.
    ``pre``, ``pre_key``: what ``AV.read_all`` made of an Avro envelope's value and key, when
    the batch read them beforehand (each raised where its reading would have been).
    """
    candidates = cfg.tables_for_topic(topic)
    unwrapped = len(candidates) == 1 and candidates[0].format == "unwrapped"
    plans = plans if plans is not None else _Plans(cfg.registry)
    if value is None:
        return _unwrapped_tombstone(candidates[0], key, partition, offset, plans) if unwrapped else None
    if candidates and candidates[0].encoding == "avro":
        if pre is None:
            pre = AV.read(value, cfg.registry, not unwrapped)
        elif pre.__class__ is not tuple:
            raise pre
        payload, schema = pre  # the body; its Writer is the schema
        schema_text = None
    else:
        doc, schema_text = _parse(value, "value", "u" if unwrapped else "v")
        if _is_wrapper(doc):
            payload = doc["payload"]
            schema = doc.get("schema")
        else:
            payload, schema = doc, None
    if payload is None:
        return _unwrapped_tombstone(candidates[0], key, partition, offset, plans) if unwrapped else None
    if not isinstance(payload, dict):
        raise Bad(E.DATA_INVALID_JSON, "value is not a JSON object")
    if unwrapped:
        return _decode_unwrapped(candidates[0], payload, schema, schema_text, key, headers, partition, offset,
                                 dropped, plans, ignored)
    table = _pick_table(payload, candidates, topic)
    op = payload.get("op")
    if not isinstance(op, str) or op not in OPS:
        if op is None and _looks_unwrapped(payload, table):
            raise Bad(E.DATA_UNKNOWN_OP, f"no op, before or after: a row unwrapped by ExtractNewRecordState? "
                                         f"declare format = \"unwrapped\" for table {table.name!r}")
        raise Bad(E.DATA_UNKNOWN_OP, f"op {_repr(op)} is not one of c, r, u, d, t")
    ts = payload.get("ts_ms")
    ts = ts if isinstance(ts, int) and not isinstance(ts, bool) and -(2**63) <= ts < 2**63 else None
    if op == "t":
        return [CdcEvent(table.name, "t", (), None, None, ts, partition, offset)]
    fields = _cached("v", schema, schema_text, _value_fields)
    before, after = payload.get("before"), payload.get("after") if op != "d" else None
    if (before.__class__ is tuple or after.__class__ is tuple) and fields is not None:  # Avro rows (_image's first case)
        lenient_image, strict_image = plans.images(table, fields)
        before = lenient_image(before) if before.__class__ is tuple else _image(before, table, fields, "before", plans,
                                                                               lenient=True)
        after = strict_image(after) if after.__class__ is tuple else _image(after, table, fields, "after", plans)
    else:
        before = _image(before, table, fields, "before", plans, lenient=True)
        after = _image(after, table, fields, "after", plans)
    if op in ("c", "r", "u") and after is None:
        raise Bad(E.DATA_MISSING_IMAGE, f"op {op!r} without an 'after' image")
    if after is not None:
        _check_after(after, table)
    message_key = _message_key(key, table, plans, pre=pre_key)
    if op == "d":
        image_key = _image_key(before, table) if before is not None else None
        if message_key is not None and image_key is not None and image_key != message_key:
            raise Bad(E.DATA_KEY_MISMATCH, f"delete of key {_repr(message_key)} whose before image has key {_repr(image_key)}")
        k = message_key if message_key is not None else image_key
        if k is None:
            raise Bad(E.DATA_MISSING_KEY, f"no primary key {list(table.primary_key)} in the message key or before image")
        events = [CdcEvent(table.name, "d", k, before.row if before else None, None, ts, partition, offset)]
    else:
        image_key = _image_key(after, table)
        if image_key is None:
            raise Bad(E.DATA_MISSING_KEY, f"'after' image has a NULL primary key {list(table.primary_key)}")
        if message_key is not None and image_key != message_key:
            raise Bad(E.DATA_KEY_MISMATCH, f"message key {_repr(message_key)} but the after image has key {_repr(image_key)}")
        unavailable = frozenset(after.unavailable)
        old_key = _old_key_header(headers, table, plans) if op == "c" else None
        old = _image_key(before, table) if before is not None and op == "u" else None
        if old is not None and old != image_key:
            # A primary-key change inside one update: delete the old row, create the new one.
            events = [CdcEvent(table.name, "d", old, before.row, None, ts, partition, offset),
                      CdcEvent(table.name, "c", image_key, None, after.row, ts, partition, offset,
                               unavailable, old)]
        else:
            events = [CdcEvent(table.name, op, image_key, before.row if before else None, after.row, ts,
                               partition, offset, unavailable, old_key)]
    if dropped is not None:
        for img in (before, after):
            if img is not None and img.missing:
                dropped.extend((table.name, c) for c in img.missing)
    if ignored is not None and before is not None and before.ignored:
        ignored.append(before.ignored)
    return events


def _unwrapped_tombstone(table: TableConfig, key: Any, partition: int, offset: int, plans: _Plans) -> list[CdcEvent]:
    """A null value on an unwrapped table's topic: the delete of its message key."""
    k = _message_key(key, table, plans)
    if k is None:
        raise Bad(E.DATA_MISSING_KEY, "a tombstone (null value) without a message key: no row to delete")
    return [CdcEvent(table.name, "d", k, None, None, None, partition, offset)]


def _decode_unwrapped(table: TableConfig, payload: dict, schema: Any, schema_text: str | None, key: Any,
                      headers: Any, partition: int, offset: int, dropped: list | None, plans: _Plans,
                      ignored: list | None) -> list[CdcEvent]:
    """A row flattened by ExtractNewRecordState: a delete when ``__deleted`` is "true" or ``__op``
    is "d", else the row's new image (create, read and update alike)."""
    if "op" in payload and "source" in payload and ("after" in payload or "before" in payload) \
            and not any(c in payload for c in table.column_names):
        raise Bad(E.DATA_UNKNOWN_OP, f"a change envelope (op, before, after) on the topic of table {table.name!r}, "
                                     "declared format = \"unwrapped\"; declare format = \"envelope\"")
    _pick_table({"source": {"table": payload.get(U.TABLE)}}, [table], table.topic)
    op = payload.get(U.OP)
    deleted = payload.get(U.DELETED)
    if deleted not in (None, "true", "false", True, False):
        raise Bad(E.DATA_WRONG_TYPE, f"{U.DELETED} {_repr(deleted)} is not \"true\" or \"false\"")
    if op is not None and op not in ("c", "r", "u", "d"):
        raise Bad(E.DATA_UNKNOWN_OP, f"{U.OP} {_repr(op)} is not one of c, r, u, d")
    ts = next((payload[f] for f in U.TS_FIELDS if f in payload), None)
    ts = ts if isinstance(ts, int) and not isinstance(ts, bool) and -(2**63) <= ts < 2**63 else None
    fields = _cached("u", schema, schema_text, _row_fields)
    message_key = _message_key(key, table, plans)
    if deleted in ("true", True) or op == "d":
        img = _image(payload, table, fields, "row", plans, lenient=True)
        image_key = _image_key(img, table)
        if message_key is not None and image_key is not None and image_key != message_key:
            raise Bad(E.DATA_KEY_MISMATCH, f"delete of key {_repr(message_key)} whose row has key {_repr(image_key)}")
        k = message_key if message_key is not None else image_key
        if k is None:
            raise Bad(E.DATA_MISSING_KEY, f"no primary key {list(table.primary_key)} in the message key or the row")
        if ignored is not None and img.ignored:
            ignored.append(img.ignored)
        return [CdcEvent(table.name, "d", k, img.row, None, ts, partition, offset)]
    after = _image(payload, table, fields, "row", plans)
    _check_after(after, table)
    image_key = _image_key(after, table)
    if image_key is None:
        raise Bad(E.DATA_MISSING_KEY, f"the row has a NULL primary key {list(table.primary_key)}")
    if message_key is not None and image_key != message_key:
        raise Bad(E.DATA_KEY_MISMATCH, f"message key {_repr(message_key)} but the row has key {_repr(image_key)}")
    old_key = _old_key_header(headers, table, plans)
    if dropped is not None:
        dropped.extend((table.name, c) for c in after.missing)
    return [CdcEvent(table.name, op or "u", image_key, None, after.row, ts, partition, offset,
                     frozenset(after.unavailable), old_key)]


def _repr(v: Any, n: int = 80) -> str:
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 - a reason must never raise
        r = f"<{type(v).__name__}>"
    return r if len(r) <= n else r[: n - 3] + "..."


def _text(b: Any) -> str | None:
    """Raw key/value for the quarantine row: always valid UTF-8 text."""
    if b is None:
        return None
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b).decode("utf-8", errors="replace")
    s = b if isinstance(b, str) else _repr(b, 10_000)
    return s.encode("utf-8", errors="replace").decode("utf-8")


def quarantine_text(b: Any, avro: bool = False) -> str | None:
    """A raw key or value as the quarantine keeps it: the text itself, or for an Avro topic
    ``base64:`` and the bytes in base64 (they are binary; decoding them as text would lose them)."""
    if avro and isinstance(b, (bytes, bytearray, memoryview)):
        return "base64:" + base64.b64encode(bytes(b)).decode()
    return _text(b)


def decode_batch(cfg: JobConfig, records: Iterable[tuple]) -> DecodedBatch:
    """Records are (topic, partition, offset, key, value[, headers]); events come out in log order.

    ``headers``: a list of (name, bytes) pairs, or of {"key", "value"} structs as Spark's Kafka
    source gives them with ``includeHeaders``; only ``__debezium.oldkey`` is read.

    Python's cycle collector is paused meanwhile: decoding allocates millions of dicts and
    tuples and frees no cycles, yet the collector kept scanning them (20-30% of the time at
    100,000 records: 17-19 against 13.7 us a record).
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _decode_batch(cfg, records)
    finally:
        if paused:
            gc.enable()


def _read_avro(cfg: JobConfig, recs: list) -> tuple[list, list]:
    """The Avro values and keys of a batch's envelope records read in one loop each
    (``AV.read_all``), one entry per record: None where ``decode_record`` reads for itself."""
    pre: list = [None] * len(recs)
    pre_key: list = [None] * len(recs)
    if cfg.registry is None:
        return pre, pre_key
    envelope = {}
    for t in cfg.tables:
        c = cfg.tables_for_topic(t.topic)
        envelope[t.topic] = bool(c) and c[0].encoding == "avro" and not (len(c) == 1 and c[0].format == "unwrapped")
    try:  # the usual batch: records of Avro envelope topics only
        if all(envelope.get(t) for t in {r[0] for r in recs}):
            vals, keys = [r[4] for r in recs], [r[3] for r in recs]
            return AV.read_all(vals, cfg.registry, envelope=True), AV.read_all(keys, cfg.registry, as_tuple=True)
    except (TypeError, IndexError, KeyError):  # a malformed record: one by one below
        pass
    at = []
    for n, r in enumerate(recs):
        try:
            if envelope.get(r[0]) and len(r) >= 5:
                at.append(n)
        except Exception:  # noqa: BLE001 - a malformed record: decode_record's loop reports it
            continue
    for n, got in zip(at, AV.read_all([recs[n][4] for n in at], cfg.registry, envelope=True)):
        pre[n] = got
    for n, got in zip(at, AV.read_all([recs[n][3] for n in at], cfg.registry, as_tuple=True)):
        pre_key[n] = got
    return pre, pre_key


def _decode_batch(cfg: JobConfig, records: Iterable[tuple]) -> DecodedBatch:
    out = DecodedBatch(events={t.name: [] for t in cfg.tables}, rejected=[])
    recs = list(records)
    try:
        recs.sort(key=lambda r: (r[0], r[1], r[2]))
    except Exception:  # noqa: BLE001 - malformed coordinates: keep arrival order
        pass
    seen: set[tuple[str, str]] = set()
    plans = _Plans(cfg.registry)
    avro_topics = {t.topic for t in cfg.tables if t.encoding == "avro"}
    pre = pre_key = None
    if avro_topics:  # a registry that does not answer delays the batch here, before any record
        unwrapped = {t.topic for t in cfg.tables if t.encoding == "avro" and t.format == "unwrapped"}
        if unwrapped:  # the envelopes' schemas are fetched as they are read, below
            AV.prefetch(cfg.registry, recs, unwrapped)
        pre, pre_key = _read_avro(cfg, recs)
    for n, rec in enumerate(recs):
        out.records += 1
        try:
            topic, partition, offset, key, value = (tuple(rec) + (None,) * 5)[:5]
            headers = rec[5] if len(rec) > 5 else None
        except Exception as e:  # noqa: BLE001 - not a record tuple at all
            out.rejected.append(Rejected("", -1, -1, None, None, E.DATA_DECODER_ERROR,
                                         _text(f"malformed record {_repr(rec)}: {_repr(e)}")))
            continue
        dropped: list[tuple[str, str]] = []
        ignored: list[int] = []
        try:
            evs = decode_record(cfg, topic, partition, offset, key, value, headers, dropped, plans, ignored,
                                pre[n] if pre is not None else None, pre_key[n] if pre is not None else None)
        except Bad as bad:
            avro = topic in avro_topics
            out.rejected.append(Rejected(topic, partition, offset, quarantine_text(key, avro),
                                         quarantine_text(value, avro), bad.code, _text(bad.reason)))
            continue
        except (RegistryUnavailable, RegistryRefused):
            raise  # not the record's fault: the batch fails, nothing quarantined
        except Exception as e:  # noqa: BLE001 - one record never fails the batch
            avro = topic in avro_topics
            out.rejected.append(Rejected(topic, partition, offset, quarantine_text(key, avro),
                                         quarantine_text(value, avro), E.DATA_DECODER_ERROR,
                                         _text(f"{type(e).__name__}: {_repr(e, 300)}")))
            continue
        if evs is None:
            out.tombstones += 1
            continue
        out.before_ignored += sum(ignored)
        for ev in evs:
            out.events[ev.table].append(ev)
        for tc in dropped:
            if tc not in seen:
                seen.add(tc)
                out.schema_changes.append((*tc, "dropped"))
    return out


def net_changes(events: list[CdcEvent]) -> dict[tuple, dict | None]:
    """Final image per primary key after the batch, in log order: a row, or None (deleted)."""
    final: dict[tuple, dict | None] = {}
    for ev in events:
        final[ev.key] = ev.after
    return final
