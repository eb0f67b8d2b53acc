"""The driver JVM's stderr reaches ours unchanged except for its incubator-module warning and
the statestore operators' driver-side Python worker lines.

``spark_session._start_jvm_without_incubator_line`` hands a process started inside it a pipe for
stderr; here the "JVM" is a small Python child that writes what a JVM would (no Spark).
"""

from __future__ import annotations

import subprocess
import sys
import time

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
