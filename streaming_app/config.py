"""The job's configuration: one TOML file, read once into frozen dataclasses.

Environment variables are read here and nowhere else (``IVMSTREAM_*``); CLI flags override
the file, the environment overrides neither silently: every flag shows its variable in
``--help``. Every mistake raises ``ConfigError`` naming the file, the section and the key.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from operators.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent

# Column types a table may declare, and the Spark / Arrow types they map to.
SIMPLE_TYPES = ("int", "long", "double", "string", "date", "timestamp", "boolean")
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")

ENV = {
    "bootstrap_servers": "IVMSTREAM_BOOTSTRAP_SERVERS",
    "lake_root": "IVMSTREAM_LAKE_ROOT",
    "checkpoint_root": "IVMSTREAM_CHECKPOINT_ROOT",
    "master": "IVMSTREAM_SPARK_MASTER",
    "config": "IVMSTREAM_CONFIG",
    "broker_port": "IVMSTREAM_BROKER_PORT",
    "broker_dir": "IVMSTREAM_BROKER_DIR",
    # The real CDC chain: the embedded PostgreSQL and Kafka Connect worker.
    "pg_port": "IVMSTREAM_PG_PORT",
    "pg_dir": "IVMSTREAM_PG_DIR",
    "connect_port": "IVMSTREAM_CONNECT_PORT",
    "connect_dir": "IVMSTREAM_CONNECT_DIR",
    # Fault injection for recovery tests: "<step>:<batch_id>" SIGKILLs the job at that step.
    "kill_at": "IVMSTREAM_KILL_AT",
}


def env(name: str, default: str | None = None) -> str | None:
    """The one place the process environment is read."""
    return os.environ.get(ENV[name], default)


def parse_type(spec: str, where: str) -> str:
    if not isinstance(spec, str):
        raise ConfigError(f"{where}: the column type must be a string such as \"long\", got {_shown(spec)}")
    spec = spec.strip().lower()
    if spec in SIMPLE_TYPES:
        return spec
    m = _DECIMAL.match(spec)
    if m:
        # Spark's DecimalType: 1..38 digits, of which 0..precision after the point
        p, s = int(m.group(1)), int(m.group(2))
        if not 1 <= p <= 38 or not 0 <= s <= p:
            raise ConfigError(f"{where}: {spec} is not a valid decimal: precision must lie in 1..38 "
                              f"and scale in 0..precision")
        return f"decimal({p},{s})"
    raise ConfigError(
        f"{where}: unknown column type {spec!r}; use one of {', '.join(SIMPLE_TYPES)} or decimal(p,s)"
    )


# -- strict readers for TOML values: a wrong type is an error, never coerced ------------------
# Table, graph, view and column names become folder names and SQL identifiers: identifiers only.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Job and sketch names may also hold '-' and '.', but not lead with them ('.', '..', '-x').
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
MAX_NAME_LEN = 128
# A sketch is a bitset of this many fragments per table, rebuilt and stored every batch:
# beyond a million it would cost more than reading the table it is meant to skip.
MAX_FRAGMENTS = 1_000_000
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")
_MEMORY = re.compile(r"[1-9][0-9]*[kmgtp]?b?", re.IGNORECASE)
_HOST = re.compile(r"[A-Za-z0-9_.:-]+")
STARTING_OFFSETS = ("earliest", "latest")


def _shown(v: Any) -> str:
    """A TOML value for a message: its type and, when short, the value."""
    kinds = {bool: "the boolean", int: "the integer", float: "the number", str: "the string",
             list: "an array", dict: "a table"}
    kind = kinds.get(type(v), f"a {type(v).__name__}")
    if isinstance(v, (list, dict)):
        return kind
    text = repr(v) if not isinstance(v, bool) else str(v).lower()
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _want_str(v: Any, w: str, key: str, *, empty: bool = False) -> str:
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise ConfigError(f"{w}: {key} must be a {'' if empty else 'non-empty '}string, got {_shown(v)}")
    return v


def _want_int(v: Any, w: str, key: str, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f"in {lo:,}..{hi:,}" if hi is not None else f">= {lo:,}"
        raise ConfigError(f"{w}: {key} must be an integer {span}, got {_shown(v)}")
    return v


def _want_number(v: Any, w: str, key: str, lo: float, hi: float) -> float:
    # an int is compared as is: math.isfinite would overflow on TOML's unbounded integers
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v))
            or not lo <= v <= hi):
        raise ConfigError(f"{w}: {key} must be a finite number in [{lo:g}, {hi:g}], got {_shown(v)}")
    return float(v)


def _want_bool(v: Any, w: str, key: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{w}: {key} must be true or false (a TOML boolean, unquoted), got {_shown(v)}")
    return v


def _want_name(v: Any, w: str, key: str, pattern: re.Pattern = _IDENT) -> str:
    _want_str(v, w, key)
    if len(v) > MAX_NAME_LEN or not pattern.fullmatch(v):
        what = ("an identifier (a letter or '_', then letters, digits, '_')" if pattern is _IDENT else
                "letters, digits, '_', '-', '.', starting with a letter, digit or '_'")
        raise ConfigError(f"{w}: {key} {v[:60]!r} must be {what}, at most {MAX_NAME_LEN} characters")
    return v


def _want_names(v: Any, w: str, key: str, *, allow_empty: bool = True) -> tuple[str, ...]:
    """A string or an array of strings (column names)."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items) or (not items and not allow_empty):
        raise ConfigError(f"{w}: {key} must be a column name or an array of column names, got {_shown(v)}")
    dup = sorted({x for x in items if items.count(x) > 1})
    if dup:
        raise ConfigError(f"{w}: {key} names {dup} more than once")
    return tuple(items)


def _want_options(v: Any, w: str, key: str) -> tuple[tuple[str, str], ...]:
    """A TOML table of option = value (string, number or boolean), as strings."""
    if not isinstance(v, dict):
        raise ConfigError(f"{w}: {key} must be a table of \"option\" = value, got {_shown(v)}")
    out = []
    for k, x in v.items():
        if not k.strip():
            raise ConfigError(f"{w}: {key} has an empty option name")
        if isinstance(x, bool):
            x = str(x).lower()
        elif isinstance(x, float) and not math.isfinite(x):
            raise ConfigError(f"{w}: {key}: {k!r} must be finite, got {x}")
        elif not isinstance(x, (str, int, float)):
            raise ConfigError(f"{w}: {key}: {k!r} must be a string, number or boolean, got {_shown(x)}")
        out.append((k, str(x)))
    return tuple(out)


def check_bootstrap_servers(v: Any, w: str) -> str:
    """``host:port[,host:port...]`` with ports in 1..65535."""
    _want_str(v, w, "bootstrap servers")
    for part in v.split(","):
        m = _HOST_PORT.fullmatch(part.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"{w}: bootstrap servers {v!r}: {part.strip()!r} is not host:port "
                              "(port 1..65535); separate several with commas")
    return v


def check_starting_offsets(v: Any, w: str, topics: list[str] | None = None) -> str:
    """earliest, latest, or Spark's JSON of offsets: {"topic": {"0": 23, "1": -2}} (-2 earliest,
    -1 latest) over topics the config reads."""
    _want_str(v, w, "starting_offsets")
    if v in STARTING_OFFSETS:
        return v
    try:
        spec = json.loads(v)
    except ValueError:
        spec = None
    ok = isinstance(spec, dict) and spec and all(
        isinstance(parts, dict) and parts and all(
            p.isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= -2 for p, o in parts.items())
        for parts in spec.values())
    if not ok:
        raise ConfigError(f"{w}: starting_offsets {v[:80]!r} must be \"earliest\", \"latest\" or a JSON object "
                          "of offsets per topic and partition, e.g. '{\"t\": {\"0\": 23, \"1\": -2}}' "
                          "(-2 = earliest, -1 = latest)")
    unknown = sorted(set(spec) - set(topics)) if topics is not None else []
    if unknown:
        raise ConfigError(f"{w}: starting_offsets names topic(s) {unknown} that no table reads")
    return v


@dataclass(frozen=True)
class TableConfig:
    """A CDC-fed base table: its topic, columns in order with types, and primary key."""

    name: str
    topic: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    source_table: str | None = None  # Debezium source.table, when several tables share a topic
    # columns declared NOT NULL in the source: a row image with NULL there is quarantined,
    # and the sketch safety check may rely on them never being NULL
    not_null: tuple[str, ...] = ()
    # declared value ranges (CHECK col BETWEEN lo AND hi) of numeric columns: enforced like
    # not_null, and facts the safety check may use (e.g. SUM over a non-negative column)
    ranges: tuple[tuple[str, float, float], ...] = ()
    # How the connector encodes numerics and times (Debezium's decimal.handling.mode and
    # time.precision.mode). The decoder follows a record's own schema when it carries one
    # (JsonConverter schemas.enable=true); these say how to read records that do not.
    decimal_mode: str = "precise"  # precise | string | double
    time_mode: str = "adaptive"  # adaptive | adaptive_time_microseconds | connect | microseconds | nanoseconds | isostring

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]

    def type_of(self, column: str) -> str:
        return dict(self.columns)[column]


DECIMAL_MODES = ("precise", "string", "double")
TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect", "microseconds", "nanoseconds", "isostring")


@dataclass(frozen=True)
class DebeziumConfig:
    """``[debezium]``: the PostgreSQL database that Debezium captures into the tables' topics.

    ``ivmstream connect register`` turns it into the connector's properties; the decoder
    reads ``decimal_handling_mode`` and ``time_precision_mode`` as every table's default.
    """

    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "postgres"
    user: str = "postgres"
    password: str = ""
    schema: str = "public"
    topic_prefix: str = "dbserver1"
    connector_name: str = "ivmstream"
    slot_name: str = "ivmstream"
    publication_name: str = "ivmstream"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    connect_url: str = "http://127.0.0.1:8083"
    extra: tuple[tuple[str, str], ...] = ()  # further connector properties, passed as given


@dataclass(frozen=True)
class TrianglesConfig:
    """A triangle-counted graph (``[[graphs]]``) over a CDC table's (src, dst) columns."""

    name: str
    table: str
    src: str = "src"
    dst: str = "dst"
    mode: str = "undirected"  # undirected | directed | three_relation
    epsilon: float = 0.5
    relation: str | None = None  # column naming R/S/T in three_relation mode


@dataclass(frozen=True)
class ViewConfig:
    """A recursive view (reachability or shortest paths) over a CDC link table."""

    name: str
    table: str
    kind: str = "reachability"  # reachability | shortest_paths
    src: str = "src"
    dst: str = "dst"
    cost: str | None = None
    expires: str | None = None  # column holding an expiry time (epoch seconds)


@dataclass(frozen=True)
class SketchConfig:
    """A registered query whose provenance sketch the job keeps current (issue 4)."""

    name: str
    sql: str
    partitions: tuple  # ((table, attribute, fragments), ...): one per partitioned table
    mode: str = "eager"  # eager | lazy

    @property
    def table(self) -> str:
        return self.partitions[0][0]

    @property
    def attribute(self) -> str:
        return self.partitions[0][1]

    @property
    def fragments(self) -> int:
        return self.partitions[0][2]


@dataclass(frozen=True)
class SketchSettings:
    """``[sketch]``: how the job maintains registered queries (issue 4)."""

    snapshot_every: int = 3  # batches between engine snapshots of each query (into state_snapshots)
    # join inputs over a table with at least this many rows at capture stay in the Delta
    # mirror and are probed with Spark (time travel) instead of held in driver memory
    spark_join_rows: int = 1_000_000


@dataclass(frozen=True)
class StateSettings:
    """``[state]``: how triangle and view maintainers keep their engine snapshots (issue 18)."""

    snapshot_every: int = 10  # batches that changed an engine between two of its snapshots


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 10_000
    extra_options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    ui: bool = True
    ui_port: int = 4040
    # The UI's listening address. Loopback by default: the UI shows the job's SQL, config and
    # data samples and has no login; open it from elsewhere through an SSH tunnel (README).
    ui_host: str = "127.0.0.1"
    driver_memory: str = "2g"
    shuffle_partitions: int = 2
    extra_conf: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JobConfig:
    name: str = "ivmstream"
    lake_root: Path = REPO_ROOT / "lake"
    checkpoint_root: Path = REPO_ROOT / "checkpoints"
    trigger_interval_s: float = 2.0
    # Where a batch's records are decoded: "driver" (collected, then decoded in the job's
    # process) or "executors" (in the Spark tasks that read them, in parallel Python workers;
    # measured slower on a 2-core machine, bench/results/ingest.md, meant for clusters).
    decode: str = "driver"
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    tables: tuple[TableConfig, ...] = ()
    graphs: tuple[TrianglesConfig, ...] = ()
    views: tuple[ViewConfig, ...] = ()
    sketches: tuple[SketchConfig, ...] = ()
    sketch: SketchSettings = field(default_factory=SketchSettings)
    state: StateSettings = field(default_factory=StateSettings)
    source_file: Path | None = None
    debezium: DebeziumConfig | None = None

    @property
    def checkpoint_dir(self) -> Path:
        return self.checkpoint_root / self.name

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise ConfigError(f"no table named {name!r} in {self.source_file or 'the config'}")

    def tables_for_topic(self, topic: str) -> list[TableConfig]:
        return [t for t in self.tables if t.topic == topic]

    @property
    def topics(self) -> list[str]:
        return sorted({t.topic for t in self.tables})

    def with_overrides(self, **kw: Any) -> "JobConfig":
        """CLI flags win over the file: returns a copy with the given non-None fields set.
        A flag given empty or malformed is a ConfigError (it would otherwise reach Kafka or Spark)."""
        if kw.get("bootstrap_servers") is not None:
            check_bootstrap_servers(kw["bootstrap_servers"], "--bootstrap-servers")
        if kw.get("master") is not None:
            _want_str(kw["master"], "--master", "the Spark master")
        kafka_kw = {k: kw.pop(k) for k in ("bootstrap_servers", "max_offsets_per_trigger") if kw.get(k) is not None}
        spark_kw = {k: kw.pop(k) for k in ("master", "ui") if kw.get(k) is not None}
        kw = {k: v for k, v in kw.items() if v is not None}
        cfg = replace(self, **kw)
        if kafka_kw:
            cfg = replace(cfg, kafka=replace(cfg.kafka, **kafka_kw))
        if spark_kw:
            cfg = replace(cfg, spark=replace(cfg.spark, **spark_kw))
        return cfg


_JOB_KEYS = {"name", "lake_root", "checkpoint_root", "trigger_interval_s", "decode"}
_KAFKA_KEYS = {"bootstrap_servers", "starting_offsets", "max_offsets_per_trigger", "options"}
_SPARK_KEYS = {"master", "ui", "ui_port", "ui_host", "driver_memory", "shuffle_partitions", "conf"}
_TABLE_KEYS = {"name", "topic", "columns", "primary_key", "source_table", "not_null", "ranges",
               "decimal_handling_mode", "time_precision_mode"}
_DEBEZIUM_KEYS = {"host", "port", "database", "user", "password", "schema", "topic_prefix", "connector_name",
                  "slot_name", "publication_name", "decimal_handling_mode", "time_precision_mode",
                  "connect_url", "properties"}
_GRAPH_KEYS = {"name", "table", "src", "dst", "mode", "epsilon", "relation"}
_VIEW_KEYS = {"name", "table", "kind", "src", "dst", "cost", "expires"}
_SKETCH_KEYS = {"name", "sql", "partition", "fragments", "mode"}
_SKETCH_SETTINGS_KEYS = {"snapshot_every", "spark_join_rows"}
_STATE_KEYS = {"snapshot_every"}


def _entry(raw: Any, section: str, i: int, where: str) -> str:
    """The ``where`` of the i-th ``[[section]]`` entry; ConfigError unless it is a TOML table."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [[{section}]] #{i + 1} must be a TOML table ([[{section}]] with "
                          f"key = value lines), got {_shown(raw)}")
    name = raw.get("name")
    return f"{where}: [[{section}]] " + (repr(name) if isinstance(name, str) else f"#{i + 1}")


def _sketch(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> SketchConfig:
    w = _entry(raw, "sketches", i, where)
    _check_keys(raw, _SKETCH_KEYS, w)
    for k in ("name", "sql", "partition"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    name = _want_name(raw["name"], w, "name", _NAME)
    sql = _want_str(raw["sql"], w, "sql")
    specs = raw["partition"]
    if isinstance(specs, str):
        specs = [x for x in specs.split(",") if x.strip()]
    if not isinstance(specs, list) or not specs or not all(isinstance(x, str) for x in specs):
        raise ConfigError(f"{w}: partition must be 'TABLE.ATTRIBUTE[:FRAGMENTS]' or an array of them, "
                          f"got {_shown(raw['partition'])}")
    default = _want_int(raw.get("fragments", 16), w, "fragments", 1, MAX_FRAGMENTS)
    parts = []
    for spec in specs:
        part, colon, frags = spec.strip().partition(":")
        if part.count(".") != 1:
            raise ConfigError(f"{w}: partition {spec.strip()!r} must be TABLE.ATTRIBUTE[:FRAGMENTS]")
        if colon:
            if not frags.strip().isdigit():
                raise ConfigError(f"{w}: partition {spec.strip()!r}: FRAGMENTS {frags!r} is not an integer")
            frags = _want_int(int(frags), w, f"partition {spec.strip()!r}: FRAGMENTS", 1, MAX_FRAGMENTS)
        else:
            frags = default
        table, attr = (x.strip() for x in part.split("."))
        _check_columns(w, table, [attr], tables)
        if any(table == t for t, _, _ in parts):
            raise ConfigError(f"{w}: one partition attribute per table ({table!r} given twice)")
        parts.append((table, attr, frags))
    mode = raw.get("mode", "eager")
    if mode not in ("eager", "lazy"):
        raise ConfigError(f"{w}: mode must be \"eager\" or \"lazy\", got {_shown(mode)}")
    return SketchConfig(name=name, sql=sql, partitions=tuple(parts), mode=mode)


def _graph(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> TrianglesConfig:
    w = _entry(raw, "graphs", i, where)
    _check_keys(raw, _GRAPH_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    _want_name(raw["name"], w, "name")
    for k in ("table", "src", "dst", "mode", "relation"):
        if k in raw:
            _want_str(raw[k], w, k)
    g = TrianglesConfig(**{k: raw[k] for k in raw})
    if g.mode not in ("undirected", "directed", "three_relation"):
        raise ConfigError(f"{w}: mode {g.mode!r} is not undirected, directed or three_relation")
    eps = _want_number(g.epsilon, w, "epsilon", 0.0, 1.0)
    _check_columns(w, g.table, [g.src, g.dst] + ([g.relation] if g.relation else []), tables)
    if g.mode == "three_relation" and not g.relation:
        raise ConfigError(f"{w}: three_relation mode needs a 'relation' column (values R, S, T)")
    return replace(g, epsilon=eps)


def _view(raw: dict, tables: tuple[TableConfig, ...], where: str, i: int = 0) -> ViewConfig:
    w = _entry(raw, "views", i, where)
    _check_keys(raw, _VIEW_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    _want_name(raw["name"], w, "name")
    for k in ("table", "kind", "src", "dst", "cost", "expires"):
        if k in raw:
            _want_str(raw[k], w, k)
    v = ViewConfig(**{k: raw[k] for k in raw})
    if v.kind not in ("reachability", "shortest_paths"):
        raise ConfigError(f"{w}: kind {v.kind!r} is not reachability or shortest_paths")
    if v.kind == "shortest_paths" and not v.cost:
        raise ConfigError(f"{w}: shortest_paths needs a 'cost' column")
    _check_columns(w, v.table, [c for c in (v.src, v.dst, v.cost, v.expires) if c], tables)
    return v


def _check_columns(where: str, table: str, columns: list[str], tables: tuple[TableConfig, ...]) -> None:
    found = [t for t in tables if t.name == table]
    if not found:
        raise ConfigError(f"{where}: table {table!r} is not declared in [[tables]]")
    missing = [c for c in columns if c not in found[0].column_names]
    if missing:
        raise ConfigError(f"{where}: table {table!r} has no column(s) {missing}")


def _check_keys(section: Any, allowed: set[str], where: str) -> None:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: must be a TOML table of key = value, got {_shown(section)}")
    unknown = set(section) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def _path(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a path string, got {value!r}")
    p = Path(value)
    return p if p.is_absolute() else (base / p).resolve()


def _mode(value: Any, allowed: tuple[str, ...], w: str, key: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{w}: {key} {value!r} is not one of {', '.join(allowed)}")
    return value


def _debezium(raw: dict, where: str) -> DebeziumConfig:
    w = f"{where}: [debezium]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{w}: must be a table")
    _check_keys(raw, _DEBEZIUM_KEYS, w)
    d = DebeziumConfig()
    kw: dict[str, Any] = {}
    for k in ("host", "database", "user", "password", "schema", "topic_prefix", "connector_name",
              "slot_name", "publication_name", "connect_url"):
        if k in raw:
            if not isinstance(raw[k], str) or (k != "password" and not raw[k]):
                raise ConfigError(f"{w}: {k} must be a non-empty string, got {raw[k]!r}")
            kw[k] = raw[k]
    if "port" in raw:
        if isinstance(raw["port"], bool) or not isinstance(raw["port"], int) or not 0 < raw["port"] < 65536:
            raise ConfigError(f"{w}: port must be an integer in 1..65535, got {raw['port']!r}")
        kw["port"] = raw["port"]
    kw["decimal_handling_mode"] = _mode(raw.get("decimal_handling_mode", d.decimal_handling_mode),
                                        DECIMAL_MODES, w, "decimal_handling_mode")
    kw["time_precision_mode"] = _mode(raw.get("time_precision_mode", d.time_precision_mode),
                                      TIME_MODES, w, "time_precision_mode")
    kw["extra"] = _want_options(raw.get("properties", {}), w, "properties")
    return DebeziumConfig(**kw)


def _table(raw: dict, i: int, where: str, dbz: DebeziumConfig | None = None) -> TableConfig:
    w = _entry(raw, "tables", i, where)
    _check_keys(raw, _TABLE_KEYS, w)
    for k in ("name", "topic", "columns", "primary_key"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    name = _want_name(raw["name"], w, "name")
    w = f"{where}: table {name!r}"
    topic = _want_str(raw["topic"], w, "topic")
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigError(f"{w}: topic {topic[:60]!r} is not a legal Kafka topic name "
                          "(letters, digits, '.', '_', '-', at most 249)")
    if not isinstance(raw["columns"], dict) or not raw["columns"]:
        raise ConfigError(f"{w}: 'columns' must be a non-empty table of name = \"type\", "
                          f"got {_shown(raw['columns'])}")
    for c in raw["columns"]:
        _want_name(c, w, "column name")
    lower = [c.lower() for c in raw["columns"]]
    clash = sorted({c for c in raw["columns"] if lower.count(c.lower()) > 1})
    if clash:  # Spark and the SQL front end resolve column names without regard to case
        raise ConfigError(f"{w}: columns {clash} differ only in case")
    columns = tuple((c, parse_type(t, f"{w}, column {c!r}")) for c, t in raw["columns"].items())
    names = {c for c, _ in columns}
    pk = _want_names(raw["primary_key"], w, "primary_key", allow_empty=False)
    missing = [k for k in pk if k not in names]
    if missing:
        raise ConfigError(f"{w}: primary_key {list(pk)} must name declared columns (missing: {missing})")
    nn = _want_names(raw.get("not_null", []), w, "not_null")
    unknown = [c for c in nn if c not in names]
    if unknown:
        raise ConfigError(f"{w}: not_null names undeclared column(s) {unknown}")
    ranges = []
    raw_ranges = raw.get("ranges", {})
    if not isinstance(raw_ranges, dict):
        raise ConfigError(f"{w}: 'ranges' must be a table of column = [min, max], got {_shown(raw_ranges)}")
    types = dict(columns)
    for c, r in raw_ranges.items():
        if c not in types:
            raise ConfigError(f"{w}: ranges names undeclared column {c!r}")
        if types[c] not in ("int", "long", "double") and not _DECIMAL.match(types[c]):
            raise ConfigError(f"{w}: ranges: column {c!r} is {types[c]}; ranges apply to numeric columns")
        ok = (isinstance(r, list) and len(r) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x == x
                      and (isinstance(x, float) or abs(x) <= 10**38) for x in r)  # no NaN; ints a decimal(38) holds
              and r[0] <= r[1])
        if not ok:
            raise ConfigError(f"{w}: ranges: {c!r} must be [min, max] with min <= max, got {r!r}")
        ranges.append((str(c), r[0], r[1]))
    source_table = raw.get("source_table")
    if source_table is not None:
        _want_str(source_table, w, "source_table")
    dbz = dbz or DebeziumConfig()
    return TableConfig(name=name, topic=topic, columns=columns, primary_key=pk,
                       source_table=source_table, not_null=nn, ranges=tuple(ranges),
                       decimal_mode=_mode(raw.get("decimal_handling_mode", dbz.decimal_handling_mode),
                                          DECIMAL_MODES, w, "decimal_handling_mode"),
                       time_mode=_mode(raw.get("time_precision_mode", dbz.time_precision_mode),
                                       TIME_MODES, w, "time_precision_mode"))


def parse_config(data: dict, source: Path | None = None) -> JobConfig:
    """Validate a config dict (as TOML reads it) into a JobConfig. Every value is checked for
    type and range here, and every ``[[sketches]]`` query goes through the same front end and
    safety check as ``sketch register``: a config that loads does not fail later in Spark."""
    where = str(source) if source else "config"
    base = source.parent if source else Path.cwd()
    _check_keys(data, {"job", "kafka", "spark", "tables", "graphs", "views", "sketches", "sketch", "state",
                       "debezium"}, where)
    for section in ("tables", "graphs", "views", "sketches"):
        if not isinstance(data.get(section, []), list):
            raise ConfigError(f"{where}: {section} must be an array of tables ([[{section}]] entries), "
                              f"got {_shown(data[section])}")
    dbz = _debezium(data["debezium"], where) if "debezium" in data else None
    job = data.get("job", {})
    w = f"{where}: [job]"
    _check_keys(job, _JOB_KEYS, w)
    name = _want_name(job.get("name", "ivmstream"), w, "name", _NAME)
    trigger = _want_number(job.get("trigger_interval_s", 2.0), w, "trigger_interval_s", 0.0, 86_400.0)
    decode = job.get("decode", JobConfig.decode)
    if decode not in ("executors", "driver"):
        raise ConfigError(f"{w}: decode must be \"executors\" or \"driver\", got {_shown(decode)}")

    kafka = data.get("kafka", {})
    w = f"{where}: [kafka]"
    _check_keys(kafka, _KAFKA_KEYS, w)
    kcfg = KafkaConfig(
        bootstrap_servers=check_bootstrap_servers(kafka.get("bootstrap_servers", KafkaConfig.bootstrap_servers),
                                                  f"{w} bootstrap_servers"),
        starting_offsets=check_starting_offsets(kafka.get("starting_offsets", "earliest"), w),
        max_offsets_per_trigger=_want_int(kafka.get("max_offsets_per_trigger", 10_000), w,
                                          "max_offsets_per_trigger", 1, 2**31 - 1),
        extra_options=_want_options(kafka.get("options", {}), w, "options"),
    )
    spark = data.get("spark", {})
    w = f"{where}: [spark]"
    _check_keys(spark, _SPARK_KEYS, w)
    memory = _want_str(spark.get("driver_memory", "2g"), w, "driver_memory")
    if not _MEMORY.fullmatch(memory):
        raise ConfigError(f"{w}: driver_memory {memory[:40]!r} must be a size such as \"2g\" or \"512m\"")
    ui_host = _want_str(spark.get("ui_host", SparkConfig.ui_host), w, "ui_host")
    if not _HOST.fullmatch(ui_host):
        raise ConfigError(f"{w}: ui_host {ui_host[:60]!r} must be an IP address or host name "
                          "(\"127.0.0.1\" = this machine only, \"0.0.0.0\" = every interface)")
    scfg = SparkConfig(
        master=_want_str(spark.get("master", "local[*]"), w, "master"),
        ui=_want_bool(spark.get("ui", True), w, "ui"),
        ui_port=_want_int(spark.get("ui_port", 4040), w, "ui_port", 1, 65535),
        ui_host=ui_host,
        driver_memory=memory,
        shuffle_partitions=_want_int(spark.get("shuffle_partitions", 2), w, "shuffle_partitions", 1, 100_000),
        extra_conf=_want_options(spark.get("conf", {}), w, "conf"),
    )
    sk = data.get("sketch", {})
    w = f"{where}: [sketch]"
    _check_keys(sk, _SKETCH_SETTINGS_KEYS, w)
    skcfg = SketchSettings(
        snapshot_every=_want_int(sk.get("snapshot_every", SketchSettings.snapshot_every), w, "snapshot_every",
                                 1, 1_000_000),
        spark_join_rows=_want_int(sk.get("spark_join_rows", SketchSettings.spark_join_rows), w,
                                  "spark_join_rows", 0))
    st = data.get("state", {})
    w = f"{where}: [state]"
    _check_keys(st, _STATE_KEYS, w)
    stcfg = StateSettings(snapshot_every=_want_int(st.get("snapshot_every", StateSettings.snapshot_every), w,
                                                   "snapshot_every", 1, 1_000_000))

    tables = tuple(_table(t, i, where, dbz) for i, t in enumerate(data.get("tables", [])))
    if not tables:
        raise ConfigError(f"{where}: no [[tables]] declared; the job needs at least one CDC-fed table "
                          "(name, topic, columns, primary_key)")
    names = [t.name.lower() for t in tables]
    if len(set(names)) != len(names):  # the SQL front end and Spark read table names without case
        raise ConfigError(f"{where}: duplicate table names in {[t.name for t in tables]} (case is ignored)")
    for topic in {t.topic for t in tables}:
        shared = [t for t in tables if t.topic == topic]
        if len(shared) > 1 and any(t.source_table is None for t in shared):
            raise ConfigError(f"{where}: tables {[t.name for t in shared]} share topic {topic!r}; "
                              "give each a source_table to tell their records apart")

    check_starting_offsets(kcfg.starting_offsets, f"{where}: [kafka]", sorted({t.topic for t in tables}))
    graphs = tuple(_graph(g, tables, where, i) for i, g in enumerate(data.get("graphs", [])))
    views = tuple(_view(v, tables, where, i) for i, v in enumerate(data.get("views", [])))
    sketches = tuple(_sketch(x, tables, where, i) for i, x in enumerate(data.get("sketches", [])))
    for kind, items in (("graphs", graphs), ("views", views), ("sketches", sketches)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: duplicate {kind} names in {names}")
    cfg = JobConfig(
        name=name,
        lake_root=_path(job.get("lake_root", "lake"), base, f"{where}: [job] lake_root"),
        checkpoint_root=_path(job.get("checkpoint_root", "checkpoints"), base,
                              f"{where}: [job] checkpoint_root"),
        trigger_interval_s=trigger,
        decode=decode,
        kafka=kcfg,
        spark=scfg,
        tables=tables,
        graphs=graphs,
        views=views,
        sketches=sketches,
        sketch=skcfg,
        state=stcfg,
        source_file=source,
        debezium=dbz,
    )
    for s in sketches:
        check_sketch_sql(cfg, s.name, s.sql, s.partitions, where=f"{where}: [[sketches]] {s.name!r}")
    return cfg


_CODE = re.compile(r"\[IVM\d{3}\] ")


def _again(e: Exception, where: str) -> Exception:
    """The same IvmError (class and code) with ``where`` in front and inner codes removed."""
    from operators.errors import IvmError

    text = _CODE.sub("", e.args[0] if e.args else str(e))
    return type(e)(f"{where}: {text}", code=e.code) if isinstance(e, IvmError) else e


_CLAUSES = {"Where": "WHERE", "Group": "GROUP BY", "Having": "HAVING", "Order": "ORDER BY", "Limit": "LIMIT",
            "From": "FROM", "Join": "JOIN", "Select": "SELECT"}


def _parse_error_text(text: str) -> str:
    """sqlglot's description of a parse error in the words of SQL, not of its classes."""
    text = text.strip().splitlines()[0] if text.strip() else "cannot parse"
    m = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>", text)
    if m:
        return f"incomplete {_CLAUSES.get(m.group(1), m.group(1))}"
    text = re.sub(r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end of the query", text)
    text = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", lambda t: repr(t.group(1)), text)
    text = re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", text)
    return text[:1].lower() + text[1:]


def sql_problem(sql: str, dialect: str = "postgres") -> str | None:
    """Why ``sql`` is not one SELECT statement (a syntax error, several statements, another
    kind of statement), or None. Run before the sketch front end, whose parser reads a
    misspelt keyword as an expression ('SELEC * FRM t' parses as an alias)."""
    import logging

    import sqlglot
    from sqlglot import exp

    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        return "the SQL is empty"
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.CRITICAL)  # its warnings would add lines to a one-line error
    try:
        trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if getattr(e, "errors", None) else {}
        at = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        near = f" near {first['highlight']!r}" if first.get("highlight") else ""
        return f"syntax error{at}{near}: {_parse_error_text(first.get('description') or str(e))}"
    except sqlglot.errors.SqlglotError as e:
        return f"syntax error: {str(e).splitlines()[0]}"
    except RecursionError:
        return "nested too deeply to parse (parentheses or subqueries)"
    finally:
        log.setLevel(level)
    if len(trees) != 1:
        return f"{len(trees)} statements given; a sketch is defined by one SELECT query"
    tree = trees[0]
    if isinstance(tree, exp.Query):
        return None
    word = text.split(None, 1)[0]
    if word.upper() in ("SELECT", "WITH", "("):
        return f"syntax error: cannot read this as a SELECT query (it parses as {type(tree).__name__})"
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Alter,
                         exp.Merge, exp.Command, exp.Set, exp.Use)):
        return f"{word.upper()} is not a query: only a SELECT query can be sketched"
    return f"syntax error: a query starts with SELECT, found {word[:40]!r}"


def check_sketch_sql(cfg: JobConfig, name: str, sql: str, partitions=(), *, where: str | None = None) -> None:
    """The checks ``sketch register`` and the job run on a registered query, without Spark:
    one SELECT (``sql_problem``), the sketch engine's front end planned against the declared
    tables (unsupported SQL, unknown tables and columns), then, per partitioned table, the
    safety check for any future data. With no ``partitions`` only the first two run."""
    from operators.errors import IvmError, SqlError
    from operators.sketch import SketchMaintainer
    from operators.sketch_safety.registration import check_query, check_safe

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


def load_config(path: str | Path) -> JobConfig:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config {p} is a directory; give the TOML file")
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise ConfigError(f"{p}: arrays or tables nested too deeply to read") from None
    except OSError as e:
        raise ConfigError(f"config file {p} cannot be read: {e.strerror}") from None
    return parse_config(data, p.resolve())


def dump_toml(data: dict) -> str:
    """Write a config dict (the shape ``parse_config`` takes) as TOML text."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{key(k)} = {val(x)}" for k, x in v.items()) + " }"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    def key(k: str) -> str:
        # a bare key may not hold dots (a Spark conf name would become nested tables)
        return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else val(str(k))

    out: list[str] = []
    for section, body in data.items():
        if isinstance(body, list):
            for item in body:
                out.append(f"[[{section}]]")
                out += [f"{key(k)} = {val(v)}" for k, v in item.items()]
        else:
            out.append(f"[{section}]")
            out += [f"{key(k)} = {val(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n"
