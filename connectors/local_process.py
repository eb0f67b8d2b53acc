"""The services we run ourselves (broker, PostgreSQL, Kafka Connect): process and port checks.

Each service module starts one process on loopback, records its pid, and before signalling
that pid checks that it is still alive and still ours (its command line); these are the
checks they share.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


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


def reap(pid: int) -> None:
    """Collect an exited child of ours so that it stops answering as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) + "\n"
    except OSError:
        return ""
