"""The real chain, end to end and raw: PostgreSQL -> Debezium (Kafka Connect) -> our broker.

No decoder here: the records are read from Kafka as bytes and checked for what Debezium
actually sends (op codes, tombstones, schema names and parameters, headers of a primary-key
change, the TOAST placeholder, truncate, schema changes, infinity and NaN).

With IVMSTREAM_CAPTURE=1 the test also writes one record of each kind to
tests/cdc_chain/captured/ (the fixtures the decoder's tests read; see the README there).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

CAPTURED = Path(__file__).parent / "captured"
WRITE = os.environ.get("IVMSTREAM_CAPTURE") == "1"
PLACEHOLDER = "__debezium_unavailable_value"


class Topic:
    """Reads one single-partition topic in order, a given number of records at a time."""

    def __init__(self, bootstrap: str, topic: str):
        from kafka import KafkaConsumer

        self.topic = topic
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      group_id=None, auto_offset_reset="earliest")
        self.assigned = False

    def _assign(self, deadline: float) -> None:
        from kafka import TopicPartition

        while time.monotonic() < deadline:
            parts = self.consumer.partitions_for_topic(self.topic)
            if parts:
                assert parts == {0}, f"{self.topic} has partitions {parts}, expected one"
                self.consumer.assign([TopicPartition(self.topic, 0)])
                self.consumer.seek_to_beginning()
                self.assigned = True
                return
            self.consumer.topics()  # refresh metadata
            time.sleep(0.2)
        raise AssertionError(f"topic {self.topic} never appeared")

    def take(self, n: int, timeout_s: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        if not self.assigned:
            self._assign(deadline)
        out: list[dict] = []
        while len(out) < n and time.monotonic() < deadline:
            for recs in self.consumer.poll(timeout_ms=200, max_records=n - len(out)).values():
                out.extend(_record(r) for r in recs)
        assert len(out) == n, f"{self.topic}: got {len(out)} of {n} records: {[r['op'] for r in out]}"
        return out

    def close(self) -> None:
        self.consumer.close()


def _record(r) -> dict:
    key = json.loads(r.key) if r.key is not None else None
    value = json.loads(r.value) if r.value is not None else None
    return {
        "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "headers": [[k, v.decode() if v is not None else None] for k, v in (r.headers or [])],
        "key": key, "value": value,
        # for the assertions; not written to the captured files
        "op": value["payload"]["op"] if value else None,
    }


def _save(name: str, rec: dict, note: str) -> None:
    if not WRITE:
        return
    CAPTURED.mkdir(exist_ok=True)
    doc = {"note": note, **{k: v for k, v in rec.items() if k != "op"}}
    (CAPTURED / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def _fields(rec: dict, image: str = "after") -> dict:
    """Schema of ``image``'s fields by column name."""
    env = rec["value"]["schema"]["fields"]
    img = next(f for f in env if f["field"] == image)
    return {f["field"]: f for f in img["fields"]}


def _after(rec: dict) -> dict:
    return rec["value"]["payload"]["after"]


def _before(rec: dict) -> dict | None:
    return rec["value"]["payload"]["before"]


def _headers(rec: dict) -> dict:
    return dict(rec["headers"])


def _wait_streaming(pg, slot: str, timeout_s: float = 60.0) -> None:
    """The connector's slot is being read: changes from now on arrive as c/u/d, not snapshot r."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pg.query("select active from pg_replication_slots where slot_name = %s", (slot,)) == [(True,)]:
            return
        time.sleep(0.1)
    raise AssertionError(f"replication slot {slot} never became active")


def _job_config(pg, tables: dict[str, str], prefix: str, slot: str, decimal="precise", time_mode="adaptive"):
    from streaming_app.settings import parse_config

    data = {
        "job": {"name": "chain_smoke"},
        "debezium": {"host": "127.0.0.1", "port": pg.port, "database": "postgres", "user": "postgres",
                     "password": pg.password(),
                     "topic_prefix": prefix, "connector_name": slot, "slot_name": slot,
                     "publication_name": slot, "decimal_handling_mode": decimal,
                     "time_precision_mode": time_mode,
                     # Debezium hands its queue to Connect every 500 ms by default; the test
                     # waits for each step's records, so a shorter interval keeps it quick.
                     "properties": {"poll.interval.ms": 50}},
        "tables": [{"name": t, "topic": f"{prefix}.public.{t}", "primary_key": ["id"],
                    "columns": {"id": "int", **({c: "string" for c in cols.split(",")})}}
                   for t, cols in tables.items()],
    }
    return parse_config(data, Path("chain_smoke.toml"))


def test_real_chain_records(postgres, kafka_connect, kafka_broker):
    from connectors.connect import connector_properties, rest

    t0 = time.monotonic()
    pg = postgres
    pg.execute("""
        drop table if exists items, docs, edge, modes;
        create table items (id int primary key, amount numeric(15,2), at timestamp, note text);
        create table docs (id int primary key, n int, body text);
        create table edge (id int primary key, d date, ts timestamp, tstz timestamptz,
                           amount numeric(15,2), num numeric, dbl double precision);
        create table modes (id int primary key, amount numeric(15,2), num numeric, d date,
                            ts timestamp, tstz timestamptz);
        insert into items values (1, 1.50, '2020-02-29 12:00:00', 'snapshotted');
    """)
    versions = {"postgresql": pg.server_version(),
                "kafka_connect": rest(kafka_connect.url, "GET", "/")["version"]}

    # -- connector 1: Debezium's defaults (decimal precise, time adaptive), from a job config --
    cfg = _job_config(pg, {"items": "amount,at,note", "docs": "n,body", "edge": "d,ts,tstz,amount,num,dbl"},
                      prefix="smoke", slot="smoke")
    props = connector_properties(cfg)
    assert props["skipped.operations"] == "none" and props["topic.creation.default.partitions"] == "1"
    kafka_connect.register("smoke", props)
    kafka_connect.register("smoke", props)  # idempotent
    st = kafka_connect.wait_running("smoke")
    versions["debezium"] = st["connector"]["version"]
    _wait_streaming(pg, "smoke")
    t_ready = time.monotonic()

    items = Topic(kafka_broker.bootstrap, "smoke.public.items")
    docs = Topic(kafka_broker.bootstrap, "smoke.public.docs")
    edge = Topic(kafka_broker.bootstrap, "smoke.public.edge")

    # snapshot read
    [r] = items.take(1)
    assert r["op"] == "r" and _after(r)["note"] == "snapshotted"
    assert r["value"]["payload"]["source"]["snapshot"] in ("true", "first", "last", "first_in_data_collection",
                                                           "last_in_data_collection")
    _save("r_snapshot", r, "snapshot read (op r) of a row that existed before the connector was registered")

    # insert
    pg.execute("insert into items values (2, 12345.67, '2024-01-02 03:04:05.123456', 'two'),"
               " (3, -0.05, '1969-07-20 20:17:40', 'three')")
    c2, c3 = items.take(2)
    assert c2["op"] == c3["op"] == "c" and _before(c2) is None
    f = _fields(c2)
    assert f["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert f["amount"]["parameters"]["scale"] == "2" and f["amount"]["parameters"]["connect.decimal.precision"] == "15"
    assert f["at"]["name"] == "io.debezium.time.MicroTimestamp" and f["at"]["type"] == "int64"
    import base64
    from decimal import Decimal

    def dec(b64: str, scale: int) -> Decimal:
        return Decimal(int.from_bytes(base64.b64decode(b64), "big", signed=True)).scaleb(-scale)

    assert dec(_after(c2)["amount"], 2) == Decimal("12345.67") and dec(_after(c3)["amount"], 2) == Decimal("-0.05")
    assert _after(c2)["at"] == 1704164645123456  # µs since the epoch, wall clock as if UTC
    assert _after(c3)["at"] == -14182940 * 1_000_000
    assert c2["key"]["payload"] == {"id": 2} and c2["key"]["schema"]["name"] == "smoke.public.items.Key"
    _save("c_insert", c2, "insert (op c): numeric(15,2) as Decimal base64, timestamp as MicroTimestamp µs")
    _save("c_insert_before_1970", c3, "insert of a negative amount and a timestamp before 1970 (negative µs)")

    # update, delete (+ tombstone)
    pg.execute("update items set amount = 99.90, note = 'two*' where id = 2")
    [u] = items.take(1)
    assert u["op"] == "u" and _before(u) is None and _after(u)["note"] == "two*"  # REPLICA IDENTITY DEFAULT
    _save("u_update", u, "update (op u) under REPLICA IDENTITY DEFAULT: before is null")
    pg.execute("delete from items where id = 3")
    d, tomb = items.take(2)
    assert d["op"] == "d" and _after(d) is None and _before(d)["id"] == 3
    assert tomb["value"] is None and tomb["key"] == d["key"]
    _save("d_delete", d, "delete (op d) under REPLICA IDENTITY DEFAULT: before holds the key columns only")
    _save("d_tombstone", tomb, "the tombstone after a delete: same key, Kafka value null")

    # primary-key change: d(old key) + tombstone + c(new key)
    pg.execute("update items set id = 20 where id = 2")
    pd, ptomb, pc = items.take(3)
    assert (pd["op"], ptomb["value"], pc["op"]) == ("d", None, "c")
    assert pd["key"]["payload"] == {"id": 2} and pc["key"]["payload"] == {"id": 20}
    assert "__debezium.newkey" in _headers(pd) and "__debezium.oldkey" in _headers(pc)
    assert json.loads(_headers(pd)["__debezium.newkey"]) == {"id": 20}
    assert json.loads(_headers(pc)["__debezium.oldkey"]) == {"id": 2}
    assert _after(pc)["note"] == "two*" and _before(pc) is None
    _save("pk_update_d", pd, "primary-key update, 1 of 3: delete of the old key; header __debezium.newkey")
    _save("pk_update_tombstone", ptomb, "primary-key update, 2 of 3: tombstone of the old key")
    _save("pk_update_c", pc, "primary-key update, 3 of 3: create of the new key; header __debezium.oldkey")

    # schema changes: ADD COLUMN then DROP COLUMN, each followed by an insert
    pg.execute("alter table items add column status int not null default 1;"
               "insert into items (id, amount, at, note) values (4, 4.00, '2024-05-05', 'four')")
    [a] = items.take(1)
    assert _fields(a)["status"]["default"] == 1 and _after(a)["status"] == 1
    _save("add_column_insert", a, "insert after ALTER TABLE ADD COLUMN status int not null default 1")
    pg.execute("alter table items drop column note;"
               "insert into items (id, amount, at) values (5, 5.00, '2024-05-06')")
    [dr] = items.take(1)
    assert "note" not in _fields(dr) and "note" not in _after(dr)
    _save("drop_column_insert", dr, "insert after ALTER TABLE DROP COLUMN note: gone from schema and payload")

    # truncate
    pg.execute("truncate items")
    [t] = items.take(1)
    assert t["op"] == "t" and t["key"] is None
    assert _before(t) is None and _after(t) is None and t["value"]["payload"]["source"]["table"] == "items"
    _save("t_truncate", t, "TRUNCATE (op t, skipped.operations=none): Kafka key null, before/after null")

    # TOAST: a text > 2 kB stored out of line, then an update of another column
    pg.execute("insert into docs select 1, 0, string_agg(md5(random()::text), '') from generate_series(1, 300)")
    [ti] = docs.take(1)
    body = _after(ti)["body"]
    assert len(body) == 9600
    _save("toast_insert", ti, "insert of a 9600-character text (TOASTed out of line)")
    pg.execute("update docs set n = 1 where id = 1")
    [tu] = docs.take(1)
    assert tu["op"] == "u" and _after(tu)["body"] == PLACEHOLDER and _after(tu)["n"] == 1
    _save("toast_update_placeholder", tu, "update of n only under REPLICA IDENTITY DEFAULT: the unchanged "
          "TOASTed text arrives as the placeholder")
    pg.execute("update docs set id = 2 where id = 1")
    tpd, _tt, tpc = docs.take(3)
    assert tpc["op"] == "c" and _after(tpc)["body"] == PLACEHOLDER
    _save("toast_pk_update_c", tpc, "primary-key update of a row with an unchanged TOASTed text: the create "
          "of the new key carries the placeholder")
    _save("toast_pk_update_d", tpd, "primary-key update of a row with a TOASTed text: the delete")
    pg.execute("delete from docs where id = 2")
    td, _ = docs.take(2)
    assert _before(td)["id"] == 2 and _before(td)["body"] is None
    _save("toast_delete", td, "delete of a row with a TOASTed text: before has the key, body null")

    # edge values in the default modes
    pg.execute("""
        insert into edge values (1, 'infinity', 'infinity', 'infinity', 'NaN', 'Infinity', 'NaN');
        insert into edge values (2, '-infinity', '-infinity', '-infinity', 1.00, '-Infinity', 'Infinity');
        insert into edge values (3, '2024-02-29', '2024-02-29 23:59:59.999999', '2024-02-29 23:59:59.5+02',
                                 2.50, 3.5, '-Infinity');
        insert into edge values (4, null, null, null, null, 'NaN', 1.5);
    """)
    e1, e2, e3, e4 = edge.take(4)
    ef = _fields(e1)
    assert ef["d"]["name"] == "io.debezium.time.Date" and ef["tstz"]["name"] == "io.debezium.time.ZonedTimestamp"
    assert ef["num"]["name"] == "io.debezium.data.VariableScaleDecimal"
    assert _after(e1)["d"] == -2147472692 and _after(e2)["d"] == -2147472691
    assert _after(e1)["tstz"] == "infinity" and _after(e2)["tstz"] == "-infinity"
    assert _after(e1)["dbl"] == "NaN" and _after(e2)["dbl"] == "Infinity" and _after(e3)["dbl"] == "-Infinity"
    assert _after(e1)["amount"] is None  # numeric NaN in precise mode
    assert _after(e3)["tstz"] == "2024-02-29T21:59:59.500000Z"
    _save("edge_infinity", e1, "precise/adaptive: 'infinity' date/timestamp/timestamptz, numeric(15,2) 'NaN', "
          "numeric 'Infinity', double 'NaN'")
    _save("edge_neg_infinity", e2, "precise/adaptive: '-infinity' date/timestamp/timestamptz, numeric "
          "'-Infinity', double 'Infinity'")
    _save("edge_finite", e3, "precise/adaptive: ordinary values, numeric without typmod as VariableScaleDecimal, "
          "double '-Infinity'")
    _save("edge_numeric_nan", e4, "precise/adaptive: unconstrained numeric 'NaN', NULL date/timestamps")

    # -- connector 2: decimal.handling.mode=string, time.precision.mode=connect ---------------
    cfg2 = _job_config(pg, {"modes": "amount,num,d,ts,tstz"}, prefix="modes", slot="modes",
                       decimal="string", time_mode="connect")
    kafka_connect.register("modes", connector_properties(cfg2))
    kafka_connect.wait_running("modes")
    _wait_streaming(pg, "modes")
    modes = Topic(kafka_broker.bootstrap, "modes.public.modes")
    pg.execute("""
        insert into modes values (1, 7.10, 3.5, '2024-02-29', '2024-02-29 23:59:59.123456', '2024-02-29 12:00:00+00');
        insert into modes values (2, 'NaN', 'NaN', 'infinity', 'infinity', 'infinity');
        insert into modes values (3, 1.00, '-Infinity', '-infinity', '-infinity', '-infinity');
        insert into modes values (4, 2.00, 'Infinity', null, null, null);
    """)
    m1, m2, m3, m4 = modes.take(4)
    mf = _fields(m1)
    assert mf["amount"]["type"] == "string" and _after(m1)["amount"] == "7.10"
    assert mf["d"]["name"] == "org.apache.kafka.connect.data.Date"
    assert mf["ts"]["name"] == "org.apache.kafka.connect.data.Timestamp"
    assert _after(m1)["ts"] == 1709251199123  # ms, sub-ms dropped
    assert _after(m2)["amount"] == "NAN"
    _save("string_connect_insert", m1, "decimal.handling.mode=string, time.precision.mode=connect: ordinary row")
    _save("string_connect_nan_infinity", m2, "string/connect: numeric 'NaN' (both), 'infinity' date/timestamp/timestamptz")
    _save("string_connect_neg_infinity", m3, "string/connect: numeric '-Infinity', '-infinity' date/timestamp/timestamptz")
    _save("string_connect_pos_infinity", m4, "string/connect: unconstrained numeric 'Infinity'")

    for topic in (items, docs, edge, modes):
        topic.close()
    for name in ("smoke", "modes"):
        assert kafka_connect.delete(name)
    assert not kafka_connect.delete("smoke")
    print(f"\nreal chain: PostgreSQL {versions['postgresql']}, Debezium {versions['debezium']}, "
          f"Kafka Connect {versions['kafka_connect']}; connector streaming after "
          f"{t_ready - t0:.1f}s, all records checked after {time.monotonic() - t0:.1f}s")
    if WRITE:
        (CAPTURED / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
