"""The embedded MariaDB asks every connection for root's password (a random one, kept in a 0600
file), has no anonymous account, and keeps its socket in a folder only its user may enter: the
same as the embedded PostgreSQL (issue 26, item 5)."""

from __future__ import annotations

import stat

import pytest

from devstack.mariadb import DB_USER
from devstack.process import LOOPBACK

pytestmark = pytest.mark.mariadb


def _connect(db, password: str, **where):
    import pymysql

    with pymysql.connect(user=DB_USER, password=password, connect_timeout=5, **where) as c, c.cursor() as cur:
        cur.execute("select current_user()")
        return cur.fetchone()[0]


def test_password_required_and_kept_private(mariadb):
    import pymysql

    db = mariadb
    assert stat.S_IMODE(db.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.home.stat().st_mode) == 0o700
    assert len(db.password()) >= 24
    for where in ({"host": LOOPBACK, "port": db.port}, {"unix_socket": str(db.socket)}):
        assert _connect(db, db.password(), **where).startswith(f"{DB_USER}@")
        for wrong in ("", "nope"):
            with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
                _connect(db, wrong, **where)
    assert db.query("SELECT COUNT(*) FROM mysql.user WHERE User = ''")[0][0] == 0
