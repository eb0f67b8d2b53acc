"""Capture at registration for the statestore backend: the keyed operators' initial state from
the Delta mirrors, as Spark jobs on the executors (``operators.keyed.capture`` per slice).

A fresh checkpoint over non-empty mirrors starts from this capture: every mirror is read at
the Delta version pinned here (so a first batch re-run after a crash, whose MERGE may already
have moved the mirror, starts from the same state), and parquet folders under the checkpoint
hold each operator's initial rows::

    capture/rows   stage 1 (mapInArrow per mirror slice): last images; join side rows, partial
                   groups, top-k rows; weights
    capture/pages  last images grouped by (table, bucket, page) (collect_list, in the JVM):
                   one cdc_image_pages_v2 entry each, so the load is one state call per page
    capture/joins  stage 2 (per (query, bucket of join keys), sorted partitions; only with a
                   join): sketch_join_v1 blobs (one per join key); partial groups, top-k rows,
                   weights of the join's output
    capture/groups stage 3 (per (set of queries, bucket of groups), sorted partitions):
                   imp_groups_v3 blobs (one per page of a bucket's groups, pages per bucket
                   chosen here from the tables' rows and pinned); top-k rows or weights of
                   their output
    capture/topk   stage 4 (per query, one task each; only with a top-k): topk_ordered_v2 (one
                   row per query); weights of the k rows it emits
    capture/mu     stage 5 (sum per (query, fragment)): mu_fragment_v1 counts > 0

``transformWithState(initialState=...)`` loads them into the state store in the query's first
batch (Spark applies an initial state only in batch 0 of a checkpoint). What reaches the driver
is the captured sketch (one row per fragment in it, at most the fragment count per query) and
row counts, never a table.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import InvariantError
from operators.keyed import capture as C
from operators.keyed.capture import CAPTURE_SCHEMA
from operators.keyed.cdc import MIN_PAGES, pages_for
from operators.keyed.sketch import GROUP_MIN_PAGES, group_pages_for
from connectors import spark_labels

FILE = "ivmstream_capture.json"
# The most a capture task hands back to the JVM in one Arrow batch: Spark takes each batch whole
# off-heap, and at SF10 one query-bucket's group pages are ~160 MB (1,024 pages of ~156 KB).
BATCH_BYTES = 16 << 20

def pinned(checkpoint_dir) -> dict | None:
    """The capture a checkpoint started from ({"versions", "dir", ...}), or None."""
    p = Path(checkpoint_dir) / FILE
    return json.loads(p.read_text()) if p.exists() else None

def run_capture(spark, cfg, lake, specs: list, versions: dict, checkpoint_dir=None) -> dict:
    """Build the initial state of the keyed operators (joins and top-k included) from the mirrors
    at ``versions``; write it under the checkpoint (``checkpoint_dir``: a generation's, default the
    config's) and pin it there. Returns the pinned record (with figures)."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    ckpt = Path(checkpoint_dir or cfg.checkpoint_dir)
    out = ckpt / "capture"
    buckets = cfg.state.cdc_buckets
    sc = spark.sparkContext
    frames = []
    for t in cfg.tables:
        cols = list(t.column_names)
        df = (spark.read.format("delta").option("versionAsOf", versions[t.name]).load(lake.mirror(t.name))
              .select(*cols))
        frames.append(df.mapInArrow(_slices(t.name, list(t.primary_key), specs, buckets), CAPTURE_SCHEMA))
    rows = frames[0]
    for f in frames[1:]:
        rows = rows.unionAll(f)
    spark_labels.label(sc, "ivmstream capture: last images and partial groups from the mirrors")
    rows.write.mode("overwrite").parquet(str(out / "rows"))
    rows = spark.read.parquet(str(out / "rows"))
    images = rows.filter(~F.col("k1").rlike("^[fgjk]:"))  # a table's name has no colon
    spark_labels.label(sc, "ivmstream capture: last images in pages")
    per_table = {r["k1"]: r["n"] for r in images.groupBy("k1").agg(F.count("*").alias("n")).collect()}
    pages = {t: pages_for(n, buckets) for t, n in per_table.items()}
    n_pages = (F.element_at(F.create_map(*[F.lit(x) for tn in pages.items() for x in tn]), F.col("k1"))
               if pages else F.lit(MIN_PAGES))
    # page_of(key_hash, buckets, pages), the hash being in w
    (images.select("k1", "k2", F.pmod(F.expr(f"w div {int(buckets)}"), n_pages).cast("long").alias("page"), "a")
     .groupBy("k1", "k2", "page").agg(F.collect_list("a").alias("parts"))
     .write.mode("overwrite").parquet(str(out / "pages")))
    t1 = time.perf_counter()
    from operators.keyed.sketch import KeyedQuery

    planned = [KeyedQuery(*s) for s in specs]
    rows_of = {t.lower(): n for t, n in per_table.items()}
    group_pages: dict = {}  # set of queries -> pages per bucket, from the most rows of its tables
    for q in planned:
        if q.aggregated:
            n = group_pages_for(max(rows_of.get(t, 0) for t in q.tables))
            group_pages[q.group_set] = max(group_pages.get(q.group_set, 0), n)
    stages = ["pages", "groups", "mu"]
    later = rows  # the rows stages 3 and 4 read their input from
    if any(q.join is not None for q in planned):
        spark_labels.label(sc, "ivmstream capture: join states")
        _merge(rows.filter(F.col("k1").startswith("j:")), "joins", specs, out, group_pages)
        joins = spark.read.parquet(str(out / "joins"))
        later = later.unionAll(joins.filter(~F.col("k1").startswith("j:")))
        stages.append("joins")
    spark_labels.label(sc, "ivmstream capture: group states")
    # groups by a shuffle and a sort, then many groups per Python call (applyInArrow would
    # make one call per group: ~1.5 M calls per sketch at SF1)
    _merge(later.filter(F.col("k1").startswith("g:")), "groups", specs, out, group_pages)
    groups = spark.read.parquet(str(out / "groups"))
    later = later.filter(~F.col("k1").startswith("g:")).unionAll(groups)
    if any(q.topk is not None for q in planned):
        spark_labels.label(sc, "ivmstream capture: top-k states")
        _merge(later.filter(F.col("k1").startswith("k:")), "topk", specs, out, group_pages)
        later = later.filter(~F.col("k1").startswith("k:")).unionAll(spark.read.parquet(str(out / "topk")))
        stages.append("topk")
    t2 = time.perf_counter()
    weights = later.filter(F.col("k1").startswith("f:"))
    spark_labels.label(sc, "ivmstream capture: fragment counts")
    (weights.groupBy("k1", "k2").agg(F.sum("w").alias("w")).filter(F.col("w") != 0)
     .select("k1", "k2", F.lit(None).cast("string").alias("pk"), "w", F.lit(None).cast("binary").alias("a"))
     .write.mode("overwrite").parquet(str(out / "mu")))
    t3 = time.perf_counter()
    mu = spark.read.parquet(str(out / "mu"))
    sketch = [(r["k1"][2:], int(r["k2"]), int(r["w"])) for r in mu.select("k1", "k2", "w").collect()]
    if any(w < 0 for _, _, w in sketch):

        raise InvariantError("capture: a fragment count below zero")
    record = {"versions": {k: int(v) for k, v in versions.items()}, "dir": str(out), "stages": stages, "pages": pages,
              "group_pages": group_pages,
              "images": int(sum(per_table.values())),
              "groups": int(groups.filter(F.col("k1").startswith("g:")).agg(F.sum("w")).first()[0] or 0),
              "fragments": len(sketch), "sketch": sorted((q, f) for q, f, _ in sketch),
              "seconds": {"rows": round(t1 - t0, 1), "states": round(t2 - t1, 1), "mu": round(t3 - t2, 1),
                          "total": round(time.perf_counter() - t0, 1)}}
    spark_labels.label(sc, None)
    (ckpt / FILE).write_text(json.dumps(record, indent=1))
    return record

def initial_states(spark, record: dict) -> dict:
    """Operator -> its initial state as GroupedData keyed (k1, k2) like the operator's input:
    ``cdc`` (rows ``k1, k2, page, parts``, one per page), ``group``, ``mu``, and ``join`` /
    ``topk`` when the capture built them (rows of ``CAPTURE_SCHEMA``, the state blob in ``a``)."""
    from pyspark.sql import functions as F

    out = Path(record["dir"])
    stages = record.get("stages", ["pages", "groups", "mu"])
    frames = {"cdc": spark.read.parquet(str(out / "pages")),
              "group": spark.read.parquet(str(out / "groups")).filter(F.col("k1").startswith("g:")),
              "mu": spark.read.parquet(str(out / "mu"))}
    if "joins" in stages:
        frames["join"] = spark.read.parquet(str(out / "joins")).filter(F.col("k1").startswith("j:"))
    if "topk" in stages:
        frames["topk"] = spark.read.parquet(str(out / "topk")).filter(F.col("k1").startswith("k:"))
    return {op: df.groupBy("k1", "k2") for op, df in frames.items()}

def _merge(df, stage: str, specs: list, out: Path, group_pages: dict) -> None:
    """Stage ``stage`` (joins, groups, topk) of ``operators.keyed.capture`` over ``df``: shuffled
    by (k1, k2) and sorted, so that each call sees whole keys; written to ``out / stage``."""
    (df.repartition("k1", "k2").sortWithinPartitions("k1", "k2")
     .mapInArrow(_runs(stage, specs, group_pages), CAPTURE_SCHEMA).write.mode("overwrite").parquet(str(out / stage)))

def _slices(table: str, primary_key: list, specs: list, buckets: int):
    def fn(batches):

        from operators.keyed.capture import slice_rows
        from state.statestore.processors import Queries

        qs = [q for q in Queries(specs).all().values() if q.reads(table)]
        for rb in batches:
            if rb.num_rows:
                yield from bounded_batches(slice_rows(table, pa.Table.from_batches([rb]), primary_key, qs, buckets))

    return fn

def _runs(stage: str, specs: list, group_pages: dict):
    """A merge stage over a partition sorted by (k1, k2): whole runs of one (k1, k2) per call,
    the last run of each Arrow batch carried into the next (a run may straddle batches; a
    top-k's run is all of its query's rows)."""

    def fn(batches):

        from state.statestore.processors import Queries

        queries = Queries(specs).all()
        merge = {"joins": lambda t: C.merge_joins(queries, t),
                 "groups": lambda t: C.merge_groups(queries, t, lambda s: group_pages.get(s, GROUP_MIN_PAGES)),
                 "topk": lambda t: C.merge_topk(queries, t)}[stage]
        carry, carry_key = None, None
        for rb in batches:
            if rb.num_rows == 0:
                continue
            t = pa.Table.from_batches([rb])
            k1, k2 = t.column("k1").to_pylist(), t.column("k2").to_pylist()
            last = (k1[-1], k2[-1])
            i = t.num_rows - 1
            while i > 0 and (k1[i - 1], k2[i - 1]) == last:
                i -= 1
            if i == 0 and carry_key == last:  # the whole batch goes on the carried run
                carry = pa.concat_tables([carry, t])
                continue
            done = t.slice(0, i) if carry is None else pa.concat_tables([carry, t.slice(0, i)])
            if done.num_rows:
                yield from bounded_batches(merge(done))
            carry, carry_key = t.slice(i), last
        if carry is not None and carry.num_rows:
            yield from bounded_batches(merge(carry))

    return fn

def bounded_batches(table, max_bytes: int = BATCH_BYTES):
    """``table`` (CAPTURE_SCHEMA) as record batches of about ``max_bytes`` at most, cut by the
    sizes of its blobs (column ``a``); a single row larger than that is a batch of its own."""

    if table.nbytes <= max_bytes:
        yield from table.to_batches()
        return
    sizes = pc.fill_null(pc.binary_length(table.column("a")), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    ends = np.cumsum(sizes + 64)  # + the row's other columns, roughly
    start = 0
    while start < table.num_rows:
        stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + max_bytes, side="right"))
        stop = max(stop, start + 1)
        yield from table.slice(start, stop - start).to_batches()
        start = stop
