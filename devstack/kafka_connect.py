"""A real Kafka Connect worker running the Debezium PostgreSQL and MySQL connectors, for the CDC chain.

`ivmstream connect start|stop|status|register` and the test suite both use this module. One
JVM runs a *distributed* worker (a group of one) against a Kafka broker: its connector
configs, source offsets and statuses live in three compacted one-partition topics on that
broker, so a restarted worker resumes its connectors where they stopped without any file of
ours. The REST API listens on 127.0.0.1 only. Keys and values are written by Connect's
JsonConverter with ``schemas.enable=true`` (what a user gets by default), so every record
carries its schema: Decimal scales, time units and type names are in the data.

The connector's properties and the REST calls that register it on any worker are
connectors.connect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from connectors.connect import ConnectError, quote_name, rest, wait_running
from core.jars import connect_classpath
from devstack.process import LOOPBACK
from devstack.server import JvmServer

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


@dataclass
class EmbeddedConnect(JvmServer):
    """One distributed Kafka Connect worker; ``home`` holds its properties, log and pid."""

    home: Path
    port: int = 8083
    bootstrap: str = "127.0.0.1:9092"
    heap: str = "512m"
    # The worker group and its internal topics; distinct groups can share one broker.
    group: str = "ivmstream-connect"
    # How to reach a secure broker (connectors.kafka_client.security_properties of the job's
    # [kafka]): for the worker itself and the producers, consumers and admin it makes.
    client: dict = field(default_factory=dict, repr=False)
    # Copies of each of the worker's internal topics ([kafka] replication_factor).
    replication_factor: int = 1

    title = "Kafka Connect"
    kind = "Kafka Connect worker"
    stem = "connect"
    error = ConnectError
    main_class = CONNECT_MAIN
    start_timeout_s = 120.0

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.home / "connect-distributed.properties"

    # ---- process ----------------------------------------------------------------------
    def worker_properties(self) -> dict[str, str]:
        """The worker's properties file as a dict (secrets included: it is written 0600)."""
        secure = {f"{prefix}{k}": v for k, v in self.client.items()
                  for prefix in ("", "producer.", "consumer.", "admin.")}
        return {**self._base_properties(), **secure}

    def _write_config(self) -> None:
        self.config_file.touch(mode=0o600)  # it may hold the broker login
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in self.worker_properties().items()))

    def _base_properties(self) -> dict[str, str]:
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "config.storage.topic": f"_{self.group}-configs",
            "offset.storage.topic": f"_{self.group}-offsets",
            "status.storage.topic": f"_{self.group}-status",
            "config.storage.replication.factor": str(self.replication_factor),
            "offset.storage.replication.factor": str(self.replication_factor),
            "status.storage.replication.factor": str(self.replication_factor),
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "listeners": f"http://{LOOPBACK}:{self.port}",
            "rest.advertised.host.name": LOOPBACK,
            "rest.advertised.port": str(self.port),
            # Source offsets (the PostgreSQL LSN Debezium confirms to its slot) are flushed
            # every second, so a restart replays little.
            "offset.flush.interval.ms": "1000",
            # A group of one: when the worker comes back, take its connectors at once instead
            # of waiting out the default 5-minute grace for a departed member.
            "scheduled.rebalance.max.delay.ms": "0",
            # Find plugins through their META-INF/services manifests only (Connect and
            # Debezium ship them); skips the reflective classpath scan, seconds at start-up.
            "plugin.discovery": "service_load",
            # Debezium's topics are created by the worker with the partitions the connector
            # asks for (topic.creation.default.*); the broker does not auto-create topics.
            "topic.creation.enable": "true",
        }
        return props

    def launch(self, timeout_s: float) -> int:
        self._write_config()
        # The clients' config dumps are long and say nothing new after the first start.
        log4j = self.write_log4j2("INFO", {"org.apache.kafka.common.config.AbstractConfig": "WARN",
                                           "org.reflections": "ERROR"})
        return self.spawn(self.java(
            connect_classpath(), "-Xms128m", "-XX:+UseSerialGC",
            # C1 only: the worker moves a few records a second here, and skipping C2 cuts
            # start-up on a 2-core machine.
            "-XX:TieredStopAtLevel=1", "-Xshare:auto", f"-Dlog4j2.configurationFile={log4j}",
            args=(str(self.config_file),)))

    def why_not_ready(self) -> str | None:
        """REST answers and the worker has joined its group (GET /connectors works then)."""
        try:
            self._request("GET", "/connectors", timeout=3)
            return None
        except (ConnectError, OSError):
            return "its REST API does not answer GET /connectors"

    def address(self) -> dict:
        bootstrap = self.bootstrap
        try:  # the broker the worker was started with, which may differ from ours
            for line in self.config_file.read_text().splitlines():
                if line.startswith("bootstrap.servers="):
                    bootstrap = line.split("=", 1)[1]
        except OSError:
            pass
        return {"url": self.url, "bootstrap": bootstrap}

    def status(self, name: str | None = None) -> dict:
        """The worker's state, or with ``name`` that connector's REST status."""
        if name is not None:
            return self.connector_status(name)
        st = {**super().status(), "ready": False, "connectors": []}
        if st["running"]:
            try:
                st["connectors"] = self._request("GET", "/connectors", timeout=3)
                st["ready"] = True
            except (ConnectError, OSError):
                pass
        return st

    # ---- REST -------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        return rest(self.url, method, path, body, timeout)

    def register(self, name: str, properties: dict) -> dict:
        """Create or update connector ``name`` (PUT .../config is idempotent)."""
        return self._request("PUT", f"/connectors/{quote_name(name)}/config",
                             {k: str(v) for k, v in properties.items()})

    def connector_status(self, name: str) -> dict:
        return self._request("GET", f"/connectors/{quote_name(name)}/status")

    def wait_running(self, name: str, timeout_s: float = 60.0) -> dict:
        return wait_running(self.url, name, timeout_s)

    def delete(self, name: str) -> bool:
        """Remove connector ``name``; False if there was none. Its PostgreSQL replication
        slot and its offsets stay (re-registering the name resumes from them)."""
        try:
            self._request("DELETE", f"/connectors/{quote_name(name)}")
            return True
        except ConnectError as e:
            if "404" in str(e):
                return False
            raise
