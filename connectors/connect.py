"""Kafka Connect's REST API and the Debezium connector that captures a job's tables.

``connector_properties(cfg)`` turns a job config's ``[debezium]`` section and its tables into
the connector's properties (PostgreSQL's or MySQL's), and refuses a table whose topic is not
the one Debezium will write; ``rest`` and ``wait_running`` register it on any Connect worker
(`ivmstream connect register|properties`; the dev stack's own worker is
devstack.kafka_connect) and wait until its task runs.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

from connectors.kafka_client import security_properties
from connectors.unwrap import unwrap_properties
from core.config.debezium import converter_properties
from core.errors import ConfigError, IvmError

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
MYSQL_CONNECTOR = "io.debezium.connector.mysql.MySqlConnector"


class ConnectError(IvmError):
    code = "IVM520"


class ConnectorFailed(ConnectError):
    """A connector or its task reported FAILED (its trace's first line is in the message)."""

    code = "IVM521"


def quote_name(name: str) -> str:
    """A connector's name as one segment of a REST path."""
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
            st = rest(url, "GET", f"/connectors/{quote_name(name)}/status", timeout=5)
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
            # the history's own producer and consumer reach a secure broker as the job does
            **{f"schema.history.internal.{side}.{k}": v for k, v in security_properties(cfg.kafka).items()
               for side in ("producer", "consumer")},
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
        "topic.creation.default.replication.factor": str(cfg.kafka.replication_factor),
        # CDC history is kept: a job may restart from an old checkpoint.
        "topic.creation.default.cleanup.policy": "delete",
        "topic.creation.default.retention.ms": "-1",
    })
    props.update(unwrap_properties(cfg))  # tables declared format = "unwrapped"
    props.update(converter_properties(cfg))  # [debezium] encoding = "avro"
    props.update(dict(d.extra))
    return props
