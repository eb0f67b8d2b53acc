"""Issue 42, secure Kafka (client side): the SASL password from a file or the environment, never
a TOML literal nor printed; the same settings for the Java clients (Spark's source, the warm-up
and metrics consumers: ``[kafka] options`` with the SASL login) and the Python ones (preflight,
topic creation, the producer: ``connectors.kafka_client.python_options``); `connect properties`
masks the database password."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from connectors import delta_sink as sink
from connectors.kafka_client import masked, python_options
from core.config import dump_toml
from core.errors import ConfigError
from streaming_app.settings import parse_config

TABLES = [{"name": "t", "topic": "sec.t", "primary_key": "id", "columns": {"id": "long"}}]
SECRET = "s3cr3t-\"quoted\"-pw"
TLS = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
       "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem"}


def kafka_cfg(tmp_path, monkeypatch, **kafka):
    monkeypatch.delenv("IVMSTREAM_KAFKA_PASSWORD", raising=False)
    data = {"kafka": {"bootstrap_servers": "127.0.0.1:9093", **kafka}, "tables": TABLES}
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    from streaming_app.settings import load_config

    return load_config(path).kafka


def test_password_file_relative_to_the_config_and_the_sasl_login_for_both_clients(tmp_path, monkeypatch):
    (tmp_path / "kafka.pw").write_text(SECRET + "\n")
    k = kafka_cfg(tmp_path, monkeypatch, options=TLS, username="ivm", password_file="kafka.pw")
    assert k.password == SECRET and SECRET not in repr(k)
    jaas = dict(k.extra_options)["kafka.sasl.jaas.config"]
    assert jaas == ('org.apache.kafka.common.security.scram.ScramLoginModule required username="ivm" '
                    'password="s3cr3t-\\"quoted\\"-pw";')
    assert python_options(k) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                 "sasl_plain_username": "ivm", "sasl_plain_password": SECRET,
                                 "ssl_cafile": "/etc/kafka/ca.pem", "ssl_check_hostname": True}


def test_password_from_the_environment_and_plain_text_without_options(tmp_path, monkeypatch):
    assert python_options(kafka_cfg(tmp_path, monkeypatch)) == {}
    monkeypatch.setenv("IVMSTREAM_KAFKA_PASSWORD", "from-env")
    data = {"kafka": {"username": "ivm", "options": {**TLS, "kafka.ssl.endpoint.identification.algorithm": ""}},
            "tables": TABLES}
    k = parse_config(data).kafka
    assert k.password == "from-env" and python_options(k)["ssl_check_hostname"] is False


@pytest.mark.parametrize("kafka, says", [
    ({"username": "ivm", "options": TLS}, "needs a password"),
    ({"password_file": "x"}, "password_file needs username"),
    ({"username": "ivm", "password_file": "/nonexistent/pw", "options": TLS}, "cannot be read"),
    ({"username": "ivm", "password_file": "/dev/null", "options": TLS}, "is empty"),
])
def test_kafka_secret_mistakes_are_one_line(monkeypatch, kafka, says):
    monkeypatch.delenv("IVMSTREAM_KAFKA_PASSWORD", raising=False)
    with pytest.raises(ConfigError, match=says):
        parse_config({"kafka": kafka, "tables": TABLES})


def test_python_clients_refuse_what_they_cannot_follow(monkeypatch):
    monkeypatch.setenv("IVMSTREAM_KAFKA_PASSWORD", "pw")
    for user, options, says in (("u", {**TLS, "kafka.ssl.truststore.type": "JKS"}, "as PEM"),
                                ("u", {**TLS, "kafka.ssl.keystore.location": "/k.p12"}, "client certificates"),
                                (None, {"kafka.security.protocol": "SASL_SSL"}, "needs username")):
        kafka = {"options": options, **({"username": user} if user else {})}
        k = parse_config({"kafka": kafka, "tables": TABLES}).kafka
        with pytest.raises(ConfigError, match=says):
            python_options(k)
    with pytest.raises(ConfigError, match="PLAIN, SCRAM"):
        parse_config({"kafka": {"username": "u", "options": {"kafka.sasl.mechanism": "GSSAPI"}}, "tables": TABLES})


def test_connect_properties_masks_the_database_password(tmp_path):
    data = {"kafka": {"bootstrap_servers": "127.0.0.1:29092"},
            "debezium": {"connector": "postgres", "database": "shop", "topic_prefix": "pg", "password": "db-pw-42"},
            "tables": [{"name": "items", "topic": "pg.public.items", "primary_key": "id", "columns": {"id": "long"}}]}
    (tmp_path / "job.toml").write_text(dump_toml(data))
    r = subprocess.run([sys.executable, "-m", "streaming_app", "connect", "properties", "--config",
                        str(tmp_path / "job.toml")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "db-pw-42" not in r.stdout and json.loads(r.stdout)["config"]["database.password"] == "********"
    assert masked({"a.password": "", "user": "x"}) == {"a.password": "", "user": "x"}


@pytest.mark.kafka
@pytest.mark.spark
def test_produce_job_outputs_through_a_sasl_ssl_broker_and_a_wrong_password_in_one_line(tmp_path):
    """The embedded broker with SASL_SSL (`ivmstream broker start --sasl-user`: SCRAM-SHA-512,
    keytool certificates, loopback) prints the [kafka] section that reaches it; with it and a
    password file `ivmstream produce` and `ivmstream run` go through it and the mirror holds what
    was produced; a wrong password ends the job in one line."""
    from devstack.process import free_port

    cli = [sys.executable, "-m", "streaming_app"]
    flags = ["--port", str(free_port()), "--dir", str(tmp_path / "kafka")]
    r = subprocess.run([*cli, "broker", "start", *flags, "--sasl-user", "ivm"], capture_output=True, text=True,
                       timeout=180, env={**os.environ, "IVMSTREAM_KAFKA_PASSWORD": "right-pw-7"})
    try:
        assert r.returncode == 0 and "right-pw-7" not in r.stdout + r.stderr, r.stdout + r.stderr
        section = json.loads(r.stdout.split("the job's [kafka]: ", 1)[1].splitlines()[0])
        # and as TOML to paste into job.toml, the password from a file
        pasted = tomllib.loads(r.stdout[r.stdout.index("\n[kafka]\n"):])["kafka"]
        assert pasted == {**section, "password_file": "kafka.pw"}, r.stdout
        ca = Path(section["options"]["kafka.ssl.truststore.location"]).read_text()
        assert ca.startswith("-----BEGIN CERTIFICATE-----")
        (tmp_path / "kafka.pw").write_text("right-pw-7\n")
        data = {"job": {"name": "secure", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ck")},
                "kafka": {**section, "password_file": "kafka.pw"},
                "spark": {"master": "local[1]", "ui": False},
                "tables": [{"name": "t", "topic": "sec.t", "primary_key": "id",
                            "columns": {"id": "long", "v": "string"}}]}
        path = tmp_path / "job.toml"
        path.write_text(dump_toml(data))
        (tmp_path / "t.csv").write_text("id,v\n1,a\n2,b\n3,c\n")
        r = subprocess.run([*cli, "produce", "--config", str(path), "--table", "t", "--file", str(tmp_path / "t.csv")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        run = [*cli, "run", "--config", str(path), "--available-now", "--no-ui"]
        r = subprocess.run(run, capture_output=True, text=True, timeout=400)
        assert r.returncode == 0 and "batch     0:" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
        rows = sink.read_table(str(tmp_path / "lake" / "mirrors" / "t")).to_pylist()
        assert sorted((x["id"], x["v"]) for x in rows) == [(1, "a"), (2, "b"), (3, "c")]
        assert "right-pw-7" not in r.stdout + r.stderr

        (tmp_path / "kafka.pw").write_text("wrong-pw-9\n")
        r = subprocess.run(run, capture_output=True, text=True, timeout=400)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout[-3000:] + r.stderr[-3000:]
        assert "refused the job's connection as 'ivm'" in r.stderr and "wrong-pw-9" not in r.stdout + r.stderr
    finally:
        stop = subprocess.run([*cli, "broker", "stop", *flags], capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stdout + stop.stderr


def test_connect_worker_and_debeziums_history_clients_reach_the_broker_as_the_job(tmp_path, monkeypatch):
    from connectors.connect import connector_properties
    from connectors.kafka_client import security_properties
    from devstack.kafka_connect import EmbeddedConnect

    monkeypatch.setenv("IVMSTREAM_KAFKA_PASSWORD", "pw-for-connect")
    cfg = parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:9093", "username": "ivm", "options": TLS},
                        "debezium": {"connector": "mysql", "database": "shop", "topic_prefix": "my"},
                        "tables": [{"name": "items", "topic": "my.shop.items", "primary_key": "id",
                                    "columns": {"id": "long"}}]})
    sec = security_properties(cfg.kafka)
    assert sec["security.protocol"] == "SASL_SSL" and sec["ssl.truststore.type"] == "PEM"
    assert "pw-for-connect" in sec["sasl.jaas.config"] and not any(k.startswith("kafka.") for k in sec)
    worker = EmbeddedConnect(tmp_path, client=sec).worker_properties()
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert worker[f"{prefix}security.protocol"] == "SASL_SSL"
        assert worker[f"{prefix}sasl.jaas.config"] == sec["sasl.jaas.config"]
    props = connector_properties(cfg)
    for side in ("producer", "consumer"):
        assert props[f"schema.history.internal.{side}.sasl.mechanism"] == "SCRAM-SHA-512"
    assert "pw-for-connect" not in json.dumps(masked(props))
    assert "pw-for-connect" not in repr(EmbeddedConnect(tmp_path, client=sec))


def test_the_database_password_from_a_file_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("IVMSTREAM_DB_PASSWORD", raising=False)
    (tmp_path / "db.pw").write_text("db-secret\n")
    dbz = {"connector": "postgres", "database": "shop", "topic_prefix": "pg"}
    table = [{"name": "items", "topic": "pg.public.items", "primary_key": "id", "columns": {"id": "long"}}]
    path = tmp_path / "job.toml"
    path.write_text(dump_toml({"debezium": {**dbz, "password_file": "db.pw"}, "tables": table}))
    from streaming_app.settings import load_config

    d = load_config(path).debezium
    assert d.password == "db-secret" and "db-secret" not in repr(d)
    monkeypatch.setenv("IVMSTREAM_DB_PASSWORD", "from-env")
    assert parse_config({"debezium": dbz, "tables": table}).debezium.password == "from-env"
    assert parse_config({"debezium": {**dbz, "password": "literal"}, "tables": table}).debezium.password == "literal"
    with pytest.raises(ConfigError, match="not both"):
        parse_config({"debezium": {**dbz, "password": "x", "password_file": "db.pw"}, "tables": table})
