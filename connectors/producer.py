"""Writing Debezium-shaped change events to Kafka: file loads and seeded random update streams.

Used by `ivmstream produce`, the demo, the tests and the benchmarks. Values are encoded the
way connectors.debezium reads them back: dates as ISO text, timestamps as epoch
milliseconds, decimals as numeric strings. The random stream keeps the set of live rows, so
its updates and deletes always name existing keys, and is deterministic under its seed.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from streaming_app.config import TableConfig

_EPOCH_TS = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def json_value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        ts = v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
        return int((ts - _EPOCH_TS).total_seconds() * 1000)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    return v


def row_json(table: TableConfig, row: dict | None) -> dict | None:
    if row is None:
        return None
    return {c: json_value(row.get(c)) for c in table.column_names}


def envelope(table: TableConfig, op: str, before: dict | None, after: dict | None,
             ts_ms: int | None = None, with_schema: bool = False) -> bytes:
    payload = {
        "before": row_json(table, before), "after": row_json(table, after), "op": op,
        "ts_ms": ts_ms if ts_ms is not None else int(time.time() * 1000),
        "source": {"connector": "ivmstream", "table": table.source_table or table.name},
    }
    doc = {"schema": {"type": "struct", "name": f"{table.name}.Envelope"}, "payload": payload} if with_schema else payload
    return json.dumps(doc, separators=(",", ":")).encode()


def key_of(table: TableConfig, row: dict) -> bytes:
    return json.dumps({k: json_value(row[k]) for k in table.primary_key}, separators=(",", ":")).encode()


class CdcProducer:
    """A kafka-python producer that sends one Debezium event per call."""

    def __init__(self, bootstrap: str):
        from kafka import KafkaProducer

        self._p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                                batch_size=256 * 1024, max_in_flight_requests_per_connection=1)
        self.sent = 0

    def send(self, table: TableConfig, op: str, before: dict | None, after: dict | None,
             with_schema: bool = False) -> None:
        row = after if after is not None else before
        self._p.send(table.topic, key=key_of(table, row), value=envelope(table, op, before, after,
                                                                         with_schema=with_schema))
        self.sent += 1

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self._p.send(topic, key=key, value=value)
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
        import pyarrow.parquet as pq

        return pq.read_table(p)
    if p.suffix.lower() in (".csv", ".tbl", ".txt"):
        from pyarrow import csv

        opts = csv.ParseOptions(delimiter="|" if p.suffix.lower() == ".tbl" else ",")
        return csv.read_csv(p, parse_options=opts)
    from operators.errors import ConfigError

    raise ConfigError(f"{p}: only .csv, .tbl and .parquet files can be loaded")


def conform(table: TableConfig, data: pa.Table) -> list[dict]:
    """Rows of ``data`` restricted to the table's declared columns (names must match)."""
    from operators.errors import ConfigError

    missing = [c for c in table.column_names if c not in data.column_names]
    if missing:
        raise ConfigError(f"file lacks column(s) {missing} declared for table {table.name!r}; "
                          f"it has {data.column_names}")
    return data.select(table.column_names).to_pylist()


class RandomUpdates:
    """A seeded stream of inserts, updates and deletes over one table's live rows."""

    def __init__(self, table: TableConfig, seed: int = 0, live: list[dict] | None = None,
                 mix: tuple[float, float, float] = (0.5, 0.3, 0.2), domain: int = 1000):
        self.table = table
        self.rng = random.Random(seed)
        self.live: dict[tuple, dict] = {tuple(r[k] for k in table.primary_key): r for r in (live or [])}
        self.mix = mix
        self.domain = domain
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
            self.live[tuple(row[k] for k in self.table.primary_key)] = row
            return "c", None, row
        key = self.rng.choice(list(self.live)) if len(self.live) < 5000 else self._sample_key()
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
        return "d", before, None

    def _sample_key(self) -> tuple:
        # Sampling from a dict without building a list each time: random probe of its keys.
        it = iter(self.live)
        for _ in range(self.rng.randrange(min(len(self.live), 64))):
            next(it)
        return next(it)
