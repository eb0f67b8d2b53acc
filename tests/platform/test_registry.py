"""The real schema registry: `ivmstream registry start|status|stop`, and Avro records decoded by
schemas fetched from it by id (Apicurio Registry's Confluent-compatible API)."""

from __future__ import annotations

import base64
import http.server
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal

import pytest

from connectors import avro as AV
from connectors.debezium import decode_batch
from devstack.process import free_port
from devstack.registry import RegistryServer, listening_ports
from core.errors import RegistryRefused, RegistryUnavailable
from streaming_app import preflight
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


class BasicAuthGate:
    """HTTP basic auth in front of the real registry, as a reverse proxy (nginx, an API gateway)
    puts it: a request without the expected credentials gets 401, any other is passed on to the
    registry and its answer returned. Every Authorization header that arrives is recorded.
    (Apicurio itself enforces auth only through an OIDC server such as Keycloak, which this
    machine does not have.)"""

    def __init__(self, upstream: str, user: str, password: str):
        self.seen: list[str | None] = []
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                auth = self.headers.get("Authorization")
                gate.seen.append(auth)
                if auth != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                    self.end_headers()
                    return
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=30) as r:
                        status, body = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, body = e.code, e.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_registry_credentials_are_sent_and_wrong_or_absent_ones_are_one_line(registry, tmp_path, monkeypatch):
    """[registry] user + password_file reaches a registry behind basic auth; a wrong password
    or none stops the batch (and the job's preflight) with one line naming neither secret,
    and quarantines nothing."""
    monkeypatch.delenv("IVMSTREAM_REGISTRY_PASSWORD", raising=False)
    monkeypatch.delenv("IVMSTREAM_REGISTRY_TOKEN", raising=False)
    value_id = registry.register(f"{TOPIC}.auth-value", avro_envelope())
    gate = BasicAuthGate(registry.base, "reader", "right-pw")
    try:
        # the Confluent API root behind the gate: the same path the registry serves it at
        url = gate.base + registry.url[len(registry.base):]
        value = wire(value_id, avro_envelope(), {"before": None, "after": avro_row({"id": 3, "note": "ok"}),
                                                 "source": {"table": "t", "lsn": 1}, "op": "c", "ts_ms": 1})
        (tmp_path / "wrong").write_text("wrong-pw\n")
        wrong = config(url, user="reader", password_file=str(tmp_path / "wrong"))
        for cfg, sent in ((wrong, "basic auth as 'reader' (password from password_file)"),
                          (config(url), "no credentials")):
            with pytest.raises(RegistryRefused) as e:
                decode_batch(cfg, [(TOPIC, 0, 0, None, value)])
            msg = str(e.value)
            assert "HTTP 401" in msg and sent in msg and "\n" not in msg and "pw" not in msg.replace("password", "")
            with pytest.raises(RegistryRefused):
                preflight.check_registry(cfg)
            assert (url, value_id) not in AV.cached_ids()  # nothing remembered: the right login reads it later
        assert gate.seen[0] == "Basic " + base64.b64encode(b"reader:wrong-pw").decode() and None in gate.seen
        (tmp_path / "right").write_text("right-pw\n")
        right = config(url, user="reader", password_file=str(tmp_path / "right"))
        lines = []
        preflight.check_registry(right, say=lines.append)
        assert lines == []
        out = decode_batch(right, [(TOPIC, 0, 0, None, value)])
        assert not out.rejected and [e.after["note"] for e in out.events["t"]] == ["ok"]
        assert gate.seen[-1] == "Basic " + base64.b64encode(b"reader:right-pw").decode()
        monkeypatch.setenv("IVMSTREAM_REGISTRY_PASSWORD", "right-pw")  # the same from the environment
        AV.forget(url)
        out = decode_batch(config(url, user="reader"), [(TOPIC, 0, 0, None, value)])
        assert [e.key for e in out.events["t"]] == [(3,)]
    finally:
        gate.close()
    # a registry that is not there at the job's start: a line, the batches wait (not an error)
    lines = []
    preflight.check_registry(config(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", timeout_s=2), say=lines.append)
    assert len(lines) == 1 and "does not answer" in lines[0] and "the batches will wait" in lines[0]
