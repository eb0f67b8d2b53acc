"""What every config section shares: the environment (read here and nowhere else), the
repository root, and the strict readers of TOML values (a wrong type is an error, never
coerced), each raising ``ConfigError`` naming the file, the section and the key."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

ENV = {
    "bootstrap_servers": "IVMSTREAM_BOOTSTRAP_SERVERS",
    "lake_root": "IVMSTREAM_LAKE_ROOT",
    "checkpoint_root": "IVMSTREAM_CHECKPOINT_ROOT",
    "master": "IVMSTREAM_SPARK_MASTER",
    "ui_port": "IVMSTREAM_UI_PORT",
    "config": "IVMSTREAM_CONFIG",
    "broker_port": "IVMSTREAM_BROKER_PORT",
    "broker_dir": "IVMSTREAM_BROKER_DIR",
    # The real CDC chain: the embedded PostgreSQL and Kafka Connect worker.
    "pg_port": "IVMSTREAM_PG_PORT",
    "pg_dir": "IVMSTREAM_PG_DIR",
    "mariadb_port": "IVMSTREAM_MARIADB_PORT",
    "mariadb_dir": "IVMSTREAM_MARIADB_DIR",
    "connect_port": "IVMSTREAM_CONNECT_PORT",
    "connect_dir": "IVMSTREAM_CONNECT_DIR",
    # The schema registry of `ivmstream registry` (Apicurio, for Avro records).
    "registry_port": "IVMSTREAM_REGISTRY_PORT",
    "registry_dir": "IVMSTREAM_REGISTRY_DIR",
    # The Spark standalone cluster of `ivmstream cluster`.
    "cluster_dir": "IVMSTREAM_CLUSTER_DIR",
    "cluster_port": "IVMSTREAM_CLUSTER_PORT",
    "cluster_ui_port": "IVMSTREAM_CLUSTER_UI_PORT",
    "cluster_workers": "IVMSTREAM_CLUSTER_WORKERS",
    "cluster_cores": "IVMSTREAM_CLUSTER_CORES",
    "cluster_memory": "IVMSTREAM_CLUSTER_MEMORY",
    "pg_bindir": "IVMSTREAM_PG_BINDIR",
    # Where `make setup` put the JVM jars and the driver's class archive (core.jars).
    "spark_jars": "IVMSTREAM_SPARK_JARS",
    "kafka_libs": "IVMSTREAM_KAFKA_LIBS",
    "connect_libs": "IVMSTREAM_CONNECT_LIBS",
    "s3proxy_libs": "IVMSTREAM_S3PROXY_LIBS",
    "registry_app": "IVMSTREAM_REGISTRY_APP",
    "s3a_jars": "IVMSTREAM_S3A_JARS",
    "jvm_archive": "IVMSTREAM_JVM_ARCHIVE",
    "jvm_archive_off": "IVMSTREAM_JVM_ARCHIVE_OFF",
    # The local S3-API server (`ivmstream s3`), and the standard AWS variables a lake on an
    # object store reads when its [s3] section leaves them out.
    "s3_port": "IVMSTREAM_S3_PORT",
    "s3_dir": "IVMSTREAM_S3_DIR",
    "s3_bucket": "IVMSTREAM_S3_BUCKET",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_endpoint_url": "AWS_ENDPOINT_URL",
    "aws_region": "AWS_REGION",
    # The SASL password of [kafka] username when no password_file is given, and the database
    # password of [debezium] when neither password nor password_file is.
    "kafka_password": "IVMSTREAM_KAFKA_PASSWORD",
    "db_password": "IVMSTREAM_DB_PASSWORD",
    # [registry] auth when the section names no password_file / token (user: the password).
    "registry_password": "IVMSTREAM_REGISTRY_PASSWORD",
    "registry_token": "IVMSTREAM_REGISTRY_TOKEN",
    # Fault injection for recovery tests: "<step>:<batch_id>" SIGKILLs the job at that step.
    "kill_at": "IVMSTREAM_KILL_AT",
}


def env(name: str, default: str | None = None) -> str | None:
    """The one place the process environment is read."""
    return os.environ.get(ENV[name], default)


# -- strict readers for TOML values: a wrong type is an error, never coerced ------------------
# Table, graph, view and column names become folder names and SQL identifiers: identifiers only.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Job and sketch names may also hold '-' and '.', but not lead with them ('.', '..', '-x').
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
MAX_NAME_LEN = 128
# A sketch is a bitset of this many fragments per table, rebuilt and stored every batch:
# beyond a million it would cost more than reading the table it is meant to skip.
MAX_FRAGMENTS = 1_000_000


def shown(v: Any) -> str:
    """A TOML value for a message: its type and, when short, the value."""
    kinds = {bool: "the boolean", int: "the integer", float: "the number", str: "the string",
             list: "an array", dict: "a table"}
    kind = kinds.get(type(v), f"a {type(v).__name__}")
    if isinstance(v, (list, dict)):
        return kind
    text = repr(v) if not isinstance(v, bool) else str(v).lower()
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def want_str(v: Any, w: str, key: str, *, empty: bool = False) -> str:
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise ConfigError(f"{w}: {key} must be a {'' if empty else 'non-empty '}string, got {shown(v)}")
    return v


def want_int(v: Any, w: str, key: str, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f"in {lo:,}..{hi:,}" if hi is not None else f">= {lo:,}"
        raise ConfigError(f"{w}: {key} must be an integer {span}, got {shown(v)}")
    return v


def want_number(v: Any, w: str, key: str, lo: float, hi: float) -> float:
    # an int is compared as is: math.isfinite would overflow on TOML's unbounded integers
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v))
            or not lo <= v <= hi):
        raise ConfigError(f"{w}: {key} must be a finite number in [{lo:g}, {hi:g}], got {shown(v)}")
    return float(v)


def want_bool(v: Any, w: str, key: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{w}: {key} must be true or false (a TOML boolean, unquoted), got {shown(v)}")
    return v


def want_name(v: Any, w: str, key: str, pattern: re.Pattern = _IDENT) -> str:
    want_str(v, w, key)
    if len(v) > MAX_NAME_LEN or not pattern.fullmatch(v):
        what = ("an identifier (a letter or '_', then letters, digits, '_')" if pattern is _IDENT else
                "letters, digits, '_', '-', '.', starting with a letter, digit or '_'")
        raise ConfigError(f"{w}: {key} {v[:60]!r} must be {what}, at most {MAX_NAME_LEN} characters")
    return v


def want_names(v: Any, w: str, key: str, *, allow_empty: bool = True) -> tuple[str, ...]:
    """A string or an array of strings (column names)."""
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items) or (not items and not allow_empty):
        raise ConfigError(f"{w}: {key} must be a column name or an array of column names, got {shown(v)}")
    dup = sorted({x for x in items if items.count(x) > 1})
    if dup:
        raise ConfigError(f"{w}: {key} names {dup} more than once")
    return tuple(items)


def want_options(v: Any, w: str, key: str) -> tuple[tuple[str, str], ...]:
    """A TOML table of option = value (string, number or boolean), as strings."""
    if not isinstance(v, dict):
        raise ConfigError(f"{w}: {key} must be a table of \"option\" = value, got {shown(v)}")
    out = []
    for k, x in v.items():
        if not k.strip():
            raise ConfigError(f"{w}: {key} has an empty option name")
        if isinstance(x, bool):
            x = str(x).lower()
        elif isinstance(x, float) and not math.isfinite(x):
            raise ConfigError(f"{w}: {key}: {k!r} must be finite, got {x}")
        elif not isinstance(x, (str, int, float)):
            raise ConfigError(f"{w}: {key}: {k!r} must be a string, number or boolean, got {shown(x)}")
        out.append((k, str(x)))
    return tuple(out)


def entry_name(raw: Any, section: str, i: int, where: str) -> str:
    """The ``where`` of the i-th ``[[section]]`` entry; ConfigError unless it is a TOML table."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [[{section}]] #{i + 1} must be a TOML table ([[{section}]] with "
                          f"key = value lines), got {shown(raw)}")
    name = raw.get("name")
    return f"{where}: [[{section}]] " + (repr(name) if isinstance(name, str) else f"#{i + 1}")


def check_keys(section: Any, allowed: set[str], where: str) -> None:
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: must be a TOML table of key = value, got {shown(section)}")
    unknown = set(section) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


_S3A = re.compile(r"s3a://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/\S*)?")


def config_path(value: Any, base: Path, where: str) -> Path | str:
    """A folder (a relative one against ``base``) or an ``s3a://bucket/path`` URI, kept a string
    (a ``Path`` would fold ``s3a://`` into ``s3a:/``)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a path string, got {value!r}")
    if "://" in value:
        if value.startswith("s3://"):
            raise ConfigError(f"{where}: {value[:80]!r}: write S3 locations as s3a://bucket/path (Spark's "
                              "Hadoop connector for S3 answers to s3a://)")
        if not _S3A.fullmatch(value.rstrip("/")):
            raise ConfigError(f"{where}: {value[:80]!r} is not a folder or an s3a://bucket/path URI "
                              "(bucket: 3-63 of a-z 0-9 . -)")
        return value.rstrip("/")
    p = Path(value)
    return p if p.is_absolute() else (base / p).resolve()


def want_mode(value: Any, allowed: tuple[str, ...], w: str, key: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{w}: {key} {value!r} is not one of {', '.join(allowed)}")
    return value


def read_secret(value: Any, base: Path, w: str, key: str) -> str:
    """A secret kept in a file (``key = "path"``, relative to the config file): its first line.
    The path may be named in a message, the secret never."""
    path = Path(want_str(value, w, key))
    path = path if path.is_absolute() else base / path
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{w}: {key} {path} cannot be read ({e.strerror or e})") from None
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise ConfigError(f"{w}: {key} {path} is empty (the secret is its first line)")
    return lines[0]
