"""What the CDC chain tests share: waiting until Debezium has written a history's last change."""

from __future__ import annotations

import json
import time

from connectors.kafka_client import python_options


def wait_for_markers(cfg, timeout_s: float = 180) -> None:
    """Until every table's topic holds its marker row (the workload's last change: key -1),
    read through the job's own [kafka] settings (a secure broker included)."""
    from kafka import KafkaConsumer

    pending = {t.topic for t in cfg.tables}
    c = KafkaConsumer(*pending, bootstrap_servers=cfg.kafka.bootstrap_servers, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=2000, **python_options(cfg.kafka))
    deadline = time.time() + timeout_s
    try:
        while pending and time.time() < deadline:
            for msg in c:
                if msg.key and msg.value and b'"after"' in msg.value:
                    payload = json.loads(msg.value).get("payload") or {}
                    after = payload.get("after") or {}
                    if -1 in (after.get("id"), after.get("order_id"), after.get("src")):
                        pending.discard(msg.topic)
                if not pending:
                    break
    finally:
        c.close()
    assert not pending, f"no marker on {pending} after {timeout_s}s"
