"""One test per Debezium / Kafka Connect semantic type, with values worked out by hand.

Expected values come from Debezium's documentation and the digest in
/work/shared/anchors/debezium.md: "BNI=" is the unscaled 1234 (0x04D2), so 12.34 at scale 2;
MicroTimestamp -14182940000000 is 1969-07-20 20:17:40 (the Apollo 11 landing, the doc's
example); date 'infinity' is -2147472692; VariableScaleDecimal {"scale":1,"value":"Iw=="} is
3.5 (0x23 = 35).
"""

import datetime as dt
import json
from decimal import Decimal

import pytest

from connectors.debezium import decode_batch
from core import errors as E
from streaming_app.settings import parse_config

UTC = dt.timezone.utc


def cfg(columns, decimal_mode="precise", time_mode="adaptive", not_null=()):
    return parse_config({"tables": [{
        "name": "t", "topic": "t", "primary_key": "id", "columns": {"id": "long", **columns},
        "not_null": list(not_null), "decimal_handling_mode": decimal_mode, "time_precision_mode": time_mode}]})


def field(name, typ, sem=None, **params):
    f = {"type": typ, "optional": True, "field": name}
    if sem:
        f.update(name=sem, version=1)
    if params:
        f["parameters"] = {k: str(v) for k, v in params.items()}
    return f


def wrapped(fields, after, op="c"):
    value_schema = {"type": "struct", "name": "p.public.t.Value", "optional": True,
                    "fields": [{"type": "int64", "optional": False, "field": "id"}, *fields]}
    schema = {"type": "struct", "name": "p.public.t.Envelope", "version": 2, "fields": [
        {**value_schema, "field": "before"}, {**value_schema, "field": "after"},
        {"type": "string", "optional": False, "field": "op"}]}
    return {"schema": schema, "payload": {"before": None, "after": {"id": 1, **after}, "op": op}}


def decode(c, value, key=None):
    v = value if isinstance(value, bytes) else json.dumps(value).encode()
    out = decode_batch(c, [("t", 0, 0, json.dumps(key or {"id": 1}).encode(), v)])
    return out


def one(c, value):
    out = decode(c, value)
    assert out.rejected == [], out.rejected
    (ev,) = out.events["t"]
    return ev.after


def code(c, value):
    out = decode(c, value)
    assert len(out.rejected) == 1 and out.events["t"] == [], out
    return out.rejected[0].code


DEC = field("v", "bytes", "org.apache.kafka.connect.data.Decimal", scale=2, **{"connect.decimal.precision": 10})


# ---------------------------------------------------------------- decimals

@pytest.mark.parametrize("b64, expected", [("BNI=", "12.34"), ("+y4=", "-12.34"), ("AA==", "0.00"),
                                           ("AIA=", "1.28"), ("/4A=", "-1.28")])
def test_connect_decimal_is_base64_unscaled_with_schema_scale(b64, expected):
    assert one(cfg({"v": "decimal(10,2)"}), wrapped([DEC], {"v": b64}))["v"] == Decimal(expected)


def test_connect_decimal_into_wider_scale_and_into_double():
    assert one(cfg({"v": "decimal(12,4)"}), wrapped([DEC], {"v": "BNI="}))["v"] == Decimal("12.3400")
    assert one(cfg({"v": "double"}), wrapped([DEC], {"v": "BNI="}))["v"] == 12.34


def test_connect_decimal_that_does_not_fit_is_not_representable():
    # 12.34 into decimal(10,1): a non-zero digit past the scale; into decimal(3,2): too many digits
    assert code(cfg({"v": "decimal(10,1)"}), wrapped([DEC], {"v": "BNI="})) == E.DATA_NOT_REPRESENTABLE
    assert code(cfg({"v": "decimal(3,2)"}), wrapped([DEC], {"v": "BNI="})) == E.DATA_NOT_REPRESENTABLE
    # 12.30 into decimal(10,1) is exact
    assert one(cfg({"v": "decimal(10,1)"}), wrapped([DEC], {"v": "BM4="}))["v"] == Decimal("12.3")


def test_decimal_of_38_digits_is_exact():
    unscaled = 10**37 + 12345678901234567890123456789  # 38 digits, beyond the default 28-digit context
    b = unscaled.to_bytes(16, "big", signed=True)
    import base64
    dec = field("v", "bytes", "org.apache.kafka.connect.data.Decimal", scale=4)
    got = one(cfg({"v": "decimal(38,4)"}), wrapped([dec], {"v": base64.b64encode(b).decode()}))["v"]
    assert got == Decimal(unscaled).scaleb(-4, context=__import__("decimal").Context(prec=50))
    assert got.as_tuple().digits == tuple(int(c) for c in str(unscaled))


def test_variable_scale_decimal():
    vsd = field("v", "struct", "io.debezium.data.VariableScaleDecimal")
    assert one(cfg({"v": "decimal(10,2)"}), wrapped([vsd], {"v": {"scale": 1, "value": "Iw=="}}))["v"] == Decimal("3.5")
    assert code(cfg({"v": "decimal(10,2)"}), wrapped([vsd], {"v": {"scale": 3, "value": "Iw=="}})) \
        == E.DATA_NOT_REPRESENTABLE  # 0.035 has a digit past scale 2
    assert code(cfg({"v": "decimal(10,2)"}), wrapped([vsd], {"v": {"scale": 1}})) == E.DATA_WRONG_TYPE


def test_string_and_double_decimal_modes():
    s = field("v", "string")
    assert one(cfg({"v": "decimal(10,2)"}), wrapped([s], {"v": "7.10"}))["v"] == Decimal("7.10")
    for special in ("NAN", "POSITIVE_INFINITY", "NEGATIVE_INFINITY"):
        assert code(cfg({"v": "decimal(10,2)"}), wrapped([s], {"v": special})) == E.DATA_NOT_REPRESENTABLE
    d = field("v", "double")
    assert one(cfg({"v": "decimal(10,2)"}), wrapped([d], {"v": 7.1}))["v"] == Decimal("7.10")
    assert code(cfg({"v": "decimal(10,2)"}), wrapped([d], {"v": "NaN"})) == E.DATA_NOT_REPRESENTABLE
    # schemaless, the table's mode says how to read a string
    assert one(cfg({"v": "decimal(10,2)"}, "string"), {"op": "c", "after": {"id": 1, "v": "7.10"}})["v"] == Decimal("7.1")
    assert code(cfg({"v": "decimal(10,2)"}, "string"), {"op": "c", "after": {"id": 1, "v": "NAN"}}) \
        == E.DATA_NOT_REPRESENTABLE
    assert one(cfg({"v": "decimal(10,2)"}), {"op": "c", "after": {"id": 1, "v": "BNI="}})["v"] == Decimal("12.34")
    # base64 that looks like a number is base64 in precise mode: "2024" is 0xDB4DB8 = -2404936 -> -24049.36
    assert one(cfg({"v": "decimal(10,2)"}), {"op": "c", "after": {"id": 1, "v": "2024"}})["v"] == Decimal("-24049.36")
    # JSON numbers are unambiguous in any mode
    for mode in ("precise", "string", "double"):
        assert one(cfg({"v": "decimal(10,2)"}, mode), {"op": "c", "after": {"id": 1, "v": 1.5}})["v"] == Decimal("1.5")


def test_precise_null_for_numeric_nan_is_just_null():
    assert one(cfg({"v": "decimal(10,2)"}), wrapped([DEC], {"v": None}))["v"] is None


# ---------------------------------------------------------------- floats

@pytest.mark.parametrize("text, check", [("NaN", lambda f: f != f), ("Infinity", lambda f: f == float("inf")),
                                         ("-Infinity", lambda f: f == float("-inf"))])
def test_double_specials_arrive_as_strings(text, check):
    for f in (field("v", "double"), field("v", "float")):
        assert check(one(cfg({"v": "double"}), wrapped([f], {"v": text}))["v"])
    assert check(one(cfg({"v": "double"}), {"op": "c", "after": {"id": 1, "v": text}})["v"])


def test_double_overflow_is_not_infinity():
    assert code(cfg({"v": "double"}), b'{"op":"c","after":{"id":1,"v":1e400}}') == E.DATA_NOT_REPRESENTABLE
    assert code(cfg({"v": "double"}), b'{"op":"c","after":{"id":1,"v":NaN}}') == E.DATA_INVALID_JSON


# ---------------------------------------------------------------- dates

def test_dates_in_days_both_names():
    for name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        f = field("v", "int32", name)
        assert one(cfg({"v": "date"}), wrapped([f], {"v": 19724}))["v"] == dt.date(2024, 1, 2)
        assert one(cfg({"v": "date"}), wrapped([f], {"v": -1}))["v"] == dt.date(1969, 12, 31)


@pytest.mark.parametrize("days", [-2147472692, -2147472691, 3_000_000])
def test_infinity_and_out_of_range_dates_are_not_representable(days):
    f = field("v", "int32", "io.debezium.time.Date")
    assert code(cfg({"v": "date"}), wrapped([f], {"v": days})) == E.DATA_NOT_REPRESENTABLE
    assert code(cfg({"v": "date"}), {"op": "c", "after": {"id": 1, "v": days}}) == E.DATA_NOT_REPRESENTABLE


def test_date_text_must_parse_exactly():
    c = cfg({"v": "date"})
    assert one(c, {"op": "c", "after": {"id": 1, "v": "2024-02-29"}})["v"] == dt.date(2024, 2, 29)
    for bad in ("2024-01-02junk", "2023-02-29", "20240102", "2024-1-2", "２０２４-01-02"):
        assert code(c, {"op": "c", "after": {"id": 1, "v": bad}}) == E.DATA_WRONG_TYPE, bad


# ---------------------------------------------------------------- timestamps

APOLLO = dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)


@pytest.mark.parametrize("name, value", [
    ("io.debezium.time.MicroTimestamp", -14182940000000),
    ("io.debezium.time.Timestamp", -14182940000),
    ("org.apache.kafka.connect.data.Timestamp", -14182940000),
    ("io.debezium.time.NanoTimestamp", -14182940000000000),
])
def test_timestamps_by_unit(name, value):
    f = field("v", "int64", name)
    assert one(cfg({"v": "timestamp"}), wrapped([f], {"v": value}))["v"] == APOLLO


def test_sub_microsecond_nano_timestamp_is_not_rounded():
    f = field("v", "int64", "io.debezium.time.NanoTimestamp")
    assert code(cfg({"v": "timestamp"}), wrapped([f], {"v": 1_000_000_001})) == E.DATA_NOT_REPRESENTABLE
    assert one(cfg({"v": "timestamp"}), wrapped([f], {"v": 1_000_001_000}))["v"] == \
        dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("name, value", [
    ("io.debezium.time.MicroTimestamp", 9223372036825200000), ("io.debezium.time.MicroTimestamp", -9223372036832400000),
    ("org.apache.kafka.connect.data.Timestamp", 9223372036825200),
    ("org.apache.kafka.connect.data.Timestamp", -9223372036832400)])
def test_timestamp_infinity_sentinels(name, value):
    f = field("v", "int64", name)
    out = decode(cfg({"v": "timestamp"}), wrapped([f], {"v": value}))
    assert out.rejected[0].code == E.DATA_NOT_REPRESENTABLE and "infinity" in out.rejected[0].reason


def test_schemaless_timestamps_follow_the_time_mode_never_the_size():
    row = {"op": "c", "after": {"id": 1, "v": -14182940000000}}
    assert one(cfg({"v": "timestamp"}), row)["v"] == APOLLO  # adaptive: µs
    # the same number read as connect-mode milliseconds is another instant (the mode says which)
    assert one(cfg({"v": "timestamp"}, time_mode="connect"), row)["v"].year == 1520
    assert one(cfg({"v": "timestamp"}, time_mode="connect"),
               {"op": "c", "after": {"id": 1, "v": -14182940000}})["v"] == APOLLO
    assert one(cfg({"v": "timestamp"}, time_mode="nanoseconds"),
               {"op": "c", "after": {"id": 1, "v": -14182940000000000}})["v"] == APOLLO
    assert code(cfg({"v": "timestamp"}, time_mode="isostring"), row) == E.DATA_WRONG_TYPE


def test_zoned_timestamp():
    f = field("v", "string", "io.debezium.time.ZonedTimestamp")
    c = cfg({"v": "timestamp", "s": "string"})
    got = one(c, wrapped([f, {**f, "field": "s"}], {"v": "2023-06-01T08:15:30.250000Z", "s": "2023-06-01T08:15:30Z"}))
    assert got["v"] == dt.datetime(2023, 6, 1, 8, 15, 30, 250000, tzinfo=UTC)
    assert got["s"] == "2023-06-01T08:15:30Z"  # into a string column: the text as sent
    assert one(c, wrapped([f], {"v": "2023-06-01T10:15:30+02:00"}))["v"] == dt.datetime(2023, 6, 1, 8, 15, 30, tzinfo=UTC)
    for inf in ("infinity", "-infinity"):
        assert code(c, wrapped([f], {"v": inf})) == E.DATA_NOT_REPRESENTABLE
    assert code(c, wrapped([f], {"v": "2023-06-01T08:15:30.1234567Z"})) == E.DATA_NOT_REPRESENTABLE
    assert one(c, wrapped([f], {"v": "2023-06-01T08:15:30.1234560Z"}))["v"].microsecond == 123456
    assert code(c, wrapped([f], {"v": "2023-06-01T08:15:30Zjunk"})) == E.DATA_WRONG_TYPE


def test_naive_iso_timestamp_is_utc_wall_clock():
    got = one(cfg({"v": "timestamp"}), {"op": "c", "after": {"id": 1, "v": "1969-07-20T20:17:40"}})
    assert got["v"] == APOLLO


# ---------------------------------------------------------------- times of day

@pytest.mark.parametrize("name, value", [("io.debezium.time.Time", 45_296_789),
                                         ("org.apache.kafka.connect.data.Time", 45_296_789),
                                         ("io.debezium.time.MicroTime", 45_296_789_000),
                                         ("io.debezium.time.NanoTime", 45_296_789_000_000)])
def test_time_of_day_into_string_and_long(name, value):
    f = field("v", "int64", name)
    got = one(cfg({"v": "string", "w": "long"}), wrapped([f, {**f, "field": "w"}], {"v": value, "w": value}))
    assert got == {"id": 1, "v": "12:34:56.789000", "w": 45_296_789_000}


def test_zoned_time_and_whole_seconds():
    f = field("v", "string", "io.debezium.time.ZonedTime")
    got = one(cfg({"v": "string", "w": "long"}), wrapped([f, {**f, "field": "w"}], {"v": "12:34:56Z", "w": "12:34:56Z"}))
    assert got == {"id": 1, "v": "12:34:56Z", "w": 45_296_000_000}
    t = field("v", "int64", "io.debezium.time.MicroTime")
    assert one(cfg({"v": "string"}), wrapped([t], {"v": 3_600_000_000}))["v"] == "01:00:00"


# ---------------------------------------------------------------- plain types

def test_plain_connect_types():
    fields = [field("i", "int32"), field("b", "boolean"), field("s", "string"), field("j", "string", "io.debezium.data.Json")]
    got = one(cfg({"i": "int", "b": "boolean", "s": "string", "j": "string"}),
              wrapped(fields, {"i": 7, "b": False, "s": "x", "j": '{"a": 1}'}))
    assert got == {"id": 1, "i": 7, "b": False, "s": "x", "j": '{"a": 1}'}
    assert code(cfg({"i": "int"}), wrapped([field("i", "int32")], {"i": 2**31})) == E.DATA_WRONG_TYPE  # schema says int32
    assert code(cfg({"i": "int"}), wrapped([field("i", "int64")], {"i": 2**31})) == E.DATA_NOT_REPRESENTABLE


def test_schema_is_cached_per_text_not_per_topic():
    from connectors import debezium

    c = cfg({"v": "decimal(10,2)"})
    v1 = wrapped([DEC], {"v": "BNI="})
    v2 = wrapped([{**DEC, "parameters": {"scale": "3"}}], {"v": "BNI="})  # same topic, new schema text
    out = decode_batch(c, [("t", 0, 0, b'{"id":1}', json.dumps(v1).encode()),
                           ("t", 0, 1, b'{"id":1}', json.dumps(v2).encode())])
    assert [e.after["v"] for e in out.events["t"]] == [Decimal("12.34"), Decimal("1.234")] or \
        out.rejected[0].code == E.DATA_NOT_REPRESENTABLE  # 1.234 has a digit past scale 2
    assert any(k.startswith("v") and '"scale": "3"' in k for k in debezium._SCHEMA_CACHE)


def test_integral_json_numbers_into_integer_columns():
    c = cfg({"i": "int"})
    for text, want in ((b"3.0", 3), (b"0E+999999", 0), (b"-0.0", 0), (b"1E+3", 1000)):
        assert one(c, b'{"op":"c","after":{"id":1,"i":' + text + b"}}")["i"] == want
    for text in (b"3.5", b"1E+10", b"1E+999999"):
        assert code(c, b'{"op":"c","after":{"id":1,"i":' + text + b"}}") == E.DATA_NOT_REPRESENTABLE
