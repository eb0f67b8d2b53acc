"""Decoding a micro-batch on the executors instead of the driver.

The driver used to collect every Kafka record (key and value bytes) and decode them one by one
in its own Python process: at 20,000-record batches that was ~90% of a batch (issue 16). Here
each Spark task decodes its own slice of the batch in a Python worker (``mapInArrow``) and
returns one pickled ``DecodedBatch`` with the Kafka offsets it saw; the driver merges the slices
in log order. Decoding is per record, so the merged result equals ``decode_batch`` over the
whole batch: events per table in (topic, partition, offset) order, rejected records in the
same order, each dropped column noted once.

The raw key and value of a record are needed on the driver only when the mirror plan rejects
one of its events (rare); ``raw_records`` reads just those records back from the batch.
"""

from __future__ import annotations

import pickle
import time
from typing import Iterator

import pyarrow as pa

from connectors.debezium import DecodedBatch, decode_batch

KAFKA_COLUMNS = ("topic", "partition", "offset", "key", "value", "headers")  # what every batch reads of a record
_OUT = "first_topic string, first_partition int, first_offset long, blob binary"


def _slice_decoder(cfg):
    def decode_slice(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pieces = list(batches)
        table = pa.Table.from_batches(pieces) if pieces else None
        if table is None or table.num_rows == 0:
            return
        cols = [table.column(c).to_pylist() for c in KAFKA_COLUMNS[:5]]
        headers = [[(h["key"], h["value"]) for h in hs] if hs else None
                   for hs in table.column("headers").to_pylist()]
        decoded = decode_batch(cfg, zip(*cols, headers))
        offsets = offset_ranges(cols[0], cols[1], cols[2])
        first = min(zip(cols[0], cols[1], cols[2]))
        yield pa.RecordBatch.from_pydict({
            "first_topic": [first[0]], "first_partition": pa.array([first[1]], pa.int32()),
            "first_offset": pa.array([first[2]], pa.int64()),
            "blob": [pickle.dumps((decoded, offsets), protocol=pickle.HIGHEST_PROTOCOL)],
        })

    return decode_slice


def decode_on_executors(cfg, batch_df, steps: dict | None = None) -> tuple[DecodedBatch, dict]:
    """The batch decoded by the Spark tasks that read it: (decoded batch, Kafka offsets
    {topic: {partition: [first, last]}}). ``steps`` gets the milliseconds of the Spark job
    (``read_decode``: read, decode and pickle on the executors, collect) and of the driver's
    unpickling and merging (``merge``)."""
    t = time.perf_counter()
    rows = batch_df.select(*KAFKA_COLUMNS).mapInArrow(_slice_decoder(cfg), _OUT).toArrow()
    if steps is not None:
        steps["read_decode"] = round((time.perf_counter() - t) * 1000.0, 3)
    t = time.perf_counter()
    order = sorted(range(rows.num_rows), key=lambda i: (rows.column("first_topic")[i].as_py(),
                                                         rows.column("first_partition")[i].as_py(),
                                                         rows.column("first_offset")[i].as_py()))
    blobs = rows.column("blob").to_pylist()
    out = merge([pickle.loads(blobs[i]) for i in order], cfg)
    if steps is not None:
        steps["merge"] = round((time.perf_counter() - t) * 1000.0, 3)
    return out


def merge(parts: list[tuple[DecodedBatch, dict]], cfg) -> tuple[DecodedBatch, dict]:
    """Slices in log order -> one batch, as ``decode_batch`` would have decoded it whole."""
    out = DecodedBatch(events={t.name: [] for t in cfg.tables}, rejected=[])
    offsets: dict[str, dict[str, list[int]]] = {}
    seen: set[tuple] = set()
    for decoded, offs in parts:
        out.records += decoded.records
        out.tombstones += decoded.tombstones
        out.before_ignored += decoded.before_ignored
        out.rejected.extend(decoded.rejected)
        for table, events in decoded.events.items():
            out.events.setdefault(table, []).extend(events)
        for ch in decoded.schema_changes:
            if ch[:2] not in seen:
                seen.add(ch[:2])
                out.schema_changes.append(ch)
        for topic, parts_ in offs.items():
            for part, (lo, hi) in parts_.items():
                lo_hi = offsets.setdefault(topic, {}).setdefault(part, [lo, hi])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], lo), max(lo_hi[1], hi)
    return out, offsets


def offset_ranges(topics, partitions, offs) -> dict:
    out: dict[str, dict[str, list[int]]] = {}
    for topic, part, off in zip(topics, partitions, offs):
        lo_hi = out.setdefault(topic, {}).setdefault(str(part), [off, off])
        lo_hi[0] = min(lo_hi[0], off)
        lo_hi[1] = max(lo_hi[1], off)
    return out


def raw_records(batch_df, coords: set[tuple[str, int, int]]) -> dict:
    """(topic, partition, offset) -> (key, value) for just these records of the batch."""
    from pyspark.sql import functions as F

    if not coords:
        return {}
    cond = None
    for topic, part, off in coords:
        c = (F.col("topic") == topic) & (F.col("partition") == part) & (F.col("offset") == off)
        cond = c if cond is None else cond | c
    got = batch_df.where(cond).select("topic", "partition", "offset", "key", "value").toArrow()
    return {(t, p, o): (k, v) for t, p, o, k, v in zip(*(got.column(c).to_pylist() for c in got.column_names))}
