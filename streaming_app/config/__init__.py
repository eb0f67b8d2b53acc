"""The job's configuration: one TOML file, read once into frozen dataclasses.

One module per section: ``job`` (the whole file, ``load_config``), ``kafka``, ``spark``,
``tables``, ``debezium``, ``derived`` (graphs, views, sketches and their settings), ``s3`` (the
bucket of an object-store lake) and ``sketch_sql`` (a registered query's checks without Spark);
``common`` holds the readers they share and is the one place the environment (``IVMSTREAM_*``) is read. CLI flags override the
file, the environment overrides neither silently: every flag shows its variable in ``--help``.
Every mistake raises ``ConfigError`` naming the file, the section and the key.
"""

from streaming_app.config.common import _NAME, ENV, MAX_FRAGMENTS, MAX_NAME_LEN, REPO_ROOT, env
from streaming_app.config.debezium import DebeziumConfig
from streaming_app.config.derived import SketchConfig, SketchSettings, StateSettings, TrianglesConfig, ViewConfig
from streaming_app.config.job import JobConfig, dump_toml, load_config, parse_config
from streaming_app.config.kafka import STARTING_OFFSETS, KafkaConfig, check_bootstrap_servers, check_starting_offsets
from streaming_app.config.s3 import S3Config
from streaming_app.config.sketch_sql import check_sketch_sql, sql_problem
from streaming_app.config.spark import SparkConfig
from streaming_app.config.tables import DECIMAL_MODES, SIMPLE_TYPES, TIME_MODES, TableConfig, parse_type

__all__ = [
    "DECIMAL_MODES", "ENV", "MAX_FRAGMENTS", "MAX_NAME_LEN", "REPO_ROOT", "SIMPLE_TYPES", "STARTING_OFFSETS",
    "TIME_MODES", "DebeziumConfig", "JobConfig", "KafkaConfig", "S3Config", "SketchConfig", "SketchSettings",
    "SparkConfig", "StateSettings", "TableConfig", "TrianglesConfig", "ViewConfig", "_NAME", "check_bootstrap_servers",
    "check_sketch_sql", "check_starting_offsets", "dump_toml", "env", "load_config", "parse_config",
    "parse_type", "sql_problem",
]
