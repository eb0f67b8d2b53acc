"""A real MariaDB server of our own (Debian's binaries), for the MySQL/MariaDB CDC chain.

`ivmstream mariadb start|stop|status` and the test suite both use this module. The server
listens on 127.0.0.1 only and writes the binary log Debezium's MySQL connector reads:
``binlog_format=ROW`` and ``binlog_row_image=FULL`` (every update and delete carries the whole
old row), a fixed ``server_id``, UTC as its time zone. Everything it writes (data, binlog,
socket, log, pid) lives under ``home``; no system service is involved.

Every connection needs ``root``'s password: at the first start the server's anonymous accounts
go and every ``root`` account (socket, 127.0.0.1, ::1) gets a random password, kept in
``home/password`` (mode 0600; ``home`` itself, where the socket is, is closed to other users).
Debezium connects as that root (it holds the replication privileges the connector needs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from core.errors import IvmError
from devstack.process import LOOPBACK, cmdline
from devstack.server import DatabaseServer

SERVER_ID = 223306  # the server's id in the replication topology; connectors take others
DB_USER = "root"


class MariaDbError(IvmError):
    code = "IVM511"


def _binary(name: str, *where: str) -> str:
    for path in where:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise MariaDbError(f"MariaDB server binaries not found ({name}); run `make setup` (installs Debian's "
                       "mariadb-server-core package)")


@dataclass
class EmbeddedMariaDb(DatabaseServer):
    """One MariaDB server on loopback; ``home`` holds its data, binlog, socket, log and pid."""

    home: Path
    port: int = 3306
    # Extra server options (mariadbd names without the dashes).
    settings: dict = field(default_factory=dict)

    title = "MariaDB"
    kind = "MariaDB server"
    stem = "mariadb"
    error = MariaDbError
    poll_s = 0.1

    @property
    def socket(self) -> Path:
        return self.home / "mariadb.sock"

    # ---- pid --------------------------------------------------------------------------
    def is_ours(self, pid: int) -> bool:
        """A mariadbd serving our data folder (not a reused pid)."""
        args = cmdline(pid)
        return bool(args) and Path(args[0]).name in ("mariadbd", "mysqld") and \
            f"--datadir={self.data_dir}" in args

    def describe(self) -> str:
        return f"a mariadbd with --datadir={self.data_dir}"

    # ---- life cycle -------------------------------------------------------------------
    def _user(self) -> list[str]:
        # mariadbd refuses to run as root unless told to; it then keeps root (this server is ours)
        return ["--user=root"] if os.geteuid() == 0 else []

    def _install(self) -> None:
        r = subprocess.run([_binary("mariadb-install-db", "/usr/bin/mariadb-install-db"), "--no-defaults",
                            f"--datadir={self.data_dir}", *self._user(), "--auth-root-authentication-method=normal",
                            "--skip-test-db"], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise MariaDbError(f"mariadb-install-db in {self.data_dir} failed: {(r.stderr or r.stdout).strip()[-500:]}")
        (self.data_dir / ".ivmstream-installed").touch()

    def _args(self) -> list[str]:
        opts = {
            "datadir": str(self.data_dir),
            "bind-address": LOOPBACK,
            "port": str(self.port),
            "socket": str(self.socket),
            "pid-file": str(self.home / "mariadbd.pid"),
            "log-error": str(self.log_file),
            # The binary log Debezium reads: whole rows, before and after every change.
            "server-id": str(SERVER_ID),
            "log-bin": "mariadb-bin",
            "binlog-format": "ROW",
            "binlog-row-image": "FULL",
            "default-time-zone": "+00:00",
            "skip-name-resolve": None,
            "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_general_ci",
            "innodb-buffer-pool-size": "32M",
            "max-connections": "50",
        }
        opts.update({k: (None if v is None else str(v)) for k, v in self.settings.items()})
        return ["--no-defaults", *self._user()] + [f"--{k}" if v is None else f"--{k}={v}" for k, v in opts.items()]

    def prepare(self) -> None:
        self.home.chmod(0o700)  # the socket, the password and the data: this user's only

    def launch(self, timeout_s: float) -> int:
        if not (self.data_dir / ".ivmstream-installed").exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)  # a half-made folder from an interrupted install
            self._install()
        return self.spawn([_binary("mariadbd", "/usr/sbin/mariadbd"), *self._args()])

    def start(self, timeout_s: float | None = None) -> "EmbeddedMariaDb":
        """Create the data folder on first use, start the server (or find it running), wait until
        ready; root gets its password at the first start (or from a release that left it without)."""
        super().start(timeout_s)
        if not self.password_file.exists():
            self._set_password()
        return self

    def _set_password(self) -> None:
        """Drop the anonymous accounts and give every loopback root account a new random password (written
        to ``password_file`` first, so that a crash in between leaves the password that was set)."""
        pw = self.new_password()
        with self._connect(password="") as c, c.cursor() as cur:
            cur.execute("SELECT User, Host FROM mysql.user WHERE is_role = 'N'")
            for user, host in cur.fetchall():
                if user == DB_USER and host in ("localhost", LOOPBACK, "::1"):
                    cur.execute("ALTER USER 'root'@%s IDENTIFIED BY %s", (host, pw))
                elif user in ("", DB_USER):  # anonymous; root@<host name>, which skip-name-resolve never matches
                    cur.execute("DROP USER IF EXISTS %s@%s", (user, host))
            cur.execute("FLUSH PRIVILEGES")

    def connect(self, database: str | None = None, timeout: float = 5):
        """A PyMySQL connection as root over our socket (autocommit)."""
        return self._connect(database, timeout)

    def _connect(self, database: str | None = None, timeout: float = 5, password: str | None = None):
        if password is None:  # before the first start has set it: the empty one install-db left
            password = self.password() if self.password_file.exists() else ""
        return pymysql.connect(unix_socket=str(self.socket), user=DB_USER, password=password, database=database,
                               autocommit=True, connect_timeout=timeout, charset="utf8mb4")

    def why_not_ready(self) -> str | None:
        try:
            with self._connect() as c, c.cursor() as cur:
                cur.execute("select 1")
            return None
        except pymysql.Error as e:
            return str(e)

    # ---- SQL helpers ------------------------------------------------------------------
    def execute(self, sql: str, params=None, database: str | None = None) -> None:
        """Run statements (autocommit); several separated by ';' when ``params`` is None."""
        with self._connect(database) as c, c.cursor() as cur:
            if params is None:
                for stmt in _split(sql):
                    cur.execute(stmt)
            else:
                cur.execute(sql, params)

    def query(self, sql: str, params=None, database: str | None = None) -> list[tuple]:
        with self._connect(database) as c, c.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def wait_binlog_clients(self, n: int, timeout_s: float = 180.0) -> None:
        """Until ``n`` replication clients read the binlog. Debezium's MySQL connector connects
        its binlog reader once its snapshot is done: from then on a change reaches it from the
        binlog, and no snapshot reads a table while a DDL changes it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                          "WHERE COMMAND LIKE 'Binlog Dump%%'")[0][0] >= n:
                return
            time.sleep(0.25)
        raise MariaDbError(f"fewer than {n} binlog readers after {timeout_s:.0f}s (is the connector running?)")

    def create_database(self, name: str) -> None:
        self.execute(f"create database if not exists `{name}`")

    def server_version(self) -> str:
        return self.query("select version()")[0][0]


def _split(sql: str) -> list[str]:
    """Statements of a script (no ';' inside our literals)."""
    return [s.strip() for s in sql.split(";") if s.strip()]
