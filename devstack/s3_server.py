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
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import IvmError
from core.config.s3 import LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY
from core.jars import s3proxy_classpath
from devstack.process import LOOPBACK, port_open
from devstack.server import JvmServer

S3PROXY_MAIN = "org.gaul.s3proxy.Main"
DEFAULT_PORT = 9333
DEFAULT_BUCKET = "lake"
REGION = "us-east-1"
# The key pair of a local server when AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set: the
# schema's, which a job with a loopback endpoint and no keys uses too (core.config.s3).


class S3ServerError(IvmError):
    code = "IVM500"


@dataclass
class S3Server(JvmServer):
    """One S3Proxy on loopback; ``home`` holds its properties, data (one folder per bucket), log and pid."""

    home: Path
    port: int = DEFAULT_PORT
    bucket: str = DEFAULT_BUCKET
    access_key: str = field(default=LOCAL_ACCESS_KEY, repr=False)
    secret_key: str = field(default=LOCAL_SECRET_KEY, repr=False)
    heap: str = "256m"

    title = "S3 server"
    kind = "S3 server"
    stem = "s3proxy"
    error = S3ServerError
    main_class = S3PROXY_MAIN
    stop_timeout_s = 20.0
    poll_s = 0.3

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

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

    def address(self) -> dict:
        """What runs where (never the keys)."""
        return {"endpoint": self.endpoint, "bucket": self.bucket}

    def prepare(self) -> None:
        (self.data_dir / self.bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder

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

    def launch(self, timeout_s: float) -> int:
        self._write_config()
        return self.spawn(self.java(
            s3proxy_classpath(), "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlogback.configurationFile={(self.home / 'logback.xml').resolve()}",
            args=("--properties", str(self.config_file.resolve()))))

    def why_not_ready(self) -> str | None:
        """Any S3 answer (an unsigned request gets 403 AccessDenied) means it serves."""
        if not port_open(self.port):
            return "its port is closed"
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=3).close()
            return None
        except urllib.error.HTTPError:
            return None
        except (urllib.error.URLError, OSError) as e:
            return f"no HTTP answer: {getattr(e, 'reason', e)}"
