"""Shared fixtures: one real Kafka broker, S3 server and Spark session per test run.

Both are started lazily, only by tests that ask for them, through the same code as
`ivmstream broker start` and the job (no fakes). Unit tests of the operators need neither.
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port

    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka"), port=free_port())
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One real S3-API server (S3Proxy, `ivmstream s3`'s code) on a free loopback port, its bucket
    made. ``s3_server.lake("x")`` is a lake root in it (``s3a://lake/x``), ``s3_server.s3_section()``
    the job config's ``[s3]`` section that reaches it."""
    from devstack.process import free_port
    from devstack.s3_server import S3Server

    srv = S3Server(tmp_path_factory.mktemp("s3"), port=free_port(), access_key="test-key",
                   secret_key="test-secret-key")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory):
    """One real schema registry (Apicurio, `ivmstream registry`'s code) on a free loopback port;
    ``registry_server.url`` is the ``[registry] url`` that reaches it."""
    from devstack.process import free_port
    from devstack.registry import RegistryServer

    srv = RegistryServer(tmp_path_factory.mktemp("registry"), port=free_port())
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from core.config import SparkConfig
    from streaming_app.spark_session import SessionOptions, build_session

    s = build_session(SparkConfig(master="local[2]", driver_memory="2g"),
                      SessionOptions(app_name="ivmstream-tests", ui=False,
                                     warehouse_dir=str(tmp_path_factory.mktemp("warehouse"))))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL (Debian's binaries) on a free loopback port, wal_level=logical.

    Its folder is made with tempfile rather than tmp_path_factory: when we are root the
    server runs as the OS user ``postgres``, which cannot enter pytest's
    /tmp/pytest-of-root (mode 0700)."""
    import shutil
    import tempfile
    from pathlib import Path

    from devstack.postgres import EmbeddedPostgres
    from devstack.process import free_port

    home = Path(tempfile.mkdtemp(prefix="ivmstream-pg-"))
    # A throwaway test cluster: no fsync, so start-up and commits cost no disk flushes.
    pg = EmbeddedPostgres(home, port=free_port(), settings={"fsync": "off", "full_page_writes": "off",
                                                           "synchronous_commit": "off"})
    pg.start()
    yield pg
    pg.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def mariadb():
    """A real MariaDB (Debian's binaries) on a free loopback port: ROW binlog, FULL row image."""
    import shutil
    import tempfile
    from pathlib import Path

    from devstack.mariadb import EmbeddedMariaDb
    from devstack.process import free_port

    home = Path(tempfile.mkdtemp(prefix="ivmstream-mariadb-"))
    # A throwaway test server: no flush at each commit.
    db = EmbeddedMariaDb(home, port=free_port(), settings={"innodb-flush-log-at-trx-commit": 0, "sync-binlog": 0})
    db.start()
    yield db
    db.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_connect(kafka_broker, tmp_path_factory):
    """One Kafka Connect worker (with the Debezium PostgreSQL connector) on the test broker."""
    from devstack.kafka_connect import EmbeddedConnect
    from devstack.process import free_port

    connect = EmbeddedConnect(tmp_path_factory.mktemp("connect"), port=free_port(),
                              bootstrap=kafka_broker.bootstrap)
    connect.start()
    yield connect
    connect.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory):
    """One real broker with SASL_SSL (SCRAM-SHA-512 over TLS, keytool certificates: `ivmstream
    broker start --sasl-user`'s code) on a free loopback port. ``secure_kafka.section`` is the job
    config's ``[kafka]`` section that reaches it without the password, ``secure_kafka.password``
    the password (for a ``password_file``)."""
    import secrets
    from types import SimpleNamespace

    from devstack.broker_security import BrokerSecurity
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port

    home = tmp_path_factory.mktemp("kafka-secure")
    security = BrokerSecurity("ivm", secrets.token_hex(12))
    broker = EmbeddedBroker(home, port=free_port(), security=security)
    broker.start()
    yield SimpleNamespace(broker=broker, bootstrap=broker.bootstrap, password=security.password,
                          section=security.client_section(home, broker.bootstrap))
    broker.stop()
