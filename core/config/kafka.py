"""``[kafka]``: where the job reads its topics and how much per batch."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.config.common import _check_keys, _want_int, _want_options, _want_str

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")
STARTING_OFFSETS = ("earliest", "latest")
_KAFKA_KEYS = {"bootstrap_servers", "starting_offsets", "max_offsets_per_trigger", "options"}


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 10_000
    extra_options: tuple[tuple[str, str], ...] = ()


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


def parse_kafka(kafka: Any, where: str) -> KafkaConfig:
    w = f"{where}: [kafka]"
    _check_keys(kafka, _KAFKA_KEYS, w)
    return KafkaConfig(
        bootstrap_servers=check_bootstrap_servers(kafka.get("bootstrap_servers", KafkaConfig.bootstrap_servers),
                                                  f"{w} bootstrap_servers"),
        starting_offsets=check_starting_offsets(kafka.get("starting_offsets", "earliest"), w),
        max_offsets_per_trigger=_want_int(kafka.get("max_offsets_per_trigger", 10_000), w,
                                          "max_offsets_per_trigger", 1, 2**31 - 1),
        extra_options=_want_options(kafka.get("options", {}), w, "options"),
    )
