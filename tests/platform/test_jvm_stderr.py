"""The driver JVM's stderr reaches ours unchanged except for its incubator-module warning and
the statestore operators' driver-side Python worker lines.

``spark_session._start_jvm_without_incubator_line`` hands a process started inside it a pipe for
stderr; here the "JVM" is a small Python child that writes what a JVM would (no Spark).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from streaming_app.spark_session import _start_jvm_without_incubator_line
from streaming_app.stderr_filter import INCUBATOR_WARNING


def run_child(text: bytes) -> subprocess.Popen:
    code = f"import os, time; os.write(2, {text!r}); time.sleep(0.2); os.write(2, b'later line\\n')"
    return _start_jvm_without_incubator_line(lambda: subprocess.Popen([sys.executable, "-c", code]))


def stderr_of(capfd, proc) -> str:
    proc.wait(timeout=30)
    time.sleep(0.3)  # the copying thread
    return capfd.readouterr().err


def test_the_warning_goes_everything_else_stays(capfd):
    err = stderr_of(capfd, run_child(INCUBATOR_WARNING + b"Exception in thread main: boom\n"))
    assert err == "Exception in thread main: boom\nlater line\n"


def test_a_first_line_that_is_not_the_warning_passes_and_so_does_a_later_warning(capfd):
    err = stderr_of(capfd, run_child(b"Error: Could not create the Java Virtual Machine.\n" + INCUBATOR_WARNING))
    assert err == "Error: Could not create the Java Virtual Machine.\n" + INCUBATOR_WARNING.decode() + "later line\n"


def test_our_own_stderr_is_ours_again_after_the_start(capfd):
    run_child(b"").wait(timeout=30)
    print("after", file=sys.stderr, flush=True)
    time.sleep(0.3)
    assert capfd.readouterr().err.endswith("after\n")


def test_the_statestore_operators_worker_lines_go_with_their_blank_lines(capfd):
    chatter = (b"Starting Streaming TransformWithStateInPandas Python worker.\n\n"
               b"Streaming TransformWithStateInPandas Python worker received parameters for UDF. State server "
               b"port/path: 41701, key schema: StructType([]).\n\n")
    err = stderr_of(capfd, run_child(b"one\n" + chatter + b"\ntwo\n" + chatter))
    assert err == "one\n\ntwo\nlater line\n"  # a blank line of the JVM's own stays


def test_the_aws_sdks_shaded_slf4j_notice_goes(capfd):
    """Issue 42, blocker 6: the three lines the AWS SDK bundle's shaded SLF4J prints (a lake on S3)."""
    from streaming_app.stderr_filter import SHADED_SLF4J_LINES

    notice = (b'SLF4J: Failed to load class "org.slf4j.impl.StaticLoggerBinder".\n'
              b"SLF4J: Defaulting to no-operation (NOP) logger implementation\n"
              b"SLF4J: See http://www.slf4j.org/codes.html#StaticLoggerBinder for further details.\n")
    assert set(notice.splitlines(keepends=True)) == SHADED_SLF4J_LINES
    err = stderr_of(capfd, run_child(b"one\n" + notice + b"SLF4J: another notice\n"))
    assert err == "one\nSLF4J: another notice\nlater line\n"


KILLED_DRIVER = """
import os, signal
from pyspark.sql import SparkSession
from streaming_app.sketches.progress import progress_listener

class Maintainer:
    recent = {}

spark = SparkSession.builder.getOrCreate()
progress_listener(spark, Maintainer())

def each(df, batch_id):
    print("batch", batch_id, flush=True)
    if batch_id == 1:
        os.kill(os.getpid(), signal.SIGKILL)

(spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.foreachBatch(each)
 .trigger(processingTime="1 second").option("checkpointLocation", os.environ["CKPT"]).start().awaitTermination())
"""


@pytest.mark.spark
def test_a_sigkilled_python_driver_under_spark_submit_leaves_no_listener_trace(tmp_path):
    """Issue 42, blocker 6: the driver's Python process (with the job's progress listener) is
    SIGKILLed under spark-submit with the quiet logging `ivmstream submit` passes; the JVM's
    listener bus can no longer reach Python, and says nothing about it."""
    import os

    from core.config import REPO_ROOT
    from streaming_app.cluster import spark_home
    from streaming_app.spark_session import QUIET_LOG4J

    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CKPT": str(tmp_path / "ckpt"),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    r = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--master", "local[1]",
                        "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{QUIET_LOG4J}",
                        str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert "batch 1" in r.stdout, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip() and line != INCUBATOR_WARNING.decode().strip()]
    assert lines == [], r.stderr[-3000:]
