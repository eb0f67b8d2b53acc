"""Shared fixtures: one real Kafka broker and one real Spark session per test run.

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
    from connectors.kafka_broker import EmbeddedBroker, free_port

    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka"), port=free_port())
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from streaming_app.config import SparkConfig
    from streaming_app.spark_session import SessionOptions, build_session

    s = build_session(SparkConfig(master="local[2]", driver_memory="2g"),
                      SessionOptions(app_name="ivmstream-tests", ui=False,
                                     warehouse_dir=str(tmp_path_factory.mktemp("warehouse"))))
    yield s
    s.stop()
