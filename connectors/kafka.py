"""Kafka as the job's transport: is a broker there, and the topics the tables read.

The job's preflight and its broker watch ask ``unreachable`` before the Kafka client would
retry for half a minute; ``ivmstream produce``, ``connect register`` and the demos make the
topics they write (``create_topics``, or ``reset_topics`` for a rerun from nothing). Any
broker will do: the embedded one of the dev stack (devstack.kafka_broker) or a cluster.
"""

from __future__ import annotations

import socket
import time

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import UnknownTopicOrPartitionError

from core.errors import IvmError


class BrokerError(IvmError):
    code = "IVM500"


def unreachable(bootstrap: str, timeout_s: float = 3.0) -> str | None:
    """Why no server of ``bootstrap`` (host:port,...) accepts a TCP connection, or None if one
    does. A probe of a second or so, where the Kafka client would retry for 30 s."""
    reasons = []
    for part in bootstrap.split(","):
        host, _, port = part.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None
        except (OSError, ValueError) as e:
            reasons.append(f"{part.strip()}: {getattr(e, 'strerror', None) or e}")
    return "; ".join(reasons)


def live_brokers(admin: KafkaAdminClient) -> int:
    """How many brokers of the cluster take replicas now (fenced ones do not)."""
    return sum(1 for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced"))


def check_replication(replication_factor: int, brokers: int, bootstrap: str) -> None:
    """One line when a topic could not have ``replication_factor`` copies on ``brokers`` brokers."""
    if replication_factor > brokers:
        raise BrokerError(f"[kafka] replication_factor = {replication_factor}, but the cluster at {bootstrap} has "
                          f"{brokers} broker{'s' if brokers != 1 else ''}: a topic cannot have more copies than "
                          "brokers (1 on the one-broker dev stack, 3 on a production cluster)")


def check_cluster_replication(bootstrap: str, replication_factor: int, client: dict | None = None) -> None:
    """Ask the cluster how many brokers it has; one line if ``replication_factor`` is more."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ivmstream-admin", **(client or {}))
    try:
        check_replication(replication_factor, live_brokers(admin), bootstrap)
    finally:
        admin.close()


def create_topics(bootstrap: str, topics: list[str], partitions: int = 1, client: dict | None = None,
                  replication_factor: int = 1) -> None:
    """Create the topics that do not exist yet (idempotent), one partition each unless told
    (README, Ordering), ``replication_factor`` copies of each ([kafka] replication_factor);
    ``client``: kafka-python's security settings (connectors.kafka_client)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ivmstream-admin", **(client or {}))
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(t, num_partitions=partitions, replication_factor=replication_factor)
               for t in topics if t not in existing]
        if new:
            check_replication(replication_factor, live_brokers(admin), bootstrap)
            admin.create_topics(new)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not {t.name for t in new} <= set(admin.list_topics()):
                time.sleep(0.2)
    finally:
        admin.close()


def reset_topics(bootstrap: str, topics: list[str], partitions: int = 1, replication_factor: int = 1) -> None:
    """Delete the topics that exist and create them empty (a rerun starts from nothing)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ivmstream-admin")
    try:
        existing = [t for t in topics if t in set(admin.list_topics())]
        if existing:
            try:
                admin.delete_topics(existing)
            except UnknownTopicOrPartitionError:
                pass
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and set(existing) & set(admin.list_topics()):
                time.sleep(0.3)
            time.sleep(1.0)
    finally:
        admin.close()
    create_topics(bootstrap, topics, partitions, replication_factor=replication_factor)
