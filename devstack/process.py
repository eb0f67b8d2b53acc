"""The services we run ourselves (broker, Kafka Connect, PostgreSQL, MariaDB, the S3 server, the
standalone cluster): process and port checks, and stopping them.

Each service starts one process on loopback, records its pid, and before signalling that pid
checks that it is still alive and still ours (its command line); these are the checks they
share (devstack.server puts them together for the servers of the dev stack).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from core.process import alive

LOOPBACK = "127.0.0.1"
KILL_WAIT_S = 5.0  # after SIGKILL (or PostgreSQL's SIGQUIT) a process is gone in well under this


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def cmdline(pid: int) -> list[str]:
    """A process's arguments, from /proc on Linux, else from ps; [] if gone or unreadable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    except OSError:
        if Path("/proc/self").exists():
            return []  # gone, or not ours to read
    try:
        r = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return r.stdout.split() if r.returncode == 0 else []


def runs_with(pid: int, main_class: str, config_file: Path, suffix: str) -> bool:
    """True if ``pid`` runs the JVM ``main_class`` with ``config_file`` among its arguments (the
    arguments ending in ``suffix`` compared as resolved paths, relative ones against the
    process's working directory): after a reboot a recorded pid may belong to anything."""
    args = cmdline(pid)
    if not args or main_class not in args:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = os.getcwd()
    want = os.path.realpath(config_file)
    return any(os.path.realpath(os.path.join(cwd, a)) == want for a in args if a.endswith(suffix))


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (a JVM starts its children from any of its threads, so
    /proc/<pid>/task/<pid>/children alone misses them: read each process's parent instead)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def reap(pid: int) -> None:
    """Collect an exited child of ours so that it stops answering as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def terminate(pid: int, timeout_s: float, poll_s: float = 0.2, still_ours: Callable[[int], bool] | None = None,
              first: int = signal.SIGTERM, last: int = signal.SIGKILL) -> None:
    """Send ``first`` (a service's clean shutdown), wait up to ``timeout_s`` for ``pid`` to exit,
    then send ``last`` if it is still alive (and, with ``still_ours``, still the process we
    started) and wait a moment for it to go."""
    os.kill(pid, first)
    _wait_gone(pid, timeout_s, poll_s)
    if alive(pid) and (still_ours is None or still_ours(pid)):
        os.kill(pid, last)
        _wait_gone(pid, KILL_WAIT_S, poll_s)


def _wait_gone(pid: int, timeout_s: float, poll_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        reap(pid)
        time.sleep(poll_s)
    reap(pid)


def tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) + "\n"
    except OSError:
        return ""
