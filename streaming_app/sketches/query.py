"""Using sketches: show, filter, lazy refresh, and running a query over the mirrors with and
without a sketch's predicate (data skipping), counting the Delta files it has to read.

Files and bytes scanned are Spark's own scan metrics (files left after Delta's data skipping,
summed over the plan's scans). Beside them, ``file_stats`` predicts the same from the Delta
log's file statistics (delta-rs add actions): a file of a partitioned table is read only if
its [min, max] of the partition attribute overlaps one of the sketch's merged ranges (or it
holds NULLs and the sketch has the NULL fragment).
"""

from __future__ import annotations

import decimal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from connectors import delta_sink as sink
from core.errors import ConfigError
from streaming_app.sketches.outputs import write_sketch_rows
from streaming_app.sketches.query_state import QueryState
from streaming_app.sketches.registry import Part, Registration, read_registry
from streaming_app.sketches.snapshots import open_store, restore_latest, write_snapshot
from streaming_app.sketches.tables import REGISTERED, SKETCHES

# -- reading sketches without Spark (delta-rs) -----------------------------------------------------

def _dl_table(path: str) -> pa.Table | None:
    try:
        return sink.read_table(path)
    except Exception:  # noqa: BLE001 - table absent
        return None

def registration(lake: sink.Lake, name: str) -> Registration:
    t = _dl_table(lake.output(REGISTERED))
    rows = [] if t is None else [r for r in t.to_pylist() if r["name"] == name]
    if not rows:
        raise ConfigError(f"no registered sketch named {name!r} in {lake.root}")
    return Registration.from_rows(rows)

def sketch_records(lake: sink.Lake, name: str) -> dict:
    """partitioned table (lower case) -> its ``sketches`` row for the query."""
    t = _dl_table(lake.output(SKETCHES))
    rows = [] if t is None else [r for r in t.to_pylist() if r["query"] == name]
    if not rows:
        raise ConfigError(f"sketch {name!r} has not been captured yet (no row in 'sketches'; "
                          "the job captures it at its next batch once the table has rows)")
    return {r["table_name"].lower(): r for r in rows}

def lazy_refresh(spark, cfg, name: str) -> dict:
    """Bring a lazy query's sketch up to the mirrors' latest versions (from its newest
    snapshot and the change feed since, or a capture) and store it; returns the row."""
    lake = sink.Lake(cfg.lake_root)
    reg = read_registry(spark, lake).get(name)
    if reg is None:
        raise ConfigError(f"no registered sketch named {name!r}")
    latest = {t.name: sink.latest_version(spark, lake.mirror(t.name)) for t in cfg.tables}
    q = QueryState(reg)
    store = open_store(spark, lake)
    # none, another build's encoding or other settings: capture below
    engine, snap, _ = restore_latest(store, reg, latest) if reg.captured else (None, None, None)
    moved = True
    if snap is not None:
        q.restored(engine.maintainer, snap.versions)
        before = dict(q.versions)
        q.bring_forward(spark, lake, cfg, latest)
        moved = q.versions != before
    if snap is None and not q.capture(spark, lake, cfg, latest):
        empty = [p.table for p in reg.parts if p.boundaries is None]
        raise ConfigError(f"sketch {name!r}: table {', '.join(empty)} has no rows to partition yet")
    if moved:
        write_sketch_rows(spark, lake, [q], batch_id=-1, app_id=None)
        write_snapshot(store, q, batch_id=-1, app_id=None)
    return sketch_records(lake, name)

def records(spark, cfg, name: str) -> tuple[Registration, dict]:
    """The registration and its ``sketches`` rows, a lazy query brought forward first."""
    lake = sink.Lake(cfg.lake_root)
    reg = registration(lake, name)
    if reg.mode == "lazy":
        return reg, lazy_refresh(spark() if callable(spark) else spark, cfg, name)
    return reg, sketch_records(lake, name)

def coverage(lake: sink.Lake, rec: dict, part: Part) -> tuple[int, int]:
    """(rows of the partitioned mirror inside the sketch, all rows) at the mirror's latest version."""
    col = sink.read_table(lake.mirror(part.table), columns=[part.attribute]).column(part.attribute)
    ids = part.partition().fragment_of(col)
    inside = np.isin(ids, np.asarray(rec["fragments"], dtype=np.int64))
    return int(inside.sum()), len(ids)

def staleness(lake: sink.Lake, recs: dict, now=None) -> dict:
    """How far a query's sketch lags behind its mirrors: per table the query reads, the latest
    mirror version against the version the sketch reflects (only tables behind are listed), and
    the seconds since its ``sketches`` rows were written. An eager sketch lags by the batches the
    job has not finished; a lazy one until it is asked for."""
    reflected: dict = {}
    for rec in recs.values():
        reflected.update({t: int(v) for t, v in (rec["mirror_versions"] or [])})
    behind = {}
    for t, v in sorted(reflected.items()):
        latest = sink.latest_version(None, lake.mirror(t))
        if latest > v:
            behind[t] = {"sketch": v, "mirror": latest, "versions": latest - v}
    updated = max((r["updated_at"] for r in recs.values() if r["updated_at"] is not None), default=None)
    now = now or sink.utcnow()
    age = None if updated is None else max(0.0, (now - updated).total_seconds())
    return {"current": not behind, "behind": behind, "updated_at": updated, "age_s": age}

def staleness_line(st: dict) -> str:
    age = "" if st["age_s"] is None else f", updated {st['age_s']:.0f} s ago"
    if st["current"]:
        return f"current (every mirror at the version the sketch reflects){age}"
    lag = ", ".join(f"{t} v{b['sketch']} of v{b['mirror']} ({b['versions']} behind)" for t, b in st["behind"].items())
    return f"behind: {lag}{age}"

# -- file statistics -------------------------------------------------------------------------------

def merged_runs(part: Part, fragments) -> tuple[list, bool]:
    """Sketch fragments as merged value ranges [(lo or None, hi or None)], plus 'has NULL'."""
    return partition_runs(part.partition(), fragments)

def partition_runs(p, fragments) -> tuple[list, bool]:
    """``merged_runs`` for a ``RangePartition`` (e.g. one of an engine's several partitions)."""
    runs, has_null = p.runs(fragments)
    out = [(p.boundaries[lo] if lo > 0 else None, p.boundaries[hi + 1] if hi < p.n_fragments - 1 else None)
           for lo, hi in runs]
    return out, has_null

PREDICATE_FORMS = ("grouped", "flat")

def sketch_predicate(part: Part, fragments, form: str = "grouped") -> str:
    """The SQL condition selecting a sketch's fragments of one partitioned table:
    ``flat`` (an OR of the merged ranges, as stored in ``sketches.predicate``) or
    ``grouped`` (the same ranges in about sqrt(n) groups behind their spans; RangePartition.predicate)."""
    if form not in PREDICATE_FORMS:
        raise ConfigError(f"predicate form {form!r} is not one of {', '.join(PREDICATE_FORMS)}")
    return part.partition().predicate(fragments, grouped=form == "grouped")

def _num(v):

    return float(v) if isinstance(v, decimal.Decimal) else v

def file_stats(path: str, attribute: str | None = None, runs=None, has_null: bool = False) -> dict:
    """Files and bytes of the table, and those a scan restricted to ``runs`` must read."""
    acts = sink.file_actions(path)
    n = len(acts["path"])
    sizes = acts["size_bytes"]
    keep = [True] * n
    if runs is not None:
        mins = acts.get(f"min.{attribute}", [None] * n)
        maxs = acts.get(f"max.{attribute}", [None] * n)
        nulls = acts.get(f"null_count.{attribute}", [None] * n)
        for i in range(n):
            lo_f, hi_f = _num(mins[i]), _num(maxs[i])
            if lo_f is None or hi_f is None:  # no stats (or all NULL): must read unless provably empty
                keep[i] = has_null or nulls[i] is None or bool(runs)
                continue
            hit = any((lo is None or _num(hi_f) >= _num(lo)) and (hi is None or _num(lo_f) < _num(hi))
                      for lo, hi in runs)
            keep[i] = hit or (has_null and (nulls[i] is None or nulls[i] > 0))
    return {"files_total": n, "bytes_total": int(sum(sizes)), "files": int(sum(keep)),
            "bytes": int(sum(s for s, k in zip(sizes, keep) if k))}

# -- the query with and without the sketch -----------------------------------------------------------

@dataclass
class QueryRun:
    rows: list
    seconds: float
    files: int
    bytes: int
    scan: dict = field(default_factory=dict)  # Spark's scan metrics per table (see scan_metrics)

def mirror_written(path: str) -> bool:
    """Whether the mirror at ``path`` has a Delta log (an object store's is assumed)."""
    return "://" in str(path) or (Path(path) / "_delta_log").is_dir()

def _register_views(spark, cfg, predicates: dict | None = None) -> None:
    lake = sink.Lake(cfg.lake_root)
    preds = dict(predicates or {})
    for t in cfg.tables:
        if not mirror_written(lake.mirror(t.name)):
            continue  # not written yet: a query naming it was refused before Spark started
        df = spark.read.format("delta").load(lake.mirror(t.name))
        if t.name in preds:
            df = df.where(preds[t.name])
        df.createOrReplaceTempView(t.name)

def scan_metrics(df, paths: dict | None = None) -> dict:
    """Spark's own scan figures for an executed DataFrame, from the SQL metrics of its physical
    plan's file scans (adaptive plans and query stages walked through): per scanned table,
    ``files`` (numFiles: files left after Delta's data skipping), ``bytes`` (filesSize: their
    size), ``rows`` (numOutputRows) and ``scans`` (scan nodes).  ``paths`` maps a table's
    directory to its name; unmapped scans are keyed by their root path."""
    names = {str(p).rstrip("/"): t for t, p in (paths or {}).items()}
    out: dict = {}

    def metric(node, key):
        m = node.metrics().get(key)
        return int(m.get().value()) if m.isDefined() else 0

    def walk(node):
        cls = node.getClass().getSimpleName()
        if cls == "AdaptiveSparkPlanExec":
            return walk(node.executedPlan())
        if "QueryStage" in cls:
            return walk(node.plan())
        if cls in ("FileSourceScanExec", "BatchScanExec") or node.nodeName().startswith("Scan "):
            try:
                roots = node.relation().location().rootPaths()
                root = str(roots.apply(0)) if roots.size() else "?"
            except Exception:  # noqa: BLE001 - a scan that is not over files
                root = node.nodeName()
            root = root.removeprefix("file:").rstrip("/")
            key = names.get(root, names.get("file:" + root, root))
            e = out.setdefault(key, {"files": 0, "bytes": 0, "rows": 0, "scans": 0})
            e["files"] += metric(node, "numFiles")
            e["bytes"] += metric(node, "filesSize")
            e["rows"] += metric(node, "numOutputRows")
            e["scans"] += 1
        ch = node.children()
        for i in range(ch.size()):
            walk(ch.apply(i))

    walk(df._jdf.queryExecution().executedPlan())
    return out

def run_with_predicates(spark, cfg, sql: str, predicates: dict | None = None) -> QueryRun:
    """Run ``sql`` over the mirrors with each table in ``predicates`` (name -> SQL condition,
    e.g. the predicates of an engine sketch partitioned on several tables) restricted; files /
    bytes here are Spark's (``scan_metrics``), summed over the tables the plan scanned."""
    lake = sink.Lake(cfg.lake_root)
    _register_views(spark, cfg, predicates)
    try:
        t0 = time.perf_counter()
        df = spark.sql(sql)
        rows = df.collect()
        secs = time.perf_counter() - t0
        scan = scan_metrics(df, {t.name: lake.mirror(t.name) for t in cfg.tables})
    finally:
        if predicates:
            _register_views(spark, cfg)
    return QueryRun(_norm(rows), secs, sum(s["files"] for s in scan.values()),
                    sum(s["bytes"] for s in scan.values()), scan)

def results_equal(sql: str, a: list, b: list) -> bool:
    """Normalised result rows equal; with ORDER BY in order, ties may come out in another order."""
    ordered = " order by " in " ".join(sql.lower().split())
    eq = (a == b) if ordered else (sorted(a, key=repr) == sorted(b, key=repr))
    if ordered and not eq:
        eq = sorted(a, key=repr) == sorted(b, key=repr)
    return eq

def _norm(rows) -> list:

    def v(x):
        if isinstance(x, float):
            return round(x, 6)
        if isinstance(x, decimal.Decimal):
            return round(float(x), 6)
        return x

    return [tuple(v(x) for x in r) for r in rows]

def run_query(spark, cfg, sql: str, use_sketch: str | None = None, form: str = "grouped") -> dict:
    """Run ``sql`` over the mirrors, and with ``use_sketch`` again with every partitioned
    table restricted to the sketch (its predicates in ``form``, see ``sketch_predicate``);
    files and bytes are Spark's scan metrics (files left after Delta's data skipping),
    ``expected`` what the Delta log's file statistics predict for the partitioned tables,
    ``ranges`` the merged ranges per table, ``equal`` whether both results agree."""
    lake = sink.Lake(cfg.lake_root)
    out = {"plain": run_with_predicates(spark, cfg, sql)}
    if use_sketch:
        reg, recs = records(spark, cfg, use_sketch)
        preds, expected, ranges = {}, {}, {}
        for part in reg.parts:
            rec = recs.get(part.table.lower())
            if rec is None:
                raise ConfigError(f"sketch {use_sketch!r} has no row for table {part.table!r} yet")
            preds[part.table] = sketch_predicate(part, rec["fragments"], form)
            runs, has_null = merged_runs(part, rec["fragments"])
            ranges[part.table] = len(runs) + has_null
            expected[part.table] = file_stats(lake.mirror(part.table), part.attribute, runs, has_null)
        out["sketch"] = run_with_predicates(spark, cfg, sql, preds)
        out["predicates"] = preds
        out["ranges"] = ranges
        out["expected"] = expected
        out["equal"] = results_equal(sql, out["plain"].rows, out["sketch"].rows)
    return out
