"""The decoder on records captured from the real chain (PostgreSQL 15 -> Debezium 3.3.1 -> Kafka Connect).

tests/cdc_chain/captured/ holds one Kafka record per file (see its README). Each is decoded as
captured (schema wrapper, headers as the broker gives them: (name, bytes)) and again with the
schemas stripped (JsonConverter ``schemas.enable=false``), where the table's declared modes
must give the same values. Expected values are worked out by hand from the README's notes.
"""

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from connectors.debezium import decode_batch
from core import errors as E
from streaming_app.settings import parse_config

CAPTURED = Path(__file__).resolve().parents[1] / "cdc_chain" / "captured"
UTC = dt.timezone.utc

CFG = parse_config({"tables": [
    {"name": "items", "topic": "smoke.public.items", "primary_key": "id",
     "columns": {"id": "int", "amount": "decimal(15,2)", "at": "timestamp", "note": "string", "status": "int"}},
    {"name": "docs", "topic": "smoke.public.docs", "primary_key": "id",
     "columns": {"id": "int", "n": "int", "body": "string"}},
    {"name": "edge", "topic": "smoke.public.edge", "primary_key": "id",
     "columns": {"id": "int", "d": "date", "ts": "timestamp", "tstz": "timestamp", "amount": "decimal(15,2)",
                 "num": "decimal(38,10)", "dbl": "double"}},
    {"name": "modes", "topic": "modes.public.modes", "primary_key": "id", "decimal_handling_mode": "string",
     "time_precision_mode": "connect",
     "columns": {"id": "int", "amount": "decimal(15,2)", "num": "decimal(38,10)", "d": "date", "ts": "timestamp",
                 "tstz": "timestamp"}},
]})

pytestmark = pytest.mark.skipif(not (CAPTURED / "c_insert.json").exists(), reason="no captured records")


def record(name: str, schemas: bool = True) -> tuple:
    d = json.loads((CAPTURED / f"{name}.json").read_text())
    key, value = d["key"], d["value"]
    if not schemas:
        key = key["payload"] if key is not None else None
        value = value["payload"] if value is not None else None
    enc = (lambda doc: None if doc is None else json.dumps(doc, separators=(",", ":")).encode())
    headers = [(h[0], h[1].encode()) for h in d["headers"]]
    return (d["topic"], d["partition"], d["offset"], enc(key), enc(value), headers)


def decode(names, schemas):
    return decode_batch(CFG, [record(n, schemas) for n in names])


BOTH = pytest.mark.parametrize("schemas", [True, False], ids=["with_schema", "schemaless"])


@BOTH
def test_items_history(schemas):
    out = decode(["r_snapshot", "c_insert", "c_insert_before_1970", "u_update", "d_delete", "d_tombstone",
                  "pk_update_d", "pk_update_tombstone", "pk_update_c", "add_column_insert", "drop_column_insert",
                  "t_truncate"], schemas)
    assert out.rejected == [] and out.tombstones == 2
    evs = out.events["items"]
    assert [(e.op, e.key) for e in evs] == [("r", (1,)), ("c", (2,)), ("c", (3,)), ("u", (2,)), ("d", (3,)),
                                            ("d", (2,)), ("c", (20,)), ("c", (4,)), ("c", (5,)), ("t", ())]
    r, c, c70, u, _, _, pk_c, add, drop, _ = evs
    assert r.after == {"id": 1, "amount": Decimal("1.50"), "at": dt.datetime(2020, 2, 29, 12, tzinfo=UTC),
                       "note": "snapshotted", "status": None}
    assert c.after["amount"] == Decimal("12345.67")  # "EtaH" = 0x12D687 = 1234567, scale 2
    assert c.after["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert c70.after["amount"] == Decimal("-0.05") and c70.after["at"] == dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)
    assert u.before is None and u.after["amount"] == Decimal("99.90")  # "JwY=" = 9990
    assert pk_c.old_key == (2,) and pk_c.after["note"] == "two*"
    assert add.after["status"] == 1 and add.after["amount"] == Decimal("4.00")
    assert drop.after["note"] is None and drop.after["amount"] == Decimal("5.00")
    # 'status' is missing from the images before ADD COLUMN, 'note' after DROP COLUMN
    assert ("items", "note", "dropped") in out.schema_changes and ("items", "status", "dropped") in out.schema_changes


@BOTH
def test_toast_placeholders(schemas):
    out = decode(["toast_insert", "toast_update_placeholder", "toast_pk_update_d", "toast_pk_update_c", "toast_delete"],
                 schemas)
    assert out.rejected == []
    ins, upd, d, c, dele = out.events["docs"]
    assert len(ins.after["body"]) == 9600 and ins.unavailable == frozenset()
    assert upd.op == "u" and upd.after == {"id": 1, "n": 1, "body": None} and upd.unavailable == {"body"}
    assert (d.op, d.key) == ("d", (1,))
    assert (c.op, c.key, c.old_key, c.unavailable, c.after["n"]) == ("c", (2,), (1,), {"body"}, 1)
    assert (dele.op, dele.key) == ("d", (2,))


@BOTH
def test_edge_values(schemas):
    out = decode(["edge_infinity", "edge_neg_infinity", "edge_finite", "edge_numeric_nan"], schemas)
    assert [(r.offset, r.code) for r in out.rejected] == [(0, E.DATA_NOT_REPRESENTABLE), (1, E.DATA_NOT_REPRESENTABLE)]
    assert "infinity" in out.rejected[0].reason
    fin, nan = out.events["edge"]
    assert fin.after == {"id": 3, "d": dt.date(2024, 2, 29), "ts": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
                         "tstz": dt.datetime(2024, 2, 29, 21, 59, 59, 500000, tzinfo=UTC), "amount": Decimal("2.50"),
                         "num": Decimal("3.5"), "dbl": float("-inf")}
    assert nan.after == {"id": 4, "d": None, "ts": None, "tstz": None, "amount": None, "num": None, "dbl": 1.5}


@BOTH
def test_string_decimals_and_connect_times(schemas):
    out = decode(["string_connect_insert", "string_connect_nan_infinity", "string_connect_neg_infinity",
                  "string_connect_pos_infinity"], schemas)
    assert [r.code for r in out.rejected] == [E.DATA_NOT_REPRESENTABLE] * 3
    (ev,) = out.events["modes"]
    assert ev.after == {"id": 1, "amount": Decimal("7.10"), "num": Decimal("3.5"), "d": dt.date(2024, 2, 29),
                        "ts": dt.datetime(2024, 2, 29, 23, 59, 59, 123000, tzinfo=UTC),
                        "tstz": dt.datetime(2024, 2, 29, 12, tzinfo=UTC)}
