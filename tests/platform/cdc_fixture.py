"""A scripted CDC history for integration tests, and its expected outcome computed by hand.

The expected mirror is a plain dict updated event by event (insert/update put the after
image, delete removes the key), independent of connectors.debezium and of Delta.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

from connectors.debezium_types import PLACEHOLDER
from core import errors as E
from devstack.producer import CdcProducer, envelope, key_of
from streaming_app.settings import parse_config


def job_config(tmp_path, bootstrap: str, name: str = "it", max_offsets: int = 50, topic_prefix: str = "it"):
    data = {
        "job": {"name": name, "lake_root": str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "checkpoints"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": max_offsets},
        "spark": {"master": "local[2]", "ui": False},
        "tables": [
            {"name": "items", "topic": f"{topic_prefix}.items", "primary_key": "id",
             "columns": {"id": "long", "name": "string", "price": "decimal(10,2)", "qty": "int",
                         "day": "date", "ts": "timestamp", "ok": "boolean"}},
            {"name": "pairs", "topic": f"{topic_prefix}.pairs", "primary_key": ["a", "b"],
             "columns": {"a": "long", "b": "string", "v": "double"}},
        ],
    }
    return data, parse_config(data)


def _item(rng, i):
    return {"id": i, "name": rng.choice(["red", "green", "blue"]), "price": Decimal(f"{rng.uniform(1, 99):.2f}"),
            "qty": rng.randrange(100), "day": dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(300)),
            "ts": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=rng.randrange(10**6)),
            "ok": rng.random() < 0.5}


class History:
    """Sends a random but fully known CDC history; keeps the expected state and bad records."""

    # ``pairs`` goes with schemas (JsonConverter schemas.enable=true), ``items`` without. One
    # form per table, as a connector writes it: the message key's bytes pick the partition, so
    # a key sent in both forms could land in two partitions and lose its order.
    def __init__(self, cfg, seed=0):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.expected = {"items": {}, "pairs": {}}
        self.bad: list[str] = []  # expected quarantine codes, in order sent
        self.sent = 0
        self.tombstones = 0
        self._next = 1

    def send(self, prod: CdcProducer, n_events: int, with_bad: bool = True, debezium_kinds: bool = False) -> None:
        """``debezium_kinds`` adds what real Debezium sends beyond plain upserts and deletes:
        updates carrying the TOAST placeholder, primary-key changes (d, tombstone, c with the
        __debezium.oldkey header and a placeholder) and truncates."""
        items, pairs = self.cfg.table("items"), self.cfg.table("pairs")
        rng = self.rng
        for i in range(n_events):
            x = rng.random()
            live = self.expected["items"]
            if debezium_kinds and live and rng.random() < 0.15:
                self._send_debezium_kind(prod, items, live)
            elif x < 0.4 or not live:
                r = _item(rng, self._next)
                self._next += 1
                prod.send(items, rng.choice("cr"), None, r)
                live[r["id"]] = r
            elif x < 0.6:  # update with before image
                k = rng.choice(sorted(live))
                after = dict(live[k], qty=rng.randrange(100), price=Decimal(f"{rng.uniform(1, 99):.2f}"))
                prod.send(items, "u", live[k], after)
                live[k] = after
            elif x < 0.7:  # update without before image (REPLICA IDENTITY DEFAULT)
                k = rng.choice(sorted(live))
                after = dict(live[k], name="updated")
                prod.send(items, "u", None, after)
                live[k] = after
            elif x < 0.78:  # delete with before, then a tombstone
                k = rng.choice(sorted(live))
                prod.send(items, "d", live.pop(k), None)
                prod.tombstone(items, {"id": k})
                self.tombstones += 1
            elif x < 0.84:  # delete without before: the key names the row
                k = rng.choice(sorted(live))
                live.pop(k)
                prod.send_raw(items.topic, key_of(items, {"id": k}),
                              json.dumps({"op": "d", "before": None, "after": None}).encode())
            else:  # composite-key table: upsert or delete
                a, b = rng.randrange(5), rng.choice("xyz")
                if (a, b) in self.expected["pairs"] and rng.random() < 0.4:
                    prod.send(pairs, "d", self.expected["pairs"].pop((a, b)), None, with_schema=True)
                else:
                    r = {"a": a, "b": b, "v": round(rng.uniform(0, 1), 6)}
                    prod.send(pairs, "c", None, r, with_schema=True)
                    self.expected["pairs"][(a, b)] = r
            if with_bad and i % 25 == 7:
                self._send_bad(prod, items)
        prod.flush()

    def _send_debezium_kind(self, prod: CdcProducer, items, live: dict) -> None:
        rng = self.rng
        y = rng.random()
        if y < 0.5:  # REPLICA IDENTITY DEFAULT update leaving the TOASTed 'name' alone
            k = rng.choice(sorted(live))
            after = dict(live[k], qty=rng.randrange(100))
            v = json.loads(envelope(items, "u", None, after))
            v["after"]["name"] = PLACEHOLDER
            prod.send_raw(items.topic, key_of(items, after), json.dumps(v).encode())
            live[k] = after
        elif y < 0.9:  # primary-key change: d(old), tombstone, c(new) carrying the placeholder
            k = rng.choice(sorted(live))
            old = live.pop(k)
            new = dict(old, id=self._next)
            self._next += 1
            hdr = [("__debezium.newkey", key_of(items, new))]
            prod.send_raw(items.topic, key_of(items, old),
                          json.dumps({"op": "d", "before": {c: (k if c == "id" else None) for c in old},
                                      "after": None, "source": {"table": "items"}}).encode(), hdr)
            prod.send_raw(items.topic, key_of(items, old), None, hdr)
            self.tombstones += 1
            v = json.loads(envelope(items, "c", None, new))
            v["after"]["name"] = PLACEHOLDER
            prod.send_raw(items.topic, key_of(items, new), json.dumps(v).encode(),
                          [("__debezium.oldkey", key_of(items, old))])
            live[new["id"]] = new
        else:  # TRUNCATE items (keyless, like Debezium's)
            prod.send_raw(items.topic, None, json.dumps({"before": None, "after": None, "op": "t",
                                                         "source": {"table": "items"}}).encode())
            live.clear()

    def _send_bad(self, prod: CdcProducer, items) -> None:
        kind = len(self.bad) % 9
        if kind == 0:
            prod.send_raw(items.topic, b'{"id": 1}', b'{"op": "c", "after": ')
            self.bad.append(E.DATA_INVALID_JSON)
        elif kind == 1:
            prod.send_raw(items.topic, b'{"id": 1}', json.dumps({"op": "z", "after": None}).encode())
            self.bad.append(E.DATA_UNKNOWN_OP)
        elif kind == 2:
            r = _item(self.rng, 10**9)
            bad = json.loads(envelope(items, "c", None, r))
            bad["after"]["qty"] = "not a number"
            prod.send_raw(items.topic, key_of(items, r), json.dumps(bad).encode())
            self.bad.append(E.DATA_WRONG_TYPE)
        elif kind == 3:
            prod.send_raw(items.topic, None, json.dumps({"op": "d", "before": None}).encode())
            self.bad.append(E.DATA_MISSING_KEY)
        elif kind == 5:  # valid data the declared type cannot hold: PostgreSQL 'infinity' date
            r = _item(self.rng, 10**9 + 1)
            v = json.loads(envelope(items, "c", None, r))
            v["after"]["day"] = -2147472692
            prod.send_raw(items.topic, key_of(items, r), json.dumps(v).encode())
            self.bad.append(E.DATA_NOT_REPRESENTABLE)
        elif kind == 6:  # the message key names another row than the image
            r = _item(self.rng, 10**9 + 2)
            prod.send_raw(items.topic, b'{"id": 1}', envelope(items, "c", None, r))
            self.bad.append(E.DATA_KEY_MISMATCH)
        elif kind == 7:  # poison: nesting deeper than any JSON parser's recursion
            prod.send_raw(items.topic, b'{"id": 1}', b'{"op":"c","after":' + b"[" * 50_000 + b"]" * 50_000 + b"}")
            self.bad.append(E.DATA_INVALID_JSON)
        elif kind == 8:  # poison: op as a list, 39-digit decimal
            prod.send_raw(items.topic, b'{"id": 1}', b'{"op":["c"],"after":{"id":1,"price":1e400}}')
            self.bad.append(E.DATA_UNKNOWN_OP)
        else:
            r = {"a": 1, "b": "x", "v": 0.0}
            v = json.loads(envelope(self.cfg.table("pairs"), "c", None, r))
            v["source"]["table"] = "not_declared_here"
            # pairs declares no source_table, so a foreign source.table is only noted; send an
            # unknown op on the pairs topic instead to cover the second topic's quarantine path
            v["op"] = "m"
            prod.send_raw(self.cfg.table("pairs").topic, b'{"a":1,"b":"x"}', json.dumps(v).encode())
            self.bad.append(E.DATA_UNKNOWN_OP)

    def expected_rows(self, table: str) -> list[dict]:
        rows = list(self.expected[table].values())
        key = (lambda r: r["id"]) if table == "items" else (lambda r: (r["a"], r["b"]))
        return sorted(rows, key=key)
