"""``[job]`` and the whole config: ``JobConfig``, read from TOML by ``read_config`` /
``parse_schema`` (every section through its own module), written back by ``dump_toml``."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.config.common import (NAME, REPO_ROOT, check_keys, config_path, shown, want_name,
                                         want_number, want_str)
from core.config.debezium import DebeziumConfig, RegistryConfig, parse_debezium, check_formats, parse_registry
from core.config.derived import (SketchConfig, SketchSettings, StateSettings, TrianglesConfig,
                                          ViewConfig, parse_graph, parse_sketch, parse_view, parse_sketch_settings,
                                          parse_state_settings)
from core.config.maintenance import MaintenanceConfig, parse_maintenance
from core.config.metrics import CatalogConfig, MetricsConfig, parse_catalog, parse_metrics
from core.config.kafka import KafkaConfig, check_bootstrap_servers, check_starting_offsets, parse_kafka
from core.config.s3 import S3Config, parse_s3
from core.config.spark import SparkConfig, check_master, parse_spark
from core.config.tables import TableConfig, parse_table

_JOB_KEYS = {"name", "lake_root", "checkpoint_root", "trigger_interval_s", "decode", "mirrors"}


def _on_a_filesystem(path: Path | str, where: str) -> Path:
    """The Spark checkpoint stays on a filesystem (README: "The checkpoint"): Spark writes it by
    rename, which an object store does not have, and against S3Proxy a checkpoint on s3a://
    failed at its first batch (its Kafka source's metadata log)."""
    if isinstance(path, str):
        raise ConfigError(f"{where}: {path[:80]!r}: the checkpoint stays on a filesystem (a local disk, or a "
                          "shared one such as an NFS or HDFS mount); only lake_root may be on S3")
    return path


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
    # How a batch writes the mirrors: "merge-on-read" (deletion vectors: the batch writes its
    # changed rows, a deletion-vector file and its change feed, whatever the table's size) or
    # "copy-on-write" (every file holding a changed key is rewritten). bench/RESULTS.md.
    mirrors: str = "merge-on-read"
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
    s3: S3Config = field(default_factory=S3Config)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    registry: RegistryConfig | None = None  # [registry]: where Avro records' schemas are
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    catalog: CatalogConfig = field(default_factory=CatalogConfig)

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
            check_master(kw["master"], "--master")
        for k in ("lake_root", "checkpoint_root"):  # a flag's path is read from the working directory
            if isinstance(kw.get(k), str):
                flag = f"--{k.replace('_', '-')}"
                kw[k] = config_path(want_str(kw[k], flag, "the folder"), Path.cwd(), flag)
                if k == "checkpoint_root":
                    _on_a_filesystem(kw[k], flag)
        kafka_kw = {k: kw.pop(k) for k in ("bootstrap_servers", "max_offsets_per_trigger") if kw.get(k) is not None}
        spark_kw = {k: kw.pop(k) for k in ("master", "ui", "ui_port") if kw.get(k) is not None}
        kw = {k: v for k, v in kw.items() if v is not None}
        cfg = replace(self, **kw)
        if kafka_kw:
            cfg = replace(cfg, kafka=replace(cfg.kafka, **kafka_kw))
        if spark_kw:
            cfg = replace(cfg, spark=replace(cfg.spark, **spark_kw))
        return cfg


def parse_schema(data: dict, source: Path | None = None) -> JobConfig:
    """Validate a config dict (as TOML reads it) into a JobConfig. Every value is checked for
    type and range here. The ``[[sketches]]`` queries' checks need the sketch engine, a floor up:
    ``streaming_app.settings.parse_config`` runs both, and every entry point reads it."""
    where = str(source) if source else "config"
    base = source.parent if source else Path.cwd()
    check_keys(data, {"job", "kafka", "spark", "tables", "graphs", "views", "sketches", "sketch", "state",
                       "debezium", "s3", "maintenance", "registry", "metrics", "catalog"}, where)
    for section in ("tables", "graphs", "views", "sketches"):
        if not isinstance(data.get(section, []), list):
            raise ConfigError(f"{where}: {section} must be an array of tables ([[{section}]] entries), "
                              f"got {shown(data[section])}")
    dbz = parse_debezium(data["debezium"], where, base) if "debezium" in data else None
    job = data.get("job", {})
    w = f"{where}: [job]"
    check_keys(job, _JOB_KEYS, w)
    name = want_name(job.get("name", "ivmstream"), w, "name", NAME)
    trigger = want_number(job.get("trigger_interval_s", 2.0), w, "trigger_interval_s", 0.0, 86_400.0)
    decode = job.get("decode", JobConfig.decode)
    if decode not in ("executors", "driver"):
        raise ConfigError(f"{w}: decode must be \"executors\" or \"driver\", got {shown(decode)}")

    mirrors = job.get("mirrors", JobConfig.mirrors)
    if mirrors not in ("merge-on-read", "copy-on-write"):
        raise ConfigError(f"{w}: mirrors must be \"merge-on-read\" or \"copy-on-write\", got {shown(mirrors)}")

    kcfg = parse_kafka(data.get("kafka", {}), where, base)
    scfg = parse_spark(data.get("spark", {}), where)
    skcfg = parse_sketch_settings(data.get("sketch", {}), where)
    stcfg = parse_state_settings(data.get("state", {}), where)

    tables = tuple(parse_table(t, i, where, dbz) for i, t in enumerate(data.get("tables", [])))
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
        if len({t.encoding for t in shared}) > 1:
            raise ConfigError(f"{where}: tables {[t.name for t in shared]} share topic {topic!r} but not their "
                              "encoding; one topic is written by one converter (json or avro)")
        if len(shared) > 1 and any(t.format == "unwrapped" for t in shared):
            raise ConfigError(f"{where}: tables {[t.name for t in shared]} share topic {topic!r}; an unwrapped "
                              "table needs a topic of its own (a tombstone names no table)")

    registry = parse_registry(data["registry"], where, base) if "registry" in data else None
    avro = [t.name for t in tables if t.encoding == "avro"]
    if avro and registry is None:
        raise ConfigError(f"{where}: tables {avro} are encoding = \"avro\" but there is no [registry] "
                          "(url = the schema registry's Confluent API root)")
    check_starting_offsets(kcfg.starting_offsets, f"{where}: [kafka]", sorted({t.topic for t in tables}))
    graphs = tuple(parse_graph(g, tables, where, i) for i, g in enumerate(data.get("graphs", [])))
    views = tuple(parse_view(v, tables, where, i) for i, v in enumerate(data.get("views", [])))
    sketches = tuple(parse_sketch(x, tables, where, i) for i, x in enumerate(data.get("sketches", [])))
    for kind, items in (("graphs", graphs), ("views", views), ("sketches", sketches)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: duplicate {kind} names in {names}")
    cfg = JobConfig(
        name=name,
        lake_root=config_path(job.get("lake_root", "lake"), base, f"{where}: [job] lake_root"),
        checkpoint_root=_on_a_filesystem(config_path(job.get("checkpoint_root", "checkpoints"), base,
                                               f"{where}: [job] checkpoint_root"), f"{where}: [job] checkpoint_root"),
        trigger_interval_s=trigger,
        decode=decode,
        mirrors=mirrors,
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
        s3=parse_s3(data.get("s3", {}), where),
        maintenance=parse_maintenance(data.get("maintenance", {}), where),
        registry=registry,
        metrics=parse_metrics(data.get("metrics", {}), where),
        catalog=parse_catalog(data.get("catalog", {}), where),
    )
    check_formats(cfg)
    return cfg


def read_config(path: str | Path) -> JobConfig:
    """The TOML file at ``path`` through ``parse_schema`` (one-line ConfigErrors for what cannot be read)."""
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
    return parse_schema(data, p.resolve())


def dump_toml(data: dict) -> str:
    """Write a config dict (the shape ``parse_schema`` takes) as TOML text."""

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
