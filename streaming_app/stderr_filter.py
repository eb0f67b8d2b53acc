"""The driver JVM's stderr without the lines that carry nothing for a user.

A local session copies the JVM's stderr through ``copy`` (spark_session); `ivmstream
submit` becomes spark-submit with its stderr piped through this file run as a script, which
copies its stdin to its stderr the same way. It imports nothing of the project or of Spark, so
it needs no package path and starts in milliseconds.
"""

from __future__ import annotations

import os
import signal

# Spark's launcher adds --add-modules=jdk.incubator.vector to every driver JVM it starts
# (org.apache.spark.launcher.JavaModuleOptions: MLlib's vectorised BLAS), and the JVM then prints
# this line on stderr whatever else it is given; nothing the job runs uses the module.
INCUBATOR_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector\n"


# Spark's driver-side runner of transformWithState (the statestore backend) starts a Python
# worker per stateful operator and query start that prints these lines, each followed by a blank
# one, to the JVM's stderr (pyspark.sql.streaming.transform_with_state_driver_worker); they carry
# nothing for a user.
TWS_WORKER_LINES = (b"Starting Streaming TransformWithStateInPandas Python worker",
                    b"Streaming TransformWithStateInPandas Python worker ")

# The AWS SDK v2 bundle (a lake on S3) carries a shaded SLF4J 1.x with no binding; the first
# logger it makes prints these three lines on the JVM's stderr (its NOP fallback: the SDK then
# logs nothing, which is what the job wants anyway).
SHADED_SLF4J_LINES = frozenset((
    b'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n',
    b"SLF4J: Defaulting to no-operation (NOP) logger implementation\n",
    b"SLF4J: See http://www.slf4j.org/codes.html#StaticLoggerBinder for further details.\n",
))


class StderrFilter:
    """Lines of the JVM's stderr minus its incubator warning when that is the first line, minus
    the transformWithState worker's lines (with the blank line after each) and the AWS SDK's
    shaded SLF4J notice; the rest as it comes, line by line."""

    def __init__(self):
        self.first, self.pending, self.skip_blank = True, b"", False

    def feed(self, chunk: bytes) -> bytes:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        return b"".join(self._keep(line + b"\n") for line in lines)

    def close(self) -> bytes:
        rest, self.pending = self.pending, b""
        return self._keep(rest) if rest else b""

    def _keep(self, line: bytes) -> bytes:
        first, self.first = self.first, False
        if first and line == INCUBATOR_WARNING:
            return b""
        if line in SHADED_SLF4J_LINES:
            return b""
        if line.startswith(TWS_WORKER_LINES):
            self.skip_blank = True
            return b""
        if self.skip_blank and line.strip() == b"":
            self.skip_blank = False
            return b""
        self.skip_blank = False
        return line


def copy(src: int, dst: int) -> None:
    """Copy file descriptor ``src`` to ``dst`` through ``StderrFilter`` until ``src`` closes."""
    f = StderrFilter()
    while True:
        chunk = os.read(src, 65536)
        if not chunk:
            break
        out = f.feed(chunk)
        if out:
            os.write(dst, out)
    out = f.close()
    if out:
        os.write(dst, out)


def main() -> int:
    """Copy stdin to stderr through ``StderrFilter`` until stdin closes."""
    # Ctrl-C or a TERM to the whole process group: the JVM's last lines still come, then EOF.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    copy(0, 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
