"""A real PostgreSQL server (Debian's binaries) run in a folder of ours, for the CDC chain.

`ivmstream postgres start|stop|status` and the test suite both use this module. The server
listens on 127.0.0.1 only and asks every connection (replication included, its unix socket
too, in a folder only the server's user may enter) for the superuser's password, which initdb
sets to a random one kept in ``home/password`` (mode 0600); it runs with ``wal_level=logical``
so that Debezium's pgoutput slot can stream from it. Everything it writes (cluster, log, pid)
lives under ``home``.

PostgreSQL refuses to run as root. When we are root, every server command runs as the OS user
``postgres`` (``runuser``), which then owns ``home``; that user must be able to reach it, so
``home`` must not sit below a folder closed to others (pytest's ``/tmp/pytest-of-root`` is,
the tests therefore use a folder of their own under /tmp).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql as pgsql

from core.config import env
from core.errors import IvmError
from devstack.process import LOOPBACK, cmdline, reap
from devstack.server import DatabaseServer

SERVER_USER = "postgres"  # the OS user that runs the server when we are root
DB_USER = "postgres"      # the superuser initdb creates (Debezium connects as it)


class PostgresError(IvmError):
    code = "IVM510"


def pg_bindir() -> Path:
    """The newest installed ``/usr/lib/postgresql/<v>/bin`` (or $IVMSTREAM_PG_BINDIR)."""
    explicit = env("pg_bindir")
    if explicit:
        return Path(explicit)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if not found:
        on_path = shutil.which("initdb")
        if on_path:
            return Path(on_path).parent
        raise PostgresError("PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb); "
                            "run `make setup` (installs Debian's postgresql package)")
    return Path(found[-1]).parent


@dataclass
class EmbeddedPostgres(DatabaseServer):
    """One PostgreSQL cluster on loopback; ``home`` holds the cluster, its log and pid."""

    home: Path
    port: int = 5432
    # Extra server settings (postgresql.conf names). The tests turn fsync off for speed.
    settings: dict = field(default_factory=dict)

    title = "PostgreSQL"
    kind = "PostgreSQL server"
    stem = "postgres"
    error = PostgresError
    poll_s = 0.1
    stop_signal = signal.SIGINT   # "fast" shutdown: roll back sessions, checkpoint, exit
    kill_signal = signal.SIGQUIT  # immediate shutdown; crash recovery at next start

    # ---- paths ------------------------------------------------------------------------
    @property
    def socket_dir(self) -> Path:
        return self.home / "socket"

    def dsn(self, database: str = "postgres") -> str:
        return (f"host={LOOPBACK} port={self.port} user={DB_USER} password={self.password()} dbname={database} "
                "connect_timeout=5")

    def _write_hba(self) -> None:
        """Loopback only, every connection with the password (SCRAM)."""
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(
            "# written by ivmstream: loopback only, password (SCRAM) for every connection\n"
            "local   all          all                 scram-sha-256\n"
            f"host    all          all   {LOOPBACK}/32  scram-sha-256\n"
            f"host    replication  all   {LOOPBACK}/32  scram-sha-256\n"
        )
        self._own(hba)

    # ---- running commands as the server's user ----------------------------------------
    def _as_server(self) -> list[str]:
        return ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []

    def _run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self._as_server(), *cmd], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def _own(self, path: Path) -> None:
        if os.geteuid() != 0:
            return
        pw = pwd.getpwnam(SERVER_USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)

    # ---- pid --------------------------------------------------------------------------
    def _postmaster_pid(self) -> int | None:
        """The pid the server itself recorded (first line of postmaster.pid)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0].strip())
        except (OSError, ValueError, IndexError):
            return None

    def recorded_pid(self) -> int | None:
        """Ours in postgres.pid, else the one the server recorded in postmaster.pid."""
        pid = super().recorded_pid()
        return pid if pid is not None else self._postmaster_pid()

    def is_ours(self, pid: int) -> bool:
        """True if ``pid`` is a postgres postmaster serving our data folder."""
        args = cmdline(pid)
        if not args or Path(args[0]).name not in ("postgres", "postmaster"):
            return False
        if "-D" in args:
            i = args.index("-D")
            return i + 1 < len(args) and Path(args[i + 1]).absolute() == self.data_dir
        # pg_ctl passes -D; without it only postmaster.pid can vouch for the process.
        return self._postmaster_pid() == pid

    def describe(self) -> str:
        return f"a postgres server of {self.data_dir}"

    # ---- life cycle -------------------------------------------------------------------
    def _initdb(self) -> None:
        self.data_dir.mkdir(mode=0o700)
        self._own(self.data_dir)
        pw = self.new_password()
        pwfile = self.home / ".initdb-password"  # the server's user reads it once, then it goes
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pw + "\n")
        self._own(pwfile)
        try:
            r = self._run(str(pg_bindir() / "initdb"), "-D", str(self.data_dir), "-U", DB_USER,
                          f"--pwfile={pwfile}", "-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync",
                          "--no-instructions")
        finally:
            pwfile.unlink(missing_ok=True)
        if r.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise PostgresError(f"initdb in {self.data_dir} failed: {(r.stderr or r.stdout).strip()}")
        self._write_hba()
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a") as f:
            f.write("\ninclude_if_exists = 'ivmstream.conf'\n")

    def _write_settings(self) -> None:
        props = {
            "listen_addresses": f"'{LOOPBACK}'",
            "port": str(self.port),
            # The unix socket goes in a folder of ours that only the server's user may enter
            # (Debian's default /var/run/postgresql may not exist and belongs to the system cluster).
            "unix_socket_directories": f"'{self.socket_dir}'",
            "unix_socket_permissions": "0700",
            "password_encryption": "'scram-sha-256'",
            "wal_level": "logical",
            # Each Debezium connector holds one slot and one WAL sender.
            "max_replication_slots": "10",
            "max_wal_senders": "10",
            "max_connections": "50",
            "shared_buffers": "32MB",
            "logging_collector": "off",
            "log_min_messages": "warning",
            "timezone": "'UTC'",
        }
        props.update({k: str(v) for k, v in self.settings.items()})
        p = self.data_dir / "ivmstream.conf"
        p.write_text("# written by ivmstream at each start\n" + "".join(f"{k} = {v}\n" for k, v in props.items()))
        self._own(p)

    def prepare(self) -> None:
        self._own(self.home)

    def launch(self, timeout_s: float) -> int:
        """Create the cluster on first use and start it with pg_ctl (which waits until it runs)."""
        if os.geteuid() == 0 and self._run("test", "-w", str(self.home)).returncode != 0:
            raise PostgresError(f"the OS user {SERVER_USER!r} cannot write to {self.home} (a parent "
                                "folder is closed to it); choose another --dir")
        migrate = False
        if not (self.data_dir / "PG_VERSION").exists():
            if self.data_dir.exists():
                shutil.rmtree(self.data_dir)  # a half-made cluster from an interrupted initdb
            self._initdb()
        elif not self.password_file.exists():  # a cluster made by a release that trusted every local user
            migrate = True
            self.new_password()
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self.socket_dir.chmod(0o700)
        self._own(self.socket_dir)
        self._write_settings()
        # A stale postmaster.pid (after a crash or kill -9) is ignored by the server when its
        # pid is not running; nothing to clean.
        if not self.log_file.exists():
            self.log_file.touch()
        self._own(self.log_file)
        self._wait_stale_gone()
        for attempt in range(5):
            log_size = self.log_file.stat().st_size
            r = self._run(str(pg_bindir() / "pg_ctl"), "start", "-D", str(self.data_dir),
                          "-l", str(self.log_file), "-s", "-w", "-t", str(int(timeout_s)),
                          timeout=timeout_s + 10)
            if r.returncode == 0:
                break
            # After a killed server, its last backends may hold the shared memory (or the old
            # postmaster linger as a zombie) for a moment: the new one refuses; try again.
            with self.log_file.open(errors="replace") as f:
                f.seek(log_size)
                fresh = f.read()
            if "already exists" not in fresh and "shared memory" not in fresh:
                break
            time.sleep(1.0)
        pid = self._postmaster_pid()
        if r.returncode != 0 or pid is None:
            said = (r.stderr or r.stdout).strip().splitlines()
            raise self.failure(f"PostgreSQL did not start on port {self.port} ({said[0] if said else 'pg_ctl failed'})")
        if migrate:  # the old hba still trusts: set the password, then require it
            self.wait_ready(timeout_s, pid)
            self.execute(pgsql.SQL("ALTER ROLE {} PASSWORD {}").format(pgsql.Identifier(DB_USER),
                                                                        pgsql.Literal(self.password())))
            self._write_hba()
            self._run(str(pg_bindir() / "pg_ctl"), "reload", "-D", str(self.data_dir), "-s")
        return pid

    def _wait_stale_gone(self, timeout_s: float = 10.0) -> None:
        """A postmaster that was killed leaves postmaster.pid naming it; wait (briefly) until
        that process has left the process table, zombie included, so the new server does
        not take it for a running one."""
        stale = self._postmaster_pid()
        deadline = time.monotonic() + timeout_s
        while stale and os.path.exists(f"/proc/{stale}") and time.monotonic() < deadline:
            args = cmdline(stale)
            if args and Path(args[0]).name not in ("postgres", "postmaster"):
                return  # the pid has been reused by something else: the server ignores it
            reap(stale)
            time.sleep(0.1)

    def why_not_ready(self) -> str | None:
        try:
            with psycopg.connect(self.dsn(), autocommit=True) as c:
                c.execute("select 1")
            return None
        except psycopg.Error as e:
            return str(e).strip()

    # ---- SQL helpers ------------------------------------------------------------------
    def execute(self, sql: str, params=None, database: str = "postgres") -> None:
        """Run one or more statements (autocommit)."""
        with psycopg.connect(self.dsn(database), autocommit=True) as c:
            c.execute(sql, params)

    def query(self, sql: str, params=None, database: str = "postgres") -> list[tuple]:
        """Rows of one query (autocommit)."""
        with psycopg.connect(self.dsn(database), autocommit=True) as c:
            return c.execute(sql, params).fetchall()

    def create_database(self, name: str) -> bool:
        """Create ``name`` unless it exists; True if created."""
        with psycopg.connect(self.dsn(), autocommit=True) as c:
            if c.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
                return False
            c.execute(pgsql.SQL("create database {}").format(pgsql.Identifier(name)))
        return True

    def server_version(self) -> str:
        return self.query("show server_version")[0][0]
