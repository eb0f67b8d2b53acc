"""``[spark]``: the Spark master, UI, memory and extra conf of the job's session."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.config.common import check_keys, want_bool, want_int, want_options, want_str

_MEMORY = re.compile(r"[1-9][0-9]*[kmgtp]?b?", re.IGNORECASE)
_HOST = re.compile(r"[A-Za-z0-9_.:-]+")
# Spark's master URLs: local[N|*[,F]], local-cluster[N,C,M], spark://host:port[,host:port],
# yarn, k8s://<api server>. Anything else fails inside Spark's launcher with a JVM stack.
_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|local-cluster\[[0-9]+, *[0-9]+, *[0-9]+\]"
                     r"|spark://[A-Za-z0-9_.\[\]:-]+:[0-9]+(,[A-Za-z0-9_.\[\]:-]+:[0-9]+)*|yarn|k8s://\S+")
_SPARK_KEYS = {"master", "ui", "ui_port", "ui_host", "driver_memory", "shuffle_partitions", "conf"}


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


def check_master(v: Any, w: str) -> str:
    want_str(v, w, "master")
    if not _MASTER.fullmatch(v.strip()):
        raise ConfigError(f"{w}: master {v[:60]!r} is not a Spark master URL: use local[*], local[N], "
                          "spark://host:port, yarn or k8s://host:port")
    return v


def parse_spark(spark: Any, where: str) -> SparkConfig:
    w = f"{where}: [spark]"
    check_keys(spark, _SPARK_KEYS, w)
    memory = want_str(spark.get("driver_memory", "2g"), w, "driver_memory")
    if not _MEMORY.fullmatch(memory):
        raise ConfigError(f"{w}: driver_memory {memory[:40]!r} must be a size such as \"2g\" or \"512m\"")
    ui_host = want_str(spark.get("ui_host", SparkConfig.ui_host), w, "ui_host")
    if not _HOST.fullmatch(ui_host):
        raise ConfigError(f"{w}: ui_host {ui_host[:60]!r} must be an IP address or host name "
                          "(\"127.0.0.1\" = this machine only, \"0.0.0.0\" = every interface)")
    return SparkConfig(
        master=check_master(spark.get("master", "local[*]"), w),
        ui=want_bool(spark.get("ui", True), w, "ui"),
        ui_port=want_int(spark.get("ui_port", 4040), w, "ui_port", 1, 65535),
        ui_host=ui_host,
        driver_memory=memory,
        shuffle_partitions=want_int(spark.get("shuffle_partitions", 2), w, "shuffle_partitions", 1, 100_000),
        extra_conf=want_options(spark.get("conf", {}), w, "conf"),
    )
