"""Avro in the Confluent wire format -> the documents the Debezium JSON path decodes.

A record's bytes are magic byte 0, the writer schema's id (4 bytes, big-endian) and the Avro
binary body. The schema comes from a Confluent-compatible registry (``GET
{url}/schemas/ids/{id}``), fetched once per (registry, id) and kept for the process; the
body is read by a strict reader generated from that schema (connectors.avro_reader; fastavro
plus a re-encoding check for a schema it cannot compile). What comes out is the payload
JsonConverter would have written (``before``/``after``/``op``... or the unwrapped row, or the
key's fields) plus the writer schema turned into Connect's JSON schema shape (``type``
int8..int64, float, double, boolean, string, bytes, struct, array, map; ``name`` and
``parameters`` from the ``connect.name`` / ``connect.parameters`` that Connect's Avro
converters write), so the JSON path's type rules (connectors.debezium_types) apply
unchanged. Avro logical types are not applied: a Decimal's unscaled bytes, a Date's days and
a MicroTimestamp's microseconds reach those rules as Debezium wrote them, with no rounding.

For the decoder's own use, the envelope's ``before`` and ``after`` and a key's record come as
tuples of their fields in the writer's order (``Writer.envelope``, ``Writer.as_tuple``:
connectors.debezium maps them to the declared columns by position, without a dict per row),
and a batch's values or keys are read in one loop (``read_all``).

Bad input raises ``Bad`` with a ``DATA_AVRO_*`` code (wrong first byte or too short, unknown
id, unusable schema, a body that does not read exactly). A registry that does not answer is
not bad input: ``schema`` retries every ``retry_s`` seconds (one line on stderr when it
starts waiting, one when it answers) and never turns that into a quarantine row; nor is a
registry that refuses the credentials (RegistryRefused: the job stops with one line).
"""

from __future__ import annotations

import base64
import io
import json
import struct
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import fastavro

from connectors.avro_reader import AS_TUPLE, Corrupt, compile_reader, row_record_fields
from connectors.debezium_types import CONNECT_DECIMAL, Bad
from core import errors as E
from core.errors import RegistryRefused, RegistryUnavailable

MAGIC = 0
PREFIX = 5  # magic byte + 4-byte schema id
_PRIMITIVE = {"int": "int32", "long": "int64", "float": "float", "double": "double", "boolean": "boolean",
              "string": "string", "bytes": "bytes"}
_CONNECT_INTS = ("int8", "int16")  # what "connect.type" narrows an Avro int to


_UNSET = object()
# Fields of a Debezium envelope the decoder never reads (connectors.debezium: before, after, op,
# ts_ms and source.table): checked byte for byte, not made into values.
ENVELOPE_SKIP = {"transaction": False, "ts_us": False, "ts_ns": False, "source": frozenset({"table"})}


@dataclass
class Writer:
    """One writer schema: fastavro's parsed form (logical types removed) and the Connect shape."""

    schema_id: int
    parsed: Any
    connect: dict
    key: str  # names the schema in the decoder's caches: one per registry and id
    specs: dict = field(default_factory=dict)  # kind -> field specs, filled by connectors.debezium
    # the strict reader generated for this schema (connectors.avro_reader); None: fastavro + re-encoding
    reader: Callable[[bytes, int], Any] | None = None
    envelope_reader: Any = _UNSET  # the same, leaving out what ENVELOPE_SKIP names (made on first use)
    row_fields: tuple[str, ...] | None = None  # the field names of the envelope reader's row tuples
    tuple_reader: Any = _UNSET  # the reader making the top record a tuple of its fields (a key's)

    def as_tuple(self) -> Callable[[bytes, int], Any] | None:
        """The reader of a whole record as a tuple of its fields in the writer's order (a
        message key: the decoder maps it to the key columns by position)."""
        if self.tuple_reader is _UNSET:
            names = tuple(f.get("field") for f in self.connect.get("fields", ()))
            ok = self.reader is not None and len(set(names)) == len(names)
            self.tuple_reader = compile_reader(self.parsed, AS_TUPLE) if ok else None
        return self.tuple_reader

    def envelope(self) -> Callable[[bytes, int], Any] | None:
        """The envelope's reader: ENVELOPE_SKIP's fields checked only, and ``before`` and
        ``after`` made as tuples of their fields in the writer's order (``row_fields``) when
        both hold the same record (Debezium's Value), its field names distinct: the decoder
        maps a tuple to the declared columns by position, without a dict per image."""
        if self.envelope_reader is _UNSET:
            skip = dict(ENVELOPE_SKIP)
            names = {row_record_fields(self.parsed, f) for f in ("before", "after")} - {()}
            if len(names) == 1 and None not in names:
                row = names.pop()
                if len(set(row)) == len(row):
                    skip.update(before=AS_TUPLE, after=AS_TUPLE)
                    self.row_fields = row
            self.envelope_reader = compile_reader(self.parsed, skip) if self.reader is not None else None
        return self.envelope_reader


# (registry url, schema id) -> Writer, or the Bad every record with that id gets
_SCHEMAS: dict[tuple[str, int], Writer | Bad] = {}


def split(value: Any) -> tuple[int, bytes]:
    """(schema id, Avro body) of a Confluent wire-format value."""
    if value.__class__ is bytes and len(value) >= PREFIX and value[0] == MAGIC:  # the usual case
        return int.from_bytes(value[1:PREFIX], "big"), value[PREFIX:]
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise Bad(E.DATA_AVRO_MAGIC, f"an Avro record must be bytes, got {type(value).__name__}")
    view = bytes(value)
    if len(view) < PREFIX or view[0] != MAGIC:
        what = f"first byte {view[0]:#04x}" if len(view) else "empty value"
        if len(view) and view[0] == MAGIC:
            what = f"{len(view)} byte(s)"
        raise Bad(E.DATA_AVRO_MAGIC, f"not the Confluent Avro wire format (magic byte 0, 4-byte schema id): {what}"
                  + (" (JSON text? declare encoding = \"json\")" if len(view) and view[0] in b"{[" else ""))
    return int.from_bytes(view[1:PREFIX], "big"), view[PREFIX:]


# ---------------------------------------------------------------- the registry

def auth_headers(registry) -> dict[str, str]:
    """The HTTP headers every request to the registry carries: Accept, and the credentials of
    ``[registry]`` (basic auth for user + password, a bearer token) when it has any."""
    headers = {"Accept": "application/json"}
    if registry.user is not None:
        cred = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
        headers["Authorization"] = f"Basic {cred}"
    elif registry.token is not None:
        headers["Authorization"] = f"Bearer {registry.token}"
    return headers


def _request(registry, path: str) -> tuple[int, bytes]:
    req = urllib.request.Request(registry.url + path, headers=auth_headers(registry))
    try:
        with urllib.request.urlopen(req, timeout=registry.timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise RegistryRefused(refusal(registry, e.code)) from None
        return e.code, e.read() or b""
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise RegistryUnavailable(f"schema registry {registry.url} does not answer: {reason}") from None


def refusal(registry, status: int) -> str:
    """The one line for credentials the registry refuses (never the secret itself)."""
    if registry.user is not None:
        sent = f"basic auth as {registry.user!r} (password from {registry.auth_from})"
    elif registry.token is not None:
        sent = f"a bearer token (from {registry.auth_from})"
    else:
        sent = "no credentials"
    return (f"schema registry {registry.url} refuses the job's request (HTTP {status}) with {sent}; "
            "set [registry] user with password_file (or IVMSTREAM_REGISTRY_PASSWORD), or token_file "
            "(or IVMSTREAM_REGISTRY_TOKEN)")


def check_access(registry) -> str | None:
    """Whether the registry lets the job in, before any batch (``GET {url}/subjects``): None
    when it answers; a line when it does not answer (the batches will wait for it);
    RegistryRefused when it refuses the credentials."""
    try:
        status, _ = _request(registry, "/subjects")
    except RegistryUnavailable as e:
        return f"{e}; the batches will wait for it"
    if status >= 500:
        return f"schema registry {registry.url} answers HTTP {status}; the batches will wait for it"
    return None


def fetch(registry, schema_id: int) -> str | None:
    """The schema text the registry holds for ``schema_id``; None when it has none (404).
    RegistryUnavailable when it does not answer or answers 5xx (the records are good: they
    wait for it); RegistryRefused when it refuses the credentials (401/403)."""
    status, body = _request(registry, f"/schemas/ids/{schema_id}")
    if status == 404:
        return None
    if status != 200:
        text = body[:200].decode("utf-8", errors="replace").strip()
        raise RegistryUnavailable(f"schema registry {registry.url} answered HTTP {status} for schema id "
                                  f"{schema_id}: {text}")
    try:
        doc = json.loads(body)
        text = doc["schema"]
        if not isinstance(text, str) or doc.get("schemaType", "AVRO") != "AVRO":
            raise ValueError(f"schemaType {doc.get('schemaType')!r}")
    except (ValueError, KeyError, TypeError) as e:
        return json.dumps({"not avro": str(e)})  # remembered as a bad schema below
    return text


def schema(registry, schema_id: int) -> Writer:
    """The writer schema of ``schema_id``: from the cache, else fetched (retried until the
    registry answers, or its ``give_up_s`` passes: then RegistryUnavailable)."""
    give_up_s = registry.give_up_s or None
    k = (registry.url, schema_id)
    hit = _SCHEMAS.get(k)
    if hit is None:
        waited_since = None
        while True:
            try:
                text = fetch(registry, schema_id)
                break
            except RegistryUnavailable as e:
                now = time.monotonic()
                if waited_since is None:
                    waited_since = now
                    print(f"ivmstream: {e}; the batch waits, retrying every {registry.retry_s:g} s", file=sys.stderr,
                          flush=True)
                if give_up_s is not None and now - waited_since >= give_up_s:
                    raise
                time.sleep(registry.retry_s)
        if waited_since is not None:
            print(f"ivmstream: schema registry {registry.url} answers again after "
                  f"{time.monotonic() - waited_since:.0f} s", file=sys.stderr, flush=True)
        hit = Bad(E.DATA_AVRO_UNKNOWN_SCHEMA, f"schema id {schema_id} is not in the registry {registry.url}") \
            if text is None else writer(registry.url, schema_id, text)
        _SCHEMAS[k] = hit
    if isinstance(hit, Bad):
        raise hit
    return hit


def remember(url: str, schema_id: int, schema_text: Any) -> Writer | Bad:
    """Put a schema into the cache as if the registry at ``url`` had served it (a schema
    already known elsewhere; tests without a registry)."""
    text = schema_text if isinstance(schema_text, str) else json.dumps(schema_text)
    hit = _SCHEMAS[(url.rstrip("/"), schema_id)] = writer(url.rstrip("/"), schema_id, text)
    return hit


def forget(url: str) -> None:
    """Drop every schema cached from the registry at ``url`` (they are fetched again)."""
    for k in [k for k in _SCHEMAS if k[0] == url.rstrip("/")]:
        del _SCHEMAS[k]


def cached_ids() -> set[tuple[str, int]]:
    """(registry url, schema id) of every schema this process holds (or knows to be bad)."""
    return set(_SCHEMAS)


def prefetch(registry, records: Iterable[tuple], topics: set[str]) -> None:
    """Fetch the schemas of a batch's keys and values (records (topic, partition, offset, key,
    value...) of ``topics``) before any is decoded, so that a registry that does not answer
    delays the batch before it rather than in the middle of it."""
    heads: set[bytes] = set()  # few distinct
    add = heads.add
    for r in records:
        if len(r) > 4 and r[0] in topics:
            for v in (r[3], r[4]):
                if v.__class__ is bytes:
                    add(v[:PREFIX])
                elif v.__class__ is bytearray:
                    add(bytes(v[:PREFIX]))
    for head in heads:
        if len(head) == PREFIX and head[0] == MAGIC:
            sid = int.from_bytes(head[1:], "big")
            if (registry.url, sid) not in _SCHEMAS:
                try:
                    schema(registry, sid)
                except Bad:
                    pass  # remembered: its records are quarantined when decoded


# ---------------------------------------------------------------- schemas

def writer(url: str, schema_id: int, text: str) -> Writer | Bad:
    """A Writer for a schema text, or the Bad its records get."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("type") != "record":
            raise ValueError("the top-level schema is not a record")
        connect = _connect(raw, None, {})
        parsed = fastavro.parse_schema(_plain(raw))
    except Bad as bad:
        return Bad(E.DATA_AVRO_BAD_SCHEMA, f"schema id {schema_id}: {bad.reason}")
    except (ValueError, TypeError, KeyError, RecursionError, fastavro.schema.SchemaParseException) as e:
        return Bad(E.DATA_AVRO_BAD_SCHEMA, f"schema id {schema_id} is not a usable Avro record schema: "
                                           f"{str(e)[:200]}")
    return Writer(schema_id, parsed, connect, f"\0avro {schema_id} {url}", reader=compile_reader(parsed))


def _plain(s: Any) -> Any:
    """The schema without ``logicalType``: fastavro then returns what Debezium wrote (a
    Decimal's unscaled bytes, not a Decimal rounded to the declared precision; days, not a date)."""
    if isinstance(s, dict):
        return {k: _plain(v) for k, v in s.items() if k != "logicalType"}
    if isinstance(s, list):
        return [_plain(x) for x in s]
    return s


def _full(name: str, ns: str | None) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


def _connect(s: Any, ns: str | None, named: dict) -> dict:
    """One Avro schema as a Connect JSON schema (``optional`` for a union with null)."""
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) != 1:
            raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"a union of {len(branches)} non-null types is not a Connect schema")
        out = dict(_connect(branches[0], ns, named))
        out["optional"] = True
        return out
    if isinstance(s, str):
        if s in _PRIMITIVE:
            return {"type": _PRIMITIVE[s], "optional": False}
        full = _full(s, ns)
        if full in named:
            return named[full]
        if s in named:
            return named[s]
        raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"unknown type name {s[:80]!r}")
    if not isinstance(s, dict):
        raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"{type(s).__name__} is not an Avro schema")
    t = s.get("type")
    if isinstance(t, (dict, list)):
        return _connect(t, ns, named)
    cname = s.get("connect.name")
    params = s.get("connect.parameters")
    out: dict[str, Any] = {"optional": False}
    if t == "record":
        rns = s.get("namespace", ns) if "." not in s.get("name", "") else s["name"].rsplit(".", 1)[0]
        full = _full(str(s.get("name", "")), s.get("namespace", ns))
        out.update(type="struct", name=cname or full, fields=[])
        named[full] = out  # before the fields: a field may name its own record
        fields = s.get("fields")
        if not isinstance(fields, list):
            raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"record {full!r} has no fields list")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"record {full!r} has a field without a name")
            out["fields"].append({**_connect(f.get("type"), rns, named), "field": f["name"]})
        return out
    if t == "enum":
        full = _full(str(s.get("name", "")), s.get("namespace", ns))
        out.update(type="string", name=cname)
        named[full] = out
    elif t == "fixed":
        full = _full(str(s.get("name", "")), s.get("namespace", ns))
        out.update(type="bytes", name=cname)
        named[full] = out
    elif t == "array":
        out.update(type="array", items=_connect(s.get("items"), ns, named))
    elif t == "map":
        out.update(type="map", keys={"type": "string", "optional": False}, values=_connect(s.get("values"), ns, named))
    elif t in _PRIMITIVE:
        ct = s.get("connect.type")
        out["type"] = ct if t == "int" and ct in _CONNECT_INTS else _PRIMITIVE[t]
        if cname is not None:
            out["name"] = cname
        if t in ("bytes",) and s.get("logicalType") == "decimal" and cname is None:
            # a decimal from a producer other than Connect: the same bytes as Connect's Decimal
            out["name"] = CONNECT_DECIMAL
            params = {"scale": str(s.get("scale", 0))}
    elif t == "null":
        out.update(type="null", optional=True)
    else:
        raise Bad(E.DATA_AVRO_BAD_SCHEMA, f"unknown Avro type {str(t)[:80]!r}")
    if isinstance(params, dict):
        out["parameters"] = params
    return out


# ---------------------------------------------------------------- bodies

def read(value: Any, registry, envelope: bool = False, as_tuple: bool = False) -> tuple[Any, Writer]:
    """(the decoded body, its writer schema) of one wire-format value. ``envelope``: a Debezium
    envelope's body, without the fields ENVELOPE_SKIP names (every byte checked all the same).
    ``as_tuple``: the body's record as a tuple of its fields' values when the schema has such a
    reader (``Writer.as_tuple``), else a dict as without it."""
    if value.__class__ is bytes and len(value) >= PREFIX and value[0] == MAGIC:  # the usual case: no copy
        sid, data, start = int.from_bytes(value[1:PREFIX], "big"), value, PREFIX
    else:
        sid, data = split(value)
        start = 0
    w = _SCHEMAS.get((registry.url, sid))
    if w.__class__ is not Writer:  # not fetched yet, or known to be bad: ``schema`` fetches or raises
        w = schema(registry, sid)
    reader = _reader_of(w, envelope, as_tuple)
    if reader is None:
        return _read_checked(data[start:], sid, w), w
    try:
        return reader(data, start), w
    except _BODY_ERRORS as e:
        raise _body_error(e, len(data) - start, sid) from None


def read_all(values: list, registry, envelope: bool = False, as_tuple: bool = False) -> list:
    """``read`` of each value, in one loop (a batch's values, most of one schema: the reader of
    the last value's schema is used again while the 5-byte prefix is the same): per value,
    (the decoded body, its Writer), the exception ``read`` raises for it, or None for a value
    that is None or, with ``as_tuple`` (keys), not bytes starting with the magic byte. A
    registry that does not answer or refuses raises here, before any of them is decoded (the
    schemas are fetched as ``prefetch`` fetches them)."""
    out: list = []
    append = out.append
    head = w = reader = None
    for v in values:
        if head is not None and v.__class__ is bytes and v.startswith(head):
            try:
                append((reader(v, PREFIX), w))
            except _BODY_ERRORS as e:
                append(_body_error(e, len(v) - PREFIX, w.schema_id))
            except Exception as e:  # noqa: BLE001 - handed to the record's decoding, which raises it there
                append(e)
            continue
        if v is None or as_tuple and not (isinstance(v, (bytes, bytearray)) and v[:1] == b"\0"):
            append(None)
            continue
        try:
            got = read(v, registry, envelope, as_tuple)
        except (RegistryUnavailable, RegistryRefused):
            raise
        except Exception as e:  # noqa: BLE001 - as above
            append(e)
            continue
        append(got)
        head = None
        if v.__class__ is bytes and len(v) >= PREFIX and v[0] == MAGIC:
            reader = _reader_of(got[1], envelope, as_tuple)
            if reader is not None:
                head, w = v[:PREFIX], got[1]
    return out


def _reader_of(w: Writer, envelope: bool, as_tuple: bool) -> Callable[[bytes, int], Any] | None:
    if envelope:
        reader = w.envelope_reader
        return w.envelope() if reader is _UNSET else reader
    if as_tuple:
        reader = w.tuple_reader
        return (w.as_tuple() if reader is _UNSET else reader) or w.reader
    return w.reader


_BODY_ERRORS = (IndexError, struct.error, Corrupt, UnicodeDecodeError, RecursionError, MemoryError, OverflowError)


def _body_error(e: Exception, size: int, sid: int) -> Bad:
    """The Bad of a body the generated reader refused with ``e`` (one of _BODY_ERRORS)."""
    if isinstance(e, (IndexError, struct.error)):
        return Bad(E.DATA_AVRO_CORRUPT, f"the Avro body ({size} bytes) ends before its schema {sid} does")
    if isinstance(e, Corrupt):
        return Bad(E.DATA_AVRO_CORRUPT, f"the Avro body is not a valid encoding under schema {sid}: {e}")
    if isinstance(e, UnicodeDecodeError):
        return Bad(E.DATA_AVRO_CORRUPT, f"an Avro string is not UTF-8 (schema {sid}): {e.reason}")
    return Bad(E.DATA_AVRO_CORRUPT, f"the Avro body does not read by schema {sid}: {type(e).__name__}")


def _read_checked(body: bytes, sid: int, w: Writer) -> Any:
    """fastavro's reading of a body, checked by encoding the value again (for a schema that
    has no generated reader: fastavro alone takes some bytes that are no Avro encoding)."""
    buf = io.BytesIO(body)
    try:
        doc = fastavro.schemaless_reader(buf, w.parsed, None)
    except (EOFError, StopIteration):
        raise Bad(E.DATA_AVRO_CORRUPT, f"the Avro body ({len(body)} bytes) ends before its schema {sid} does") from None
    except UnicodeDecodeError as e:
        raise Bad(E.DATA_AVRO_CORRUPT, f"an Avro string is not UTF-8 (schema {sid}): {e.reason}") from None
    except (ValueError, IndexError, TypeError, KeyError, OverflowError, MemoryError, RecursionError) as e:
        raise Bad(E.DATA_AVRO_CORRUPT, f"the Avro body does not read by schema {sid}: "
                                       f"{type(e).__name__}: {str(e)[:120]}") from None
    left = len(body) - buf.tell()
    if left:
        raise Bad(E.DATA_AVRO_CORRUPT, f"{left} byte(s) left after the Avro body of schema {sid}")
    # fastavro reads some bytes that are no Avro encoding at all (a boolean byte 2, a negative
    # union index, an over-long or over-wide number) as a value; an encoder writes each value
    # one way, so a body that is not what its value encodes to was damaged on the way.
    again = io.BytesIO()
    try:
        fastavro.schemaless_writer(again, w.parsed, doc)
        same = again.getvalue() == body
    except (ValueError, TypeError, OverflowError, struct.error, KeyError, IndexError):
        same = False
    if not same:
        raise Bad(E.DATA_AVRO_CORRUPT, f"the Avro body is not a valid encoding under schema {sid} (a boolean other "
                                       "than 0/1, a bad union index or an over-long number)")
    return doc
