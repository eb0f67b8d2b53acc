"""Run the job as its own process (``ivmstream run --available-now``), optionally killed by
fault injection (IVMSTREAM_KILL_AT), for the recovery tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def run_job_process(config_path, kill_at: str | None, timeout: float = 400) -> tuple[int, str]:
    """(exit code, output) of one run; with ``kill_at`` the output must show the kill."""
    env = dict(os.environ)
    env.pop("IVMSTREAM_KILL_AT", None)
    if kill_at:
        env["IVMSTREAM_KILL_AT"] = kill_at
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(config_path),
                             "--available-now", "--no-ui"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:  # the JVM child goes with its Python parent; make sure of it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if kill_at:
        assert f"fault injection: SIGKILL at {kill_at}" in out, out[-3000:]
    return proc.returncode, out
