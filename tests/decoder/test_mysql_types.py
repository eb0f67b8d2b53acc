"""One test per type Debezium's MySQL connector sends (MySQL and MariaDB), values worked out by hand.

Encodings are those of Debezium 3.3's MySQL connector documentation and the capture digested in
/work/shared/anchors/debezium-mysql.md (MariaDB 10.11 -> MySQL connector 3.3.1): TINYINT(1) and
BOOLEAN are int16, TIME is a signed duration under the name MicroTime (or Kafka's Time in ms
under time.precision.mode=connect), BIGINT UNSIGNED is int64 (wrapping) or, under
bigint.unsigned.handling.mode=precise, a Decimal of scale 0, BIT(n>1) is little-endian bytes.
"""

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from connectors.debezium import decode_batch
from core import errors as E
from streaming_app.settings import parse_config

UTC = dt.timezone.utc


def cfg(columns, time_mode="adaptive_time_microseconds"):
    return parse_config({"tables": [{
        "name": "t", "topic": "my.shop.t", "primary_key": "id", "columns": {"id": "long", **columns},
        "time_precision_mode": time_mode}]})


def field(name, typ, sem=None, **params):
    f = {"type": typ, "optional": True, "field": name}
    if sem:
        f.update(name=sem, version=1)
    if params:
        f["parameters"] = {k: str(v) for k, v in params.items()}
    return f


def envelope(fields, before, after, op):
    value = {"type": "struct", "name": "my.shop.t.Value", "optional": True,
             "fields": [{"type": "int64", "optional": False, "field": "id"}, *fields]}
    schema = {"type": "struct", "name": "my.shop.t.Envelope", "version": 2, "fields": [
        {**value, "field": "before"}, {**value, "field": "after"}, {"type": "string", "optional": False, "field": "op"}]}
    return {"schema": schema, "payload": {"before": before, "after": after, "op": op,
                                          "source": {"connector": "mysql", "db": "shop", "table": "t"}}}


def decode(c, values, key=1):
    recs = [("my.shop.t", 0, i, json.dumps({"id": key}).encode(), json.dumps(v).encode())
            for i, v in enumerate(values)]
    return decode_batch(c, recs)


def one(c, fields, after):
    out = decode(c, [envelope(fields, None, {"id": 1, **after}, "c")])
    assert out.rejected == [], out.rejected
    return out.events["t"][0].after


def reject(c, fields, after):
    out = decode(c, [envelope(fields, None, {"id": 1, **after}, "c")])
    assert len(out.rejected) == 1 and out.events["t"] == [], out
    return out.rejected[0]


# ---------------------------------------------------------------- TINYINT(1) / BOOLEAN

INT16 = field("v", "int16")


def test_tinyint1_zero_and_one_are_booleans():
    c = cfg({"v": "boolean"})
    assert one(c, [INT16], {"v": 1})["v"] is True
    assert one(c, [INT16], {"v": 0})["v"] is False
    assert one(c, [INT16], {"v": None})["v"] is None
    # schemaless (schemas.enable=false): the same integers
    out = decode_batch(c, [("my.shop.t", 0, 0, b'{"id":1}', b'{"op":"c","after":{"id":1,"v":1}}')])
    assert out.events["t"][0].after["v"] is True


@pytest.mark.parametrize("stored", [2, -1, 127, -128])
def test_tinyint1_other_values_have_their_own_code(stored):
    r = reject(cfg({"v": "boolean"}), [INT16], {"v": stored})
    assert r.code == E.DATA_NOT_BOOLEAN and str(stored) in r.reason
    # declared int, every value is kept
    assert one(cfg({"v": "int"}), [INT16], {"v": stored})["v"] == stored


def test_connect_boolean_still_needs_a_json_boolean():
    # BIT(1) and TinyIntOneToBooleanConverter send Connect booleans
    c = cfg({"v": "boolean"})
    assert one(c, [field("v", "boolean")], {"v": True})["v"] is True
    assert reject(c, [field("v", "boolean")], {"v": 1}).code == E.DATA_WRONG_TYPE


# ---------------------------------------------------------------- TIME: a signed duration

MICRO_TIME = field("v", "int64", "io.debezium.time.MicroTime")
CONNECT_TIME = field("v", "int32", "org.apache.kafka.connect.data.Time")


@pytest.mark.parametrize("micros, text", [
    (37_800_123_456, "10:30:00.123456"),
    (-1_500_000, "-00:00:01.500000"),
    (-1, "-00:00:00.000001"),
    (86_400_000_000, "24:00:00"),
    (360_000_500_000, "100:00:00.500000"),
    (3_020_399_000_000, "838:59:59"),
    (-3_020_399_000_000, "-838:59:59"),
    (0, "00:00:00"),
])
def test_micro_time_into_long_and_string(micros, text):
    c = cfg({"v": "long", "s": "string"})
    got = one(c, [MICRO_TIME, {**MICRO_TIME, "field": "s"}], {"v": micros, "s": micros})
    assert got["v"] == micros and got["s"] == text


def test_connect_time_is_milliseconds_and_may_be_negative():
    c = cfg({"v": "long", "s": "string"}, "connect")
    got = one(c, [CONNECT_TIME, {**CONNECT_TIME, "field": "s"}], {"v": 37_800_123, "s": -1_500})
    assert got == {"id": 1, "v": 37_800_123_000, "s": "-00:00:01.500000"}


def test_time_text_into_long():
    c = cfg({"v": "long"})
    for text, micros in (("-838:59:59", -3_020_399_000_000), ("10:30:00.123456", 37_800_123_456),
                         ("100:00:00.5", 360_000_500_000)):
        out = decode_batch(c, [("my.shop.t", 0, 0, b'{"id":1}',
                                json.dumps({"op": "c", "after": {"id": 1, "v": text}}).encode())])
        assert out.events["t"][0].after["v"] == micros, text
    out = decode_batch(c, [("my.shop.t", 0, 0, b'{"id":1}', b'{"op":"c","after":{"id":1,"v":"10:61:00"}}')])
    assert out.rejected[0].code == E.DATA_WRONG_TYPE


def test_nano_time_finer_than_a_microsecond_is_not_rounded():
    f = field("v", "int64", "io.debezium.time.NanoTime")
    assert reject(cfg({"v": "long"}), [f], {"v": -1_000_000_001}).code == E.DATA_NOT_REPRESENTABLE


# ---------------------------------------------------------------- BIGINT UNSIGNED

def _decimal_b64(n: int) -> str:
    return base64.b64encode(n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True)).decode()


def test_bigint_unsigned_precise_into_decimal_20_0():
    f = field("v", "bytes", "org.apache.kafka.connect.data.Decimal", scale=0, **{"connect.decimal.precision": 20})
    c = cfg({"v": "decimal(20,0)"})
    for n in (0, 2**63, 2**64 - 1, 9007199254740993):
        assert one(c, [f], {"v": _decimal_b64(n)})["v"] == Decimal(n)
    # 2^64 - 1 into long: not representable (never wrapped)
    assert reject(cfg({"v": "long"}), [f], {"v": _decimal_b64(2**64 - 1)}).code == E.DATA_NOT_REPRESENTABLE


def test_bigint_unsigned_long_mode_arrives_wrapped():
    # bigint.unsigned.handling.mode=long: 18446744073709551615 is sent as -1; nothing in the
    # record says the column is unsigned, so the value is stored as sent (README: use precise)
    assert one(cfg({"v": "long"}), [field("v", "int64")], {"v": -1})["v"] == -1


# ---------------------------------------------------------------- DATE, DATETIME(6), TIMESTAMP(6)

@pytest.mark.parametrize("days, day", [(-354285, dt.date(1000, 1, 1)), (19737, dt.date(2024, 1, 15)),
                                       (2932896, dt.date(9999, 12, 31)), (-141432, dt.date(1582, 10, 10))])
def test_date_full_range(days, day):
    assert one(cfg({"v": "date"}), [field("v", "int32", "io.debezium.time.Date")], {"v": days})["v"] == day


@pytest.mark.parametrize("micros, ts", [
    (1705314600123456, dt.datetime(2024, 1, 15, 10, 30, 0, 123456, tzinfo=UTC)),
    (-30610224000000000, dt.datetime(1000, 1, 1, tzinfo=UTC)),
    (253402300799999999, dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    (-11670955200000000, dt.datetime(1600, 2, 29, 12, tzinfo=UTC)),
])
def test_datetime6_full_range(micros, ts):
    assert one(cfg({"v": "timestamp"}), [field("v", "int64", "io.debezium.time.MicroTimestamp")], {"v": micros})["v"] == ts


def test_datetime_under_connect_is_milliseconds():
    f = field("v", "int64", "org.apache.kafka.connect.data.Timestamp")
    assert one(cfg({"v": "timestamp"}, "connect"), [f], {"v": 1705314600123})["v"] == \
        dt.datetime(2024, 1, 15, 10, 30, 0, 123000, tzinfo=UTC)


@pytest.mark.parametrize("text, ts", [
    ("2024-01-15T10:30:00.123456Z", dt.datetime(2024, 1, 15, 10, 30, 0, 123456, tzinfo=UTC)),
    ("1970-01-01T00:00:01Z", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),  # snapshot: zero fraction trimmed
    ("1970-01-01T00:00:01.000000Z", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),  # streaming: 6 digits
    ("2038-01-19T03:14:07.999999Z", dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)),
    ("9999-12-31T23:59:59.999999Z", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
])
def test_timestamp6_zoned_text(text, ts):
    assert one(cfg({"v": "timestamp"}), [field("v", "string", "io.debezium.time.ZonedTimestamp")], {"v": text})["v"] == ts


def test_zero_dates_arrive_as_debezium_makes_them():
    # DATE/DATETIME '0000-00-00' in a nullable column: null; TIMESTAMP: the epoch (README)
    c = cfg({"d": "date", "ts": "timestamp"})
    got = one(c, [field("d", "int32", "io.debezium.time.Date"), field("ts", "string", "io.debezium.time.ZonedTimestamp")],
              {"d": None, "ts": "1970-01-01T00:00:00.000000Z"})
    assert got == {"id": 1, "d": None, "ts": dt.datetime(1970, 1, 1, tzinfo=UTC)}


# ---------------------------------------------------------------- ENUM, SET, JSON, YEAR

def test_enum_set_json_year():
    fields = [field("e", "string", "io.debezium.data.Enum", allowed="new,paid,shipped"),
              field("s", "string", "io.debezium.data.EnumSet", allowed="a,b,c"),
              field("j", "string"),  # MariaDB: JSON is LONGTEXT, no semantic name
              field("k", "string", "io.debezium.data.Json"),  # Oracle MySQL
              field("y", "int32", "io.debezium.time.Year")]
    c = cfg({"e": "string", "s": "string", "j": "string", "k": "string", "y": "int"})
    after = {"e": "paid", "s": "a,c", "j": '{"x": 1e400, "s": "\\u017c"}', "k": "[1, 2]", "y": 2024}
    assert one(c, fields, after) == {"id": 1, **after}
    assert one(c, fields, {**after, "s": "", "y": 1901})["s"] == ""


# ---------------------------------------------------------------- BIT, BINARY, BLOB

def test_bit_n_is_little_endian_bytes():
    f = field("v", "bytes", "io.debezium.data.Bits", length=16)
    # b'0000000100000010' = 258 is sent as the bytes 02 01
    raw = base64.b64encode(bytes([2, 1])).decode()
    assert one(cfg({"v": "long"}), [f], {"v": raw})["v"] == 258
    assert one(cfg({"v": "binary"}), [f], {"v": raw})["v"] == bytes([1, 2])
    assert one(cfg({"v": "boolean"}), [field("v", "boolean")], {"v": False})["v"] is False  # BIT(1)


def test_binary_and_blob_into_binary():
    f = field("v", "bytes")
    data = bytes([0, 255, 16, 0, 0])  # BINARY(5) right-padded with 0x00
    assert one(cfg({"v": "binary"}), [f], {"v": base64.b64encode(data).decode()})["v"] == data
    assert one(cfg({"v": "binary"}), [f], {"v": ""})["v"] == b""
    assert reject(cfg({"v": "binary"}), [f], {"v": "not base64!"}).code == E.DATA_WRONG_TYPE
    # binary.handling.mode=hex/base64 send "string" fields, which cannot be told apart: refused
    assert reject(cfg({"v": "binary"}), [field("v", "string")], {"v": "00ff"}).code == E.DATA_WRONG_TYPE


def test_binary_mirror_frame():
    from connectors.delta_sink import mirror_changes_frame

    c = cfg({"v": "binary"})
    frame = mirror_changes_frame(c.table("t"), {(1,): {"id": 1, "v": b"\x00\x01"}, (2,): None})
    assert frame.column("v").to_pylist()[0] == b"\x00\x01"


# ---------------------------------------------------------------- before images never quarantine a change

def test_undecodable_before_values_are_ignored_and_counted():
    c = cfg({"v": "boolean", "t": "string"})
    fields = [INT16, {**MICRO_TIME, "field": "t"}]
    bad_before = {"id": 1, "v": 2, "t": 1}  # 2 is not a boolean
    out = decode(c, [envelope(fields, bad_before, {"id": 1, "v": 1, "t": 5}, "u"),
                     envelope(fields, bad_before, None, "d")])
    assert out.rejected == []
    u, d = out.events["t"]
    assert (u.op, u.key, u.after["v"], u.before["v"]) == ("u", (1,), True, None)
    assert (d.op, d.key, d.after) == ("d", (1,), None)
    assert out.before_ignored == 2


def test_before_image_with_an_undecodable_key_uses_the_message_key():
    c = cfg({"v": "int"})
    value = envelope([field("v", "int32")], {"id": "x", "v": 1}, None, "d")
    value["schema"]["fields"][0]["fields"][0]["type"] = "string"  # a broken before key
    out = decode(c, [value], key=4)
    assert out.rejected == [] and out.events["t"][0].key == (4,)
    # no message key either: nothing names the row
    out = decode_batch(c, [("my.shop.t", 0, 0, None, json.dumps(value).encode())])
    assert out.rejected[0].code == E.DATA_MISSING_KEY


def test_after_image_is_still_checked():
    c = cfg({"v": "boolean"})
    out = decode(c, [envelope([INT16], {"id": 1, "v": 1}, {"id": 1, "v": 3}, "u")])
    assert [r.code for r in out.rejected] == [E.DATA_NOT_BOOLEAN]
