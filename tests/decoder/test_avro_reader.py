"""The generated strict Avro reader (connectors.avro_reader): what fastavro reads from valid
bodies, and a refusal for each kind of byte that is no Avro encoding but that fastavro alone reads
as a value (the cases the re-encoding check used to catch)."""

from __future__ import annotations

import io
import math
import random
import struct

import fastavro
import pytest

from connectors.avro_reader import Corrupt, compile_reader

SCHEMA = {"type": "record", "name": "T", "namespace": "n", "fields": [
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": ["null", "long"]},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "y", "type": "bytes"},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
    {"name": "a", "type": {"type": "array", "items": ["null", "string", "long"]}},
    {"name": "m", "type": {"type": "map", "values": "double"}},
    {"name": "next", "type": ["null", "n.T"]},  # a recursive record
    {"name": "u", "type": ["null", "E", "F"]},
    {"name": "c", "type": {"type": "int", "connect.type": "int16"}},
]}
PARSED = fastavro.parse_schema(SCHEMA)
READ = compile_reader(PARSED)


def datum(rng: random.Random, depth: int = 0) -> dict:
    return {"b": rng.random() < 0.5, "i": rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-999, 999)]),
            "l": rng.choice([None, 0, 2**63 - 1, -(2**63), rng.randint(-10**12, 10**12)]),
            "f": rng.choice([0.0, 1.5, -2.25]), "d": rng.choice([0.0, -1e300, math.inf, 3.14]),
            "s": rng.choice(["", "é✓", "x" * rng.randint(0, 200)]), "y": rng.randbytes(rng.randint(0, 9)),
            "e": rng.choice("ABC"), "x": rng.randbytes(3),
            "a": [rng.choice([None, "s", 7, -(2**40)]) for _ in range(rng.randint(0, 4))],
            "m": {f"k{j}": float(j) for j in range(rng.randint(0, 3))},
            "next": datum(rng, depth + 1) if depth < 2 and rng.random() < 0.5 else None,
            "u": rng.choice([None, "B", b"xyz"]), "c": rng.randint(-32768, 32767)}


def body(doc: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, PARSED, doc)
    return buf.getvalue()


def test_reads_what_fastavro_reads():
    assert READ is not None
    rng = random.Random(41)
    for _ in range(500):
        b = body(datum(rng))
        want = fastavro.schemaless_reader(io.BytesIO(b), PARSED, None)
        assert READ(b, 0) == want
        assert READ(b"\0\0\0\0\7" + b, 5) == want  # from an offset: the wire format's prefix skipped


def test_arrays_in_blocks_and_with_sizes():
    # [1, 2] as two blocks, then [3] as a block with a negative count and its byte size
    s = fastavro.parse_schema({"type": "record", "name": "A", "fields": [
        {"name": "a", "type": {"type": "array", "items": "long"}}]})
    read = compile_reader(s)
    assert read(bytes([2, 2, 2, 4, 0]), 0) == {"a": [1, 2]}
    assert read(bytes([1, 2, 6, 0]), 0) == {"a": [3]}  # count -1, size 1, item 3
    with pytest.raises(Corrupt, match="block size"):
        read(bytes([1, 4, 6, 0]), 0)  # size 2 for a 1-byte block


SIMPLE = fastavro.parse_schema({"type": "record", "name": "S", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "u", "type": ["null", "string"]},
    {"name": "i", "type": "int"}, {"name": "l", "type": "long"}]})
GOOD = bytes([1, 2, 2]) + b"h" + bytes([4, 6])  # True, "h", 2, 3


@pytest.mark.parametrize("data,reason", [
    (bytes([2]) + GOOD[1:], "a boolean byte 2"),
    (GOOD[:1] + bytes([1]) + GOOD[2:], "union index byte 1"),  # index -1: fastavro takes the last branch
    (GOOD[:1] + bytes([4]) + GOOD[2:], "union index byte 4"),
    (GOOD[:4] + bytes([0x84, 0x00, 6]), "over-long"),  # 2 written in two bytes
    (GOOD[:4] + bytes([0x80] * 4 + [0x10, 6]), "int past 32 bits"),
    (GOOD[:5] + bytes([0xFF] * 9 + [0x03]), "past 64 bits"),
    (GOOD[:5] + bytes([0x80] * 10 + [0x01]), "more than 10 bytes"),
    (GOOD[:1] + bytes([2, 1]) + b"h" + GOOD[4:], "negative length"),
    (GOOD + b"\0", r"1 byte\(s\) left"),
])
def test_refuses_what_no_encoder_writes(data, reason):
    fastavro_reads = True
    try:
        fastavro.schemaless_reader(io.BytesIO(data), SIMPLE, None)
    except Exception:  # noqa: BLE001 - only recorded: some of these fastavro refuses too
        fastavro_reads = False
    with pytest.raises(Corrupt, match=reason):
        compile_reader(SIMPLE)(data, 0)
    if reason in ("a boolean byte 2", "union index byte 1", "over-long"):
        assert fastavro_reads  # the lenient reads the re-encoding check had to catch


def test_truncated_and_bad_text():
    read = compile_reader(SIMPLE)
    assert read(GOOD, 0) == {"b": True, "u": "h", "i": 2, "l": 3}
    for n in range(len(GOOD)):
        with pytest.raises(IndexError):
            read(GOOD[:n], 0)
    with pytest.raises(UnicodeDecodeError):
        read(GOOD[:3] + b"\xff" + GOOD[4:], 0)


def test_unusable_schema_gives_none():
    assert compile_reader({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}) is None


def test_devstack_avro_events_decode_like_their_json():
    """The bench's Avro records (devstack.avro_records) decode to the events of the same
    changes written as JSON with schemas, ENVELOPE_SKIP's fields left out of the reading."""
    from connectors import avro as AV
    from connectors.debezium import decode_batch
    from devstack.avro_records import AvroEvents
    from devstack.producer import RandomUpdates, envelope, key_of
    from streaming_app.settings import parse_config

    url = "http://127.0.0.1:9/devstack-avro"
    raw = {"name": "t", "topic": "d.t", "primary_key": "id", "not_null": ["n"],
           "columns": {"id": "long", "n": "int", "s": "string", "p": "decimal(9,3)", "d": "date", "ts": "timestamp",
                       "b": "binary", "ok": "boolean", "x": "double"}}
    cj = parse_config({"tables": [raw]})
    ca = parse_config({"tables": [{**raw, "encoding": "avro"}], "registry": {"url": url}})
    table = cj.tables[0]
    ev = AvroEvents(table, 21, 22)
    AV.remember(url, 21, ev.value_schema)
    AV.remember(url, 22, ev.key_schema)
    gen = RandomUpdates(table, seed=3, domain=1000)
    js, av = [], []
    for i in range(300):
        op, before, after = gen.next()
        row = after if after is not None else before
        js.append(("d.t", 0, i, key_of(table, row, True), envelope(table, op, before, after, 1000 + i, True)))
        av.append(("d.t", 0, i, ev.key(row), ev.value(op, before, after, 1000 + i)))
    dj, da = decode_batch(cj, js), decode_batch(ca, av)
    assert not dj.rejected and not da.rejected
    assert len(dj.events["t"]) == 300 and da.events == dj.events
    doc, _ = AV.read(av[0][4], ca.registry, envelope=True)
    assert set(doc) == {"before", "after", "source", "op", "ts_ms"} and doc["source"] == {"table": "t"}
    full, _ = AV.read(av[0][4], ca.registry)
    assert {"transaction", "ts_us", "ts_ns"} <= set(full) and full["source"]["connector"] == "postgresql"


def test_remembered_text_runs_agree_with_a_full_strict_read_under_mutation():
    """Runs of text fields (Debezium's source: version, connector, name...) are remembered by
    their bytes; across records that repeat them, mutated or not, the reader must say exactly
    what a full strict read says (fastavro, every byte consumed, the same bytes written back)."""
    schema = fastavro.parse_schema({"type": "record", "name": "E", "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "snap", "type": ["null", "string"]}, {"name": "ts", "type": "long"},
        {"name": "db", "type": "string"}, {"name": "table", "type": "string"}, {"name": "op", "type": "string"}]})
    skip = {"version": False, "connector": False, "snap": False, "ts": False, "db": False}
    read_all, read_skip = compile_reader(schema), compile_reader(schema, skip)
    rng = random.Random(7)

    def strict(data: bytes):
        buf = io.BytesIO(data)
        try:
            doc = fastavro.schemaless_reader(buf, schema, None)
        except Exception:  # noqa: BLE001 - any refusal: the bytes spell no record
            return None
        if buf.tell() != len(data):
            return None
        again = io.BytesIO()
        fastavro.schemaless_writer(again, schema, doc)
        return doc if again.getvalue() == data else None

    agreed = hits = 0
    for n in range(3000):
        doc = {"version": "3.3.1.Final", "connector": rng.choice(["postgresql", "mysql"]),
               "snap": rng.choice([None, "false", "true"]), "ts": rng.randint(0, 2**50),
               "db": "shop", "table": rng.choice(["orders", "items"]), "op": rng.choice("cud")}
        data = bytearray(body_of(schema, doc))
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 2)):
                data[rng.randrange(len(data))] = rng.choice([0, 1, 2, 0x80, 0xff, rng.randrange(256)])
        data = bytes(data)
        want = strict(data)
        for read, kept in ((read_all, None), (read_skip, ("table", "op"))):
            try:
                got = read(data, 0)
            except (Corrupt, IndexError, UnicodeDecodeError):
                got = None
            exp = want if want is None or kept is None else {k: want[k] for k in kept}
            assert got == exp, (n, data, got, exp)
            agreed += 1
        hits += want is not None
    assert agreed == 6000 and hits > 1000


def body_of(schema, doc) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, doc)
    return buf.getvalue()


def test_a_schema_too_deep_to_generate_falls_back_to_fastavro_checked_by_encoding_again():
    """Nesting past what Python compiles in one function (arrays in arrays...) gives no
    generated reader; connectors.avro then reads with fastavro and refuses, by encoding the
    value again, what fastavro alone would take (here a boolean byte 2)."""
    from connectors import avro as AV
    from connectors.debezium_types import Bad

    t: object = "boolean"
    for _ in range(15):
        t = {"type": "array", "items": t}
    schema = {"type": "record", "name": "Deep", "fields": [{"name": "d", "type": t}, {"name": "ok", "type": "boolean"}]}
    assert compile_reader(fastavro.parse_schema(schema)) is None
    url = "http://127.0.0.1:9/deep"
    w = AV.remember(url, 77, schema)
    assert w.reader is None
    good = b"\0\0\0\0\x4d" + bytes([0, 1])  # an empty outer array, then True
    registry = type("R", (), {"url": url, "give_up_s": 0})()
    assert AV.read(good, registry)[0] == {"d": [], "ok": True}
    with pytest.raises(Bad) as e:
        AV.read(good[:-1] + b"\x02", registry)
    assert e.value.code == "DATA_AVRO_CORRUPT"


NESTED = fastavro.parse_schema({"type": "record", "name": "Env", "fields": [
    {"name": "src", "type": {"type": "record", "name": "Src", "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "ts", "type": "long"}, {"name": "snap", "type": ["null", "string"]}, {"name": "db", "type": "string"},
        {"name": "seq", "type": ["null", "string"]}, {"name": "us", "type": ["null", "long"]},
        {"name": "ok", "type": "boolean"}, {"name": "f", "type": "float"}, {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"}, {"name": "tx", "type": ["null", "long"]}, {"name": "lsn", "type": ["long", "null"]}]}},
    {"name": "op", "type": "string"}]})


def _strict(schema, data: bytes):
    """fastavro's reading, every byte consumed and the same bytes written back; else None."""
    buf = io.BytesIO(data)
    try:
        doc = fastavro.schemaless_reader(buf, schema, None)
    except Exception:  # noqa: BLE001 - any refusal: the bytes spell no record
        return None
    if buf.tell() != len(data):
        return None
    again = io.BytesIO()
    try:
        fastavro.schemaless_writer(again, schema, doc)
    except Exception:  # noqa: BLE001
        return None
    return doc if again.getvalue() == data else None


def _templates(read) -> list:
    """The template states of a generated reader (avro_reader.retemplate: [match or None,
    matches since built, builds, matches before, misses since built])."""
    return [v for k, v in read.__globals__.items() if k.startswith("K") and isinstance(v, list) and len(v) == 5]


@pytest.mark.parametrize("seq", ["none", "ascii", "non-ascii"])
def test_a_record_read_by_its_template_agrees_with_a_full_strict_read_under_mutation(seq):
    """A nested record of text and numbers checked only, its table made (Debezium's source),
    is read by one match of a template built from the last record: with a ``seq`` text that
    is null, ASCII changing every record (a PostgreSQL sequence: the template takes any short
    ASCII text there) or non-ASCII (no template matches: it stops being built), mutated or
    not, the reader says exactly what a full strict read says."""
    read = compile_reader(NESTED, {"src": frozenset({"table"})})
    rng = random.Random(11 + len(seq))
    agreed = good = 0
    for n in range(4000):
        src = {"version": "3.3.1.Final", "connector": "postgresql", "ts": rng.randint(0, 2**45),
               "snap": rng.choice([None, "false"]) if n % 50 == 0 else "false", "db": "shop",
               "seq": {"none": None, "ascii": f"[\"{n}\",\"{n + 1}\"]", "non-ascii": f"é{n}"}[seq], "us": rng.choice([None, rng.randint(-2**62, 2**62)]),
               "ok": rng.random() < 0.5, "f": rng.choice([0.0, 1.5, -2.25]), "schema": "public",
               "table": rng.choice(["orders", "items"]) if n % 100 == 0 else "orders",
               "tx": rng.choice([None, rng.randint(0, 10**6)]), "lsn": rng.choice([None, 2**63 - 1, -(2**63), 5])}
        data = bytearray(body_of(NESTED, {"src": src, "op": rng.choice("cud")}))
        if rng.random() < 0.3:
            for _ in range(rng.randint(1, 2)):
                data[rng.randrange(len(data))] = rng.choice([0, 1, 2, 0x80, 0xff, rng.randrange(256)])
        data = bytes(data)
        want = _strict(NESTED, data)
        try:
            got = read(data, 0)
        except (Corrupt, IndexError, UnicodeDecodeError, struct.error):
            got = None
        exp = None if want is None else {"src": {"table": want["src"]["table"]}, "op": want["op"]}
        assert got == exp, (n, data, got, exp)
        agreed += 1
        good += want is not None
    states = _templates(read)
    assert agreed == 4000 and good > 2000 and len(states) == 1
    if seq == "non-ascii":  # hardly ever matched (a mutated record may spell a template that matches another):
        # templates built freely 16 times, then one per 256 records not matched
        assert states[0][2] <= 16 + 4000 // 256 and states[0][1] + states[0][3] < 50
    else:
        assert states[0][0] is not None and states[0][1] + states[0][3] > 1000  # records read by a template
