"""`ivmstream sketch register|advise|drop|show|filter|layout` and `ivmstream query` (issues 4, 7).

``add_commands(sub, common)`` is the one call cli.py makes. ``show``, ``filter`` and ``advise``
read the Delta tables with delta-rs (no Spark start) unless the query is lazy, which needs
Spark to bring it forward from the change feed. ``register`` proves the partition safe
(``operators.sketch_safety``) before it registers; without ``--partition`` the cost-based
advisor (``operators.sketch_advisor``) picks the attribute from the mirrors' current rows.
The safety check used here ignores the mirrors' min/max statistics and takes every column but
the primary key to be nullable: a registered sketch is maintained under future updates, and a
fact of today's data (all values >= 0, no NULLs) need not hold after the next batch.
"""

from __future__ import annotations

import json

from operators.errors import ConfigError
from streaming_app.config import load_config


def _cfg(args):
    cfg = load_config(args.config)
    return cfg.with_overrides(master=getattr(args, "master", None))


def _spark(cfg):
    from streaming_app.spark_session import SessionOptions, build_session

    return build_session(cfg.spark, SessionOptions(app_name=f"ivmstream-sketch:{cfg.name}", ui=False))


def parse_partition(spec: str, default_fragments: int) -> tuple[str, str, int]:
    part, _, frags = spec.partition(":")
    if "." not in part:
        raise ConfigError(f"--partition {spec!r} must be TABLE.ATTR[:FRAGMENTS]")
    table, attr = part.split(".", 1)
    try:
        n = int(frags) if frags else default_fragments
    except ValueError:
        raise ConfigError(f"--partition {spec!r}: FRAGMENTS must be an integer") from None
    return table, attr, n


def query_tables(cfg, sql: str) -> dict:
    """name (lower case) -> TableConfig of every table ``sql`` reads."""
    from sqlglot import exp

    from operators.sketch_safety.check import parse

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
    import pyarrow as pa

    from connectors import delta_sink as sink

    lake = sink.Lake(cfg.lake_root)
    out = {}
    for name, table in query_tables(cfg, sql).items():
        try:
            import deltalake

            data = deltalake.DeltaTable(lake.mirror(table.name)).to_pyarrow_table(columns=table.column_names)
        except Exception:  # noqa: BLE001 - mirror absent: no rows yet
            data = pa.Table.from_batches([], schema=sink.arrow_schema(table))
        out[name] = data
    return out


def choose_partition(sql: str, tables: dict, fragments: int, seed: int = 0, nullable: dict | None = None):
    """The advisor's choice for a registration: (Advice, chosen Candidate); ConfigError if none."""
    from operators.sketch_advisor import advise_report

    if not any(t.num_rows for t in tables.values()):
        raise ConfigError("the advisor needs rows in the mirrors to estimate sketch sizes; "
                          "load the tables first or give --partition TABLE.ATTR")
    advice = advise_report(sql, tables, fragments=fragments, seed=seed, stats={}, nullable=nullable)
    if advice.chosen is None:
        why = "; ".join(f"{r.table}.{r.attribute}: {r.reason}" for r in advice.refused) or "no attributes"
        raise ConfigError(f"no safe partition attribute for this query ({why})")
    return advice, advice.chosen


def cmd_advise(args) -> int:
    from operators.sketch_advisor import advise_report, format_advice
    from streaming_app.sketch_maintainer import may_be_null

    cfg = _cfg(args)
    tables = mirror_tables(cfg, args.sql)
    if not any(t.num_rows for t in tables.values()):
        raise ConfigError("the mirrors of the query's tables have no rows yet: nothing to estimate from")
    advice = advise_report(args.sql, tables, verify=args.verify, fragments=args.fragments, theta=args.theta,
                           seed=args.seed, stats={}, nullable=may_be_null(cfg), how="capture")
    rows = ", ".join(f"{t} {v.num_rows} rows" for t, v in tables.items())
    print(f"advise over the mirrors in {cfg.lake_root} ({rows}); {args.fragments} equi-depth fragments; "
          f"shares of the table a sketch would cover")
    print(format_advice(advice), end="")
    return 0


def cmd_register(args) -> int:
    from streaming_app.sketch_maintainer import check_partition, may_be_null, register_query

    cfg = _cfg(args)
    if args.partition:
        table, attr, n = parse_partition(args.partition, args.fragments)
        schema = {k: list(t.column_names) for k, t in query_tables(cfg, args.sql).items()}
        if attr in schema.get(table.lower(), ()):  # else register_query says what is wrong
            check_partition(args.sql, schema, table, attr, may_be_null(cfg))  # refused before Spark starts
    else:
        n = args.fragments
        advice, best = choose_partition(args.sql, mirror_tables(cfg, args.sql), n, nullable=may_be_null(cfg))
        table, attr = best.table, best.attribute
        others = ", ".join(f"{c.table}.{c.attribute} {c.estimate:.1%}" for c in advice.candidates[1:4])
        print(f"advisor chose {table}.{attr}: proven safe, smallest estimated sketch {best.estimate:.1%} of "
              f"{table} (95% [{best.ci_low:.1%}, {best.ci_high:.1%}]) with {n} fragments"
              + (f"; next: {others}" if others else "") + f"; {len(advice.refused)} attributes refused")
        table = next(t.name for t in cfg.tables if t.name.lower() == table)
    spark = _spark(cfg)
    reg = register_query(spark, cfg, args.name, args.sql, table, attr, n, args.mode, replace=args.replace,
                         check=False)  # proven above (explicit --partition) or chosen among proven ones
    state = "captured" if reg.boundaries else "pending (the table has no rows yet; captured by the job)"
    print(f"registered {reg.name}: {table}.{attr}, {n} fragments, {reg.mode}, mirror version "
          f"{reg.capture_version}, {state}")
    return 0


def cmd_drop(args) -> int:
    from streaming_app.sketch_maintainer import drop_query

    cfg = _cfg(args)
    if not drop_query(_spark(cfg), cfg, args.name):
        raise ConfigError(f"no registered sketch named {args.name!r}")
    print(f"dropped {args.name}")
    return 0


def _record(cfg, name):
    from connectors import delta_sink as sink
    from streaming_app import sketch_query as sq

    lake = sink.Lake(cfg.lake_root)
    reg = sq.registration(lake, name)
    rec = sq.lazy_refresh(_spark(cfg), cfg, name) if reg.mode == "lazy" else sq.sketch_record(lake, name)
    return lake, reg, rec


def cmd_show(args) -> int:
    from streaming_app import sketch_query as sq

    cfg = _cfg(args)
    lake, reg, rec = _record(cfg, args.name)
    inside, total = sq.coverage(lake, rec, reg)
    runs, has_null = sq.merged_runs(reg, rec["fragments"])
    info = {
        "query": rec["query"], "table": rec["table_name"], "attribute": rec["attribute"], "mode": reg.mode,
        "fragments": f"{len(rec['fragments'])} of {rec['n_fragments'] + 1}",
        "ranges": [[lo if lo is None else str(lo), hi if hi is None else str(hi)] for lo, hi in runs]
        + ([["NULL", "NULL"]] if has_null else []),
        "rows_covered": f"{inside} of {total} ({(100.0 * inside / total) if total else 0:.1f}%)",
        "batch_id": rec["batch_id"], "mirror_version": rec["mirror_version"],
        "mirror_versions": dict(rec["mirror_versions"] or []),
    }
    if args.json:
        print(json.dumps(info, default=str))
    else:
        for k, v in info.items():
            print(f"{k:>16}: {v}")
    return 0


def cmd_filter(args) -> int:
    cfg = _cfg(args)
    _, _, rec = _record(cfg, args.name)
    print(rec["predicate"])
    return 0


def cmd_query(args) -> int:
    from streaming_app.sketch_query import run_query

    cfg = _cfg(args)
    out = run_query(_spark(cfg), cfg, args.sql, args.use_sketch)
    p = out["plain"]
    print(f"without sketch: {len(p.rows)} rows, {p.files} files, {p.bytes} bytes, {p.seconds * 1000:.0f} ms")
    if "sketch" in out:
        s = out["sketch"]
        print(f"with sketch {args.use_sketch}: {len(s.rows)} rows, {s.files} files, {s.bytes} bytes, "
              f"{s.seconds * 1000:.0f} ms")
        print(f"predicate: {out['predicate']}")
        print(f"results equal: {out['equal']}")
    if args.show_rows:
        for r in p.rows[: args.show_rows]:
            print(r)
    return 0 if out.get("equal", True) else 1


def cmd_layout(args) -> int:
    from connectors import delta_sink as sink

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


def add_commands(sub, common) -> None:
    s = sub.add_parser("sketch", help="register, drop and inspect provenance sketches of queries")
    ss = s.add_subparsers(dest="sketch_command", required=True)

    r = ss.add_parser("register", help="register a query; its sketch is captured and kept current by the job")
    common(r, ui=False)
    r.add_argument("--name", required=True, help="query name")
    r.add_argument("--sql", required=True, help="the SQL query (over the declared tables)")
    r.add_argument("--partition", help="TABLE.ATTR[:FRAGMENTS] to range-partition (refused unless proven "
                                       "safe); without it the cost-based advisor chooses")
    r.add_argument("--fragments", type=int, default=16, help="fragments when --partition gives none (16)")
    r.add_argument("--mode", choices=["eager", "lazy"], default="eager",
                   help="eager: maintained every batch; lazy: when the sketch is asked for")
    r.add_argument("--replace", action="store_true", help="replace a query of the same name")
    r.set_defaults(fn=cmd_register)

    a = ss.add_parser("advise", help="safe partition attributes of a query with estimated sketch sizes "
                                     "(cost-based advisor over the mirrors)")
    common(a, ui=False)
    a.add_argument("--sql", required=True, help="the SQL query (over the declared tables)")
    a.add_argument("--fragments", type=int, default=16, help="equi-depth fragments per attribute (16)")
    a.add_argument("--theta", type=float, default=0.05, help="sampling rate (0.05)")
    a.add_argument("--seed", type=int, default=0, help="sampling seed (0)")
    a.add_argument("--verify", action="store_true", help="also capture each candidate's sketch: true sizes")
    a.set_defaults(fn=cmd_advise)

    d = ss.add_parser("drop", help="drop a registered query and its sketch")
    common(d, ui=False)
    d.add_argument("name")
    d.set_defaults(fn=cmd_drop)

    sh = ss.add_parser("show", help="a sketch's ranges, share of the table covered, version")
    common(sh, ui=False)
    sh.add_argument("name")
    sh.add_argument("--json", action="store_true", help="print one JSON object")
    sh.set_defaults(fn=cmd_show)

    f = ss.add_parser("filter", help="the sketch's SQL predicate (adjacent ranges merged)")
    common(f, ui=False)
    f.add_argument("name")
    f.set_defaults(fn=cmd_filter)

    lay = ss.add_parser("layout", help="cluster a mirror by an attribute for skipping (OPTIMIZE ZORDER BY)")
    common(lay, ui=False)
    lay.add_argument("table")
    lay.add_argument("attribute")
    lay.add_argument("--max-file-mb", type=int, default=16, help="target file size in MB (default 16)")
    lay.set_defaults(fn=cmd_layout)

    q = sub.add_parser("query", help="run SQL over the Delta mirrors, optionally restricted by a sketch")
    common(q, ui=False)
    q.add_argument("--sql", required=True, help="the query")
    q.add_argument("--use-sketch", help="also run it with this sketch's predicate and compare")
    q.add_argument("--show-rows", type=int, default=0, help="print the first N result rows")
    q.set_defaults(fn=cmd_query)


def build_parser_check() -> set[str]:
    """Names of the sketch subcommands and `query` as the main parser registers them."""
    from streaming_app.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command")
    sk = next(a for a in sub.choices["sketch"]._actions if a.dest == "sketch_command")
    return set(sk.choices) | ({"query"} & set(sub.choices))
