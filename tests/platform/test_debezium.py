"""Debezium decoding: every accepted shape, every rejection code, and net changes per key."""

import datetime as dt
import json
from decimal import Decimal

import pytest

from connectors.debezium import decode_batch, net_changes
from connectors.producer import envelope
from operators import errors as E
from streaming_app.config import parse_config

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


def row(i, **kw):
    r = {"id": i, "name": f"n{i}", "price": "1.50", "qty": 2, "day": "2024-01-02",
         "ts": 1_700_000_000_000, "ok": True, "w": 0.5}
    r.update(kw)
    return r


def rec(value, key=None, topic="cdc.items", offset=[0]):
    offset[0] += 1
    k = json.dumps(key).encode() if key is not None else None
    v = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
    return (topic, 0, offset[0], k, v)


def test_types_are_coerced_and_wrapper_is_optional():
    plain = rec({"op": "c", "before": None, "after": row(1)}, key={"id": 1})
    wrapped = rec({"schema": {}, "payload": {"op": "r", "before": None, "after": row(2, day=19000)}},
                  key={"schema": {}, "payload": {"id": 2}})
    out = decode_batch(CFG, [plain, wrapped])
    assert out.rejected == []
    a, b = out.events["items"]
    assert a.after["price"] == Decimal("1.50") and a.after["day"] == dt.date(2024, 1, 2)
    assert a.after["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert b.op == "r" and b.after["day"] == dt.date(1970, 1, 1) + dt.timedelta(days=19000)


@pytest.mark.parametrize("value, key, topic, code", [
    (b"{not json", {"id": 1}, "cdc.items", E.DATA_INVALID_JSON),
    ({"op": "x", "after": row(1)}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": "t", "after": None}, {"id": 1}, "cdc.items", E.DATA_UNKNOWN_OP),
    ({"op": "c", "after": row(1, qty="two")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, qty=2**40)}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1, price="1.234.5")}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": {"id": 1}}, {"id": 1}, "cdc.items", E.DATA_WRONG_TYPE),
    ({"op": "c", "after": row(1)}, {"id": 1}, "unknown.topic", E.DATA_UNKNOWN_TABLE),
    ({"op": "c", "after": {"k": 1}, "source": {"table": "tc"}}, {"k": 1}, "shared", E.DATA_UNKNOWN_TABLE),
    ({"op": "d", "before": None}, None, "cdc.items", E.DATA_MISSING_KEY),
    ({"op": "c", "after": row(None)}, None, "cdc.items", E.DATA_MISSING_KEY),
    ({"op": "u", "before": row(1)}, {"id": 1}, "cdc.items", E.DATA_MISSING_IMAGE),
    ({"op": "c", "after": row(1, price=None)}, {"id": 1}, "cdc.items", E.DATA_NULL),
    ({"op": "c", "after": row(1, qty=-1)}, {"id": 1}, "cdc.items", E.DATA_OUT_OF_RANGE),
    ({"op": "u", "before": row(1), "after": row(1, price="1000.01")}, {"id": 1}, "cdc.items", E.DATA_OUT_OF_RANGE),
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
    edge = decode_batch(CFG, [rec({"op": "c", "after": row(2, qty=100, price="0")}, {"id": 2}),
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
