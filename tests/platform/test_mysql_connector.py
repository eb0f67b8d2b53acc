"""`[debezium] connector = "mysql"`: the properties `connect register` / `connect properties` build."""

import pytest

from connectors.connect import connector_properties
from core.errors import ConfigError
from streaming_app.settings import parse_config


def cfg(**debezium):
    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:29092"},
        "debezium": {"connector": "mysql", "database": "shop", "topic_prefix": "my", **debezium},
        "tables": [{"name": "items", "topic": "my.shop.items", "primary_key": "id", "columns": {"id": "long"}},
                   {"name": "order_lines", "topic": "my.shop.order_lines", "primary_key": ["a", "b"],
                    "columns": {"a": "int", "b": "int"}}]})


def test_mysql_connector_properties():
    c = cfg(server_id=5401, host="db", user="dbz", password="pw")
    p = connector_properties(c)
    assert p["connector.class"] == "io.debezium.connector.mysql.MySqlConnector"
    assert (p["database.hostname"], p["database.port"], p["database.user"], p["database.password"]) == \
        ("db", "3306", "dbz", "pw")
    assert p["database.server.id"] == "5401"
    assert p["database.include.list"] == "shop"
    assert p["table.include.list"] == r"shop\.items,shop\.order_lines"
    assert "schema.include.list" not in p  # the pitfall: a schema filter captures nothing on MySQL
    assert p["schema.history.internal.kafka.topic"] == "schemahistory.my"
    assert p["schema.history.internal.kafka.bootstrap.servers"] == "127.0.0.1:29092"
    assert p["bigint.unsigned.handling.mode"] == "precise"
    assert p["time.precision.mode"] == "adaptive_time_microseconds"  # Debezium's MySQL default
    assert p["skipped.operations"] == "none" and p["topic.creation.default.partitions"] == "1"
    assert "slot.name" not in p and "plugin.name" not in p
    # properties win over what we set
    assert connector_properties(cfg(properties={"bigint.unsigned.handling.mode": "long"}))[
        "bigint.unsigned.handling.mode"] == "long"


def test_mysql_topics_are_prefix_database_table():
    with pytest.raises(ConfigError) as e:
        connector_properties(parse_config({
            "debezium": {"connector": "mysql", "database": "shop", "topic_prefix": "my"},
            "tables": [{"name": "items", "topic": "my.public.items", "primary_key": "id", "columns": {"id": "long"}}]}))
    assert "my.shop.items" in str(e.value) and "topic_prefix.database.table" in str(e.value)


def test_postgres_stays_the_default():
    p = connector_properties(parse_config({
        "debezium": {"database": "shop", "topic_prefix": "pg"},
        "tables": [{"name": "items", "topic": "pg.public.items", "primary_key": "id", "columns": {"id": "long"}}]}))
    assert p["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert p["schema.include.list"] == "public" and p["database.dbname"] == "shop"
    assert "database.server.id" not in p and p["time.precision.mode"] == "adaptive"


@pytest.mark.parametrize("bad, words", [({"connector": "oracle"}, "connector"), ({"server_id": 0}, "server_id"),
                                        ({"server_id": "1"}, "server_id")])
def test_bad_connector_settings(bad, words):
    with pytest.raises(ConfigError) as e:
        cfg(**bad)
    assert words in str(e.value)
