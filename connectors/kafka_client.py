"""The job's ``[kafka] options`` for the project's Python Kafka clients (kafka-python: the
preflight topic check, topic creation, the producer of `ivmstream produce` and the demos).

Spark's Kafka source and the JVM consumers (warm-up, metrics) take the options as they are
(``kafka.``-prefixed Java client settings); kafka-python names the same settings differently and
reads certificates as PEM files only, so a TLS truststore must be given as
``kafka.ssl.truststore.type = "PEM"`` for both to reach a TLS broker. A setting the Python
clients cannot follow (client certificates, a JKS/PKCS12 truststore, another SASL mechanism)
is refused in one line rather than left out, which would connect in plain text or fail later.
"""

from __future__ import annotations

from core.config import KafkaConfig
from core.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def python_options(kafka: KafkaConfig) -> dict:
    """kafka-python keyword arguments for ``bootstrap_servers`` and the security settings of
    ``kafka.extra_options`` (an empty dict for a plain-text broker)."""
    opts = {k.removeprefix("kafka."): v for k, v in kafka.extra_options if k.startswith("kafka.")}
    protocol = opts.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"[kafka] options: kafka.security.protocol {protocol[:40]!r} is not one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    out: dict = {}
    if protocol == "PLAINTEXT":
        return out
    out["security_protocol"] = protocol
    if protocol.startswith("SASL"):
        mechanism = opts.get("sasl.mechanism", "PLAIN").upper()
        if mechanism not in MECHANISMS:
            raise ConfigError(f"[kafka] options: kafka.sasl.mechanism {mechanism[:40]!r}: the project's Python "
                              f"clients speak {', '.join(MECHANISMS)}")
        if kafka.username is None:
            raise ConfigError("[kafka]: a SASL protocol needs username (with password_file or "
                              "IVMSTREAM_KAFKA_PASSWORD), which the job's Python clients use too")
        out.update(sasl_mechanism=mechanism, sasl_plain_username=kafka.username,
                   sasl_plain_password=kafka.password)
    if protocol.endswith("SSL"):
        if "ssl.keystore.location" in opts or "ssl.keystore.certificate.chain" in opts:
            raise ConfigError("[kafka] options: client certificates (kafka.ssl.keystore.*) are not supported by "
                              "the project's Python clients; authenticate with SASL over TLS")
        location = opts.get("ssl.truststore.location")
        if location is not None:
            if opts.get("ssl.truststore.type", "JKS").upper() != "PEM":
                raise ConfigError("[kafka] options: give the truststore as PEM (kafka.ssl.truststore.type = \"PEM\", "
                                  "kafka.ssl.truststore.location = the CA certificates' .pem file): the project's "
                                  "Python clients read PEM only")
            out["ssl_cafile"] = location
        # Java's empty algorithm turns host name checks off; so does ssl_check_hostname for kafka-python
        out["ssl_check_hostname"] = opts.get("ssl.endpoint.identification.algorithm", "https") != ""
    return out


def security_properties(kafka: KafkaConfig) -> dict[str, str]:
    """The Java client settings of ``[kafka] options`` that say how to connect (``security.*``,
    ``sasl.*``, ``ssl.*``, without their ``kafka.`` prefix): what a Kafka Connect worker and a
    Debezium connector's own clients need to reach the same broker as the job."""
    return {k.removeprefix("kafka."): v for k, v in kafka.extra_options
            if k.removeprefix("kafka.").startswith(("security.", "sasl.", "ssl."))}


def masked(props: dict) -> dict:
    """``props`` with every secret value replaced: passwords, SASL logins, a schema registry's
    basic-auth user info and bearer token (for printing)."""
    secret = ("password", "jaas.config", "secret", "user.info", "auth.token")
    return {k: ("********" if any(s in k.lower() for s in secret) and v else v) for k, v in props.items()}
