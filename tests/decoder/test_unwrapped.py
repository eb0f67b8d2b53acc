"""Rows flattened by Debezium's ExtractNewRecordState ("unwrap") transform, and the config check
that refuses a connector whose deletes cannot reach the job.

Record shapes follow debezium-mysql.md section 6 (seen with delete.tombstone.handling.mode=rewrite
on MariaDB) and Debezium 3.3's event-flattening documentation for the other modes.
"""

import json

import pytest

from connectors.connect import connector_properties
from connectors.debezium import decode_batch
from core import errors as E
from core.errors import ConfigError
from streaming_app.settings import parse_config

TOPIC = "my.shop.items"


def cfg(fmt="unwrapped", debezium=None, columns=None):
    data = {"tables": [{"name": "items", "topic": TOPIC, "primary_key": ["id"], "format": fmt,
                        "columns": columns or {"id": "long", "name": "string", "flag": "boolean"}}]}
    if debezium is not None:
        data["debezium"] = {"connector": "mysql", "topic_prefix": "my", "database": "shop", **debezium}
    return parse_config(data)


def row_schema(extra=()):
    return {"type": "struct", "name": "my.shop.items.Value", "optional": False, "fields": [
        {"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"},
        {"type": "int16", "optional": True, "field": "flag"}, *extra]}


DELETED = {"type": "string", "optional": True, "field": "__deleted"}
ADDED = [{"type": "string", "optional": True, "field": "__op"}, {"type": "string", "optional": True, "field": "__table"},
         {"type": "int64", "optional": True, "field": "__source_ts_ms"}]


def rec(offset, key, value, schema=True, extra=(DELETED,), headers=None):
    k = None if key is None else json.dumps({"id": key}).encode()
    if value is None:
        v = None
    elif schema:
        v = json.dumps({"schema": row_schema(extra), "payload": value}).encode()
    else:
        v = json.dumps(value).encode()
    return (TOPIC, 0, offset, k, v, headers)


@pytest.mark.parametrize("schema", [True, False])
def test_rewrite_mode(schema):
    out = decode_batch(cfg(), [
        rec(0, 1, {"id": 1, "name": "a", "flag": 1, "__deleted": "false"}, schema),
        rec(1, 1, {"id": 1, "name": "b", "flag": 0, "__deleted": "false"}, schema),
        rec(2, 1, {"id": 1, "name": "b", "flag": 0, "__deleted": "true"}, schema),
    ])
    assert out.rejected == []
    evs = out.events["items"]
    assert [(e.op, e.key) for e in evs] == [("u", (1,)), ("u", (1,)), ("d", (1,))]
    assert evs[0].after == {"id": 1, "name": "a", "flag": True} and evs[2].after is None


def test_added_fields_give_op_table_and_time():
    out = decode_batch(cfg(), [
        rec(0, 2, {"id": 2, "name": "x", "flag": 1, "__deleted": "false", "__op": "r", "__table": "items",
                   "__source_ts_ms": 1700000000000}, extra=(DELETED, *ADDED)),
        rec(1, 2, {"id": 2, "name": "x", "flag": 2, "__deleted": "true", "__op": "d", "__table": "items",
                   "__source_ts_ms": 1700000001000}, extra=(DELETED, *ADDED)),
    ])
    r, d = out.events["items"]
    assert (r.op, r.ts_ms, d.op, d.ts_ms) == ("r", 1700000000000, "d", 1700000001000)
    # the rewritten delete carries the old row: a value that does not decode (flag 2) is ignored
    assert out.rejected == [] and out.before_ignored == 1


def test_tombstone_modes_delete_the_message_key():
    # tombstone mode: {"schema":..., "payload": null}; delete-to-tombstone / rewrite-with-tombstone: null value
    with_schema = (TOPIC, 0, 1, b'{"id":3}', json.dumps({"schema": row_schema(), "payload": None}).encode(), None)
    out = decode_batch(cfg(), [rec(0, 3, {"id": 3, "name": "c", "flag": 0}), with_schema, rec(2, 4, None)])
    assert [(e.op, e.key) for e in out.events["items"]] == [("u", (3,)), ("d", (3,)), ("d", (4,))]
    assert out.tombstones == 0
    out = decode_batch(cfg(), [rec(0, None, None)])
    assert out.rejected[0].code == E.DATA_MISSING_KEY


def test_envelope_tables_still_skip_tombstones():
    out = decode_batch(cfg("envelope"), [rec(0, 4, None)])
    assert out.events["items"] == [] and out.tombstones == 1


def test_wrong_format_is_stated():
    out = decode_batch(cfg("envelope"), [rec(0, 1, {"id": 1, "name": "a", "flag": 1, "__deleted": "false"})])
    r = out.rejected[0]
    assert r.code == E.DATA_UNKNOWN_OP and 'format = "unwrapped"' in r.reason
    env = {"op": "c", "before": None, "after": {"id": 1, "name": "a", "flag": 1}, "source": {"table": "items"}}
    out = decode_batch(cfg(), [rec(0, 1, env, schema=False)])
    assert out.rejected[0].code == E.DATA_UNKNOWN_OP and 'format = "envelope"' in out.rejected[0].reason


def test_unwrapped_rows_keep_the_table_contract():
    c = cfg()
    out = decode_batch(c, [rec(0, 1, {"id": 2, "name": "a", "flag": 1}), rec(1, 1, {"id": 1, "name": "a", "flag": 5}),
                           rec(2, 1, {"id": 1, "name": "a", "flag": 1, "__deleted": "maybe"}),
                           rec(3, 1, {"id": 1, "name": "a", "flag": 1, "__op": "t"}, schema=False)])
    assert [r.code for r in out.rejected] == [E.DATA_KEY_MISMATCH, E.DATA_NOT_BOOLEAN, E.DATA_WRONG_TYPE,
                                              E.DATA_UNKNOWN_OP]


def test_key_change_old_key_header():
    out = decode_batch(cfg(), [
        rec(0, 1, {"id": 1, "name": "a", "flag": 0, "__deleted": "true"}, headers=[("__debezium.newkey", b'{"id":9}')]),
        rec(1, 9, {"id": 9, "name": "a", "flag": 0, "__deleted": "false"}, headers=[("__debezium.oldkey", b'{"id":1}')]),
    ])
    d, c = out.events["items"]
    assert (d.op, d.key, c.key, c.old_key) == ("d", (1,), (9,), (1,))


# ---------------------------------------------------------------- connector properties and the start-up check

def test_connect_register_adds_the_transform_for_unwrapped_tables():
    props = connector_properties(cfg(debezium={}))
    assert props["transforms"] == "unwrap"
    assert props["transforms.unwrap.type"] == "io.debezium.transforms.ExtractNewRecordState"
    assert props["transforms.unwrap.delete.tombstone.handling.mode"] == "rewrite"
    assert props["transforms.unwrap.add.fields"] == "op,table,source.ts_ms"
    assert "transforms" not in connector_properties(cfg("envelope", debezium={}))


@pytest.mark.parametrize("fmt, props, words", [
    ("unwrapped", {"transforms.unwrap.delete.tombstone.handling.mode": "drop"}, "cannot apply deletes"),
    ("unwrapped", {"transforms.unwrap.delete.handling.mode": "rewrite"}, "no longer read"),
    ("unwrapped", {"transforms": "route"}, "names no ExtractNewRecordState"),
    ("envelope", {"transforms": "u", "transforms.u.type": "io.debezium.transforms.ExtractNewRecordState"},
     'declare format = "unwrapped"'),
])
def test_configs_that_cannot_apply_deletes_are_refused(fmt, props, words):
    with pytest.raises(ConfigError) as e:
        cfg(fmt, debezium={"properties": props})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unwrapped_default_tombstone_mode_is_accepted():
    c = cfg(debezium={"properties": {"transforms.unwrap.delete.tombstone.handling.mode": "tombstone"}})
    assert connector_properties(c)["transforms.unwrap.delete.tombstone.handling.mode"] == "tombstone"
