"""`encoding = "avro"`, `[registry]` and the converters `connect register` sets: one-line ConfigErrors."""

from __future__ import annotations

import pytest

from connectors import avro as AV
from connectors.connect import connector_properties
from connectors.kafka_client import masked
from core.config.debezium import APICURIO_CONVERTER, CONFLUENT_CONVERTER
from core.errors import ConfigError
from streaming_app.settings import parse_config

TABLE = {"name": "t", "topic": "p.public.t", "columns": {"id": "long"}, "primary_key": ["id"]}
APICURIO = "http://127.0.0.1:8081/apis/ccompat/v7"


def cfg(**data):
    return parse_config({"tables": [TABLE], **data})


def test_encoding_per_job_and_per_table():
    c = cfg(debezium={"encoding": "avro", "topic_prefix": "p"}, registry={"url": APICURIO + "/"})
    assert c.tables[0].encoding == "avro" and c.registry.url == APICURIO
    assert (c.registry.timeout_s, c.registry.retry_s, c.registry.give_up_s) == (10.0, 5.0, 0.0)
    c = parse_config({"tables": [{**TABLE, "encoding": "avro"}, {**TABLE, "name": "u", "topic": "x"}],
                      "registry": {"url": "https://r.example", "token": "tok"}})
    assert [t.encoding for t in c.tables] == ["avro", "json"] and c.registry.token == "tok"


@pytest.mark.parametrize("data, needle", [
    ({"tables": [{**TABLE, "encoding": "protobuf"}]}, "encoding 'protobuf' is not one of json, avro"),
    ({"debezium": {"encoding": "xml"}}, "[debezium]: encoding 'xml' is not one of json, avro"),
    ({"tables": [{**TABLE, "encoding": "avro"}]}, "are encoding = \"avro\" but there is no [registry]"),
    ({"registry": {}}, "[registry]: missing key 'url'"),
    ({"registry": {"url": "127.0.0.1:8081"}}, "url must be an http:// or https:// URL"),
    ({"registry": {"url": "http://r", "user": "u"}}, "user 'u' needs a password: password_file"),
    ({"registry": {"url": "http://r", "password": "p"}}, "basic auth needs both user and a password"),
    ({"registry": {"url": "http://r", "user": "u", "password": "p", "password_file": "f"}}, "not both"),
    ({"registry": {"url": "http://r", "user": "u", "password_file": "/nonexistent/pw"}},
     "password_file /nonexistent/pw cannot be read"),
    ({"registry": {"url": "http://r", "token": 5}}, "token must be a non-empty string"),
    ({"registry": {"url": "http://r", "user": "u", "password": "p", "token": "t"}}, "not both"),
    ({"registry": {"url": "http://r", "retry_s": -1}}, "retry_s must be"),
    ({"registry": {"url": "http://r", "urls": "x"}}, "unknown key(s) ['urls']"),
    ({"tables": [{**TABLE, "encoding": "avro", "source_table": "a"}, {**TABLE, "name": "u", "source_table": "b"}],
      "registry": {"url": "http://r"}}, "share topic 'p.public.t' but not their encoding"),
    ({"debezium": {"encoding": "avro", "topic_prefix": "p"}, "tables": [{**TABLE, "encoding": "json"}],
      "registry": {"url": "http://r"}}, "one connector writes every table with one converter"),
])
def test_bad_avro_config_is_one_line(data, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({"tables": [TABLE], **data})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_connect_register_sets_the_converters():
    c = cfg(debezium={"encoding": "avro", "topic_prefix": "p"},
            registry={"url": APICURIO, "user": "u", "password": "p"})
    props = connector_properties(c)
    for side in ("key", "value"):
        assert props[f"{side}.converter"] == APICURIO_CONVERTER
        assert props[f"{side}.converter.apicurio.registry.url"] == "http://127.0.0.1:8081/apis/registry/v2"
        assert props[f"{side}.converter.apicurio.registry.as-confluent"] == "true"
        assert props[f"{side}.converter.apicurio.registry.headers.enabled"] == "false"
        assert props[f"{side}.converter.apicurio.auth.username"] == "u"
    c = cfg(debezium={"encoding": "avro", "topic_prefix": "p", "properties": {"value.converter.x": "1"}},
            registry={"url": "https://sr.example:8081", "token": "t"})
    props = connector_properties(c)
    assert props["value.converter"] == CONFLUENT_CONVERTER and props["value.converter.schema.registry.url"] == \
        "https://sr.example:8081"
    assert props["key.converter.bearer.auth.token"] == "t" and props["value.converter.x"] == "1"
    json_props = connector_properties(cfg(debezium={"topic_prefix": "p"}))
    assert not any("converter" in k for k in json_props)


def test_registry_secrets_from_a_file_or_the_environment_and_never_shown(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("s3cret-pw\nignored\n")
    (tmp_path / "tok").write_text("s3cret-tok\n")
    monkeypatch.delenv("IVMSTREAM_REGISTRY_PASSWORD", raising=False)
    monkeypatch.delenv("IVMSTREAM_REGISTRY_TOKEN", raising=False)
    c = cfg(registry={"url": APICURIO, "user": "u", "password_file": str(tmp_path / "pw")},
            debezium={"encoding": "avro", "topic_prefix": "p"})
    assert c.registry.password == "s3cret-pw" and c.registry.auth_from == "password_file"
    assert "s3cret" not in repr(c) and "s3cret" not in repr(c.registry)
    shown = masked(connector_properties(c))  # what `connect properties` prints
    assert "s3cret" not in str(shown) and shown["value.converter.apicurio.auth.password"] == "********"
    confluent = cfg(registry={"url": "https://sr.example", "user": "u", "password_file": str(tmp_path / "pw")},
                    debezium={"encoding": "avro", "topic_prefix": "p"})
    shown = masked(connector_properties(confluent))
    assert "s3cret" not in str(shown) and shown["key.converter.basic.auth.user.info"] == "********"
    c = cfg(registry={"url": APICURIO, "token_file": str(tmp_path / "tok")})
    assert c.registry.token == "s3cret-tok" and "s3cret" not in repr(c)
    monkeypatch.setenv("IVMSTREAM_REGISTRY_PASSWORD", "env-pw")
    c = cfg(registry={"url": APICURIO, "user": "u"})
    assert c.registry.password == "env-pw" and "IVMSTREAM_REGISTRY_PASSWORD" in c.registry.auth_from
    monkeypatch.setenv("IVMSTREAM_REGISTRY_TOKEN", "env-tok")
    assert cfg(registry={"url": APICURIO}).registry.token == "env-tok"
    assert cfg(registry={"url": APICURIO, "user": "u"}).registry.token is None  # basic auth wins: one of the two
    # the headers every request to the registry carries
    assert AV.auth_headers(cfg(registry={"url": APICURIO, "user": "u", "password": "p"}).registry)["Authorization"] \
        == "Basic dTpw"
    assert AV.auth_headers(cfg(registry={"url": APICURIO, "token": "t"}).registry)["Authorization"] == "Bearer t"
    monkeypatch.delenv("IVMSTREAM_REGISTRY_TOKEN")
    assert "Authorization" not in AV.auth_headers(cfg(registry={"url": APICURIO}).registry)


@pytest.mark.parametrize("module", ["pg_demo", "mariadb_demo"])
def test_the_real_chain_demos_in_avro_read_the_registry(module):
    """`demo --source postgres|mariadb --format avro`: the demo's job declares Avro with the
    registry's URL, so `connect register` gives Debezium Apicurio's converter, and the job reads
    the wire format (the chains themselves: tests/cdc_chain/test_*_avro.py)."""
    import importlib

    demo = importlib.import_module(f"streaming_app.{module}")
    url = "http://127.0.0.1:18081/apis/ccompat/v7"
    c = demo.demo_config(3306, "127.0.0.1:9092", "http://127.0.0.1:8083", False, run="r", password="pw",
                         registry_url=url)
    assert {t.encoding for t in c.tables} == {"avro"} and c.registry.url == url
    props = connector_properties(c)
    assert props["value.converter"] == APICURIO_CONVERTER
    assert props["value.converter.apicurio.registry.url"] == "http://127.0.0.1:18081/apis/registry/v2"
    plain = demo.demo_config(3306, "127.0.0.1:9092", "http://127.0.0.1:8083", False)
    assert {t.encoding for t in plain.tables} == {"json"} and plain.registry is None


def test_demo_format_avro_needs_a_real_chain(capsys):
    from streaming_app.cli import main

    assert main(["demo", "--format", "avro"]) == 2
    err = capsys.readouterr().err
    assert "--format avro runs with --source postgres or mariadb" in err and err.count("\n") == 1
