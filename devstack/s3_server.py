"""A real S3-API server on this machine (S3Proxy, filesystem backend) for a lake on an object store.

`ivmstream s3 start|stop|status` and the test suite both use this module, as they use the
embedded Kafka broker: one JVM (S3Proxy from the Maven Central jars in ``jvm/s3proxy/libs``)
that listens on 127.0.0.1 only, keeps each bucket as a folder under ``<home>/data`` and
answers S3 requests signed with one access key (AWS signature v2 or v4). Start writes its
properties file (mode 0600: it holds the secret), creates the bucket, launches the JVM in its
own session, waits until it answers HTTP and records the pid; stop ends that pid only, and only
after checking that it is this server (S3Proxy's main class with this folder's properties file).

S3Proxy logs every request at DEBUG unless told otherwise (~22k lines for a handful of
requests): it gets a logback file of WARN into ``<home>/s3proxy.log``. It does not honour
``If-None-Match`` on PutObject (conditional PUT came in 2.8.0, which Maven Central does not
have here), so two writers committing the same Delta version of one table would both
"succeed" and one commit would be lost: the job keeps one writer per table (README).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import IvmError
from core.jars import s3proxy_classpath
from core.process import alive
from devstack.process import LOOPBACK, port_open, runs_with, tail, terminate

S3PROXY_MAIN = "org.gaul.s3proxy.Main"
DEFAULT_PORT = 9333
DEFAULT_BUCKET = "lake"
REGION = "us-east-1"
# The key pair of a local server when AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set: it
# listens on loopback only and guards throwaway data, like a database's development password.
LOCAL_ACCESS_KEY = "ivmstream"
LOCAL_SECRET_KEY = "ivmstream-local-secret"


class S3ServerError(IvmError):
    code = "IVM500"


@dataclass
class S3Server:
    """One S3Proxy on loopback; ``home`` holds its properties, data (one folder per bucket), log and pid."""

    home: Path
    port: int = DEFAULT_PORT
    bucket: str = DEFAULT_BUCKET
    access_key: str = field(default=LOCAL_ACCESS_KEY, repr=False)
    secret_key: str = field(default=LOCAL_SECRET_KEY, repr=False)
    heap: str = "256m"

    def __post_init__(self):
        self.home = Path(self.home)

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "s3proxy.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "s3proxy.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config_file(self) -> Path:
        return self.home / "s3proxy.properties"

    def lake(self, prefix: str) -> str:
        """A lake root in this server's bucket: ``s3a://<bucket>/<prefix>``."""
        return f"s3a://{self.bucket}/{prefix.strip('/')}"

    def s3_section(self) -> dict:
        """The job config's ``[s3]`` section that reaches this server (a dict for ``parse_config``)."""
        return {"endpoint": self.endpoint, "region": REGION, "path_style": True,
                "access_key": self.access_key, "secret_key": self.secret_key}

    def recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        """The recorded pid if it is alive and is this server, else None."""
        pid = self.recorded_pid()
        return pid if pid is not None and alive(pid) and self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        return runs_with(pid, S3PROXY_MAIN, self.config_file, ".properties")

    def check_pid_file(self) -> str | None:
        """If the pid file names a process that is gone or is not this server, remove the file
        and say so (that process is left alone); None if it is absent or names our server."""
        if not self.pid_file.exists():
            return None
        pid = self.recorded_pid()
        if pid is None:
            why = "holds no pid"
        elif not alive(pid):
            why = f"names pid {pid}, which is not running"
        elif not self._is_ours(pid):
            why = (f"names pid {pid}, which is not this S3 server (not an {S3PROXY_MAIN} JVM with "
                   f"{self.config_file}); left it alone")
        else:
            return None
        self.pid_file.unlink(missing_ok=True)
        return f"{self.pid_file} {why}: removed the stale pid file"

    def _write_config(self) -> None:
        props = {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.data_dir.resolve()),
            "jclouds.identity": self.access_key,
            "jclouds.credential": self.secret_key,
        }
        fd = os.open(self.config_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        os.chmod(self.config_file, 0o600)
        (self.home / "logback.xml").write_text(
            "<configuration>\n"
            '  <appender name="F" class="ch.qos.logback.core.FileAppender">\n'
            f"    <file>{self.log_file.resolve()}</file>\n"
            "    <encoder><pattern>%d %level %logger{20} %msg%n</pattern></encoder>\n"
            "  </appender>\n"
            '  <root level="WARN"><appender-ref ref="F"/></root>\n'
            "</configuration>\n")

    def start(self, timeout_s: float = 60.0) -> "S3Server":
        """Start (or find running) and return once the server answers HTTP; the bucket exists."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.data_dir / self.bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder
        running = self.pid()
        if running:
            self._wait_ready(timeout_s, running)
            return self
        if port_open(self.port):
            raise S3ServerError(f"port {self.port} is already taken by another process; "
                                "choose another with --port")
        self._write_config()
        out = open(self.home / "s3proxy.out", "ab")
        proc = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dlogback.configurationFile={(self.home / 'logback.xml').resolve()}",
             "-cp", s3proxy_classpath(), S3PROXY_MAIN, "--properties", str(self.config_file.resolve())],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(timeout_s, proc.pid)
        return self

    def _wait_ready(self, timeout_s: float, pid: int) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive(pid):
                log_tail = tail(self.home / "s3proxy.out") + tail(self.log_file)
                raise S3ServerError(f"S3 server (pid {pid}) exited during start-up:\n{log_tail}")
            if port_open(self.port) and self._answers():
                return
            time.sleep(0.3)
        raise S3ServerError(f"S3 server on port {self.port} not ready after {timeout_s:.0f}s; see {self.log_file}")

    def _answers(self) -> bool:
        """Any S3 answer (an unsigned request gets 403 AccessDenied) means it serves."""
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=3).close()
            return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout_s: float = 20.0) -> bool:
        """End the recorded server process; True if one was running. A pid that is not this
        server is never signalled (``check_pid_file`` says why and removes the file)."""
        pid = self.pid()
        if pid is None:
            self.check_pid_file()
            return False
        terminate(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict:
        """What runs where (never the keys)."""
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "endpoint": self.endpoint, "bucket": self.bucket,
                "home": str(self.home), "ready": bool(pid and port_open(self.port))}
