"""``[debezium]``: the database (PostgreSQL, or MySQL/MariaDB) Debezium captures into the tables' topics."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.config.common import (check_keys, want_mode, shown, want_int, want_number, want_options, env,
                                read_secret)
from core.config.tables import DECIMAL_MODES, ENCODINGS, TIME_MODES

CONNECTORS = ("postgres", "mysql")
_DEBEZIUM_KEYS = {"connector", "server_id", "host", "port", "database", "user", "password", "password_file", "schema", "topic_prefix", "connector_name",
                  "slot_name", "publication_name", "decimal_handling_mode", "time_precision_mode",
                  "connect_url", "properties", "encoding"}
_REGISTRY_KEYS = {"url", "user", "password", "token", "password_file", "token_file", "timeout_s", "retry_s", "give_up_s"}


@dataclass(frozen=True)
class DebeziumConfig:
    """``[debezium]``: the database that Debezium captures into the tables' topics.

    ``ivmstream connect register`` turns it into the connector's properties; the decoder
    reads ``decimal_handling_mode`` and ``time_precision_mode`` as every table's default.
    ``connector``: "postgres" (topics prefix.schema.table) or "mysql" (MySQL and MariaDB,
    topics prefix.database.table; ``server_id`` is the connector's replication client id).
    """

    connector: str = "postgres"
    server_id: int = 5400
    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "postgres"
    user: str = "postgres"
    # the database password: password_file, else IVMSTREAM_DB_PASSWORD, else a TOML literal
    password: str = field(default="", repr=False)
    schema: str = "public"
    topic_prefix: str = "dbserver1"
    connector_name: str = "ivmstream"
    slot_name: str = "ivmstream"
    publication_name: str = "ivmstream"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    connect_url: str = "http://127.0.0.1:8083"
    encoding: str = "json"  # every table's default (ENCODINGS); "avro" needs [registry]
    extra: tuple[tuple[str, str], ...] = ()  # further connector properties, passed as given


def parse_debezium(raw: dict, where: str, base: Path | None = None) -> DebeziumConfig:
    w = f"{where}: [debezium]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{w}: must be a table")
    check_keys(raw, _DEBEZIUM_KEYS, w)
    d = DebeziumConfig()
    kw: dict[str, Any] = {"connector": want_mode(raw.get("connector", d.connector), CONNECTORS, w, "connector")}
    if kw["connector"] == "mysql":  # MySQL's port; Debezium's MySQL default time mode
        d = DebeziumConfig(port=3306, user="root", time_precision_mode="adaptive_time_microseconds")
    if "server_id" in raw:
        kw["server_id"] = want_int(raw["server_id"], w, "server_id", 1, 2**32 - 1)
    for k in ("host", "database", "user", "password", "schema", "topic_prefix", "connector_name",
              "slot_name", "publication_name", "connect_url"):
        if k in raw:
            if not isinstance(raw[k], str) or (k != "password" and not raw[k]):
                raise ConfigError(f"{w}: {k} must be a non-empty string, got {raw[k]!r}")
            kw[k] = raw[k]
    if "password_file" in raw:
        if "password" in raw:
            raise ConfigError(f"{w}: give password_file or password, not both")
        kw["password"] = read_secret(raw["password_file"], base or Path.cwd(), w, "password_file")
    elif "password" not in raw and env("db_password") is not None:
        kw["password"] = env("db_password")
    if "port" in raw:
        if isinstance(raw["port"], bool) or not isinstance(raw["port"], int) or not 0 < raw["port"] < 65536:
            raise ConfigError(f"{w}: port must be an integer in 1..65535, got {raw['port']!r}")
        kw["port"] = raw["port"]
    kw["decimal_handling_mode"] = want_mode(raw.get("decimal_handling_mode", d.decimal_handling_mode),
                                        DECIMAL_MODES, w, "decimal_handling_mode")
    kw["time_precision_mode"] = want_mode(raw.get("time_precision_mode", d.time_precision_mode),
                                      TIME_MODES, w, "time_precision_mode")
    kw["extra"] = want_options(raw.get("properties", {}), w, "properties")
    kw["encoding"] = want_mode(raw.get("encoding", d.encoding), ENCODINGS, w, "encoding")
    return replace(d, **kw)


@dataclass(frozen=True)
class RegistryConfig:
    """``[registry]``: a Confluent-compatible schema registry that Avro records name by id.

    ``url`` is its Confluent API root (``GET {url}/schemas/ids/{id}``): Confluent's registry at
    its root, Apicurio's at ``/apis/ccompat/v7``. ``user`` + a password send HTTP basic auth,
    a token a bearer token; the password from ``password_file`` (its first line, relative to
    the config), else ``password``, else IVMSTREAM_REGISTRY_PASSWORD; the token from
    ``token_file``, else ``token``, else IVMSTREAM_REGISTRY_TOKEN (without ``user``). Neither
    is ever in the repr. A request that gets no answer in ``timeout_s`` is retried every
    ``retry_s`` seconds, for as long as it takes: the batch waits, no record is quarantined;
    with ``give_up_s`` > 0 the batch fails after that long (IVM530) instead, and the query
    stops with its offsets uncommitted. A registry that refuses the credentials (401/403) is
    IVM531, at the job's start or when a batch meets it: they will not become right by waiting.
    """

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    retry_s: float = 5.0
    give_up_s: float = 0.0  # 0: wait for the registry however long it takes
    auth_from: str = "none"  # where the secret came from: "password_file", "environment", "config"... (for messages)


def parse_registry(raw: Any, where: str, base: Path | None = None) -> RegistryConfig:
    w = f"{where}: [registry]"
    check_keys(raw, _REGISTRY_KEYS, w)
    if "url" not in raw:
        raise ConfigError(f"{w}: missing key 'url' (the registry's Confluent API root, e.g. "
                          "http://127.0.0.1:8081 or Apicurio's http://127.0.0.1:8080/apis/ccompat/v7)")
    url = raw["url"]
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", url):
        raise ConfigError(f"{w}: url must be an http:// or https:// URL, got {shown(url)}")
    kw: dict[str, Any] = {"url": url.rstrip("/")}
    for k in ("user", "password", "token"):
        if k in raw:
            if not isinstance(raw[k], str) or not raw[k]:
                raise ConfigError(f"{w}: {k} must be a non-empty string" +
                                  (f", got {shown(raw[k])}" if k == "user" else ""))  # a secret is never shown
            kw[k] = raw[k]
    for k, plain in (("password_file", "password"), ("token_file", "token")):
        if k in raw:
            if plain in raw:
                raise ConfigError(f"{w}: give {k} or {plain}, not both")
            kw[plain] = read_secret(raw[k], base or Path.cwd(), w, k)
            kw["auth_from"] = k
    if "user" in kw and "password" not in kw and env("registry_password") is not None:
        kw["password"], kw["auth_from"] = env("registry_password"), "environment (IVMSTREAM_REGISTRY_PASSWORD)"
    if "user" not in kw and "token" not in kw and "password" not in kw and env("registry_token") is not None:
        kw["token"], kw["auth_from"] = env("registry_token"), "environment (IVMSTREAM_REGISTRY_TOKEN)"
    kw.setdefault("auth_from", "config" if "password" in kw or "token" in kw else "none")
    if "user" in kw and "password" not in kw:
        raise ConfigError(f"{w}: user {kw['user']!r} needs a password: password_file = \"...\" or the "
                          "environment variable IVMSTREAM_REGISTRY_PASSWORD")
    if "password" in kw and "user" not in kw:
        raise ConfigError(f"{w}: basic auth needs both user and a password")
    if "token" in kw and "user" in kw:
        raise ConfigError(f"{w}: give user + password (basic auth) or a token (bearer), not both")
    for k, default, hi in (("timeout_s", 10.0, 600.0), ("retry_s", 5.0, 3600.0)):
        kw[k] = float(want_number(raw.get(k, default), w, k, 0.001, hi))
    kw["give_up_s"] = float(want_number(raw.get("give_up_s", 0.0), w, "give_up_s", 0.0, 10.0**7))
    return RegistryConfig(**kw)


# ---- the ExtractNewRecordState ("unwrap") transform: connectors/unwrap.py says what it writes

SMT_CLASS = "io.debezium.transforms.ExtractNewRecordState"
SMT_NAME = "unwrap"
# What `connect register` sets for unwrapped tables; [debezium] properties win over it.
DEFAULTS = {"delete.tombstone.handling.mode": "rewrite", "add.fields": "op,table,source.ts_ms"}
DELETE_MODES = ("rewrite", "rewrite-with-tombstone", "tombstone", "delete-to-tombstone")


def unwrap_properties(cfg) -> dict:
    """The transform's connector properties when the config's tables are unwrapped, else {}."""
    if not cfg.tables or any(t.format != "unwrapped" for t in cfg.tables):
        return {}
    props = {"transforms": SMT_NAME, f"transforms.{SMT_NAME}.type": SMT_CLASS}
    props.update({f"transforms.{SMT_NAME}.{k}": v for k, v in DEFAULTS.items()})
    return props


def unwrap_transforms(props: dict) -> list[tuple[str, dict]]:
    """(name, options) of each ExtractNewRecordState in a connector's ``transforms`` list."""
    out = []
    for name in (n.strip() for n in str(props.get("transforms", "")).split(",")):
        if name and str(props.get(f"transforms.{name}.type", "")).strip() == SMT_CLASS:
            prefix = f"transforms.{name}."
            out.append((name, {k[len(prefix):]: str(v) for k, v in props.items() if k.startswith(prefix)}))
    return out


# ---- the converters that write Avro in the Confluent wire format

APICURIO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"  # in jvm/connect/pom.xml
CONFLUENT_CONVERTER = "io.confluent.connect.avro.AvroConverter"  # not on Maven Central: bring its jars
_CCOMPAT = re.compile(r"(?P<root>.*)/apis/ccompat/v[67]")


def converter_properties(cfg) -> dict:
    """Key and value converter properties when ``[debezium] encoding = "avro"``, else {}.

    An Apicurio registry (``[registry] url`` ending in ``/apis/ccompat/v6`` or ``v7``) gets
    Apicurio's converter talking to its own API, writing the Confluent form (magic byte, 4-byte
    content id, no headers) and registering schemas as they come; any other URL is taken for
    a Confluent registry and gets Confluent's converter. ``[debezium] properties`` win.
    """
    d, reg = cfg.debezium, cfg.registry
    if d is None or d.encoding != "avro" or reg is None:
        return {}
    m = _CCOMPAT.fullmatch(reg.url)
    if m:
        common = {"apicurio.registry.url": m.group("root") + "/apis/registry/v2",
                  "apicurio.registry.auto-register": "true", "apicurio.registry.find-latest": "true",
                  "apicurio.registry.headers.enabled": "false", "apicurio.registry.as-confluent": "true",
                  "apicurio.registry.use-id": "contentId"}
        if reg.user is not None:
            common.update({"apicurio.auth.username": reg.user, "apicurio.auth.password": reg.password})
        cls = APICURIO_CONVERTER
    else:
        common = {"schema.registry.url": reg.url}
        if reg.user is not None:
            common.update({"basic.auth.credentials.source": "USER_INFO",
                           "basic.auth.user.info": f"{reg.user}:{reg.password}"})
        elif reg.token is not None:
            common.update({"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": reg.token})
        cls = CONFLUENT_CONVERTER
    props = {}
    for side in ("key", "value"):
        props[f"{side}.converter"] = cls
        props.update({f"{side}.converter.{k}": v for k, v in common.items()})
    return props


def check_formats(cfg) -> None:
    """ConfigError unless the connector that ``[debezium]`` describes writes what the tables
    declare (envelopes or unwrapped rows) and every delete reaches the job."""
    d = cfg.debezium
    if d is None:
        return  # a connector of the user's own: the declared format is taken as given
    where = f"{cfg.source_file or 'config'}: [debezium]"
    formats = {t.format for t in cfg.tables}
    encodings = {t.encoding for t in cfg.tables}
    if encodings != {d.encoding}:
        raise ConfigError(f"{where}: one connector writes every table with one converter ([debezium] encoding = "
                          f"\"{d.encoding}\"), but the tables declare encoding {sorted(encodings)}")
    if len(formats) > 1:
        unwrapped = [t.name for t in cfg.tables if t.format == "unwrapped"]
        raise ConfigError(f"{where}: one connector writes every table, but {unwrapped} are format = \"unwrapped\" "
                          "and the others \"envelope\"; declare one format (or use two configs)")
    smts = unwrap_transforms({**unwrap_properties(cfg), **dict(d.extra)})
    if smts and formats != {"unwrapped"}:
        raise ConfigError(f"{where}: properties apply ExtractNewRecordState (transforms.{smts[0][0]}), so records "
                          "arrive unwrapped; declare format = \"unwrapped\" on every [[tables]] entry")
    if not smts and formats == {"unwrapped"}:
        raise ConfigError(f"{where}: the tables are format = \"unwrapped\" but properties.transforms names no "
                          f"ExtractNewRecordState; keep {SMT_NAME!r} in transforms")
    for name, opts in smts:
        for gone in ("delete.handling.mode", "drop.tombstones"):
            if gone in opts:
                raise ConfigError(f"{where}: transforms.{name}.{gone} is no longer read by Debezium 3.3; "
                                  "set delete.tombstone.handling.mode (rewrite keeps every delete)")
        mode = opts.get("delete.tombstone.handling.mode", "tombstone")
        if mode not in DELETE_MODES:
            raise ConfigError(f"{where}: transforms.{name}.delete.tombstone.handling.mode = {mode!r} cannot apply "
                              f"deletes (the mirrors would keep deleted rows); use one of {', '.join(DELETE_MODES)}")
