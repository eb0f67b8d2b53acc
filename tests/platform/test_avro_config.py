"""`encoding = "avro"`, `[registry]` and the converters `connect register` sets: one-line ConfigErrors."""

from __future__ import annotations

import pytest

from connectors.connect import connector_properties
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
    ({"registry": {"url": "http://r", "user": "u"}}, "basic auth needs both user and password"),
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
