"""``[kafka]``: where the job reads its topics and how much per batch."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.config.common import check_keys, want_int, want_options, want_str, env, read_secret

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")
STARTING_OFFSETS = ("earliest", "latest")
_KAFKA_KEYS = {"bootstrap_servers", "starting_offsets", "max_offsets_per_trigger", "options", "username",
               "password_file", "replication_factor"}
MAX_REPLICATION_FACTOR = 32767  # Kafka's own bound (a short)
JAAS_OPTION = "kafka.sasl.jaas.config"
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 10_000
    # Every Kafka client the project makes gets these (Spark's source, the warm-up and metrics
    # consumers as they are; the Python admin, preflight and producer translated by
    # connectors.kafka_client). With ``username`` they hold the SASL login built from the
    # password (file or environment): never shown, hence no repr.
    extra_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # Copies of each partition for every topic the project creates: the tables' topics
    # (produce, connect register), Debezium's (topic.creation.default.*) and Kafka Connect's
    # internal ones. 1 fits the one-broker dev stack; a production cluster wants 3.
    replication_factor: int = 1

    @property
    def mechanism(self) -> str:
        return dict(self.extra_options).get("kafka.sasl.mechanism", "PLAIN")


def check_bootstrap_servers(v: Any, w: str) -> str:
    """``host:port[,host:port...]`` with ports in 1..65535."""
    want_str(v, w, "bootstrap servers")
    for part in v.split(","):
        m = _HOST_PORT.fullmatch(part.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"{w}: bootstrap servers {v!r}: {part.strip()!r} is not host:port "
                              "(port 1..65535); separate several with commas")
    return v


def check_starting_offsets(v: Any, w: str, topics: list[str] | None = None) -> str:
    """earliest, latest, or Spark's JSON of offsets: {"topic": {"0": 23, "1": -2}} (-2 earliest,
    -1 latest) over topics the config reads."""
    want_str(v, w, "starting_offsets")
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


def _password(kafka: dict, w: str, base: Path) -> str | None:
    """The SASL password: from ``password_file`` (its first line; relative to the config file),
    else IVMSTREAM_KAFKA_PASSWORD; never a TOML literal, never in a message."""
    if "password_file" in kafka:
        return read_secret(kafka["password_file"], base, w, "password_file")
    return env("kafka_password")


def _sasl_login(username: str, password: str, mechanism: str, w: str) -> str:
    module = LOGIN_MODULES.get(mechanism)
    if module is None:
        raise ConfigError(f"{w}: username and password need kafka.sasl.mechanism PLAIN, SCRAM-SHA-256 or "
                          f"SCRAM-SHA-512 in options, got {mechanism[:40]!r}")
    quote = lambda v: v.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731 - JAAS string escapes
    return f'{module} required username="{quote(username)}" password="{quote(password)}";'


def parse_kafka(kafka: Any, where: str, base: Path | None = None) -> KafkaConfig:
    w = f"{where}: [kafka]"
    check_keys(kafka, _KAFKA_KEYS, w)
    options = want_options(kafka.get("options", {}), w, "options")
    username = kafka.get("username")
    password = None
    if username is not None:
        username = want_str(username, w, "username")
        if JAAS_OPTION in dict(options):
            raise ConfigError(f"{w}: give username (with password_file or IVMSTREAM_KAFKA_PASSWORD) or "
                              f"{JAAS_OPTION} in options, not both")
        password = _password(kafka, w, base or Path.cwd())
        if password is None:
            raise ConfigError(f"{w}: username {username!r} needs a password: password_file = \"...\" or the "
                              "environment variable IVMSTREAM_KAFKA_PASSWORD")
        mechanism = dict(options).get("kafka.sasl.mechanism", "PLAIN")
        options = (*options, (JAAS_OPTION, _sasl_login(username, password, mechanism, w)))
    elif "password_file" in kafka:
        raise ConfigError(f"{w}: password_file needs username")
    return KafkaConfig(
        username=username, password=password,
        bootstrap_servers=check_bootstrap_servers(kafka.get("bootstrap_servers", KafkaConfig.bootstrap_servers),
                                                  f"{w} bootstrap_servers"),
        starting_offsets=check_starting_offsets(kafka.get("starting_offsets", "earliest"), w),
        max_offsets_per_trigger=want_int(kafka.get("max_offsets_per_trigger", 10_000), w,
                                          "max_offsets_per_trigger", 1, 2**31 - 1),
        extra_options=options,
        replication_factor=want_int(kafka.get("replication_factor", 1), w, "replication_factor", 1,
                                    MAX_REPLICATION_FACTOR),
    )
