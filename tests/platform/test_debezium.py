"""Debezium decoding: every accepted shape, every rejection code, and net changes per key.

Records here are schemaless and use Debezium's default encodings (decimal mode precise:
base64 of the unscaled value; time mode adaptive: dates in days, timestamps in epoch µs).
"""

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from connectors.debezium import decode_batch, net_changes
from core import errors as E
from devstack.producer import envelope
from streaming_app.settings import parse_config

CFG = parse_config({
    "tables": [
        {"name": "items", "topic": "cdc.items", "primary_key": "id", "not_null": ["price"],
         "ranges": {"qty": [0, 100], "price": [0, 1000]},
         "columns": {"id": "long", "name": "string", "price": "decimal(10,2)", "qty": "int",
                     "day": "date", "ts": "timestamp", "ok": "boolean", "w": "double"}},
        {"name": "a", "topic": "shared", "primary_key": "k", "source_table": "ta",
         "columns": {"k": "long"}},
        {"name": "b", "topic": "shared", "primary_key": "k", "source_table": "tb",
         "columns": {"k": "long"}},
    ]
})
ITEMS = CFG.table("items")


def b64(unscaled: int) -> str:
    """Base64 of a big-endian two's-complement integer, as Kafka Connect's Decimal carries it."""
    n = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


def row(i, **kw):
    r = {"id": i, "name": f"n{i}", "price": b64(150), "qty": 2, "day": "2024-01-02",
         "ts": 1_700_000_000_000_000, "ok": True, "w": 0.5}
    r.update(kw)
    return r


def _dumps(doc):
    return json.dumps(doc, default=str).replace('"1E+400"', "1e400").encode()


def rec(value, key=None, topic="cdc.items", offset=[0]):
    offset[0] += 1
    k = json.dumps(key).encode() if key is not None else None
    v = value if isinstance(value, (bytes, type(None))) else _dumps(value)
    return (topic, 0, offset[0], k, v)


def test_types_are_coerced_and_wrapper_is_optional():
    plain = rec({"op": "c", "before": None, "after": row(1)}, key={"id": 1})
    wrapped = rec({"schema": {}, "payload": {"op": "r", "before": None, "after": row(2, day=19000)}},
                  key={"schema": {}, "payload": {"id": 2}})
    out = decode_batch(CFG, [plain, wrapped])
    assert out.rejected == []
    a, b = out.events["items"]
    assert a.after["price"] == Decimal("1.50") and a.after["day"] == dt.date(2024, 1, 2)
    assert a.after["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)  # µs (adaptive)
    assert b.op == "r" and b.after["day"] == dt.date(1970, 1, 1) + dt.timedelta(days=19000)


@pytest.mark.parametrize("value, key, topic, code", [
    (b"{not json", {"id": 1}, "cdc.items", E.DATA_INVALID_JSON),
    ({"op": "x", "after": row(1)}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": "m", "message": {"prefix": "p"}}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": ["c"], "after": row(1)}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": {"c": 1}, "after": row(1)}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": "c", "after": row(1, qty="two")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, qty=2**40)}, {"id": 1}, "cdc.items", E.DATA_NOT_REPRESENTABLE),
    ({"op": "c", "after": row(1, price="1.234.5")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, price="1.50")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, price=b64(100001))}, {"id": 1}, "cdc.items", E.DATA_OUT_OF_RANGE),
    ({"op": "c", "after": row(1, price=1.505)}, {"id": 1}, "cdc.items", E.DATA_NOT_REPRESENTABLE),
    ({"op": "c", "after": row(1, day="2024-01-02junk")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, ts="2024-01-02T99:99:99")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, day=-2147472692)}, {"id": 1}, "cdc.items", E.DATA_NOT_REPRESENTABLE),
    ({"op": "c", "after": row(1, w=Decimal("1e400"))}, {"id": 1}, "cdc.items", E.DATA_NOT_REPRESENTABLE),
    ({"op": "c", "after": row(1, name="\ud800")}, {"id": 1}, "cdc.items", E.DATA_NOT_REPRESENTABLE),
    ({"op": "c", "after": {"id": 1}}, {"id": 1}, "cdc.items", E.DATA_COLUMN_DROPPED),
    ({"op": "c", "after": row(2)}, {"id": 1}, "cdc.items", E.DATA_KEY_MISMATCH),
    ({"op": "d", "before": row(2)}, {"id": 1}, "cdc.items", E.DATA_KEY_MISMATCH),
    ({"op": "c", "after": row(1)}, {"idx": 1}, "cdc.items", E.DATA_MISSING_KEY),
    ({"op": "c", "after": row(1)}, {"id": 1}, "unknown.topic", E.DATA_UNKNOWN_TABLE),
    ({"op": "c", "after": {"k": 1}, "source": {"table": "tc"}}, {"k": 1}, "shared", E.DATA_UNKNOWN_TABLE),
    ({"op": "d", "before": None}, None, "cdc.items", E.DATA_MISSING_KEY),
    ({"op": "c", "after": row(None)}, None, "cdc.items", E.DATA_MISSING_KEY),
    ({"op": "u", "before": row(1)}, {"id": 1}, "cdc.items", E.DATA_MISSING_IMAGE),
    ({"op": "c", "after": row(1, price=None)}, {"id": 1}, "cdc.items", E.DATA_NULL),
    ({"op": "c", "after": row(1, qty=-1)}, {"id": 1}, "cdc.items", E.DATA_OUT_OF_RANGE),
    ({"op": "u", "before": row(1), "after": row(1, price=b64(100001))}, {"id": 1}, "cdc.items", E.DATA_OUT_OF_RANGE),
    ({"op": "u", "before": row(1), "after": row(1, price=None)}, {"id": 1}, "cdc.items", E.DATA_NULL),
])
def test_bad_records_are_rejected_with_their_code(value, key, topic, code):
    out = decode_batch(CFG, [rec(value, key=key, topic=topic)])
    assert [r.code for r in out.rejected] == [code]
    assert out.rejected[0].reason and out.rejected[0].topic == topic
    assert sum(len(v) for v in out.events.values()) == 0


def test_not_null_is_checked_on_after_images_only():
    # other columns may be NULL; a delete's before image may carry the key alone
    ok = [rec({"op": "c", "after": row(1, name=None, qty=None)}, {"id": 1}),
          rec({"op": "d", "before": {c: (1 if c == "id" else None) for c in row(1)}}, {"id": 1})]
    out = decode_batch(CFG, ok)
    assert out.rejected == [] and len(out.events["items"]) == 2
    with pytest.raises(Exception, match="not_null"):
        parse_config({"tables": [{"name": "t", "topic": "t", "primary_key": "k", "columns": {"k": "long"},
                                  "not_null": ["nope"]}]})
    # range ends are inclusive; a NULL is not out of range (not_null says whether it may be NULL)
    edge = decode_batch(CFG, [rec({"op": "c", "after": row(2, qty=100, price=b64(0))}, {"id": 2}),
                              rec({"op": "c", "after": row(3, qty=None)}, {"id": 3})])
    assert edge.rejected == []
    for bad in ({"nope": [0, 1]}, {"k": [1, 0]}, {"k": [0]}, {"s": [0, 1]}, {"k": ["a", "b"]}, [1]):
        with pytest.raises(Exception, match="ranges"):
            parse_config({"tables": [{"name": "t", "topic": "t", "primary_key": "k",
                                      "columns": {"k": "long", "s": "string"}, "ranges": bad}]})


def test_tombstones_are_counted_not_rejected():
    out = decode_batch(CFG, [rec(None, key={"id": 1})])
    assert out.tombstones == 1 and out.rejected == []


def test_shared_topic_routes_by_source_table():
    out = decode_batch(CFG, [rec({"op": "c", "after": {"k": 1}, "source": {"table": "tb"}}, {"k": 1}, "shared")])
    assert [e.table for e in out.events["b"]] == ["b"] and out.events["a"] == []


def test_delete_without_before_uses_message_key():
    out = decode_batch(CFG, [rec({"op": "d", "before": None, "after": None}, key={"id": 7})])
    (ev,) = out.events["items"]
    assert ev.key == (7,) and ev.after is None


def test_primary_key_change_is_delete_plus_insert_and_net_changes_keep_last():
    evs = [
        rec({"op": "c", "after": row(1)}, {"id": 1}),
        rec({"op": "u", "before": row(1), "after": row(2)}, {"id": 2}),
        rec({"op": "u", "before": None, "after": row(2, qty=9)}, {"id": 2}),
        rec({"op": "c", "after": row(3)}, {"id": 3}),
        rec({"op": "d", "before": row(3)}, {"id": 3}),
    ]
    out = decode_batch(CFG, evs)
    final = net_changes(out.events["items"])
    assert final[(1,)] is None and final[(3,)] is None and final[(2,)]["qty"] == 9


def test_producer_envelope_round_trips():
    r = {"id": 5, "name": "x", "price": Decimal("2.25"), "qty": 1, "day": dt.date(2020, 2, 29),
         "ts": dt.datetime(2021, 1, 1, tzinfo=dt.timezone.utc), "ok": False, "w": 1.0}
    v = envelope(ITEMS, "c", None, r, with_schema=True)
    (ev,) = decode_batch(CFG, [("cdc.items", 0, 1, b'{"id": 5}', v)]).events["items"]
    assert ev.after == r


# ---------------------------------------------------------------- TOAST, PK changes, truncate, schema changes

def test_toast_placeholder_never_becomes_a_value():
    out = decode_batch(CFG, [rec({"op": "u", "before": None,
                                  "after": row(1, name="__debezium_unavailable_value")}, {"id": 1})])
    (ev,) = out.events["items"]
    assert ev.after["name"] is None and ev.unavailable == frozenset({"name"})
    assert ev.after["qty"] == 2 and out.rejected == []


def test_toast_placeholder_in_a_not_null_column_is_not_a_null():
    cfg = parse_config({"tables": [{"name": "t", "topic": "t", "primary_key": "id", "not_null": ["body"],
                                    "columns": {"id": "long", "body": "string"}}]})
    out = decode_batch(cfg, [("t", 0, 1, b'{"id":1}', b'{"op":"u","after":{"id":1,"body":"__debezium_unavailable_value"}}')])
    assert out.rejected == [] and out.events["t"][0].unavailable == {"body"}


def test_primary_key_change_carries_old_key_from_header():
    # Debezium: d(old key), tombstone, c(new key) with __debezium.oldkey; the c may hold placeholders
    recs = [("cdc.items", 0, 1, b'{"id":1}', _dumps({"op": "d", "before": row(1)}), [("__debezium.newkey", b'{"id":2}')]),
            ("cdc.items", 0, 2, b'{"id":1}', None, [("__debezium.newkey", b'{"id":2}')]),
            ("cdc.items", 0, 3, b'{"id":2}', _dumps({"op": "c", "after": row(2, name="__debezium_unavailable_value")}),
             [("__debezium.oldkey", b'{"id":1}'), ("__debezium.context.connectorName", b"x")])]
    out = decode_batch(CFG, recs)
    d, c = out.events["items"]
    assert (d.op, d.key, c.op, c.key, c.old_key, c.unavailable) == ("d", (1,), "c", (2,), (1,), {"name"})
    assert out.tombstones == 1 and out.rejected == []
    # the header may carry a schema wrapper too
    wrapped_key = b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}]},"payload":{"id":1}}'
    (c2,) = decode_batch(CFG, [recs[2][:5] + ([("__debezium.oldkey", wrapped_key)],)]).events["items"]
    assert c2.old_key == (1,)
    spark_style = [{"key": "__debezium.oldkey", "value": b'{"id":1}'}, {"key": "x", "value": None}]
    (c3,) = decode_batch(CFG, [recs[2][:5] + (spark_style,)]).events["items"]
    assert c3.old_key == (1,)
    assert decode_batch(CFG, [recs[2][:5] + ([("__debezium.oldkey", b"{oops")],)]).rejected[0].code == E.DATA_MISSING_KEY


def test_truncate_is_an_event_in_log_order():
    recs = [rec({"op": "c", "after": row(1)}, {"id": 1}),
            rec({"op": "t", "before": None, "after": None, "source": {"table": "items"}}),
            rec({"op": "c", "after": row(2)}, {"id": 2})]
    out = decode_batch(CFG, recs)
    assert [(e.op, e.key) for e in out.events["items"]] == [("c", (1,)), ("t", ()), ("c", (2,))]
    t = out.events["items"][1]
    assert t.before is None and t.after is None
    shared = decode_batch(CFG, [rec({"op": "t", "source": {"table": "tb"}}, topic="shared")])
    assert [e.op for e in shared.events["b"]] == ["t"] and shared.events["a"] == []


def test_dropped_columns_read_as_null_once_per_batch_and_not_null_ones_are_rejected():
    r = row(1)
    del r["name"], r["qty"]
    r2 = row(2)
    del r2["name"]
    out = decode_batch(CFG, [rec({"op": "c", "after": r}, {"id": 1}), rec({"op": "c", "after": r2}, {"id": 2}),
                             rec({"op": "c", "after": {**row(3), "added": 5}}, {"id": 3})])
    assert out.rejected == [] and [e.after["name"] for e in out.events["items"]] == [None, None, "n3"]
    assert out.schema_changes == [("items", "name", "dropped"), ("items", "qty", "dropped")]
    r3 = row(4)
    del r3["price"]  # not_null
    bad = decode_batch(CFG, [rec({"op": "c", "after": r3}, {"id": 4})])
    assert [x.code for x in bad.rejected] == [E.DATA_COLUMN_DROPPED] and bad.schema_changes == []
    # a REPLICA IDENTITY DEFAULT delete: every field present, nulls outside the key: not a drop
    d = decode_batch(CFG, [rec({"op": "d", "before": {c: (4 if c == "id" else None) for c in row(4)}}, {"id": 4})])
    assert d.rejected == [] and d.schema_changes == []


def test_message_key_is_the_identity():
    # key and image agree: fine; no message key: the image's key; disagreement: quarantined
    out = decode_batch(CFG, [rec({"op": "c", "after": row(1)}, None),
                             rec({"op": "u", "after": row(2)}, {"id": 3}),
                             rec({"op": "d", "before": None}, {"id": 5})])
    assert [(e.op, e.key) for e in out.events["items"]] == [("c", (1,)), ("d", (5,))]
    assert [r.code for r in out.rejected] == [E.DATA_KEY_MISMATCH]


@pytest.mark.parametrize("key, value", [
    (b"\xff\xfe", b'{"op":"c","after":{}}'), (b'{"id":1}', b"\xff" * 3), (b'{"id":1}', b"[" * 100_000),
    (b"[" * 100_000, _dumps({"op": "c", "after": row(1)})), (b'{"id":1}', b'{"op":"c","after":{"id":1e99999}}'),
    (b'{"id":1}', b'{"op":"c","after":{"id":' + b"9" * 5000 + b"}}"), (b"null", b"null"), (b"1", b"1"),
    (b'{"id":1}', b'{"schema":5,"payload":{"op":"c","after":{"id":1}}}'),
    (b'{"id":1}', b'{"schema":{"fields":[{"field":"after","fields":[7]}]},"payload":{"op":"c","after":{"id":1}}}'),
])
def test_any_bytes_are_decoded_or_rejected_never_raised(key, value):
    out = decode_batch(CFG, [("cdc.items", 0, 1, key, value, [(b"\xff", 5), "junk", None])])
    assert out.records == 1 and len(out.rejected) + out.tombstones + len(out.events["items"]) == 1


@pytest.mark.parametrize("decimal_mode", ["precise", "string", "double"])
@pytest.mark.parametrize("time_mode", ["adaptive", "adaptive_time_microseconds", "connect", "microseconds",
                                       "nanoseconds", "isostring"])
@pytest.mark.parametrize("with_schema", [False, True])
def test_producer_writes_what_debezium_writes_in_every_mode(decimal_mode, time_mode, with_schema):
    from devstack.producer import key_of

    cfg = parse_config({"tables": [{
        "name": "t", "topic": "t", "primary_key": ["id", "day"], "not_null": ["price"],
        "decimal_handling_mode": decimal_mode, "time_precision_mode": time_mode,
        "columns": {"id": "long", "day": "date", "price": "decimal(38,4)", "ts": "timestamp", "w": "double",
                    "n": "int", "s": "string", "ok": "boolean"}}]})
    t = cfg.table("t")
    ts = dt.datetime(1969, 7, 20, 20, 17, 40, 123000, tzinfo=dt.timezone.utc)  # whole ms: connect keeps it
    r = {"id": 2**62, "day": dt.date(1, 1, 1), "price": Decimal("-1234567890123456789012345678901.2345"),
         "ts": ts, "w": float("-inf"), "n": -7, "s": "é\"🎉", "ok": True}
    out = decode_batch(cfg, [("t", 0, 1, key_of(t, r, with_schema), envelope(t, "c", None, r, with_schema=with_schema))])
    assert out.rejected == []
    (ev,) = out.events["t"]
    expected = dict(r)
    if decimal_mode == "double":  # Debezium sends a double: the nearest one is what arrives
        expected["price"] = Decimal(repr(float(r["price"])))
    assert ev.key == (2**62, dt.date(1, 1, 1)) and ev.after == expected
    if with_schema:
        doc = json.loads(envelope(t, "c", None, r, with_schema=True))
        assert doc["schema"]["name"].endswith(".Envelope") and doc["schema"]["version"] == 2
        after = next(f for f in doc["schema"]["fields"] if f["field"] == "after")
        price = next(f for f in after["fields"] if f["field"] == "price")
        if decimal_mode == "precise":
            assert price["name"] == "org.apache.kafka.connect.data.Decimal" and price["parameters"]["scale"] == "4"
