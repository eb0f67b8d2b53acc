"""SASL_SSL for the embedded broker (``devstack.kafka_broker.EmbeddedBroker(security=...)``): clients
log in with SCRAM-SHA-512 over TLS, on loopback, as managed Kafka clusters ask.

At the first start Java's keytool makes the broker's key pair and a self-signed certificate for
127.0.0.1 (``broker.p12``, PKCS12, a random password kept in the broker's 0600 properties file)
and exports the certificate as ``ca.pem``: the truststore a client gives as
``kafka.ssl.truststore.type = "PEM"``. The user's SCRAM credential is written into the KRaft
metadata when the storage is formatted (``--add-scram``). The broker's own traffic (controller,
inter-broker) stays on loopback listeners of their own in plain text: one node talks to itself.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import IvmError

MECHANISM = "SCRAM-SHA-512"


class BrokerSecurityError(IvmError):
    code = "IVM500"


@dataclass(frozen=True)
class BrokerSecurity:
    username: str
    password: str = field(repr=False)

    def keystore(self, home: Path) -> Path:
        return home / "broker.p12"

    def ca_file(self, home: Path) -> Path:
        return home / "ca.pem"

    def keystore_password(self, home: Path) -> str:
        """The keystore's password: made once with the keystore, kept beside it (0600)."""
        p = home / "broker.p12.pw"
        if not p.exists():
            p.touch(mode=0o600)
            p.write_text(secrets.token_hex(16))
        return p.read_text().strip()

    def certificates(self, home: Path) -> None:
        """The key pair and certificate for 127.0.0.1 (keytool), and its PEM export; kept once made."""
        store, ca = self.keystore(home), self.ca_file(home)
        if store.exists() and ca.exists():
            return
        pw = self.keystore_password(home)
        store.unlink(missing_ok=True)
        for args in (["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
                      "-dname", "CN=127.0.0.1", "-ext", "SAN=IP:127.0.0.1,DNS:localhost",
                      "-keystore", str(store), "-storetype", "PKCS12", "-storepass", pw, "-keypass", pw],
                     ["-exportcert", "-rfc", "-alias", "broker", "-keystore", str(store), "-storepass", pw,
                      "-file", str(ca)]):
            r = subprocess.run(["keytool", *args], capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise BrokerSecurityError(f"keytool {args[0]} failed: {(r.stderr or r.stdout).strip()[:300]}")

    def properties(self, home: Path) -> dict[str, str]:
        """The broker's settings for its SASL_SSL listener (the listeners themselves are the broker's)."""
        pw = self.keystore_password(home)
        return {
            "sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore(home).resolve()),
            "ssl.keystore.password": pw,
            "ssl.key.password": pw,
            "ssl.client.auth": "none",
        }

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that write the user's SCRAM credential."""
        quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
        return ["--add-scram", f'{MECHANISM}=[name={self.username},password="{quoted}"]']

    def client_section(self, home: Path, bootstrap: str) -> dict:
        """The job config's ``[kafka]`` section that reaches this broker (without the password)."""
        return {"bootstrap_servers": bootstrap, "username": self.username,
                "options": {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": MECHANISM,
                            "kafka.ssl.truststore.type": "PEM",
                            "kafka.ssl.truststore.location": str(self.ca_file(home).resolve())}}
