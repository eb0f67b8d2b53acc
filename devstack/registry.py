"""A real schema registry on this machine (Apicurio Registry, in-memory storage) for Avro records.

`ivmstream registry start|stop|status` and the test suite use this module as they use the
embedded Kafka broker: one JVM (Apicurio's Quarkus runner jar, unpacked from Maven Central into
``jvm/registry/app`` by `make jars`) listening on 127.0.0.1 only, its log and pid under one
folder. Schemas live in memory: a restart forgets them, and the ids a producer registered
with them (run it again after a restart). Its Confluent-compatible API (``/apis/ccompat/v7``,
what ``[registry] url`` names) serves ``GET /schemas/ids/{id}``; Apicurio's own API
(``/apis/registry/v2``) is what Apicurio's Kafka Connect converter talks to. Start waits until
``/health/ready`` answers; stop ends the recorded pid only after checking that it is this
registry (the runner jar started with this folder as ``-Divmstream.registry.home``): the life cycle
of every dev-stack server (``devstack.server``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from core.errors import IvmError
from core.jars import registry_runner
from devstack.process import LOOPBACK, cmdline, port_open
from devstack.server import LocalServer

DEFAULT_PORT = 8081
CCOMPAT = "/apis/ccompat/v7"  # the Confluent-compatible API: [registry] url
NATIVE = "/apis/registry/v2"  # Apicurio's own: its converters' apicurio.registry.url
HOME_PROPERTY = "ivmstream.registry.home"


class RegistryError(IvmError):
    code = "IVM530"


@dataclass
class RegistryServer(LocalServer):
    """One Apicurio Registry on loopback; ``home`` holds its output and pid."""

    home: Path
    port: int = DEFAULT_PORT
    heap: str = "512m"

    title = "schema registry"
    kind = "registry"
    stem = "registry"
    error = RegistryError
    start_timeout_s = 120.0
    poll_s = 0.5

    @property
    def base(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API root: ``[registry] url``."""
        return self.base + CCOMPAT

    @property
    def native_url(self) -> str:
        return self.base + NATIVE

    def address(self) -> dict:
        return {"url": self.url, "native_url": self.native_url}

    def is_ours(self, pid: int) -> bool:
        args = cmdline(pid)
        return f"-D{HOME_PROPERTY}={self.home}" in args and any(a.endswith("-runner.jar") for a in args)

    def describe(self) -> str:
        return f"an Apicurio runner jar with -D{HOME_PROPERTY}={self.home}"

    def launch(self, timeout_s: float) -> int:
        return self.spawn(["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", f"-D{HOME_PROPERTY}={self.home}",
                           f"-Dquarkus.http.host={LOOPBACK}", f"-Dquarkus.http.port={self.port}",
                           f"-Dquarkus.management.host={LOOPBACK}", "-Dquarkus.log.level=WARN",
                           "-Dquarkus.log.category.\"io.apicurio\".level=WARN", "-jar", str(registry_runner())],
                          cwd=self.home)

    def why_not_ready(self) -> str | None:
        if not port_open(self.port):
            return "its port is closed"
        return None if self.ready() else "/health/ready does not answer 200"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/health/ready", timeout=3) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def register(self, subject: str, schema: dict | str) -> int:
        """Register an Avro schema under ``subject`` through the Confluent API; its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        req = urllib.request.Request(f"{self.url}/subjects/{subject}/versions", method="POST",
                                     data=json.dumps({"schema": text}).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(json.loads(r.read())["id"])


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on (Linux /proc): what it exposes."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # state LISTEN
                addr, port = parts[1].split(":")
                out.append((_address(addr), int(port, 16)))
    return out


def _address(hex_addr: str) -> str:
    if len(hex_addr) == 8:
        return ".".join(str(b) for b in bytes.fromhex(hex_addr)[::-1])
    words = [bytes.fromhex(hex_addr[i:i + 8])[::-1].hex() for i in range(0, 32, 8)]
    full = "".join(words)
    if full == "0" * 32:
        return "::"
    if full[:24] == "0" * 20 + "ffff":
        return ".".join(str(b) for b in bytes.fromhex(full[24:]))
    return ":".join(full[i:i + 4] for i in range(0, 32, 4))
