"""Avro in the Confluent wire format decodes to exactly what the JSON path decodes.

Each record is written twice from the same logical values: as Connect's JsonConverter
writes it (schema + payload, base64 bytes, written by this test) and as an Avro converter
writes it (fastavro's encoder behind the 5-byte prefix, from a schema shaped like the one
Debezium's records get: ``connect.name``/``connect.parameters`` on the fields). Both go
through ``decode_batch``; the events, rejections and schema changes must be the same. No
registry here: the writer schemas are put into the decoder's cache by id (``remember``);
fetching them from a real registry is tests/platform/test_registry.py.
"""

from __future__ import annotations

import base64
import io
import json
import random
import struct
import time
import zlib
from decimal import Decimal

import fastavro
import pytest

from connectors import avro as AV
from connectors.debezium import decode_batch
from core.errors import RegistryUnavailable
from streaming_app.settings import parse_config

URL = "http://127.0.0.1:9/never-asked"  # every schema below is remembered: nothing is fetched
TOPIC = "db.public.t"
PLACEHOLDER = "__debezium_unavailable_value"

COLUMNS = {"id": "long", "small": "int", "price": "decimal(10,2)", "vsd": "decimal(20,4)", "day": "date",
           "tod": "string", "ts": "timestamp", "zts": "timestamp", "doc": "string", "mood": "string",
           "flags": "long", "blob": "binary", "note": "string", "ok": "boolean", "ratio": "double",
           "score": "double"}


def _p(name: str, **params) -> dict:
    return {"connect.version": 1, "connect.name": name, **({"connect.parameters": params} if params else {})}


# (column, Avro type as Debezium's converter writes it, Connect JSON schema of the same field)
FIELDS = [
    ("id", "long", {"type": "int64", "optional": False}),
    ("small", {"type": "int", "connect.type": "int16"}, {"type": "int16", "optional": True}),
    ("price", {"type": "bytes", "scale": 2, "precision": 10, "logicalType": "decimal",
               **_p("org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"})},
     {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
      "parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
    ("vsd", {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
             "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
             **_p("io.debezium.data.VariableScaleDecimal")},
     {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
      "fields": [{"type": "int32", "optional": False, "field": "scale"},
                 {"type": "bytes", "optional": False, "field": "value"}]}),
    ("day", {"type": "int", **_p("io.debezium.time.Date")},
     {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1}),
    ("tod", {"type": "long", **_p("io.debezium.time.MicroTime")},
     {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1}),
    ("ts", {"type": "long", **_p("io.debezium.time.MicroTimestamp")},
     {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    ("zts", {"type": "string", **_p("io.debezium.time.ZonedTimestamp")},
     {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    ("doc", {"type": "string", **_p("io.debezium.data.Json")},
     {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1}),
    ("mood", {"type": "string", **_p("io.debezium.data.Enum", allowed="sad,ok,happy")},
     {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
      "parameters": {"allowed": "sad,ok,happy"}}),
    ("flags", {"type": "bytes", **_p("io.debezium.data.Bits", length="12")},
     {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits", "version": 1,
      "parameters": {"length": "12"}}),
    ("blob", "bytes", {"type": "bytes", "optional": True}),
    ("note", "string", {"type": "string", "optional": True}),
    ("ok", "boolean", {"type": "boolean", "optional": True}),
    ("ratio", "float", {"type": "float", "optional": True}),
    ("score", "double", {"type": "double", "optional": True}),
]


def unscaled(d: Decimal, scale: int) -> bytes:
    n = int(d.scaleb(scale))
    return n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True)


def avro_value_schema(fields=FIELDS, name="Value") -> dict:
    out = []
    for col, t, _ in fields:
        out.append({"name": col, "type": t} if col == "id" else {"name": col, "type": ["null", t], "default": None})
    return {"type": "record", "name": name, "namespace": TOPIC, "fields": out, "connect.name": f"{TOPIC}.{name}"}


def avro_envelope(fields=FIELDS) -> dict:
    return {"type": "record", "name": "Envelope", "namespace": TOPIC, "connect.name": f"{TOPIC}.Envelope", "fields": [
        {"name": "before", "type": ["null", avro_value_schema(fields)], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "table", "type": "string"}, {"name": "lsn", "type": ["null", "long"]}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


def json_envelope_schema(fields=FIELDS) -> dict:
    value = {"type": "struct", "optional": True, "name": f"{TOPIC}.Value",
             "fields": [{**js, "field": col} for col, _, js in fields]}
    return {"type": "struct", "optional": False, "name": f"{TOPIC}.Envelope", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "optional": False, "field": "source",
         "fields": [{"type": "string", "optional": False, "field": "table"}]},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"}]}


KEY_AVRO = {"type": "record", "name": "Key", "namespace": TOPIC, "fields": [{"name": "id", "type": "long"}]}
KEY_JSON = {"type": "struct", "optional": False, "name": f"{TOPIC}.Key",
            "fields": [{"type": "int64", "optional": False, "field": "id"}]}
VALUE_ID, KEY_ID = 11, 12


def wire(schema_id: int, schema: dict, record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return b"\0" + struct.pack(">I", schema_id) + buf.getvalue()


def as_json(row: dict | None, fields=FIELDS):
    """A row as JsonConverter writes it: bytes as base64, decimals as base64 unscaled bytes."""
    if row is None:
        return None
    out = {}
    for col, _, js in fields:
        v = row.get(col)
        if isinstance(v, Decimal) and col == "price":
            v = base64.b64encode(unscaled(v, 2)).decode()
        elif isinstance(v, dict):  # VariableScaleDecimal
            v = {"scale": v["scale"], "value": base64.b64encode(v["value"]).decode()}
        elif isinstance(v, bytes):
            v = base64.b64encode(v).decode()
        elif isinstance(v, float):
            v = Raw(repr(v) if js["type"] == "double" else _f32(v))
        out[col] = v
    return out


class Raw(str):
    """A JSON number written as given (what Java writes for a float or double)."""


def _f32(x: float) -> str:
    f = struct.pack("<f", x)
    for n in range(1, 10):
        t = f"{x:.{n}g}"
        try:
            if struct.pack("<f", float(t)) == f:
                return t
        except OverflowError:
            pass
    raise AssertionError(x)


def dumps(doc) -> bytes:
    def enc(v):
        if isinstance(v, Raw):
            return str(v)
        if isinstance(v, dict):
            return "{" + ",".join(json.dumps(k) + ":" + enc(x) for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(enc(x) for x in v) + "]"
        return json.dumps(v)
    return enc(doc).encode()


def config(encoding: str, fmt: str = "envelope", columns=COLUMNS):
    return parse_config({"tables": [{"name": "t", "topic": TOPIC, "columns": columns, "primary_key": ["id"],
                                     "not_null": ["id"], "encoding": encoding, "format": fmt}],
                         **({"registry": {"url": URL}} if encoding == "avro" else {})})


def avro_row(row: dict | None) -> dict | None:
    if row is None:
        return None
    out = {col: row.get(col) for col, _, _ in FIELDS}
    return out


def random_row(rng: random.Random, i: int) -> dict:
    scale = rng.randint(0, 4)
    return {
        "id": i, "small": rng.choice([None, -32768, 0, 7, 32767]),
        "price": rng.choice([None, Decimal("0.00"), Decimal("-12.34"), Decimal("99999999.99")]),
        "vsd": rng.choice([None, {"scale": scale, "value": unscaled(Decimal(rng.randint(-10**9, 10**9)).scaleb(-scale), scale)}]),
        "day": rng.choice([None, 0, 19000, -719162, 2932896]),
        "tod": rng.choice([None, 0, 86_399_999_999, 3_723_000_001]),
        "ts": rng.choice([None, 0, 1_700_000_000_123_456, -62_135_596_800_000_000]),
        "zts": rng.choice([None, "2023-06-01T08:15:30.250000Z", "1970-01-01T00:00:00Z"]),
        "doc": rng.choice([None, '{"a": [1, 2]}', "null"]), "mood": rng.choice([None, "sad", "happy"]),
        "flags": rng.choice([None, b"\x05\x08", b"\xff"]), "blob": rng.choice([None, b"", b"\x00\xff\x10"]),
        "note": rng.choice([None, "", "héllo ✓", "x" * 300]), "ok": rng.choice([None, True, False]),
        "ratio": rng.choice([None, 1.1, -0.5, 3.4028234663852886e38]), "score": rng.choice([None, 0.1, -1e300, 2.5]),
    }


@pytest.fixture(autouse=True)
def schemas():
    AV.remember(URL, VALUE_ID, avro_envelope())
    AV.remember(URL, KEY_ID, KEY_AVRO)


def both(changes: list[tuple[str, dict | None, dict | None]], keyed: bool = True):
    """(op, before, after) changes -> (the JSON path's batch, the Avro path's batch)."""
    js, av = [], []
    for off, (op, before, after) in enumerate(changes):
        k = (after or before)["id"]
        src = {"table": "t", "lsn": off}
        jv = dumps({"schema": json_envelope_schema(), "payload": {"before": as_json(before), "after": as_json(after),
                                                                "source": {"table": "t"}, "op": op, "ts_ms": off}})
        jk = dumps({"schema": KEY_JSON, "payload": {"id": k}}) if keyed else None
        av_v = wire(VALUE_ID, avro_envelope(), {"before": avro_row(before), "after": avro_row(after), "source": src,
                                                "op": op, "ts_ms": off})
        av_k = wire(KEY_ID, KEY_AVRO, {"id": k}) if keyed else None
        js.append((TOPIC, 0, off, jk, jv))
        av.append((TOPIC, 0, off, av_k, av_v))
    return decode_batch(config("json"), js), decode_batch(config("avro"), av)


def same(a, b) -> None:
    assert a.events == b.events
    assert [(r.offset, r.code) for r in a.rejected] == [(r.offset, r.code) for r in b.rejected]
    assert (a.tombstones, a.schema_changes, a.before_ignored) == (b.tombstones, b.schema_changes, b.before_ignored)


def test_every_logical_type_decodes_as_in_json():
    rng = random.Random(41)
    rows = [random_row(rng, i) for i in range(300)]
    changes = [("c" if i % 3 else "r", None, r) for i, r in enumerate(rows)]
    changes += [("u", None, {**r, "note": "changed"}) for r in rows[:50]]
    changes += [("d", {"id": r["id"]}, None) for r in rows[50:80]]
    js, av = both(changes)
    same(js, av)
    assert len(av.events["t"]) == len(changes) and not av.rejected
    first = av.events["t"][0].after
    assert first["ratio"] in (None, 1.1, -0.5, 3.4028234663852886e38)  # a float32 as Java prints it, not 1.100000023841858


def test_values_out_of_the_declared_types_are_rejected_alike():
    rows = [{"id": 1, "day": 2147483000}, {"id": 2, "small": 32767, "price": None, "ts": 9223372036825200000},
            {"id": 3, "vsd": {"scale": 0, "value": unscaled(Decimal(10**17), 0)}},
            {"id": 4, "ts": 2**62}, {"id": 5, "tod": 86_400_000_000_123}]
    js, av = both([("c", None, r) for r in rows])
    same(js, av)
    assert [r.code for r in av.rejected][:3] == ["DATA_NOT_REPRESENTABLE"] * 3


def test_toast_placeholder_keeps_the_stored_value():
    row = {"id": 7, "note": PLACEHOLDER, "blob": PLACEHOLDER.encode(), "doc": PLACEHOLDER}
    js, av = both([("u", None, row)])
    same(js, av)
    assert av.events["t"][0].unavailable == {"note", "blob", "doc"}


def test_avro_keys_tombstones_and_key_mismatch():
    js, av = both([("c", None, {"id": 1}), ("d", {"id": 1}, None)])
    same(js, av)
    tomb = decode_batch(config("avro"), [(TOPIC, 0, 0, wire(KEY_ID, KEY_AVRO, {"id": 1}), None)])
    assert tomb.tombstones == 1 and not tomb.rejected
    wrong_key = wire(KEY_ID, KEY_AVRO, {"id": 2})
    value = wire(VALUE_ID, avro_envelope(), {"before": None, "after": avro_row({"id": 1}), "source": {"table": "t", "lsn": 1},
                                             "op": "c", "ts_ms": 1})
    out = decode_batch(config("avro"), [(TOPIC, 0, 0, wrong_key, value), (TOPIC, 0, 1, b'{"id": 1}', value)])
    assert [r.code for r in out.rejected] == ["DATA_KEY_MISMATCH"] and out.events["t"][0].key == (1,)


def test_unwrapped_rows_in_avro():
    fields = [f for f in FIELDS if f[0] in ("id", "note", "price")]
    row_schema = avro_value_schema(fields)
    row_schema["fields"] += [{"name": "__deleted", "type": ["null", "string"], "default": None},
                             {"name": "__op", "type": ["null", "string"], "default": None},
                             {"name": "__source_ts_ms", "type": ["null", "long"], "default": None}]
    AV.remember(URL, 21, row_schema)
    cols = {"id": "long", "note": "string", "price": "decimal(10,2)"}
    cfg = config("avro", "unwrapped", cols)
    key = wire(KEY_ID, KEY_AVRO, {"id": 4})
    recs = [(TOPIC, 0, 0, key, wire(21, row_schema, {"id": 4, "note": "a", "price": Decimal("1.50"), "__deleted": "false",
                                                      "__op": "c", "__source_ts_ms": 9})),
            (TOPIC, 0, 1, key, wire(21, row_schema, {"id": 4, "note": None, "price": None, "__deleted": "true",
                                                      "__op": "d", "__source_ts_ms": 10})),
            (TOPIC, 0, 2, key, None)]
    out = decode_batch(cfg, recs)
    assert not out.rejected
    assert [(e.op, e.key, e.after) for e in out.events["t"]] == [
        ("c", (4,), {"id": 4, "note": "a", "price": Decimal("1.50")}), ("d", (4,), None), ("d", (4,), None)]
    assert out.events["t"][0].ts_ms == 9


def test_a_new_schema_id_mid_topic_drops_and_adds_columns_as_json_does():
    dropped = [f for f in FIELDS if f[0] != "note"] + [("added", "int", {"type": "int32", "optional": True})]
    AV.remember(URL, 31, avro_envelope(dropped))
    old = wire(VALUE_ID, avro_envelope(), {"before": None, "after": avro_row({"id": 1, "note": "x"}),
                                           "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    row = {c: None for c, _, _ in dropped} | {"id": 2, "added": 5}
    new = wire(31, avro_envelope(dropped), {"before": None, "after": row, "source": {"table": "t", "lsn": 2},
                                            "op": "c", "ts_ms": 2})
    out = decode_batch(config("avro"), [(TOPIC, 0, 0, None, old), (TOPIC, 0, 1, None, new)])
    assert not out.rejected and out.schema_changes == [("t", "note", "dropped")]
    assert out.events["t"][0].after["note"] == "x" and out.events["t"][1].after["note"] is None
    assert "added" not in out.events["t"][1].after


def test_bad_avro_is_quarantined_with_its_code():
    good = wire(VALUE_ID, avro_envelope(), {"before": None, "after": avro_row({"id": 1, "note": "é"}),
                                            "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    AV.remember(URL, 40, {"type": "string"})  # not a record
    AV.remember(URL, 41, "{not json")
    bool_id = [(c, "boolean" if c == "small" else t, j) for c, t, j in FIELDS]
    AV.remember(URL, 42, avro_envelope(bool_id))
    mismatch = wire(42, avro_envelope(bool_id), {"before": None, "after": {**avro_row({"id": 1}), "small": True},
                                                 "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    bad_utf8 = good.replace("é".encode(), b"\xff\xfe")
    cases = {
        b"": "DATA_AVRO_MAGIC", b"\0\0\0": "DATA_AVRO_MAGIC", b"\x01" + good[1:]: "DATA_AVRO_MAGIC",
        b'{"schema": null}': "DATA_AVRO_MAGIC",
        good[:-3]: "DATA_AVRO_CORRUPT", good + b"\0": "DATA_AVRO_CORRUPT", bad_utf8: "DATA_AVRO_CORRUPT",
        good[:5]: "DATA_AVRO_CORRUPT", b"\0\0\0\0\x28" + good[5:]: "DATA_AVRO_BAD_SCHEMA",
        b"\0\0\0\0\x29" + good[5:]: "DATA_AVRO_BAD_SCHEMA", mismatch: "DATA_AVRO_SCHEMA_MISMATCH",
    }
    recs = [(TOPIC, 0, i, None, v) for i, v in enumerate(cases)] + [(TOPIC, 0, 99, None, good)]
    out = decode_batch(config("avro"), recs)
    assert [r.code for r in out.rejected] == list(cases.values())
    assert [e.offset for e in out.events["t"]] == [99]
    assert all("\n" not in r.reason for r in out.rejected)
    assert out.rejected[2].value == "base64:" + base64.b64encode(b"\x01" + good[1:]).decode()  # binary kept whole


def test_a_registry_that_does_not_answer_holds_the_batch_and_quarantines_nothing(capsys):
    cfg = parse_config({"tables": [{"name": "t", "topic": TOPIC, "columns": COLUMNS, "primary_key": ["id"],
                                    "encoding": "avro"}],
                        "registry": {"url": "http://127.0.0.1:9", "timeout_s": 0.5, "retry_s": 0.2, "give_up_s": 0.6}})
    good = wire(VALUE_ID, avro_envelope(), {"before": None, "after": avro_row({"id": 1}),
                                            "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    t = time.monotonic()
    with pytest.raises(RegistryUnavailable, match=r"\[IVM530\] schema registry http://127.0.0.1:9 does not answer"):
        decode_batch(cfg, [(TOPIC, 0, 0, None, good)])
    assert time.monotonic() - t >= 0.6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the batch waits, retrying every 0.2 s" in err[0]


@pytest.mark.parametrize("change,ok", [
    ({"drop": "id"}, False),  # no field for the primary key
    ({"id": "string"}, False),  # text where a long is declared
    ({"note": "long"}, False),  # a number where a string is declared
    ({"day": {"type": "long", **_p("io.debezium.time.MicroTimestamp")}}, False),  # a timestamp for a date
    ({"ts": {"type": "int", **_p("io.debezium.time.Date")}}, False),  # a date for a timestamp
    ({"ok": "string"}, False),  # text for a boolean
    ({"blob": "string"}, False),  # text for binary
    ({"score": "boolean"}, False),
    ({"price": "string"}, True),  # decimal.handling.mode=string
    ({"score": "long"}, True),  # a number fills a double
    ({"small": "long"}, True),  # a wider number: value by value
    ({"ok": {"type": "int", "connect.type": "int16"}}, True),  # MySQL TINYINT(1) for a boolean
    ({"tod": "long"}, False),  # the declared string takes text or a time of day, not a bare number
])
def test_a_writer_schema_that_does_not_match_the_columns_is_quarantined(change, ok):
    """Checked once per writer schema: a key column it lacks or a field of a kind the declared
    type never takes is DATA_AVRO_SCHEMA_MISMATCH for every record of that schema."""
    fields = []
    for col, t, js in FIELDS:
        if change.get("drop") == col:
            continue
        fields.append((col, change.get(col, t), js))
    sid = 1000 + zlib.crc32(json.dumps(change, sort_keys=True).encode()) % 100_000  # one id per schema
    AV.remember(URL, sid, avro_envelope(fields))
    row = {c: None for c, _, _ in fields}
    if "id" in row:
        row["id"] = "7" if change.get("id") == "string" else 7
    value = wire(sid, avro_envelope(fields), {"before": None, "after": row, "source": {"table": "t", "lsn": 1},
                                             "op": "c", "ts_ms": 1})
    out = decode_batch(config("avro"), [(TOPIC, 0, 0, None, value)])
    if ok:
        assert not out.rejected and [e.key for e in out.events["t"]] == [(7,)]
    else:
        assert [r.code for r in out.rejected] == ["DATA_AVRO_SCHEMA_MISMATCH"] and not out.events["t"]
        assert "writer schema" in out.rejected[0].reason


def test_a_batch_read_beforehand_decodes_as_record_by_record():
    """decode_batch reads a batch's Avro values and keys in one loop each before decoding
    (AV.read_all, reusing the reader while the 5-byte prefix repeats); each record must come
    out as decode_record alone makes it: the same events, and the same code and reason for
    a bad body, a bad key or an unusable schema, wherever they sit among good records."""
    from connectors.debezium import Bad, decode_record

    rng = random.Random(5)
    no_blob = [f for f in FIELDS if f[0] != "blob"]
    AV.remember(URL, 51, avro_envelope(no_blob))
    AV.remember(URL, 99, "{not json")  # a schema no record can be read by
    recs = []
    for off in range(400):
        row = random_row(rng, off % 37)
        op = rng.choice("cud")
        before, after = (row, None) if op == "d" else (None if op == "c" else {"id": row["id"]}, row)
        doc = {"before": avro_row(before), "after": avro_row(after), "source": {"table": "t", "lsn": off},
               "op": op, "ts_ms": off}
        if off % 5:
            value = wire(VALUE_ID, avro_envelope(), doc)
        else:  # another schema id among them
            doc.update({k: None if doc[k] is None else {c: v for c, v in doc[k].items() if c != "blob"}
                        for k in ("before", "after")})
            value = wire(51, avro_envelope(no_blob), doc)
        key = wire(KEY_ID, KEY_AVRO, {"id": row["id"] + (off % 29 == 0)})  # now and then another key
        kind = rng.random()
        if kind < 0.1:
            value = value[:rng.randint(0, len(value) - 1)]  # cut
        elif kind < 0.2:
            b = bytearray(value)
            b[rng.randrange(5, len(b))] = rng.randrange(256)  # a byte flipped in the body
            value = bytes(b)
        elif kind < 0.23:
            value = b"\0\0\0\0\x63" + value[5:]  # schema id 99
        elif kind < 0.26:
            value = None  # a tombstone
        elif kind < 0.3:
            key = key[:-1] + b"\x80"  # a key cut in the middle of its number
        elif kind < 0.33:
            key = json.dumps({"id": row["id"]}).encode()  # a JSON key on the Avro topic
        elif kind < 0.36:
            key = None
        recs.append((TOPIC, 0, off, key, value))
    cfg = config("avro")
    batch = decode_batch(cfg, recs)
    events, rejected = [], []
    for rec in recs:
        try:
            evs = decode_record(cfg, *rec, None, [], None, [])
        except Bad as bad:
            rejected.append((rec[2], bad.code, bad.reason))
            continue
        events += evs or []
    assert batch.events["t"] == events and len(events) > 150
    assert [(r.offset, r.code, r.reason) for r in batch.rejected] == rejected
    assert {code for _, code, _ in rejected} >= {"DATA_AVRO_CORRUPT", "DATA_AVRO_BAD_SCHEMA", "DATA_KEY_MISMATCH"}
