"""Issue 26, item 5: the embedded PostgreSQL asks every connection for a password (a random
one, kept in a 0600 file), and its unix socket sits in a folder only the server's user may
enter. A cluster made by an older release (trust, no password file) gets one at its next start."""

from __future__ import annotations

import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from devstack.postgres import DB_USER, EmbeddedPostgres
from devstack.process import LOOPBACK, free_port

pytestmark = pytest.mark.postgres


def _connect(pg, password: str | None):
    import psycopg

    pw = f" password={password}" if password is not None else ""
    with psycopg.connect(f"host={LOOPBACK} port={pg.port} user={DB_USER} dbname=postgres connect_timeout=5{pw}",
                         autocommit=True) as c:
        return c.execute("select current_user").fetchone()[0]


def test_password_required_and_kept_private(postgres):
    import psycopg

    pg = postgres
    assert stat.S_IMODE(pg.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(pg.socket_dir.stat().st_mode) == 0o700
    assert "trust" not in (pg.data_dir / "pg_hba.conf").read_text().split("#", 1)[1].split("\n", 1)[1]
    assert len(pg.password()) >= 24
    assert _connect(pg, pg.password()) == DB_USER
    for wrong in (None, "nope"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            _connect(pg, wrong)


def test_a_cluster_that_trusted_everyone_gets_a_password():
    import psycopg

    home = Path(tempfile.mkdtemp(prefix="ivmstream-pg-auth-"))
    pg = EmbeddedPostgres(home, port=free_port(), settings={"fsync": "off"})
    try:
        pg.start()
        pg.stop()
        # what an older release left: no password file, every loopback connection trusted
        pg.password_file.unlink()
        (pg.data_dir / "pg_hba.conf").write_text(f"local all all trust\nhost all all {LOOPBACK}/32 trust\n")
        pg.start()
        assert stat.S_IMODE(pg.password_file.stat().st_mode) == 0o600
        assert _connect(pg, pg.password()) == DB_USER
        with pytest.raises(psycopg.OperationalError, match="password"):
            _connect(pg, "nope")
    finally:
        pg.stop()
        shutil.rmtree(home, ignore_errors=True)
