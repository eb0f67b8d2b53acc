"""The dev stack's server base class, run on real processes (a Python HTTP server and scripts
that fail in the ways a server does): start, find running, stop, stale pid files, and the
one-line errors of a server that exits during start-up or never answers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.errors import IvmError
from core.process import alive
from devstack.process import cmdline, free_port
from devstack.server import LocalServer

MARK = "ivmstream-test-server"


class ToyError(IvmError):
    code = "IVM599"


@dataclass
class ToyServer(LocalServer):
    """``script`` runs as ``python -c script MARK <home>``; the default serves HTTP on ``port``."""

    home: Path
    port: int
    script: str = ("import http.server, sys; http.server.ThreadingHTTPServer(('127.0.0.1', {port}), "
                   "http.server.SimpleHTTPRequestHandler).serve_forever()")

    title = "Toy server"
    kind = "toy server"
    stem = "toy"
    error = ToyError
    poll_s = 0.05

    def launch(self, timeout_s: float) -> int:
        return self.spawn([sys.executable, "-c", self.script.format(port=self.port), MARK, str(self.home)])

    def is_ours(self, pid: int) -> bool:
        args = cmdline(pid)
        return MARK in args and str(self.home) in args

    def describe(self) -> str:
        return f"a python with {MARK} {self.home}"

    def why_not_ready(self) -> str | None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=1).close()
            return None
        except urllib.error.HTTPError:
            return None
        except OSError as e:
            return f"no HTTP answer: {e}"


def _one_line(e: pytest.ExceptionInfo, *parts: str) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, msg
    return msg


def test_start_finds_running_status_stop(tmp_path):
    srv = ToyServer(tmp_path / "toy", port=free_port())
    assert srv.status()["running"] is False and srv.stop() is False
    srv.start(timeout_s=30)
    pid = srv.pid()
    try:
        assert pid is not None and srv.pid_file.read_text() == str(pid)
        st = srv.status()
        assert st == {"running": True, "pid": pid, "host": "127.0.0.1", "port": srv.port,
                      "home": str(srv.home), "ready": True}
        assert srv.start().pid() == pid  # found running: not a second process
        busy = ToyServer(tmp_path / "other", port=srv.port)
        with pytest.raises(ToyError) as e:
            busy.start(timeout_s=5)
        _one_line(e, f"port {srv.port} is already taken")
    finally:
        stopped = srv.stop(timeout_s=10)
    assert stopped is True and not alive(pid) and not srv.pid_file.exists()
    assert srv.status()["running"] is False


def test_a_pid_file_naming_another_process_is_left_alone(tmp_path):
    srv = ToyServer(tmp_path / "toy", port=free_port())
    srv.home.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        srv.pid_file.write_text(str(other.pid))
        assert srv.pid() is None and srv.stop() is False and other.poll() is None
        assert not srv.pid_file.exists()
        srv.pid_file.write_text(str(other.pid))
        note = srv.check_pid_file()
        assert f"pid {other.pid}, which is not this toy server" in note and "left it alone" in note
    finally:
        other.kill()
        other.wait()
    srv.pid_file.write_text(str(other.pid))
    assert "not running" in srv.check_pid_file() and not srv.pid_file.exists()
    srv.pid_file.write_text("garbage")
    assert "holds no pid" in srv.check_pid_file()


def test_exit_during_start_up_is_one_line_naming_the_log(tmp_path):
    srv = ToyServer(tmp_path / "toy", port=free_port(),
                    script="import sys; print('starting'); print('FATAL: bad option --nope', flush=True); sys.exit(3)")
    with pytest.raises(ToyError) as e:
        srv.start(timeout_s=30)
    _one_line(e, "Toy server (pid", "exited during start-up: FATAL: bad option --nope", f"see {srv.out_file}")


def test_never_ready_times_out_in_one_line_then_stop_kills_past_sigterm(tmp_path):
    script = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "open({home!r} + '/toy.log', 'w').write('listening soon\\n'); time.sleep(120)")
    srv = ToyServer(tmp_path / "toy", port=free_port(), script=script.replace("{home!r}", repr(str(tmp_path / "toy"))))
    with pytest.raises(ToyError) as e:
        srv.start(timeout_s=1.5)
    _one_line(e, f"Toy server on port {srv.port} not ready after 2s (no HTTP answer", f"see {srv.log_file}")
    pid = srv.pid()
    assert pid is not None  # recorded: stop can end it
    t0 = time.monotonic()
    assert srv.stop(timeout_s=0.5) is True  # SIGTERM is ignored: SIGKILL after the timeout
    assert not alive(pid) and time.monotonic() - t0 < 10 and not srv.pid_file.exists()


def test_stop_sends_the_server_own_signals(tmp_path):
    @dataclass
    class GentleServer(ToyServer):
        stop_signal = signal.SIGINT

    script = ("import signal, sys, http.server; "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "signal.signal(signal.SIGINT, lambda *a: sys.exit(0)); "
              "http.server.ThreadingHTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler)"
              ".serve_forever()")
    srv = GentleServer(tmp_path / "gentle", port=free_port(), script=script)
    srv.start(timeout_s=30)
    pid = srv.pid()
    t0 = time.monotonic()
    assert srv.stop(timeout_s=20) is True
    assert not alive(pid) and time.monotonic() - t0 < 5  # SIGINT ended it, no wait for the kill
