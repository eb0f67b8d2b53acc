"""A batch full of poison records commits: good records applied, bad ones quarantined, and the
next batch runs (issue 15). Real broker, real Spark and Delta.

Each poison record below once raised out of the decoder (RecursionError, OverflowError,
decimal.InvalidOperation, TypeError) or reached the mirror write and failed it; such a record
failed its batch on every replay, which stalled the stream.
"""

from __future__ import annotations

import collections
import json

import pytest

from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from streaming_app.runner import run_job
from tests.platform.cdc_fixture import History, job_config

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _poison(topic: str) -> list[tuple[bytes | None, bytes | None, str]]:
    deep = b'{"op":"c","after":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    after = {"id": 77, "name": "x", "price": 1.5, "qty": 1, "day": 19000, "ts": 0, "ok": True}
    return [
        (b'{"id": 77}', deep, "DATA_INVALID_JSON"),                                   # deep nesting
        (b"[" * 50_000 + b"]" * 50_000, json.dumps({"op": "c", "after": after}).encode(), "DATA_MISSING_KEY"),
        (b'{"id": 77}', json.dumps({"op": ["c"], "after": after}).encode(), "DATA_UNKNOWN_OP"),
        (b'{"id": 77}', json.dumps({"op": "c", "after": {**after, "price": int("1" * 60)}}).encode(),
         "DATA_NOT_REPRESENTABLE"),                                                    # 60 digits
        (b'{"id": 77}', b'{"op":"c","after":{"id":77,"name":"x","price":1.5,"qty":1,"day":1e400,'
                        b'"ts":0,"ok":true}}', "DATA_WRONG_TYPE"),                      # 1e400 as a date
        (b'{"id": 77}', json.dumps({"op": "c", "after": {**after, "name": "\ud800"}}).encode(),
         "DATA_NOT_REPRESENTABLE"),                                                    # lone surrogate
        (b'{"id": 77}', b'{"op":"c","after":{"id":77,"name":"\xff\xfe","price":1.5}}', "DATA_INVALID_JSON"),
        (b'{"id": 78}', json.dumps({"op": "c", "after": after}).encode(), "DATA_KEY_MISMATCH"),
    ]


def test_poison_records_are_quarantined_and_the_stream_goes_on(kafka_broker, spark, tmp_path):
    _, cfg = job_config(tmp_path, kafka_broker.bootstrap, name="poison", max_offsets=40, topic_prefix="poison")
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    items = cfg.table("items")
    hist = History(cfg, seed=5)
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 15, with_bad=False)
    poison = _poison(items.topic)
    for key, value, _ in poison:  # all of them inside the first batches
        prod.send_raw(items.topic, key, value)
    hist.send(prod, 60, with_bad=False)
    prod.close()

    res = run_job(cfg, available_now=True, spark=spark, quiet=True)
    assert res.totals["batches"] >= 3  # the batches after the poison ran too

    mirror = spark.read.format("delta").load(str(cfg.lake_root / "mirrors" / "items")).orderBy("id").collect()
    assert [r.id for r in mirror] == sorted(hist.expected["items"])
    q = spark.read.format("delta").load(str(cfg.lake_root / "quarantine")).collect()
    got = collections.Counter(r.error_code for r in q)
    assert sum(got.values()) == len(poison), got
    assert all(r.reason for r in q)
    # the exact codes: each poison record is named for what is wrong with it
    assert got == collections.Counter(code for _, _, code in poison), got
