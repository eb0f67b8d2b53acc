"""A real schema registry on this machine (Apicurio Registry, in-memory storage) for Avro records.

`ivmstream registry start|stop|status` and the test suite use this module as they use the
embedded Kafka broker: one JVM (Apicurio's Quarkus runner jar, unpacked from Maven Central into
``jvm/registry/app`` by `make jars`) listening on 127.0.0.1 only, its log and pid under one
folder. Schemas live in memory: a restart forgets them, and the ids a producer registered
with them (run it again after a restart). Its Confluent-compatible API (``/apis/ccompat/v7``,
what ``[registry] url`` names) serves ``GET /schemas/ids/{id}``; Apicurio's own API
(``/apis/registry/v2``) is what Apicurio's Kafka Connect converter talks to. Start waits until
``/health/ready`` answers; stop ends the recorded pid only after checking that it is this
registry (the runner jar started with this folder as ``-Divmstream.registry.home``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from connectors.local_process import LOOPBACK, alive, cmdline, port_open, tail, terminate
from core.errors import IvmError
from core.jars import registry_runner

DEFAULT_PORT = 8081
CCOMPAT = "/apis/ccompat/v7"  # the Confluent-compatible API: [registry] url
NATIVE = "/apis/registry/v2"  # Apicurio's own: its converters' apicurio.registry.url
HOME_PROPERTY = "ivmstream.registry.home"


class RegistryError(IvmError):
    code = "IVM530"


@dataclass
class RegistryServer:
    """One Apicurio Registry on loopback; ``home`` holds its log and pid."""

    home: Path
    port: int = DEFAULT_PORT
    heap: str = "512m"

    def __post_init__(self):
        self.home = Path(self.home)

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

    @property
    def pid_file(self) -> Path:
        return self.home / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "registry.log"

    def recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        """The recorded pid if it is alive and is this registry, else None."""
        pid = self.recorded_pid()
        return pid if pid is not None and alive(pid) and self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        args = cmdline(pid)
        return f"-D{HOME_PROPERTY}={self.home.resolve()}" in args and any(a.endswith("-runner.jar") for a in args)

    def check_pid_file(self) -> str | None:
        """If registry.pid names a process that is gone or is not this registry, remove the file
        and say so (that process is left alone); None if absent or ours."""
        if not self.pid_file.exists():
            return None
        pid = self.recorded_pid()
        if pid is None:
            why = "holds no pid"
        elif not alive(pid):
            why = f"names pid {pid}, which is not running"
        elif not self._is_ours(pid):
            why = f"names pid {pid}, which is not this registry (no -D{HOME_PROPERTY}={self.home.resolve()}); left it alone"
        else:
            return None
        self.pid_file.unlink(missing_ok=True)
        return f"{self.pid_file} {why}: removed the stale pid file"

    def start(self, timeout_s: float = 120.0) -> "RegistryServer":
        """Start (or find running) and return once the registry answers ``/health/ready``."""
        self.home.mkdir(parents=True, exist_ok=True)
        running = self.pid()
        if running:
            self._wait_ready(timeout_s, running)
            return self
        if port_open(self.port):
            raise RegistryError(f"port {self.port} is already taken by another process; choose another with --port")
        jar = registry_runner()
        out = open(self.log_file, "ab")
        proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", f"-D{HOME_PROPERTY}={self.home.resolve()}",
             f"-Dquarkus.http.host={LOOPBACK}", f"-Dquarkus.http.port={self.port}",
             f"-Dquarkus.management.host={LOOPBACK}", "-Dquarkus.log.level=WARN",
             "-Dquarkus.log.category.\"io.apicurio\".level=WARN",
             "-jar", str(jar)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.home,
            start_new_session=True,
        )
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(timeout_s, proc.pid)
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/health/ready", timeout=3) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait_ready(self, timeout_s: float, pid: int) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive(pid):
                raise RegistryError(f"schema registry (pid {pid}) exited during start-up:\n{tail(self.log_file)}")
            if port_open(self.port) and self.ready():
                return
            time.sleep(0.5)
        raise RegistryError(f"schema registry on port {self.port} not ready after {timeout_s:.0f}s; see {self.log_file}")

    def stop(self, timeout_s: float = 30.0) -> bool:
        """End the recorded registry process; True if one was running."""
        pid = self.pid()
        if pid is None:
            self.check_pid_file()
            return False
        terminate(pid, timeout_s, still_ours=self._is_ours)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "url": self.url, "native_url": self.native_url,
                "home": str(self.home), "ready": bool(pid and self.ready())}

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
