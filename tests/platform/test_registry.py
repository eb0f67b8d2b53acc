"""The real schema registry: `ivmstream registry start|status|stop`, and Avro records decoded by
schemas fetched from it by id (Apicurio Registry's Confluent-compatible API)."""

from __future__ import annotations

import subprocess
import sys
import time
from decimal import Decimal

import pytest

from connectors import avro as AV
from connectors.debezium import decode_batch
from devstack.process import free_port
from devstack.registry import RegistryServer, listening_ports
from core.errors import RegistryUnavailable
from streaming_app.settings import parse_config
from tests.decoder.test_avro import COLUMNS, KEY_AVRO, PLACEHOLDER, TOPIC, avro_envelope, avro_row, wire

pytestmark = pytest.mark.registry


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming_app", "registry", *args], capture_output=True,
                          text=True, timeout=180)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    home, port = tmp_path_factory.mktemp("registry"), free_port()
    r = cli("start", "--port", str(port), "--dir", str(home))
    assert r.returncode == 0, r.stderr
    srv = RegistryServer(home, port=port)
    assert f'[registry] url = "{srv.url}"' in r.stdout
    yield srv
    r = cli("stop", "--port", str(port), "--dir", str(home))
    assert r.stdout.strip() == "stopped" and srv.pid() is None


def config(url: str, **registry):
    return parse_config({"tables": [{"name": "t", "topic": TOPIC, "columns": COLUMNS, "primary_key": ["id"],
                                     "encoding": "avro"}], "registry": {"url": url, **registry}})


def test_status_and_loopback_only(registry):
    r = cli("status", "--port", str(registry.port), "--dir", str(registry.home))
    assert r.returncode == 0 and '"running": true' in r.stdout and '"ready": true' in r.stdout
    ports = listening_ports(registry.pid())
    assert (("127.0.0.1", registry.port) in ports) and all(addr == "127.0.0.1" for addr, _ in ports), ports


def test_records_decode_by_the_ids_the_registry_gave(registry):
    value_id = registry.register(f"{TOPIC}-value", avro_envelope())
    key_id = registry.register(f"{TOPIC}-key", KEY_AVRO)
    assert value_id != key_id
    value = wire(value_id, avro_envelope(), {"before": None, "after": avro_row({"id": 5, "price": Decimal("-1.25"),
                                                                                "day": 19000, "note": "é"}),
                                             "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    key = wire(key_id, KEY_AVRO, {"id": 5})
    unknown = b"\0" + (2**31 - 7).to_bytes(4, "big") + value[5:]
    out = decode_batch(config(registry.url), [(TOPIC, 0, 0, key, value), (TOPIC, 0, 1, None, unknown)])
    ev = out.events["t"][0]
    assert (ev.op, ev.key, ev.after["price"], str(ev.after["day"]), ev.after["note"]) == \
        ("c", (5,), Decimal("-1.25"), "2022-01-08", "é")
    assert [(r.offset, r.code) for r in out.rejected] == [(1, "DATA_AVRO_UNKNOWN_SCHEMA")]


def test_a_registry_that_stops_answering_holds_the_batch(registry, tmp_path):
    # A second registry, started and stopped here: its ids are not in the decoder's cache.
    other = RegistryServer(tmp_path / "other", port=free_port())
    other.start()
    sid = other.register("gone-value", avro_envelope())
    other.stop()
    value = wire(sid, avro_envelope(), {"before": None, "after": avro_row({"id": 1}),
                                        "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
    t = time.monotonic()
    with pytest.raises(RegistryUnavailable):
        decode_batch(config(other.url, retry_s=0.2, give_up_s=1.0), [(TOPIC, 0, 0, None, value)])
    assert time.monotonic() - t >= 1.0
    assert (other.url, sid) not in AV.cached_ids()


@pytest.mark.spark
def test_executors_fetch_schemas_themselves_and_decode_as_the_driver(registry, spark):
    """decode = "executors": each Python worker starts with an empty cache and asks the registry."""
    import pyarrow as pa

    from connectors.decode_stage import decode_on_executors

    value_id = registry.register(f"{TOPIC}.exec-value", avro_envelope())
    recs = []
    for i in range(60):
        after = avro_row({"id": i, "price": Decimal(i) / 4, "note": PLACEHOLDER if i % 7 == 0 else f"n{i}"})
        v = wire(value_id, avro_envelope(), {"before": None, "after": after, "source": {"table": "t", "lsn": i},
                                             "op": "c", "ts_ms": i})
        recs.append((TOPIC, i % 2, i // 2, None, v if i % 11 else v[:-1]))
    table = pa.table({"topic": [r[0] for r in recs], "partition": pa.array([r[1] for r in recs], pa.int32()),
                      "offset": pa.array([r[2] for r in recs], pa.int64()), "key": pa.array([None] * 60, pa.binary()),
                      "value": [r[4] for r in recs],
                      "headers": pa.array([None] * 60, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})
    # three tasks, each a contiguous run of offsets as the Kafka source gives them
    df = spark.createDataFrame(table.to_pandas()).repartitionByRange(3, "partition", "offset")
    cfg = config(registry.url)
    decoded, offsets = decode_on_executors(cfg, df)
    whole = decode_batch(cfg, recs)
    assert decoded.events == whole.events and len(whole.events["t"]) == 54
    assert [(r.offset, r.code) for r in decoded.rejected] == [(r.offset, r.code) for r in whole.rejected]
    assert {r.code for r in whole.rejected} == {"DATA_AVRO_CORRUPT"}
