"""The job's configuration: one TOML file, read once into frozen dataclasses.

Environment variables are read here and nowhere else (``IVMSTREAM_*``); CLI flags override
the file, the environment overrides neither silently: every flag shows its variable in
``--help``. Every mistake raises ``ConfigError`` naming the file, the section and the key.
"""

from __future__ import annotations

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
    # Fault injection for recovery tests: "<step>:<batch_id>" SIGKILLs the job at that step.
    "kill_at": "IVMSTREAM_KILL_AT",
}


def env(name: str, default: str | None = None) -> str | None:
    """The one place the process environment is read."""
    return os.environ.get(ENV[name], default)


def parse_type(spec: str, where: str) -> str:
    spec = spec.strip().lower()
    if spec in SIMPLE_TYPES or _DECIMAL.match(spec):
        return spec
    raise ConfigError(
        f"{where}: unknown column type {spec!r}; use one of {', '.join(SIMPLE_TYPES)} or decimal(p,s)"
    )


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
class GraphConfig:
    """A triangle-counted graph over a CDC table's (src, dst) columns."""

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

    snapshot_every: int = 3  # batches between engine snapshots into sketch_state
    # join inputs over a table with at least this many rows at capture stay in the Delta
    # mirror and are probed with Spark (time travel) instead of held in driver memory
    spark_join_rows: int = 1_000_000


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
    driver_memory: str = "2g"
    shuffle_partitions: int = 2
    extra_conf: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JobConfig:
    name: str = "ivmstream"
    lake_root: Path = REPO_ROOT / "lake"
    checkpoint_root: Path = REPO_ROOT / "checkpoints"
    trigger_interval_s: float = 2.0
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    tables: tuple[TableConfig, ...] = ()
    graphs: tuple[GraphConfig, ...] = ()
    views: tuple[ViewConfig, ...] = ()
    sketches: tuple[SketchConfig, ...] = ()
    sketch: SketchSettings = field(default_factory=SketchSettings)
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
        """CLI flags win over the file: returns a copy with the given non-None fields set."""
        kafka_kw = {k: kw.pop(k) for k in ("bootstrap_servers", "max_offsets_per_trigger") if kw.get(k) is not None}
        spark_kw = {k: kw.pop(k) for k in ("master", "ui") if kw.get(k) is not None}
        kw = {k: v for k, v in kw.items() if v is not None}
        cfg = replace(self, **kw)
        if kafka_kw:
            cfg = replace(cfg, kafka=replace(cfg.kafka, **kafka_kw))
        if spark_kw:
            cfg = replace(cfg, spark=replace(cfg.spark, **spark_kw))
        return cfg


_JOB_KEYS = {"name", "lake_root", "checkpoint_root", "trigger_interval_s"}
_KAFKA_KEYS = {"bootstrap_servers", "starting_offsets", "max_offsets_per_trigger", "options"}
_SPARK_KEYS = {"master", "ui", "ui_port", "driver_memory", "shuffle_partitions", "conf"}
_TABLE_KEYS = {"name", "topic", "columns", "primary_key", "source_table", "not_null", "ranges",
               "decimal_handling_mode", "time_precision_mode"}
_DEBEZIUM_KEYS = {"host", "port", "database", "user", "password", "schema", "topic_prefix", "connector_name",
                  "slot_name", "publication_name", "decimal_handling_mode", "time_precision_mode",
                  "connect_url", "properties"}
_GRAPH_KEYS = {"name", "table", "src", "dst", "mode", "epsilon", "relation"}
_VIEW_KEYS = {"name", "table", "kind", "src", "dst", "cost", "expires"}
_SKETCH_KEYS = {"name", "sql", "partition", "fragments", "mode"}
_SKETCH_SETTINGS_KEYS = {"snapshot_every", "spark_join_rows"}


def _sketch(raw: dict, tables: tuple[TableConfig, ...], where: str) -> SketchConfig:
    w = f"{where}: [[sketches]] {raw.get('name', '?')!r}"
    _check_keys(raw, _SKETCH_KEYS, w)
    for k in ("name", "sql", "partition"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    specs = raw["partition"]
    if isinstance(specs, str):
        specs = specs.split(",")
    if not isinstance(specs, list) or not specs:
        raise ConfigError(f"{w}: partition must be 'TABLE.ATTRIBUTE[:FRAGMENTS]' or a list of them")
    default = raw.get("fragments", 16)
    parts = []
    for spec in specs:
        part, _, frags = str(spec).strip().partition(":")
        frags = frags or default
        if "." not in part:
            raise ConfigError(f"{w}: partition {part!r} must be TABLE.ATTRIBUTE[:FRAGMENTS]")
        try:
            frags = int(frags)
        except (TypeError, ValueError):
            raise ConfigError(f"{w}: fragments {frags!r} is not an integer") from None
        if frags < 1:
            raise ConfigError(f"{w}: fragments must be >= 1, got {frags}")
        table, attr = part.split(".", 1)
        _check_columns(w, table, [attr], tables)
        if any(table == t for t, _, _ in parts):
            raise ConfigError(f"{w}: one partition attribute per table ({table!r} given twice)")
        parts.append((table, attr, frags))
    s = SketchConfig(name=str(raw["name"]), sql=str(raw["sql"]), partitions=tuple(parts),
                     mode=str(raw.get("mode", "eager")))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", s.name):
        raise ConfigError(f"{w}: name may hold letters, digits, '_', '-', '.' only")
    if s.mode not in ("eager", "lazy"):
        raise ConfigError(f"{w}: mode {s.mode!r} is not eager or lazy")
    return s


def _graph(raw: dict, tables: tuple[TableConfig, ...], where: str) -> GraphConfig:
    w = f"{where}: [[graphs]] {raw.get('name', '?')!r}"
    _check_keys(raw, _GRAPH_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    g = GraphConfig(**{k: raw[k] for k in raw})
    if g.mode not in ("undirected", "directed", "three_relation"):
        raise ConfigError(f"{w}: mode {g.mode!r} is not undirected, directed or three_relation")
    try:
        eps = float(g.epsilon)
    except (TypeError, ValueError):
        raise ConfigError(f"{w}: epsilon {g.epsilon!r} is not a number") from None
    if not 0.0 <= eps <= 1.0:
        raise ConfigError(f"{w}: epsilon must lie in [0, 1], got {eps}")
    _check_columns(w, g.table, [g.src, g.dst] + ([g.relation] if g.relation else []), tables)
    if g.mode == "three_relation" and not g.relation:
        raise ConfigError(f"{w}: three_relation mode needs a 'relation' column (values R, S, T)")
    return replace(g, epsilon=eps)


def _view(raw: dict, tables: tuple[TableConfig, ...], where: str) -> ViewConfig:
    w = f"{where}: [[views]] {raw.get('name', '?')!r}"
    _check_keys(raw, _VIEW_KEYS, w)
    for k in ("name", "table"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
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


def _check_keys(section: dict, allowed: set[str], where: str) -> None:
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
    props = raw.get("properties", {})
    if not isinstance(props, dict):
        raise ConfigError(f"{w}: properties must be a table of connector property = value")
    kw["extra"] = tuple((str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in props.items())
    return DebeziumConfig(**kw)


def _table(raw: dict, i: int, where: str, dbz: DebeziumConfig | None = None) -> TableConfig:
    w = f"{where}: [[tables]] #{i + 1}"
    _check_keys(raw, _TABLE_KEYS, w)
    for k in ("name", "topic", "columns", "primary_key"):
        if k not in raw:
            raise ConfigError(f"{w}: missing key {k!r}")
    name = raw["name"]
    w = f"{where}: table {name!r}"
    if not isinstance(raw["columns"], dict) or not raw["columns"]:
        raise ConfigError(f"{w}: 'columns' must be a non-empty table of name = \"type\"")
    columns = tuple((str(c), parse_type(str(t), f"{w}, column {c!r}")) for c, t in raw["columns"].items())
    pk = raw["primary_key"]
    pk = (pk,) if isinstance(pk, str) else tuple(pk)
    names = {c for c, _ in columns}
    missing = [k for k in pk if k not in names]
    if not pk or missing:
        raise ConfigError(f"{w}: primary_key {list(pk)} must name declared columns (missing: {missing})")
    nn = raw.get("not_null", [])
    nn = (nn,) if isinstance(nn, str) else tuple(str(c) for c in nn)
    unknown = [c for c in nn if c not in names]
    if unknown:
        raise ConfigError(f"{w}: not_null names undeclared column(s) {unknown}")
    ranges = []
    raw_ranges = raw.get("ranges", {})
    if not isinstance(raw_ranges, dict):
        raise ConfigError(f"{w}: 'ranges' must be a table of column = [min, max]")
    types = dict(columns)
    for c, r in raw_ranges.items():
        if c not in types:
            raise ConfigError(f"{w}: ranges names undeclared column {c!r}")
        if types[c] not in ("int", "long", "double") and not _DECIMAL.match(types[c]):
            raise ConfigError(f"{w}: ranges: column {c!r} is {types[c]}; ranges apply to numeric columns")
        ok = (isinstance(r, list) and len(r) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in r) and r[0] <= r[1])
        if not ok:
            raise ConfigError(f"{w}: ranges: {c!r} must be [min, max] with min <= max, got {r!r}")
        ranges.append((str(c), r[0], r[1]))
    dbz = dbz or DebeziumConfig()
    return TableConfig(name=name, topic=str(raw["topic"]), columns=columns, primary_key=pk,
                       source_table=raw.get("source_table"), not_null=nn, ranges=tuple(ranges),
                       decimal_mode=_mode(raw.get("decimal_handling_mode", dbz.decimal_handling_mode),
                                          DECIMAL_MODES, w, "decimal_handling_mode"),
                       time_mode=_mode(raw.get("time_precision_mode", dbz.time_precision_mode),
                                       TIME_MODES, w, "time_precision_mode"))


def parse_config(data: dict, source: Path | None = None) -> JobConfig:
    where = str(source) if source else "config"
    base = source.parent if source else Path.cwd()
    _check_keys(data, {"job", "kafka", "spark", "tables", "graphs", "views", "sketches", "sketch", "debezium"}, where)
    dbz = _debezium(data["debezium"], where) if "debezium" in data else None
    job = data.get("job", {})
    _check_keys(job, _JOB_KEYS, f"{where}: [job]")
    kafka = data.get("kafka", {})
    _check_keys(kafka, _KAFKA_KEYS, f"{where}: [kafka]")
    spark = data.get("spark", {})
    _check_keys(spark, _SPARK_KEYS, f"{where}: [spark]")
    try:
        kcfg = KafkaConfig(
            bootstrap_servers=str(kafka.get("bootstrap_servers", KafkaConfig.bootstrap_servers)),
            starting_offsets=str(kafka.get("starting_offsets", "earliest")),
            max_offsets_per_trigger=int(kafka.get("max_offsets_per_trigger", 10_000)),
            extra_options=tuple((str(k), str(v)) for k, v in kafka.get("options", {}).items()),
        )
        scfg = SparkConfig(
            master=str(spark.get("master", "local[*]")),
            ui=bool(spark.get("ui", True)),
            ui_port=int(spark.get("ui_port", 4040)),
            driver_memory=str(spark.get("driver_memory", "2g")),
            shuffle_partitions=int(spark.get("shuffle_partitions", 2)),
            extra_conf=tuple((str(k), str(v)) for k, v in spark.get("conf", {}).items()),
        )
        trigger = float(job.get("trigger_interval_s", 2.0))
        sk = data.get("sketch", {})
        _check_keys(sk, _SKETCH_SETTINGS_KEYS, f"{where}: [sketch]")
        skcfg = SketchSettings(snapshot_every=int(sk.get("snapshot_every", SketchSettings.snapshot_every)),
                               spark_join_rows=int(sk.get("spark_join_rows", SketchSettings.spark_join_rows)))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e
    if skcfg.snapshot_every < 1 or skcfg.spark_join_rows < 0:
        raise ConfigError(f"{where}: [sketch] snapshot_every must be >= 1 and spark_join_rows >= 0")
    if kcfg.max_offsets_per_trigger <= 0 or trigger < 0:
        raise ConfigError(f"{where}: max_offsets_per_trigger must be > 0 and trigger_interval_s >= 0")
    tables = tuple(_table(t, i, where, dbz) for i, t in enumerate(data.get("tables", [])))
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: duplicate table names in {names}")
    for topic in {t.topic for t in tables}:
        shared = [t for t in tables if t.topic == topic]
        if len(shared) > 1 and any(t.source_table is None for t in shared):
            raise ConfigError(f"{where}: tables {[t.name for t in shared]} share topic {topic!r}; "
                              "give each a source_table to tell their records apart")
    graphs = tuple(_graph(g, tables, where) for g in data.get("graphs", []))
    views = tuple(_view(v, tables, where) for v in data.get("views", []))
    sketches = tuple(_sketch(x, tables, where) for x in data.get("sketches", []))
    for kind, items in (("graphs", graphs), ("views", views), ("sketches", sketches)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: duplicate {kind} names in {names}")
    name = str(job.get("name", "ivmstream"))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{where}: [job] name {name!r} may hold letters, digits, '_', '-', '.' only")
    return JobConfig(
        name=name,
        lake_root=_path(job.get("lake_root", "lake"), base, f"{where}: [job] lake_root"),
        checkpoint_root=_path(job.get("checkpoint_root", "checkpoints"), base,
                              f"{where}: [job] checkpoint_root"),
        trigger_interval_s=trigger,
        kafka=kcfg,
        spark=scfg,
        tables=tables,
        graphs=graphs,
        views=views,
        sketches=sketches,
        sketch=skcfg,
        source_file=source,
        debezium=dbz,
    )


def load_config(path: str | Path) -> JobConfig:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
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
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    out: list[str] = []
    for section, body in data.items():
        if isinstance(body, list):
            for item in body:
                out.append(f"[[{section}]]")
                out += [f"{k} = {val(v)}" for k, v in item.items()]
        else:
            out.append(f"[{section}]")
            out += [f"{k} = {val(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n"
