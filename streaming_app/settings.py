"""The job's config as every entry point reads it: the schema (``core.config``), then each
``[[sketches]]`` query through the sketch engine's front end and safety check, so a config that
loads does not fail later in Spark."""

from __future__ import annotations

from pathlib import Path

from core.config import JobConfig, parse_schema, read_config
from operators.sketch_safety.registration import check_sketches


def parse_config(data: dict, source: Path | None = None) -> JobConfig:
    cfg = parse_schema(data, source)
    check_sketches(cfg)
    return cfg


def load_config(path: str | Path) -> JobConfig:
    cfg = read_config(path)
    check_sketches(cfg)
    return cfg
