"""`ivmstream sketch register|advise|drop|show|filter|layout` and `ivmstream query` (issues 4, 7).

``add_commands(sub, common)`` is the one call cli.py makes. ``show``, ``filter`` and ``advise``
read the Delta tables with delta-rs (no Spark start) unless the query is lazy, which needs
Spark to bring it forward from the change feed. ``register`` proves the partition safe
(``operators.sketch_safety``) before it registers; without ``--partition`` the cost-based
advisor (``operators.sketch_advisor``) picks the attribute from the mirrors' current rows.
The safety check used here ignores the mirrors' min/max statistics and takes every column but
the primary key to be nullable: a registered sketch is maintained under future updates, and a
fact of today's data (all values >= 0, no NULLs) need not hold after the next batch. What the
config declares of a table (``not_null`` columns, value ``ranges``) does hold: the decoder
quarantines records that break it, so the check may use it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math

import pyarrow as pa
import sqlglot
from sqlglot import exp

from connectors import delta_sink as sink
from connectors import object_store
from connectors.s3_lease import S3Lease
from core.config import NAME, MAX_FRAGMENTS, MAX_NAME_LEN, sql_problem
from core.errors import ConfigError, SqlError
from operators.sketch_advisor import advise_report, format_advice
from operators.sketch_safety.check import parse
from operators.sketch_safety.registration import (
    check_partition,
    check_query,
    check_sketch_sql,
    declared_stats,
    may_be_null,
)
from streaming_app.flags import int_in
from streaming_app.settings import load_config
from streaming_app.sketches import query as sq
from streaming_app.sketches.query import mirror_written, run_query, sketch_predicate
from streaming_app.sketches.register import drop_query, register_query
from streaming_app.sketches.registry import as_parts
from streaming_app.spark_session import SessionOptions, build_session


def _cfg(args):

    cfg = load_config(args.config)
    object_store.use(cfg.s3)  # delta-rs reads of an s3 lake
    return cfg.with_overrides(master=getattr(args, "master", None), lake_root=getattr(args, "lake_root", None),
                              checkpoint_root=getattr(args, "checkpoint_root", None))

def _holding_lake(fn):
    """A command that may write the lake (a registration, a lazy sketch brought forward, a
    layout): on an S3 lake it holds the lake's lease while it runs, so it is refused while the
    job runs there (S3Proxy cannot make two writers of one table safe; README)."""

    @functools.wraps(fn)
    def run(args) -> int:

        cfg = _cfg(args)
        if not object_store.is_s3(cfg.lake_root):
            return fn(args)
        with S3Lease(cfg.lake_root, f"ivmstream sketch {fn.__name__.removeprefix('cmd_')}"):
            return fn(args)

    return run

def _spark(cfg):

    return build_session(cfg.spark, SessionOptions(app_name=f"ivmstream-sketch:{cfg.name}", ui=False,
                                                   s3=object_store.lake_s3(cfg)))

def parse_partition(spec: str, default_fragments: int) -> tuple[str, str, int]:
    part, _, frags = spec.strip().partition(":")
    if part.count(".") != 1:
        raise ConfigError(f"--partition {spec!r} must be TABLE.ATTR[:FRAGMENTS]")
    table, attr = part.split(".", 1)
    try:
        n = int(frags) if frags else default_fragments
    except ValueError:
        raise ConfigError(f"--partition {spec!r}: FRAGMENTS must be an integer") from None
    if not 1 <= n <= MAX_FRAGMENTS:
        raise ConfigError(f"--partition {spec!r}: FRAGMENTS must lie in 1..{MAX_FRAGMENTS:,}, got {n}")
    return table, attr, n

def sketch_name(text: str) -> str:
    """``--name`` and the NAME arguments: the names a [[sketches]] entry may have."""

    if len(text) > MAX_NAME_LEN or not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a sketch name (letters, digits, '_', '-', '.', "
                                         f"starting with a letter, digit or '_'; at most {MAX_NAME_LEN})")
    return text

def fragments(text: str) -> int:
    return int_in(1, MAX_FRAGMENTS)(text)

def parse_partitions(specs, default_fragments: int) -> list[tuple[str, str, int]]:
    """Several ``--partition`` options, each one spec or a comma-separated list of them."""
    return [parse_partition(x, default_fragments) for spec in specs for x in spec.split(",") if x.strip()]

def query_tables(cfg, sql: str) -> dict:
    """name (lower case) -> TableConfig of every table ``sql`` reads."""

    declared = {t.name.lower(): t for t in cfg.tables}
    out = {}
    for name in sorted({t.name.lower() for t in parse(sql).find_all(exp.Table)}):
        if name not in declared:
            raise ConfigError(f"the query reads {name!r}, which is not declared in [[tables]]")
        out[name] = declared[name]
    return out

def mirror_tables(cfg, sql: str) -> dict:
    """Current rows of the tables ``sql`` reads, from their Delta mirrors (delta-rs, no Spark);
    a mirror not written yet is an empty table of the declared schema."""

    lake = sink.Lake(cfg.lake_root)
    out = {}
    for name, table in query_tables(cfg, sql).items():
        try:
            data = sink.read_table(lake.mirror(table.name), columns=table.column_names)
        except Exception:  # noqa: BLE001 - mirror absent: no rows yet
            data = pa.Table.from_batches([], schema=sink.arrow_schema(table))
        out[name] = data
    return out

def choose_partition(sql: str, tables: dict, fragments: int, seed: int = 0, nullable: dict | None = None,
                     per_table: bool = False, stats: dict | None = None):
    """The advisor's choice for a registration: (Advice, [chosen Candidate]); ConfigError if
    none. ``per_table``: the best safe attribute of every table whose estimated sketch covers
    at most ``PER_TABLE_MAX`` of it (sketching a table that is read almost whole gains nothing)."""

    if not any(t.num_rows for t in tables.values()):
        raise ConfigError("the advisor needs rows in the mirrors to estimate sketch sizes; "
                          "load the tables first or give --partition TABLE.ATTR")
    advice = advise_report(sql, tables, fragments=fragments, seed=seed, stats=stats or {}, nullable=nullable)
    if advice.chosen is None:
        why = "; ".join(f"{r.table}.{r.attribute}: {r.reason}" for r in advice.refused) or "no attributes"
        raise ConfigError(f"no safe partition attribute for this query ({why})")
    if not per_table:
        return advice, [advice.chosen]
    best: dict = {}
    for c in advice.candidates:  # smallest estimate first
        if c.table not in best and c.estimate <= PER_TABLE_MAX:
            best[c.table] = c
    return advice, list(best.values()) or [advice.chosen]

PER_TABLE_MAX = 0.5

def cmd_advise(args) -> int:

    cfg = _cfg(args)
    check_sketch_sql(cfg, "--sql", args.sql, where="--sql")  # syntax, supported SQL, tables, columns
    tables = mirror_tables(cfg, args.sql)
    if not any(t.num_rows for t in tables.values()):
        raise ConfigError("the mirrors of the query's tables have no rows yet: nothing to estimate from")
    advice = advise_report(args.sql, tables, verify=args.verify, fragments=args.fragments, theta=args.theta,
                           seed=args.seed, stats=declared_stats(cfg), nullable=may_be_null(cfg), how="capture")
    rows = ", ".join(f"{t} {v.num_rows} rows" for t, v in tables.items())
    print(f"advise over the mirrors in {cfg.lake_root} ({rows}); {args.fragments} equi-depth fragments; "
          f"shares of the table a sketch would cover")
    print(format_advice(advice), end="")
    return 0

@_holding_lake
def cmd_register(args) -> int:

    cfg = _cfg(args)
    # the SQL first (one SELECT, supported, over declared tables and columns): the safety
    # check alone would misname the problem (an IN subquery read as an unknown column)
    check_sketch_sql(cfg, args.name, args.sql, where=f"--sql of {args.name!r}")
    if args.partition:
        parts = parse_partitions(args.partition, args.fragments)
        as_parts(parts)  # one attribute per table: refused before Spark starts
        schema = {k: list(t.column_names) for k, t in query_tables(cfg, args.sql).items()}
        for table, attr, _ in parts:
            if attr in schema.get(table.lower(), ()):  # else register_query says what is wrong
                check_partition(args.sql, schema, table, attr, may_be_null(cfg), declared_stats(cfg))
        check_query(cfg, args.name, args.sql, parts)  # undeclared table or column: before Spark
    else:
        n = args.fragments
        advice, chosen = choose_partition(args.sql, mirror_tables(cfg, args.sql), n, nullable=may_be_null(cfg),
                                          per_table=args.per_table, stats=declared_stats(cfg))
        picked = {(c.table, c.attribute) for c in chosen}
        others = ", ".join([f"{c.table}.{c.attribute} {c.estimate:.1%}" for c in advice.candidates
                            if (c.table, c.attribute) not in picked][:3])
        what = "; ".join(f"{c.table}.{c.attribute} {c.estimate:.1%} of {c.table} (95% [{c.ci_low:.1%}, "
                         f"{c.ci_high:.1%}])" for c in chosen)
        print(f"advisor chose {', '.join(f'{c.table}.{c.attribute}' for c in chosen)}: proven safe, smallest "
              f"estimated sketch{' per table' if args.per_table else ''}: {what} with {n} fragments"
              + (f"; next: {others}" if others else "") + f"; {len(advice.refused)} attributes refused")
        names = {t.name.lower(): t.name for t in cfg.tables}
        parts = [(names[c.table], c.attribute, n) for c in chosen]
    spark = _spark(cfg)
    reg = register_query(spark, cfg, args.name, args.sql, parts, args.mode, replace=args.replace,
                         check=False)  # proven above (explicit --partition) or chosen among proven ones
    state = "captured" if reg.captured else "pending (a table has no rows yet; captured by the job)"
    print(f"registered {reg.name}: {reg.describe()} (table.attribute:fragments), {reg.mode}, "
          f"mirror version {reg.capture_version}, {state}")
    return 0

@_holding_lake
def cmd_drop(args) -> int:

    cfg = _cfg(args)
    if not drop_query(_spark(cfg), cfg, args.name):
        raise ConfigError(f"no registered sketch named {args.name!r}")
    print(f"dropped {args.name}")
    return 0

def _records(cfg, name):

    reg, recs = sq.records(lambda: _spark(cfg), cfg, name)  # Spark only for a lazy query
    return sink.Lake(cfg.lake_root), reg, recs

@_holding_lake
def cmd_show(args) -> int:

    cfg = _cfg(args)
    lake, reg, recs = _records(cfg, args.name)
    tables = []
    for part in reg.parts:
        rec = recs.get(part.table.lower())
        if rec is None:
            continue
        inside, total = sq.coverage(lake, rec, part)
        tables.append({
            "table": rec["table_name"], "attribute": rec["attribute"],
            **fragments_shown(part.partition(), rec["fragments"]),
            "rows_covered": f"{inside} of {total} ({(100.0 * inside / total) if total else 0:.1f}%)",
            "mirror_version": rec["mirror_version"], "batch_id": rec["batch_id"],
        })
    any_rec = next(iter(recs.values()))
    st = sq.staleness(lake, recs)
    info = {"query": reg.name, "mode": reg.mode, "tables": tables,
            "mirror_versions": dict(any_rec["mirror_versions"] or []), "staleness": st}
    if args.json:
        print(json.dumps(info, default=str))
        return 0
    print(f"{'query':>16}: {reg.name} ({reg.mode})")
    for t in tables:
        for k, v in t.items():
            if k == "ranges":
                v = ", ".join(range_text(r) for r in v) + "  (lower bound included, upper excluded)"
            elif k == "null_fragment":
                v = "in the sketch (rows whose value is NULL)" if v else "not in the sketch"
            elif k == "fragments":
                v = f"{v} value ranges in the sketch"
            print(f"{k:>16}: {v}")
    print(f"{'mirror_versions':>16}: {info['mirror_versions']}")
    print(f"{'staleness':>16}: {sq.staleness_line(st)}")
    return 0

def fragments_shown(partition, fragments) -> dict:
    """A sketch's fragments as ``show`` reports them: how many of the partition's value ranges
    it holds (the NULL fragment counted apart, so ``--fragments 512`` reads "n of 512"), whether
    it holds NULL, and its merged ranges with bounds in the column's type (a long stays a
    number), ``ge`` included and ``lt`` excluded, a missing bound open."""
    runs, has_null = sq.partition_runs(partition, fragments)
    return {"fragments": f"{len(set(fragments)) - has_null} of {partition.n_fragments}",
            "null_fragment": has_null,
            "ranges": [{k: v for k, v in (("ge", lo), ("lt", hi)) if v is not None} for lo, hi in runs]}

def range_text(r: dict) -> str:
    """``[lo, hi)`` with typed values (``repr`` quotes a string bound, not a number); an open end
    is -inf / +inf."""
    lo = "(-inf" if "ge" not in r else f"[{bound_text(r['ge'])}"
    hi = "+inf)" if "lt" not in r else f"{bound_text(r['lt'])})"
    return f"{lo}, {hi}"

def bound_text(v) -> str:
    return repr(v) if isinstance(v, str) else str(v)

@_holding_lake
def cmd_filter(args) -> int:

    cfg = _cfg(args)
    _, reg, recs = _records(cfg, args.name)

    def pred(part) -> str:
        rec = recs[part.table.lower()]
        return rec["predicate"] if args.form == "flat" else sketch_predicate(part, rec["fragments"], args.form)

    parts = [p for p in reg.parts if p.table.lower() in recs]
    if args.table:
        part = next((p for p in parts if p.table.lower() == args.table.lower()), None)
        if part is None:
            raise ConfigError(f"sketch {args.name!r} has no partitioned table {args.table!r} "
                              f"(it has {', '.join(p.table for p in reg.parts)})")
        print(pred(part))
    elif len(parts) == 1:
        print(pred(parts[0]))
    else:  # one line per table: "table: predicate"
        for part in parts:
            print(f"{part.table}: {pred(part)}")
    return 0

def _scan_line(run) -> str:
    per = ", ".join(f"{t} {s['files']} files {s['bytes']:,} B" for t, s in sorted(run.scan.items()))
    return f"{len(run.rows)} rows, {run.files} files, {run.bytes:,} bytes, {run.seconds * 1000:.0f} ms ({per})"

@_holding_lake
def cmd_query(args) -> int:

    cfg = _cfg(args)
    why = sql_problem(args.sql, dialect="spark")  # Spark SQL, not only what the sketch engine reads
    if why:
        raise SqlError(f"--sql: {why}")
    _check_query_tables(cfg, args.sql)
    spark = _spark(cfg)
    from pyspark.errors import AnalysisException

    try:
        out = run_query(spark, cfg, args.sql, args.use_sketch, args.form)
    except AnalysisException as e:  # unknown table or column, types: Spark's reason, one line
        raise SqlError(f"--sql: {' '.join(str(e).split())[:500]}") from None
    p = out["plain"]
    print(f"without sketch: {_scan_line(p)}")
    if "sketch" in out:
        s = out["sketch"]
        print(f"with sketch {args.use_sketch}: {_scan_line(s)}")
        if s.bytes:
            print(f"data read: {p.bytes / s.bytes:.1f}x less with the sketch")
        for t, pred in out["predicates"].items():
            e, n = out["expected"][t], out["ranges"][t]
            shown = pred if len(pred) <= 240 else pred[:200] + f" ... ({len(pred):,} characters; sketch filter prints it)"
            print(f"predicate on {t} ({n} range{'s' if n != 1 else ''}, {args.form}): {shown}  "
                  f"(Delta file statistics: {e['files']} of {e['files_total']} files)")
        print(f"results equal: {out['equal']}")
    if args.show_rows:
        for r in p.rows[: args.show_rows]:
            print(r)
    return 0 if out.get("equal", True) else 1

def _check_query_tables(cfg, sql: str) -> None:
    """Every table the query names is declared and has a mirror in the lake: said before Spark
    starts, in the words of the config (Spark would say "Path does not exist")."""

    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    declared = {t.name.lower(): t for t in cfg.tables}
    lake = sink.Lake(cfg.lake_root)
    for ref in tree.find_all(exp.Table):
        name = ref.name.lower()
        if ref.db or name in ctes or not name:  # delta.`/path`, db.table: Spark resolves them
            continue
        if name not in declared:
            raise SqlError(f"--sql reads table {ref.name!r}, which {cfg.source_file or 'the config'} does not "
                           f"declare (its tables: {', '.join(sorted(t.name for t in cfg.tables))})")
        if not mirror_written(lake.mirror(declared[name].name)):
            raise ConfigError(f"table {declared[name].name!r} has no mirror in {cfg.lake_root} yet: the job has "
                              "not written it there (run the job first, or give the job's lake with --lake-root)")

@_holding_lake
def cmd_layout(args) -> int:

    cfg = _cfg(args)
    if args.attribute not in cfg.table(args.table).column_names:
        raise ConfigError(f"table {args.table!r} has no column {args.attribute!r}")
    spark = _spark(cfg)
    path = sink.Lake(cfg.lake_root).mirror(args.table)
    # small target files: skipping works at file granularity, one 1 GB file skips nothing
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(args.max_file_mb * 1024 * 1024))
    spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (`{args.attribute}`)").collect()
    print(f"optimized {path} with ZORDER BY ({args.attribute}), files up to {args.max_file_mb} MB")
    return 0

def sampling_rate(text: str) -> float:

    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be a sampling rate in (0, 1], got {text!r}")
    return v

def seed(text: str) -> int:
    return int_in(0, 2**32 - 1)(text)

def max_file_mb(text: str) -> int:
    return int_in(1, 1 << 20)(text)

def show_rows(text: str) -> int:
    return int_in(0, 10**9)(text)

def add_commands(sub, common) -> None:
    s = sub.add_parser("sketch", help="register, drop and inspect provenance sketches of queries")
    ss = s.add_subparsers(dest="sketch_command", required=True)

    r = ss.add_parser("register", help="register a query; its sketch is captured and kept current by the job")
    common(r, ui=False)
    r.add_argument("--name", type=sketch_name, required=True, help="query name")
    r.add_argument("--sql", required=True, help="the SQL query (over the declared tables)")
    r.add_argument("--partition", action="append",
                   help="TABLE.ATTR[:FRAGMENTS] to range-partition (refused unless proven safe); repeat it or "
                        "separate with commas to sketch several tables of the query (one attribute per table); "
                        "without it the cost-based advisor chooses")
    r.add_argument("--per-table", action="store_true",
                   help="without --partition: the advisor's best attribute on every table the query reads "
                        f"whose sketch would cover at most {PER_TABLE_MAX:.0%}% of it (more data skipped)")
    r.add_argument("--fragments", type=fragments, default=16,
                   help=f"fragments when --partition gives none (16; at most {MAX_FRAGMENTS:,})")
    r.add_argument("--mode", choices=["eager", "lazy"], default="eager",
                   help="eager: maintained every batch; lazy: when the sketch is asked for")
    r.add_argument("--replace", action="store_true", help="replace a query of the same name")
    r.set_defaults(fn=cmd_register)

    a = ss.add_parser("advise", help="safe partition attributes of a query with estimated sketch sizes "
                                     "(cost-based advisor over the mirrors)")
    common(a, ui=False)
    a.add_argument("--sql", required=True, help="the SQL query (over the declared tables)")
    a.add_argument("--fragments", type=fragments, default=16, help="equi-depth fragments per attribute (16)")
    a.add_argument("--theta", type=sampling_rate, default=0.05, help="sampling rate in (0, 1] (0.05)")
    a.add_argument("--seed", type=seed, default=0, help="sampling seed (0)")
    a.add_argument("--verify", action="store_true", help="also capture each candidate's sketch: true sizes")
    a.set_defaults(fn=cmd_advise)

    d = ss.add_parser("drop", help="drop a registered query and its sketch")
    common(d, ui=False)
    d.add_argument("name", type=sketch_name)
    d.set_defaults(fn=cmd_drop)

    sh = ss.add_parser("show", help="a sketch's ranges, share of the table covered, version, staleness")
    common(sh, ui=False)
    sh.add_argument("name", type=sketch_name)
    sh.add_argument("--json", action="store_true", help="print one JSON object")
    sh.set_defaults(fn=cmd_show)

    f = ss.add_parser("filter", help="the sketch's SQL predicate (adjacent ranges merged)")
    common(f, ui=False)
    f.add_argument("name", type=sketch_name)
    f.add_argument("--table", help="only this partitioned table's predicate (default: all, one per line)")
    f.add_argument("--form", choices=("flat", "grouped"), default="flat",
                   help="flat: an OR of the merged ranges (default, as stored in 'sketches'); grouped: the same "
                        "ranges in about sqrt(n) groups behind their spans, cheaper per row when there are many")
    f.set_defaults(fn=cmd_filter)

    lay = ss.add_parser("layout", help="cluster a mirror by an attribute for skipping (OPTIMIZE ZORDER BY)")
    common(lay, ui=False)
    lay.add_argument("table")
    lay.add_argument("attribute")
    lay.add_argument("--max-file-mb", type=max_file_mb, default=16, help="target file size in MB (default 16)")
    lay.set_defaults(fn=cmd_layout)

    q = sub.add_parser("query", help="run SQL over the Delta mirrors, optionally restricted by a sketch")
    common(q, ui=False)
    q.add_argument("--sql", required=True, help="the query")
    q.add_argument("--use-sketch", type=sketch_name, help="also run it with this sketch's predicate and compare")
    q.add_argument("--show-rows", type=show_rows, default=0, help="print the first N result rows")
    q.add_argument("--form", choices=("grouped", "flat"), default="grouped",
                   help="form of the sketch predicates the query runs with (see sketch filter --form)")
    q.set_defaults(fn=cmd_query)

