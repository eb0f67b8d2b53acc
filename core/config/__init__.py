"""The job's configuration: one TOML file, read once into frozen dataclasses.

One module per section: ``job`` (the whole file, ``read_config``), ``kafka``, ``spark``,
``tables``, ``debezium``, ``derived`` (graphs, views, sketches and their settings), ``s3`` (the
bucket of an object-store lake), ``maintenance`` (compaction, VACUUM, log checkpoints), ``metrics`` (the Prometheus
endpoint, and the catalog database the tables are registered in) and ``sketch_sql`` (is a registered query one SELECT);
``common`` holds the readers they share and is the one place the environment (``IVMSTREAM_*``) is read. CLI flags override the
file, the environment overrides neither silently: every flag shows its variable in ``--help``.
Every mistake raises ``ConfigError`` naming the file, the section and the key.
"""

from core.config.common import NAME, ENV, MAX_FRAGMENTS, MAX_NAME_LEN, REPO_ROOT, env
from core.config.debezium import DebeziumConfig, RegistryConfig
from core.config.derived import SketchConfig, SketchSettings, StateSettings, TrianglesConfig, ViewConfig
from core.config.job import JobConfig, dump_toml, parse_schema, read_config
from core.config.kafka import STARTING_OFFSETS, KafkaConfig, check_bootstrap_servers, check_starting_offsets
from core.config.maintenance import MaintenanceConfig
from core.config.metrics import CatalogConfig, MetricsConfig
from core.config.s3 import S3Config
from core.config.sketch_sql import sql_problem
from core.config.spark import SparkConfig
from core.config.tables import DECIMAL_MODES, SIMPLE_TYPES, TIME_MODES, TableConfig, parse_type

__all__ = [
    "DECIMAL_MODES", "ENV", "MAX_FRAGMENTS", "MAX_NAME_LEN", "REPO_ROOT", "SIMPLE_TYPES", "STARTING_OFFSETS",
    "TIME_MODES", "CatalogConfig", "DebeziumConfig", "JobConfig", "KafkaConfig", "MaintenanceConfig", "MetricsConfig", "RegistryConfig", "S3Config", "SketchConfig", "SketchSettings",
    "SparkConfig", "StateSettings", "TableConfig", "TrianglesConfig", "ViewConfig", "NAME", "check_bootstrap_servers",
    "check_starting_offsets", "dump_toml", "env", "parse_schema", "read_config",
    "parse_type", "sql_problem",
]
