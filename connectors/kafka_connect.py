"""A real Kafka Connect worker running the Debezium PostgreSQL connector, for the CDC chain.

`ivmstream connect start|stop|status|register` and the test suite both use this module. One
JVM runs a *distributed* worker (a group of one) against a Kafka broker: its connector
configs, source offsets and statuses live in three compacted one-partition topics on that
broker, so a restarted worker resumes its connectors where they stopped without any file of
ours. The REST API listens on 127.0.0.1 only. Keys and values are written by Connect's
JsonConverter with ``schemas.enable=true`` (what a user gets by default), so every record
carries its schema: Decimal scales, time units and type names are in the data.

``connector_properties(cfg)`` turns a job config's ``[debezium]`` section and its tables into
the connector's properties, and refuses a table whose topic is not the one Debezium will write.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from connectors.unwrap import unwrap_properties
from core.config.debezium import converter_properties
from connectors.local_process import LOOPBACK, alive, cmdline, port_open, tail, terminate
from core.errors import ConfigError, IvmError
from core.jars import connect_classpath

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
MYSQL_CONNECTOR = "io.debezium.connector.mysql.MySqlConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


class ConnectError(IvmError):
    code = "IVM520"


class ConnectorFailed(ConnectError):
    """A connector or its task reported FAILED (its trace's first line is in the message)."""

    code = "IVM521"








@dataclass
class EmbeddedConnect:
    """One distributed Kafka Connect worker; ``home`` holds its properties, log and pid."""

    home: Path
    port: int = 8083
    bootstrap: str = "127.0.0.1:9092"
    heap: str = "512m"
    # The worker group and its internal topics; distinct groups can share one broker.
    group: str = "ivmstream-connect"

    def __post_init__(self) -> None:
        self.home = Path(self.home).absolute()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "connect.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "connect.log"

    @property
    def config_file(self) -> Path:
        return self.home / "connect-distributed.properties"

    # ---- process ----------------------------------------------------------------------
    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        """A live JVM running ConnectDistributed with our properties file (not a reused pid)."""
        if not alive(pid):
            return False
        args = cmdline(pid)
        return "org.apache.kafka.connect.cli.ConnectDistributed" in args and str(self.config_file) in args

    def _write_config(self) -> None:
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "config.storage.topic": f"_{self.group}-configs",
            "offset.storage.topic": f"_{self.group}-offsets",
            "status.storage.topic": f"_{self.group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
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
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _log4j(self) -> Path:
        p = self.home / "log4j2.properties"
        p.write_text(
            "rootLogger.level=INFO\nrootLogger.appenderRef.f.ref=F\n"
            "appender.f.type=File\nappender.f.name=F\n"
            f"appender.f.fileName={self.log_file}\n"
            "appender.f.layout.type=PatternLayout\n"
            "appender.f.layout.pattern=[%d] %p %m (%c)%n\n"
            # The clients' config dumps are long and say nothing new after the first start.
            "logger.cfg.name=org.apache.kafka.common.config.AbstractConfig\nlogger.cfg.level=WARN\n"
            "logger.reflections.name=org.reflections\nlogger.reflections.level=ERROR\n"
        )
        return p

    def start(self, timeout_s: float = 120.0) -> "EmbeddedConnect":
        """Start the worker (or find it running) and return once its REST API answers."""
        self.home.mkdir(parents=True, exist_ok=True)
        running = self.pid()
        if running:
            self._wait_ready(timeout_s, running)
            return self
        if port_open(self.port):
            raise ConnectError(f"port {self.port} is already taken by another process; "
                               "choose another with --port")
        self._write_config()
        out = open(self.home / "connect.out", "ab")
        proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseSerialGC",
             # C1 only: the worker moves a few records a second here, and skipping C2 cuts
             # start-up on a 2-core machine.
             "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             f"-Dlog4j2.configurationFile={self._log4j()}",
             "-cp", connect_classpath(),
             "org.apache.kafka.connect.cli.ConnectDistributed", str(self.config_file)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(timeout_s, proc.pid)
        return self

    def _wait_ready(self, timeout_s: float, pid: int) -> None:
        """REST answers and the worker has joined its group (GET /connectors works then)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive(pid):
                raise ConnectError(f"Kafka Connect (pid {pid}) exited during start-up:\n"
                                   f"{tail(self.home / 'connect.out')}{tail(self.log_file)}")
            try:
                self._request("GET", "/connectors", timeout=3)
                return
            except (ConnectError, OSError):
                pass
            time.sleep(0.2)
        raise ConnectError(f"Kafka Connect REST on port {self.port} not ready after {timeout_s:.0f}s; "
                           f"see {self.log_file}")

    def stop(self, timeout_s: float = 30.0) -> bool:
        """End the recorded worker process (checked to be ours); True if one was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        terminate(pid, timeout_s, still_ours=self._is_ours)  # its shutdown hook stops tasks, flushes offsets
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self, name: str | None = None) -> dict:
        """The worker's state, or with ``name`` that connector's REST status."""
        if name is not None:
            return self.connector_status(name)
        pid = self.pid()
        bootstrap = self.bootstrap
        try:  # the broker the worker was started with, which may differ from ours
            for line in self.config_file.read_text().splitlines():
                if line.startswith("bootstrap.servers="):
                    bootstrap = line.split("=", 1)[1]
        except OSError:
            pass
        st = {"running": pid is not None, "pid": pid, "url": self.url, "bootstrap": bootstrap,
              "home": str(self.home), "ready": False, "connectors": []}
        if pid is not None:
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
        return self._request("PUT", f"/connectors/{_q(name)}/config",
                             {k: str(v) for k, v in properties.items()})

    def connector_status(self, name: str) -> dict:
        return self._request("GET", f"/connectors/{_q(name)}/status")

    def wait_running(self, name: str, timeout_s: float = 60.0) -> dict:
        return wait_running(self.url, name, timeout_s)

    def delete(self, name: str) -> bool:
        """Remove connector ``name``; False if there was none. Its PostgreSQL replication
        slot and its offsets stay (re-registering the name resumes from them)."""
        try:
            self._request("DELETE", f"/connectors/{_q(name)}")
            return True
        except ConnectError as e:
            if "404" in str(e):
                return False
            raise


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def rest(url: str, method: str, path: str, body: dict | None = None, timeout: float = 30):
    """One call to a Connect REST API; its JSON answer, or ConnectError with its message."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read() or b"{}").get("message") or e.reason
        except ValueError:
            msg = e.reason
        raise ConnectError(f"Kafka Connect {method} {path}: HTTP {e.code}: {str(msg).splitlines()[0]}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise ConnectError(f"Kafka Connect at {url} does not answer ({getattr(e, 'reason', e)}); "
                           "start it with `ivmstream connect start`") from None
    return json.loads(raw) if raw else None


def wait_running(url: str, name: str, timeout_s: float = 60.0) -> dict:
    """Wait until connector ``name`` and all its tasks are RUNNING; its status."""
    deadline = time.monotonic() + timeout_s
    st: dict = {}
    while time.monotonic() < deadline:
        try:
            st = rest(url, "GET", f"/connectors/{_q(name)}/status", timeout=5)
        except ConnectError as e:
            if "404" not in str(e):
                raise
            st = {}
        if st:
            states = [st["connector"]["state"]] + [t["state"] for t in st.get("tasks", [])]
            for part in [st["connector"], *st.get("tasks", [])]:
                if part.get("state") == "FAILED":
                    trace = (part.get("trace") or "").strip().splitlines()
                    first = next((ln for ln in trace if "Exception" in ln), trace[0] if trace else "no trace")
                    raise ConnectorFailed(f"connector {name!r} failed: {first.strip()}")
            if st.get("tasks") and all(s == "RUNNING" for s in states):
                return st
        time.sleep(0.25)
    raise ConnectError(f"connector {name!r} not RUNNING after {timeout_s:.0f}s (last status {st or 'none'})")


def topic_for(prefix: str, schema: str, table: str) -> str:
    """The topic Debezium writes table ``schema.table`` to (MySQL: ``database.table``)."""
    return f"{prefix}.{schema}.{table}"


def connector_properties(cfg) -> dict:
    """The Debezium connector's properties for ``cfg`` (a JobConfig): PostgreSQL's or MySQL's
    (which also captures MariaDB), as ``[debezium] connector`` says.

    Raises ConfigError when the config has no ``[debezium]`` section or a table's topic is
    not the one Debezium writes it to.
    """
    d = cfg.debezium
    where = cfg.source_file or "the config"
    if d is None:
        raise ConfigError(f"{where}: no [debezium] section; it names the database to capture")
    if not cfg.tables:
        raise ConfigError(f"{where}: no [[tables]] to capture")
    mysql = d.connector == "mysql"
    namespace = d.database if mysql else d.schema  # MySQL has no schema level: prefix.database.table
    include = []
    for t in cfg.tables:
        source = t.source_table or t.name
        expected = topic_for(d.topic_prefix, namespace, source)
        if t.topic != expected:
            raise ConfigError(f"{where}: table {t.name!r} has topic {t.topic!r}, but Debezium writes "
                              f"{namespace}.{source} to {expected!r} (topic_prefix.{'database' if mysql else 'schema'}"
                              ".table)")
        include.append(re.escape(f"{namespace}.{source}"))
    props = {
        "connector.class": MYSQL_CONNECTOR if mysql else POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": d.host,
        "database.port": str(d.port),
        "database.user": d.user,
        "database.password": d.password,
        "topic.prefix": d.topic_prefix,
    }
    if mysql:
        props.update({
            # The connector's id as a replication client: unique among the server's replicas.
            "database.server.id": str(d.server_id),
            # No schema.include.list here: MySQL has no schemas, and a PostgreSQL-style
            # "public" filter leaves the connector RUNNING with nothing captured.
            "database.include.list": re.escape(d.database),
            # Every DDL with its binlog position, replayed at restart (one partition, required).
            "schema.history.internal.kafka.topic": f"schemahistory.{d.topic_prefix}",
            "schema.history.internal.kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
            # Debezium's default "long" wraps values above 2^63-1; precise sends Decimal(20,0).
            "bigint.unsigned.handling.mode": "precise",
        })
    else:
        props.update({
            "database.dbname": d.database,
            "plugin.name": "pgoutput",
            "slot.name": d.slot_name,
            "publication.name": d.publication_name,
            # The publication holds exactly the included tables (created if missing).
            "publication.autocreate.mode": "filtered",
            "schema.include.list": re.escape(d.schema),
        })
    props.update({
        "table.include.list": ",".join(sorted(set(include))),
        # Debezium skips truncates unless told otherwise ("t" is its default); we apply them.
        "skipped.operations": "none",
        "tombstones.on.delete": "true",
        "snapshot.mode": "initial",
        "decimal.handling.mode": d.decimal_handling_mode,
        "time.precision.mode": d.time_precision_mode,
        # One partition per table topic. Debezium keys a row change by its primary key, but a
        # truncate has no key and lands on whatever partition the producer picks; only within
        # one partition is the log order of a truncate and the table's row changes exact, so
        # "delete every row" is applied at the right point. (Topics that exist already keep
        # their partition count; `ivmstream connect register` creates them with one.)
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "1",
        # CDC history is kept: a job may restart from an old checkpoint.
        "topic.creation.default.cleanup.policy": "delete",
        "topic.creation.default.retention.ms": "-1",
    })
    props.update(unwrap_properties(cfg))  # tables declared format = "unwrapped"
    props.update(converter_properties(cfg))  # [debezium] encoding = "avro"
    props.update(dict(d.extra))
    return props



