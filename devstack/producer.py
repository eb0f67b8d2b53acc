"""Writing Debezium-shaped change events to Kafka: file loads and seeded random update streams.

Used by `ivmstream produce`, the demo, the tests and the benchmarks. Values are encoded the
way Debezium's PostgreSQL connector encodes them under the table's ``decimal_mode`` and
``time_mode`` (connectors.debezium reads them back): precise decimals as base64 of the
unscaled value at the declared scale, dates as int32 days, timestamps as epoch microseconds
(adaptive) or milliseconds (connect), double NaN/infinities as strings. With
``with_schema=True`` key and value carry a JsonConverter schema like Debezium's (Envelope
version 2, named semantic types with their parameters). The random stream keeps the set of
live rows, so its updates and deletes always name existing keys, and is deterministic under
its seed.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import re
import time
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_HALF_UP, Context, Decimal
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import csv

from core.config import TableConfig
from core.errors import ConfigError

_EPOCH_TS = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_CTX = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_HALF_UP)
PREFIX = "ivmstream"  # topic.prefix in the schema names
_TS_PER_S = {"adaptive": 10**6, "adaptive_time_microseconds": 10**6, "microseconds": 10**6,
             "connect": 10**3, "nanoseconds": 10**9}
_TS_NAME = {"adaptive": "io.debezium.time.MicroTimestamp", "adaptive_time_microseconds": "io.debezium.time.MicroTimestamp",
            "microseconds": "io.debezium.time.MicroTimestamp", "connect": "org.apache.kafka.connect.data.Timestamp",
            "nanoseconds": "io.debezium.time.NanoTimestamp", "isostring": "io.debezium.time.IsoTimestamp"}

def _modes(table: TableConfig) -> tuple[str, str]:
    return getattr(table, "decimal_mode", "precise"), getattr(table, "time_mode", "adaptive")

def _as_decimal(v: Any, scale: int) -> Decimal:
    """The value a numeric(p, scale) column stores for ``v`` (PostgreSQL rounds half away from zero)."""
    d = v if isinstance(v, Decimal) else Decimal(repr(v)) if isinstance(v, float) else Decimal(str(v))
    return d.quantize(Decimal(1).scaleb(-scale), context=_CTX) if d.is_finite() else d

def _instant(v: Any) -> dt.datetime:
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if not isinstance(v, dt.datetime):  # a date: its midnight
        v = dt.datetime(v.year, v.month, v.day)
    return v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)  # wall clock encoded as if UTC

def encode_value(v: Any, typ: str, decimal_mode: str = "precise", time_mode: str = "adaptive") -> Any:
    """One column value as Debezium's JSON payload carries it for this type and these modes."""
    if v is None:
        return None
    m = _DECIMAL.match(typ)
    if m:
        d = _as_decimal(v, int(m.group(2)))
        if decimal_mode == "double":
            f = float(d)
            return f if math.isfinite(f) else ("NaN" if math.isnan(f) else "Infinity" if f > 0 else "-Infinity")
        if decimal_mode == "string":
            return {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}.get(str(d), str(d))
        if not d.is_finite():
            return None  # precise mode sends NaN as null
        unscaled = int(d.scaleb(int(m.group(2)), context=_CTX))
        return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()
    if typ == "date":
        day = v if isinstance(v, dt.date) and not isinstance(v, dt.datetime) else (
            v.date() if isinstance(v, dt.datetime) else dt.date.fromisoformat(str(v)))
        return day.isoformat() if time_mode == "isostring" else (day - _EPOCH_DATE).days
    if typ == "timestamp":
        ts = _instant(v)
        if time_mode == "isostring":
            return ts.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        us = (ts - _EPOCH_TS) // dt.timedelta(microseconds=1)
        per_s = _TS_PER_S[time_mode]
        return us * per_s // 10**6 if per_s <= 10**6 else us * (per_s // 10**6)
    if typ == "double":
        f = float(v)
        return f if math.isfinite(f) else ("NaN" if math.isnan(f) else "Infinity" if f > 0 else "-Infinity")
    if typ in ("int", "long"):
        return int(v)
    if typ == "binary":  # binary.handling.mode=bytes
        return base64.b64encode(bytes(v)).decode()
    return v

def field_schema(column: str, typ: str, optional: bool, decimal_mode: str = "precise",
                 time_mode: str = "adaptive") -> dict:
    """The JsonConverter field schema Debezium's PostgreSQL connector gives this column."""
    f: dict[str, Any] = {}
    m = _DECIMAL.match(typ)
    if m:
        if decimal_mode == "precise":
            f = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                 "parameters": {"scale": m.group(2), "connect.decimal.precision": m.group(1)}}
        else:
            f = {"type": "double" if decimal_mode == "double" else "string"}
    elif typ == "date":
        f = ({"type": "string", "name": "io.debezium.time.IsoDate", "version": 1} if time_mode == "isostring" else
             {"type": "int32", "name": "org.apache.kafka.connect.data.Date" if time_mode == "connect"
              else "io.debezium.time.Date", "version": 1})
    elif typ == "timestamp":
        f = {"type": "string" if time_mode == "isostring" else "int64", "name": _TS_NAME[time_mode], "version": 1}
    else:
        f = {"type": {"int": "int32", "long": "int64", "double": "double", "string": "string",
                      "boolean": "boolean", "binary": "bytes"}[typ]}
    return {**f, "optional": optional, "field": column}

def _row_fields(table: TableConfig, columns) -> list[dict]:
    dm, tm = _modes(table)
    required = set(table.primary_key) | set(table.not_null)
    return [field_schema(c, table.type_of(c), c not in required, dm, tm) for c in columns]

def _source_name(table: TableConfig) -> str:
    return f"{PREFIX}.public.{table.source_table or table.name}"

_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
     "default": "false", "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "int64", "optional": True, "field": "ts_us"},
    {"type": "int64", "optional": True, "field": "ts_ns"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]

def envelope_schema(table: TableConfig) -> dict:
    name = _source_name(table)
    value = {"type": "struct", "fields": _row_fields(table, table.column_names), "optional": True, "name": f"{name}.Value"}
    return {"type": "struct", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "fields": _SOURCE_FIELDS, "optional": False,
         "name": "io.debezium.connector.postgresql.Source", "field": "source"},
        {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "id"},
                                      {"type": "int64", "optional": False, "field": "total_order"},
                                      {"type": "int64", "optional": False, "field": "data_collection_order"}],
         "optional": True, "name": "event.block", "version": 1, "field": "transaction"},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
    ], "optional": False, "name": f"{name}.Envelope", "version": 2}

def key_schema(table: TableConfig) -> dict:
    return {"type": "struct", "fields": _row_fields(table, table.primary_key), "optional": False,
            "name": f"{_source_name(table)}.Key"}

def row_json(table: TableConfig, row: dict | None) -> dict | None:
    if row is None:
        return None
    dm, tm = _modes(table)
    return {c: encode_value(row.get(c), t, dm, tm) for c, t in table.columns}

def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()

def envelope(table: TableConfig, op: str, before: dict | None, after: dict | None,
             ts_ms: int | None = None, with_schema: bool = False) -> bytes:
    ts_ms = ts_ms if ts_ms is not None else int(time.time() * 1000)
    source = {"version": "3.3.1.Final", "connector": "postgresql", "name": PREFIX, "ts_ms": ts_ms,
              "snapshot": "true" if op == "r" else "false", "db": "ivmstream", "sequence": None,
              "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 10**6, "schema": "public",
              "table": table.source_table or table.name, "txId": None, "lsn": None, "xmin": None}
    payload = {"before": row_json(table, before), "after": row_json(table, after), "source": source,
               "transaction": None, "op": op, "ts_ms": ts_ms, "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 10**6}
    return _dumps({"schema": envelope_schema(table), "payload": payload} if with_schema else payload)

def key_of(table: TableConfig, row: dict, with_schema: bool = False) -> bytes:
    dm, tm = _modes(table)
    payload = {k: encode_value(row[k], table.type_of(k), dm, tm) for k in table.primary_key}
    return _dumps({"schema": key_schema(table), "payload": payload} if with_schema else payload)

class CdcProducer:
    """A kafka-python producer that sends one Debezium event per call."""

    def __init__(self, bootstrap: str, client: dict | None = None):
        """``client``: kafka-python's security settings for the job's [kafka] (connectors.kafka_client)."""
        from kafka import KafkaProducer

        self._p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                                batch_size=256 * 1024, max_in_flight_requests_per_connection=1, **(client or {}))
        self.sent = 0

    def send(self, table: TableConfig, op: str, before: dict | None, after: dict | None,
             with_schema: bool = False) -> None:
        row = after if after is not None else before
        self._p.send(table.topic, key=key_of(table, row, with_schema),
                     value=envelope(table, op, before, after, with_schema=with_schema))
        self.sent += 1

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None) -> None:
        self._p.send(topic, key=key, value=value, headers=headers)
        self.sent += 1

    def tombstone(self, table: TableConfig, row: dict) -> None:
        self.send_raw(table.topic, key_of(table, row), None)

    def flush(self) -> None:
        self._p.flush()

    def close(self) -> None:
        self._p.flush()
        self._p.close()

def read_edge_list(path: str | Path, src: str, dst: str) -> pa.Table:
    """A whitespace-separated edge list (``u v`` per line, ``#`` comments) as (src, dst)."""
    us, vs = [], []
    for line in Path(path).read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 2:
            us.append(int(parts[0]))
            vs.append(int(parts[1]))
    return pa.table({src: pa.array(us, pa.int64()), dst: pa.array(vs, pa.int64())})

def edge_events(table: TableConfig, src, dst, weight, src_col: str = "src", dst_col: str = "dst"):
    """(op, before, after) per signed edge row: +1 inserts, -1 deletes; other columns null."""
    blank = {c: None for c in table.column_names}
    for u, v, w in zip(src.tolist(), dst.tolist(), weight.tolist()):
        row = dict(blank, **{src_col: int(u), dst_col: int(v)})
        if w > 0:
            yield "c", None, row
        else:
            yield "d", row, None

def read_rows(path: str | Path) -> pa.Table:
    """A CSV or Parquet file as an Arrow table."""
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):

        return pq.read_table(p)
    if p.suffix.lower() in (".csv", ".tbl", ".txt"):

        opts = csv.ParseOptions(delimiter="|" if p.suffix.lower() == ".tbl" else ",")
        return csv.read_csv(p, parse_options=opts)

    raise ConfigError(f"{p}: only .csv, .tbl and .parquet files can be loaded")

def conform(table: TableConfig, data: pa.Table) -> list[dict]:
    """Rows of ``data`` restricted to the table's declared columns (names must match)."""

    missing = [c for c in table.column_names if c not in data.column_names]
    if missing:
        raise ConfigError(f"file lacks column(s) {missing} declared for table {table.name!r}; "
                          f"it has {data.column_names}")
    return data.select(table.column_names).to_pylist()

class RandomUpdates:
    """A seeded stream of inserts, updates and deletes over one table's live rows.

    Updates and deletes pick their key uniformly among the live keys (each with probability
    1/live, in O(1): the keys are kept in a list with their positions, a delete moves the last
    key into the gap). ``zipf``: a skew instead, for a bench that wants a hot spot: the key at
    position i of that list is picked with weight ~ 1/(i+1)^zipf (a Pareto draw of the rank)."""

    def __init__(self, table: TableConfig, seed: int = 0, live: list[dict] | None = None,
                 mix: tuple[float, float, float] = (0.5, 0.3, 0.2), domain: int = 1000, zipf: float | None = None):
        self.table = table
        self.rng = random.Random(seed)
        self.live: dict[tuple, dict] = {tuple(r[k] for k in table.primary_key): r for r in (live or [])}
        self._keys: list[tuple] = list(self.live)
        self._pos: dict[tuple, int] = {k: i for i, k in enumerate(self._keys)}
        self.mix = mix
        self.domain = domain
        if zipf is not None and not zipf > 0:
            raise ValueError(f"zipf must be > 0, got {zipf!r}")
        self.zipf = zipf
        self._next_id = 1 + max((k[0] for k in self.live if isinstance(k[0], int)), default=0)

    def _value(self, column: str, typ: str) -> Any:
        r = self.rng
        if typ in ("int", "long"):
            return r.randrange(self.domain)
        if typ == "double":
            return round(r.uniform(0, self.domain), 2)
        if typ.startswith("decimal"):
            return Decimal(f"{r.uniform(0, self.domain):.2f}")
        if typ == "string":
            return f"{column}_{r.randrange(max(2, self.domain // 50))}"
        if typ == "boolean":
            return r.random() < 0.5
        if typ == "binary":
            return r.randbytes(r.randrange(8))
        if typ == "date":
            return dt.date(1995, 1, 1) + dt.timedelta(days=r.randrange(2000))
        return _EPOCH_TS + dt.timedelta(seconds=r.randrange(10**9))

    def _new_row(self) -> dict:
        row = {c: self._value(c, t) for c, t in self.table.columns}
        for k in self.table.primary_key:
            if self.table.type_of(k) in ("int", "long"):
                row[k] = self._next_id
                self._next_id += 1
            else:
                row[k] = f"{k}-{self._next_id}"
                self._next_id += 1
        return row

    def __iter__(self) -> Iterator[tuple[str, dict | None, dict | None]]:
        while True:
            yield self.next()

    def next(self) -> tuple[str, dict | None, dict | None]:
        """(op, before, after) for the next change."""
        p_ins, p_upd, _ = self.mix
        x = self.rng.random()
        if not self.live or x < p_ins:
            row = self._new_row()
            key = tuple(row[k] for k in self.table.primary_key)
            if key not in self.live:
                self._pos[key] = len(self._keys)
                self._keys.append(key)
            self.live[key] = row
            return "c", None, row
        key = self._sample_key()
        before = self.live[key]
        if x < p_ins + p_upd:
            after = dict(before)
            changeable = [c for c, _ in self.table.columns if c not in self.table.primary_key]
            if changeable:
                c = self.rng.choice(changeable)
                after[c] = self._value(c, self.table.type_of(c))
            self.live[key] = after
            return "u", before, after
        del self.live[key]
        self._drop(key)
        return "d", before, None

    def _sample_key(self) -> tuple:
        n = len(self._keys)
        if self.zipf is None:
            return self._keys[self.rng.randrange(n)]
        return self._keys[min(n, int(self.rng.paretovariate(self.zipf))) - 1]

    def _drop(self, key: tuple) -> None:
        i = self._pos.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[i] = last
            self._pos[last] = i
