"""A real Apache Kafka broker (KRaft, single node) run from the Maven Central jars.

`ivmstream broker start|stop|status` and the test suite both use this module: one JVM that
is broker and controller at once, listening on 127.0.0.1 only, its data and log under one
folder. Start formats the storage on first use, launches the JVM in its own session, waits
until the broker answers a metadata request, and records the pid; stop ends that pid only,
and only after checking that it is this broker (a Kafka JVM started with this folder's
config): after a reboot the recorded pid may belong to anything. Records are kept for a week
or up to 1 GiB per partition, whichever ends first (``RETENTION_HOURS``, ``RETENTION_BYTES``).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from connectors.kafka import BrokerError
from core.jars import kafka_classpath
from core.process import alive
from devstack.process import LOOPBACK, free_port, port_open, runs_with, tail, terminate

KAFKA_MAIN = "kafka.Kafka"
# Bounded CDC history. A week and 1 GiB per partition hold every test, the demo and the
# benches (the largest writes ~100 MB a partition) many times over; a job restarted from a
# checkpoint older than what is kept fails on the missing offsets (Spark's failOnDataLoss)
# rather than silently skipping them.
RETENTION_HOURS = 168
RETENTION_BYTES = 1 << 30
SEGMENT_BYTES = 128 << 20  # retention deletes whole segments: keep them well under the bound









@dataclass
class EmbeddedBroker:
    """One KRaft broker+controller on loopback; ``home`` holds config, data, log and pid."""

    home: Path
    port: int = 9092
    heap: str = "512m"

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    def recorded_pid(self) -> int | None:
        """The pid in broker.pid, whatever runs under it now."""
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        """The recorded pid if it is alive and is this broker, else None."""
        pid = self.recorded_pid()
        return pid if pid is not None and alive(pid) and self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        return _is_broker(pid, self.config_file)

    def check_pid_file(self) -> str | None:
        """If broker.pid names a process that is gone or is not this broker, remove the file and
        say so (that process is left alone); None if the file is absent or names our broker."""
        if not self.pid_file.exists():
            return None
        pid = self.recorded_pid()
        if pid is None:
            why = "holds no pid"
        elif not alive(pid):
            why = f"names pid {pid}, which is not running"
        elif not self._is_ours(pid):
            why = (f"names pid {pid}, which is not this broker (not a {KAFKA_MAIN} JVM with "
                   f"{self.config_file}); left it alone")
        else:
            return None
        self.pid_file.unlink(missing_ok=True)
        return f"{self.pid_file} {why}: removed the stale pid file"

    def _write_config(self, controller_port: int) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
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
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _java(self, *args: str, **kw) -> subprocess.CompletedProcess:
        cmd = ["java", f"-Xmx{self.heap}", "-Xms128m",
               f"-Dlog4j2.configurationFile={self._log4j()}",
               "-cp", kafka_classpath(), *args]
        return subprocess.run(cmd, capture_output=True, text=True, **kw)

    def _log4j(self) -> Path:
        p = self.home / "log4j2.properties"
        if not p.exists():
            p.write_text(
                "rootLogger.level=WARN\nrootLogger.appenderRef.f.ref=F\n"
                "appender.f.type=File\nappender.f.name=F\n"
                f"appender.f.fileName={self.log_file}\n"
                "appender.f.layout.type=PatternLayout\n"
                "appender.f.layout.pattern=[%d] %p %m (%c)%n\n"
                "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n"
            )
        return p

    def start(self, timeout_s: float = 90.0) -> "EmbeddedBroker":
        """Start (or find running) and return once the broker serves metadata."""
        self.home.mkdir(parents=True, exist_ok=True)
        running = self.pid()
        if running:
            self._wait_ready(timeout_s, running)
            return self
        if port_open(self.port):
            raise BrokerError(f"port {self.port} is already taken by another process; "
                              "choose another with --port")
        cport_file = self.home / "controller.port"
        if not (self.data_dir / "meta.properties").exists():
            controller_port = free_port()
            cport_file.write_text(str(controller_port))
            self._write_config(controller_port)
            r = self._java("kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                           "-c", str(self.config_file), timeout=120)
            if r.returncode != 0:
                raise BrokerError(f"formatting Kafka storage in {self.data_dir} failed:\n{r.stdout}\n{r.stderr}")
        else:
            # The quorum voter set is fixed at format time: keep the controller port.
            self._write_config(int(cport_file.read_text()))
        out = open(self.home / "broker.out", "ab")
        proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseSerialGC",
             f"-Dlog4j2.configurationFile={self._log4j()}",
             "-cp", kafka_classpath(), KAFKA_MAIN, str(self.config_file.resolve())],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(timeout_s, proc.pid)
        return self

    def _wait_ready(self, timeout_s: float, pid: int) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive(pid):
                log_tail = tail(self.home / "broker.out") + tail(self.log_file)
                raise BrokerError(f"Kafka broker (pid {pid}) exited during start-up:\n{log_tail}")
            if port_open(self.port) and self._metadata_ok():
                return
            time.sleep(0.5)
        raise BrokerError(f"Kafka broker on port {self.port} not ready after {timeout_s:.0f}s; "
                          f"see {self.log_file}")

    def _metadata_ok(self) -> bool:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000,
                                     client_id="ivmstream-probe")
            try:
                admin.list_topics()
                return True
            finally:
                admin.close()
        except (KafkaError, OSError, ValueError):
            return False

    def stop(self, timeout_s: float = 30.0) -> bool:
        """End the recorded broker process; True if one was running. A pid that is not this
        broker is never signalled (``check_pid_file`` says why and removes the file)."""
        pid = self.pid()
        if pid is None:
            self.check_pid_file()
            return False
        terminate(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "bootstrap": self.bootstrap,
                "home": str(self.home), "ready": bool(pid and port_open(self.port))}




def _is_broker(pid: int, config_file: Path) -> bool:
    """True if ``pid`` runs Kafka's main class with ``config_file``."""
    return runs_with(pid, KAFKA_MAIN, config_file, ".properties")




def _cluster_id() -> str:
    """A random KRaft cluster id (url-safe base64 of a UUID). One that starts with '-' would be
    read as an option by the storage tool, so draw again (as Kafka's own Uuid does)."""
    import base64

    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
