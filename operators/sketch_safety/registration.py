"""The checks a sketch registration passes against the declared tables, without Spark: the query
plans over the declared schemas and reads each partitioned table, and each partition attribute
is safe (PBDS) for any future data.

``cfg`` is the job config (its ``tables`` with ``name``, ``column_names``, ``primary_key``,
``not_null``, ``ranges``); a partition is a ``(table, attribute, ...)`` tuple or anything with
``table`` and ``attribute``. The config loader and the sketch wiring both call these; nothing
here imports either.
"""

from __future__ import annotations

import re

from core.config.sketch_sql import sql_problem
from core.errors import ConfigError, IvmError, SqlError, UnsafeSketchError, UnsupportedSqlError

_CODE = re.compile(r"\[IVM\d{3}\] ")

def _table_attribute(p) -> tuple[str, str]:
    return (p.table, p.attribute) if hasattr(p, "table") else (p[0], p[1])

def table_attributes(parts) -> list[tuple[str, str]]:
    """(table, attribute) per partition; ConfigError if none or a table is given twice."""
    pairs = [_table_attribute(p) for p in parts]
    if not pairs:
        raise ConfigError("a sketch needs at least one partitioned table")
    seen = [t.lower() for t, _ in pairs]
    dup = sorted({t for t in seen if seen.count(t) > 1})
    if dup:
        raise ConfigError(f"one partition attribute per table: {', '.join(dup)} given twice")
    return pairs

def check_query(cfg, name: str, sql: str, parts) -> list[str]:
    """Parse and plan the query against the config's table schemas with its partitions
    (``Part``s or (table, attribute, ...) tuples); the tables it reads."""

    names = {t.name for t in cfg.tables}
    for p in parts:
        table, attribute = _table_attribute(p)
        if table not in names:
            raise ConfigError(f"sketch {name!r}: table {table!r} is not declared in [[tables]]")
        if attribute not in cfg.table(table).column_names:
            raise ConfigError(f"sketch {name!r}: table {table!r} has no column {attribute!r}")
    pairs = table_attributes(parts)
    from operators.sketch import RangePartition, SketchMaintainer  # the engine (pandas): only a config with sketches

    m = SketchMaintainer.from_sql(sql, {t: RangePartition(a, [0, 1]) for t, a in pairs})
    m.prepare({t.name: t.column_names for t in cfg.tables})
    for t, _ in pairs:
        if t.lower() not in m.tables:
            raise ConfigError(f"sketch {name!r}: the query does not read the partitioned table {t!r}")
    return list(m.tables)

def may_be_null(cfg) -> dict:
    """table -> columns a CDC record may set to NULL (all but the primary key and the
    declared ``not_null`` columns, which the decoder enforces): the safety check must hold
    for the mirror after any future batch, not only for today's rows."""
    return {t.name.lower(): set(t.column_names) - set(t.primary_key) - set(t.not_null) for t in cfg.tables}

def declared_stats(cfg) -> dict:
    """table -> column -> (min, max) from the tables' declared ``ranges``: the decoder
    quarantines values outside them, so they hold for the mirror after any future batch
    (PBDS's pred(R) for the safety check)."""
    return {t.name.lower(): {c: (lo, hi) for c, lo, hi in t.ranges} for t in cfg.tables if t.ranges}

def check_partition(sql: str, schema: dict, table: str, attr: str, nullable: dict | None = None,
                    stats: dict | None = None) -> str:
    """The safety check for an explicit --partition (``schema``: table -> column names;
    ``stats``: declared ranges); UnsafeSketchError with the reason if refused."""

    if table.lower() not in schema:
        raise ConfigError(f"--partition {table}.{attr}: the query does not read {table!r}")
    try:
        from operators.sketch_safety import check_safety  # z3: only when a partition is checked

        r = check_safety(sql, table, attr, schema=schema, stats=stats or {}, nullable=nullable or {})
    except UnsupportedSqlError as e:  # not proven safe is not safe
        raise UnsafeSketchError(f"refused --partition {table}.{attr}: the safety check cannot analyse "
                                f"this query ({e})") from None
    if not r.safe:
        raise UnsafeSketchError(f"refused --partition {table}.{attr}: {r.reason}")
    return r.reason

def check_safe(cfg, name: str, sql: str, parts) -> list[str]:
    """The PBDS safety check for a registration, per partitioned table, for any future data
    (every non-key column may become NULL, no statistics of today's rows); UnsafeSketchError
    names the reason. Returns each table's reason for being safe."""

    schema = {t.name.lower(): t.column_names for t in cfg.tables}
    out = []
    for table, attribute in table_attributes(parts):
        try:
            out.append(check_partition(sql, schema, table, attribute, may_be_null(cfg), declared_stats(cfg)))
        except UnsafeSketchError as e:
            raise UnsafeSketchError(f"sketch {name!r}: {e}") from None
    return out

def _again(e: Exception, where: str) -> Exception:
    """The same IvmError (class and code) with ``where`` in front and inner codes removed."""
    text = _CODE.sub("", e.args[0] if e.args else str(e))
    return type(e)(f"{where}: {text}", code=e.code) if isinstance(e, IvmError) else e

def check_sketch_sql(cfg, name: str, sql: str, partitions=(), *, where: str | None = None) -> None:
    """The checks ``sketch register`` and the job run on a registered query, without Spark:
    one SELECT (``sql_problem``), the sketch engine's front end planned against the declared
    tables (unsupported SQL, unknown tables and columns), then, per partitioned table, the
    safety check for any future data. With no ``partitions`` only the first two run."""
    from operators.sketch import SketchMaintainer  # the engine (pandas): only a config with sketches

    where = where or f"sketch {name!r}"
    why = sql_problem(sql)
    if why:
        raise SqlError(f"{where}: {why}")
    try:
        if partitions:
            check_query(cfg, name, sql, partitions)
            check_safe(cfg, name, sql, partitions)
        else:
            SketchMaintainer.from_sql(sql, {}).prepare({t.name: t.column_names for t in cfg.tables})
    except RecursionError:  # the engine walks expression trees recursively, as the job would
        raise SqlError(f"{where}: the query is nested too deeply for the sketch engine (a long AND/OR "
                       "chain or deep parentheses); write it with IN (...) or split it") from None
    except IvmError as e:
        text = e.args[0] if e.args else ""
        prefix = f"sketch {name!r}: "
        text = text[len(prefix):] if text.startswith(prefix) else text
        if "[[sketches]]" in where:  # a config entry has no --partition flag
            text = text.replace("refused --partition ", "refused partition ")
        raise _again(type(e)(text, code=e.code), where) from None

def check_sketches(cfg) -> None:
    """``check_sketch_sql`` for every ``[[sketches]]`` entry of a loaded config."""
    where = str(cfg.source_file) if cfg.source_file else "config"
    for s in cfg.sketches:
        check_sketch_sql(cfg, s.name, s.sql, s.partitions, where=f"{where}: [[sketches]] {s.name!r}")
