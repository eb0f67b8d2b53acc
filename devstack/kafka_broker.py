"""A real Apache Kafka broker (KRaft, single node) run from the Maven Central jars.

`ivmstream broker start|stop|status` and the test suite both use this module: one JVM that
is broker and controller at once, listening on 127.0.0.1 only, its data and log under one
folder. Start formats the storage on first use, launches the JVM in its own session, waits
until the broker answers a metadata request, and records the pid; stop ends that pid only,
and only after checking that it is this broker (a Kafka JVM started with this folder's
config): after a reboot the recorded pid may belong to anything (devstack.server). Records
are kept for a week or up to 1 GiB per partition, whichever ends first (``RETENTION_HOURS``,
``RETENTION_BYTES``).
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from connectors.kafka import BrokerError
from core.jars import kafka_classpath
from devstack.broker_security import BrokerSecurity
from devstack.process import LOOPBACK, free_port, port_open
from devstack.server import JvmServer

KAFKA_MAIN = "kafka.Kafka"
# Bounded CDC history. A week and 1 GiB per partition hold every test, the demo and the
# benches (the largest writes ~100 MB a partition) many times over; a job restarted from a
# checkpoint older than what is kept fails on the missing offsets (Spark's failOnDataLoss)
# rather than silently skipping them.
RETENTION_HOURS = 168
RETENTION_BYTES = 1 << 30
SEGMENT_BYTES = 128 << 20  # retention deletes whole segments: keep them well under the bound


@dataclass
class EmbeddedBroker(JvmServer):
    """One KRaft broker+controller on loopback; ``home`` holds config, data, log and pid."""

    home: Path
    port: int = 9092
    heap: str = "512m"
    security: BrokerSecurity | None = None  # SASL_SSL (SCRAM-SHA-512 over TLS) on ``port``: broker_security

    title = "Kafka broker"
    kind = "broker"
    stem = "broker"
    error = BrokerError
    main_class = KAFKA_MAIN
    start_timeout_s = 90.0
    poll_s = 0.5

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    def address(self) -> dict:
        return {"bootstrap": self.bootstrap}

    @property
    def internal_port(self) -> int | None:
        """A secure broker's own plain-text loopback listener (its readiness probe, inter-broker)."""
        p = self.home / "internal.port"
        return int(p.read_text()) if self.security and p.exists() else None

    def _listeners(self, controller_port: int) -> dict[str, str]:
        if self.security is None:
            return {"listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{controller_port}",
                    "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
        if self.internal_port is None:
            (self.home / "internal.port").write_text(str(free_port()))
        internal = f"INTERNAL://{LOOPBACK}:{self.internal_port}"
        return {"listeners": f"SASL_SSL://{LOOPBACK}:{self.port},{internal},CONTROLLER://{LOOPBACK}:{controller_port}",
                "advertised.listeners": f"SASL_SSL://{LOOPBACK}:{self.port},{internal}",
                "inter.broker.listener.name": "INTERNAL",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL",
                **self.security.properties(self.home)}

    def _write_config(self, controller_port: int) -> None:
        if self.security is not None:
            self.security.certificates(self.home)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
            **self._listeners(controller_port),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.data_dir),
            "num.partitions": "2",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.recovery.threads.per.data.dir": "1",
            "auto.create.topics.enable": "false",
            "log.retention.hours": str(RETENTION_HOURS),
            "log.retention.bytes": str(RETENTION_BYTES),
            "log.segment.bytes": str(SEGMENT_BYTES),
        }
        self.config_file.touch(mode=0o600)  # a secure broker's holds its keystore password
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def launch(self, timeout_s: float) -> int:
        log4j = f"-Dlog4j2.configurationFile={self.write_log4j2('WARN', {'kafka': 'INFO'})}"
        cport_file = self.home / "controller.port"
        if not (self.data_dir / "meta.properties").exists():
            controller_port = free_port()
            cport_file.write_text(str(controller_port))
            self._write_config(controller_port)
            cmd = ["java", f"-Xmx{self.heap}", "-Xms128m", log4j, "-cp", kafka_classpath(),
                   "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(self.config_file),
                   *(self.security.format_args() if self.security else ())]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise BrokerError(f"formatting Kafka storage in {self.data_dir} failed:\n{r.stdout}\n{r.stderr}")
        else:
            # The quorum voter set is fixed at format time: keep the controller port.
            self._write_config(int(cport_file.read_text()))
        return self.spawn(self.java(kafka_classpath(), "-Xms128m", "-XX:+UseSerialGC", log4j,
                                    args=(str(self.config_file.resolve()),)))

    def why_not_ready(self) -> str | None:
        if not port_open(self.port):
            return "its port is closed"
        try:
            probe = f"{LOOPBACK}:{self.internal_port}" if self.security else self.bootstrap
            admin = KafkaAdminClient(bootstrap_servers=probe, request_timeout_ms=3000,
                                     client_id="ivmstream-probe")
            try:
                admin.list_topics()
                return None
            finally:
                admin.close()
        except (KafkaError, OSError, ValueError) as e:
            return f"no answer to a metadata request: {type(e).__name__}"


def _cluster_id() -> str:
    """A random KRaft cluster id (url-safe base64 of a UUID). One that starts with '-' would be
    read as an option by the storage tool, so draw again (as Kafka's own Uuid does)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
