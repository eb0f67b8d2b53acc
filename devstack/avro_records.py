"""Debezium change events in Avro, the Confluent wire format, as an Avro converter writes them.

The same events ``devstack.producer`` writes as JSON (its Connect schemas and payloads), turned
into Avro: each Connect schema becomes the Avro schema a Connect Avro converter derives from it
(a struct a named record, an optional field a union with null defaulting to null, int8/int16 an
``int`` with ``connect.type``, semantic types carrying ``connect.name`` and ``connect.parameters``,
a Connect Decimal ``bytes`` with the decimal logical type), and each payload the datum of that
schema (base64 text back to bytes). A value is magic byte 0, the schema id (4 bytes, big-endian)
and the body written by fastavro. Used by the ingest bench (the same records as JSON and as Avro)
and by tests that need Avro records without Kafka Connect.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro

from core.config import TableConfig
from devstack.producer import envelope, envelope_schema, key_of, key_schema

_AVRO = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float", "float": "float",
         "float64": "double", "double": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def avro_schema(connect: dict) -> dict:
    """The Avro schema of a Connect JSON schema (a struct at the top)."""
    return _avro(connect, set())


def _avro(s: dict, named: set) -> Any:
    t = s["type"]
    name = s.get("name")
    if t == "struct":
        full = name or "ConnectDefault"
        if full in named:
            out: Any = full  # a second field of the same struct: by name
        else:
            named.add(full)
            ns, _, short = full.rpartition(".")
            out = {"type": "record", "name": short, **({"namespace": ns} if ns else {}),
                   "fields": [_field(f, named) for f in s["fields"]]}
            if name:
                out["connect.name"] = name
    elif t == "array":
        out = {"type": "array", "items": _avro(s["items"], named)}
    elif t == "map":
        out = {"type": "map", "values": _avro(s["values"], named)}
    else:
        out = {"type": _AVRO[t]}
        if t in ("int8", "int16"):
            out["connect.type"] = t
        if name:
            out["connect.name"] = name
            if s.get("version") is not None:
                out["connect.version"] = s["version"]
        if s.get("parameters"):
            out["connect.parameters"] = dict(s["parameters"])
        if name == _DECIMAL:
            params = s.get("parameters") or {}
            out.update(logicalType="decimal", scale=int(params.get("scale", 0)),
                       precision=int(params.get("connect.decimal.precision", 38)))
        if len(out) == 1:
            out = out["type"]
    return ["null", out] if s.get("optional") else out


def _field(f: dict, named: set) -> dict:
    out = {"name": f["field"], "type": _avro(f, named)}
    if f.get("optional"):
        out["default"] = None
    return out


def datum(connect: dict, value: Any) -> Any:
    """A JsonConverter payload as the datum of ``avro_schema(connect)`` (base64 text -> bytes)."""
    if value is None:
        return None
    t = connect["type"]
    if t == "struct":
        return {f["field"]: datum(f, value.get(f["field"])) for f in connect["fields"]}
    if t == "array":
        return [datum(connect["items"], v) for v in value]
    if t == "map":
        return {k: datum(connect["values"], v) for k, v in value.items()}
    if t == "bytes":
        return base64.b64decode(value)
    return value


def wire(schema_id: int, parsed: Any, doc: Any) -> bytes:
    """Magic byte 0, the schema id and the Avro body of ``doc``."""
    buf = io.BytesIO()
    buf.write(b"\0" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, parsed, doc)
    return buf.getvalue()


class AvroEvents:
    """One table's value and key schemas in Avro, with the ids a registry gave them (or any
    ids, for a decoder that is told the schemas), writing the Debezium events of
    ``devstack.producer`` in the wire format."""

    def __init__(self, table: TableConfig, value_id: int, key_id: int):
        self.table, self.value_id, self.key_id = table, value_id, key_id
        self.value_connect, self.key_connect = envelope_schema(table), key_schema(table)
        self.value_schema, self.key_schema = avro_schema(self.value_connect), avro_schema(self.key_connect)
        # fastavro's writer wants plain types; the logical decimal would expect Decimal objects
        self._value_parsed = fastavro.parse_schema(_plain(self.value_schema))
        self._key_parsed = fastavro.parse_schema(_plain(self.key_schema))

    def value(self, op: str, before: dict | None, after: dict | None, ts_ms: int | None = None) -> bytes:
        payload = json.loads(envelope(self.table, op, before, after, ts_ms))
        return wire(self.value_id, self._value_parsed, datum(self.value_connect, payload))

    def key(self, row: dict) -> bytes:
        return wire(self.key_id, self._key_parsed, datum(self.key_connect, json.loads(key_of(self.table, row))))


def _plain(s: Any) -> Any:
    if isinstance(s, dict):
        return {k: _plain(v) for k, v in s.items() if k != "logicalType"}
    if isinstance(s, list):
        return [_plain(x) for x in s]
    return s
