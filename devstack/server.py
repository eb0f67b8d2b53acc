"""One server of our own on loopback: the life cycle every dev-stack server shares.

A ``LocalServer`` lives in one folder, ``home``: its pid file ``<stem>.pid``, its log
``<stem>.log`` and what the process itself prints, ``<stem>.out``. ``start`` finds it running or
launches it in a session of its own (it outlives the command that started it), records the pid
and waits until it answers, or ends with a one-line error naming the log; ``stop`` signals the
recorded pid only while it is this server (``is_ours``: after a reboot a recorded pid may belong
to anything), first for a clean shutdown and, past the timeout, to kill it; ``status`` says what
runs where. A server says how it is launched (``launch``), how it is recognised (``is_ours``,
``describe``) and when it serves (``why_not_ready``); ``JvmServer`` adds what the three Java
servers (broker, Kafka Connect, S3Proxy) share, ``DatabaseServer`` the superuser's password
of PostgreSQL and MariaDB.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import ClassVar, TypeVar

from core.errors import IvmError
from core.process import alive
from devstack.process import LOOPBACK, port_open, reap, runs_with, terminate

S = TypeVar("S", bound="LocalServer")


class LocalServer:
    """Base of the dev stack's servers. Subclasses are dataclasses with ``home`` and ``port``
    fields and set the class attributes below."""

    home: Path
    port: int
    title: ClassVar[str]              # how messages name it: "Kafka broker"
    kind: ClassVar[str]               # what a stale pid file is not: "not this broker"
    stem: ClassVar[str]               # its files in home: <stem>.pid, <stem>.log, <stem>.out
    error: ClassVar[type[IvmError]]   # what start raises
    start_timeout_s: ClassVar[float] = 60.0
    stop_timeout_s: ClassVar[float] = 30.0
    poll_s: ClassVar[float] = 0.2
    stop_signal: ClassVar[int] = signal.SIGTERM  # its clean shutdown
    kill_signal: ClassVar[int] = signal.SIGKILL  # past stop's timeout

    def __post_init__(self) -> None:
        self.home = Path(self.home).absolute()

    # ---- files ------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        """What the server stores."""
        return self.home / "data"

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.stem}.pid"

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.stem}.log"

    @property
    def out_file(self) -> Path:
        """The process's own stdout and stderr (a JVM's start-up failure lands here, not in the log)."""
        return self.home / f"{self.stem}.out"

    # ---- what each server says about itself ------------------------------------------
    def launch(self, timeout_s: float) -> int:
        """Prepare what the server needs (config, data folder) and start it; its pid."""
        raise NotImplementedError

    def is_ours(self, pid: int) -> bool:
        """True if the live process ``pid`` is this server (its command line says so)."""
        raise NotImplementedError

    def describe(self) -> str:
        """What ``is_ours`` looks for, for the note on a stale pid file."""
        raise NotImplementedError

    def why_not_ready(self) -> str | None:
        """None once the server serves requests, else what it does not do yet."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Folders the server needs whether it runs already or not (after ``home`` is made)."""

    def address(self) -> dict:
        """Where it serves, for ``status``."""
        return {"host": LOOPBACK, "port": self.port}

    # ---- pid --------------------------------------------------------------------------
    def recorded_pid(self) -> int | None:
        """The pid in the pid file, whatever runs under it now."""
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def pid(self) -> int | None:
        """The recorded pid if it is alive and is this server, else None."""
        pid = self.recorded_pid()
        return pid if pid is not None and alive(pid) and self.is_ours(pid) else None

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
        elif not self.is_ours(pid):
            why = f"names pid {pid}, which is not this {self.kind} (not {self.describe()}); left it alone"
        else:
            return None
        self.pid_file.unlink(missing_ok=True)
        return f"{self.pid_file} {why}: removed the stale pid file"

    # ---- life cycle -------------------------------------------------------------------
    def spawn(self, cmd: list[str], **popen) -> int:
        """Start ``cmd`` detached (its own session, no stdin, output to ``out_file``); its pid."""
        with open(self.out_file, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, **popen)
        return proc.pid

    def start(self: S, timeout_s: float | None = None) -> S:
        """Start the server (or find it running) and return once it serves."""
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        self.home.mkdir(parents=True, exist_ok=True)
        self.prepare()
        running = self.pid()
        if running:
            self.wait_ready(timeout_s, running)
            return self
        if port_open(self.port):
            raise self.error(f"port {self.port} is already taken by another process; choose another with --port")
        pid = self.launch(timeout_s)
        self.pid_file.write_text(str(pid))
        self.wait_ready(timeout_s, pid)
        return self

    def wait_ready(self, timeout_s: float, pid: int) -> None:
        """Until ``why_not_ready`` says None; a one-line error naming the log if the process
        exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        why = None
        while time.monotonic() < deadline:
            if not alive(pid):
                reap(pid)
                raise self.failure(f"{self.title} (pid {pid}) exited during start-up")
            why = self.why_not_ready()
            if why is None:
                return
            time.sleep(self.poll_s)
        said = f" ({why.strip().splitlines()[0]})" if why and why.strip() else ""
        raise self.error(f"{self.title} on port {self.port} not ready after {timeout_s:.0f}s{said}; "
                         f"see {self.log_file}")

    def failure(self, what: str) -> IvmError:
        """The error for a server that did not start: ``what``, the last line it wrote (to its log
        or its output, whichever was written last) and where to read the rest, on one line."""
        written = [p for p in (self.log_file, self.out_file) if p.exists() and p.stat().st_size]
        last = ""
        if written:
            newest = max(written, key=lambda p: p.stat().st_mtime)
            lines = [ln.strip() for ln in newest.read_text(errors="replace").splitlines()[-50:] if ln.strip()]
            last = f": {lines[-1][:300]}" if lines else ""
        logs = " and ".join(str(p) for p in (self.log_file, self.out_file) if p.exists()) or str(self.log_file)
        return self.error(f"{what}{last}; see {logs}")

    def stop(self, timeout_s: float | None = None) -> bool:
        """End the recorded server process; True if one was running. A pid that is not this
        server is never signalled (``check_pid_file`` says why and removes the file)."""
        pid = self.pid()
        if pid is None:
            self.check_pid_file()
            return False
        terminate(pid, self.stop_timeout_s if timeout_s is None else timeout_s, self.poll_s,
                  still_ours=self.is_ours, first=self.stop_signal, last=self.kill_signal)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, **self.address(), "home": str(self.home),
                "ready": bool(pid and port_open(self.port))}


class DatabaseServer(LocalServer):
    """A database server whose superuser has a random password, kept in ``home/password``
    (mode 0600) from the first start on."""

    @property
    def password_file(self) -> Path:
        return self.home / "password"

    def password(self) -> str:
        """The superuser's password, generated at the first start into ``password_file``."""
        try:
            return self.password_file.read_text().strip()
        except OSError:
            raise self.error(f"no password file {self.password_file}: start the server with "
                             f"`ivmstream {self.stem} start` first") from None

    def new_password(self) -> str:
        """A fresh random password in ``password_file``, readable by this user only."""
        pw = secrets.token_urlsafe(24)  # letters, digits, '-', '_': safe in a conninfo string
        self.password_file.unlink(missing_ok=True)
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pw + "\n")
        return pw


class JvmServer(LocalServer):
    """A server that is one JVM: recognised by its main class and its properties file."""

    main_class: ClassVar[str]
    heap: str
    config_file: Path  # a property of each subclass: the file the JVM is started with

    def is_ours(self, pid: int) -> bool:
        return runs_with(pid, self.main_class, self.config_file, ".properties")

    def describe(self) -> str:
        return f"a {self.main_class} JVM with {self.config_file}"

    def java(self, classpath: str, *jvm_options: str, args: tuple[str, ...] = ()) -> list[str]:
        """The command line of this server's JVM."""
        return ["java", f"-Xmx{self.heap}", *jvm_options, "-cp", classpath, self.main_class, *args]

    def write_log4j2(self, root_level: str, loggers: dict[str, str]) -> Path:
        """A log4j2 configuration that writes ``log_file`` at ``root_level`` (and ``loggers``, name:
        level); its path, for ``-Dlog4j2.configurationFile``."""
        p = self.home / "log4j2.properties"
        p.write_text(
            f"rootLogger.level={root_level}\nrootLogger.appenderRef.f.ref=F\n"
            "appender.f.type=File\nappender.f.name=F\n"
            f"appender.f.fileName={self.log_file}\n"
            "appender.f.layout.type=PatternLayout\n"
            "appender.f.layout.pattern=[%d] %p %m (%c)%n\n"
            + "".join(f"logger.l{i}.name={name}\nlogger.l{i}.level={level}\n"
                      for i, (name, level) in enumerate(loggers.items())))
        return p
