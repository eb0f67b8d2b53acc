"""The local S3-API server: `ivmstream s3 start|status|stop`, its pid check, and a Delta table in it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from devstack.process import free_port

pytestmark = [pytest.mark.s3]


def _cli(*args, env=None, timeout=120):
    import os

    return subprocess.run([sys.executable, "-m", "streaming_app", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_s3_start_status_stop_with_keys_from_the_environment(tmp_path):
    port, home = free_port(), tmp_path / "s3"
    keys = {"AWS_ACCESS_KEY_ID": "cli-key", "AWS_SECRET_ACCESS_KEY": "cli-secret-never-printed"}
    flags = ("--port", str(port), "--dir", str(home), "--bucket", "cli-bucket")
    r = _cli("s3", "start", *flags, env=keys)
    assert r.returncode == 0 and f"127.0.0.1:{port}" in r.stdout and "s3a://cli-bucket/" in r.stdout, r.stderr
    try:
        st = _cli("s3", "status", *flags)
        assert st.returncode == 0 and json.loads(st.stdout)["running"] is True
        assert _cli("s3", "start", *flags, env=keys).returncode == 0  # idempotent
        props = home / "s3proxy.properties"
        assert props.stat().st_mode & 0o077 == 0  # it holds the secret
        assert (home / "data" / "cli-bucket").is_dir()
        # the server answers requests signed with the environment's keys, and only those
        import deltalake
        import pyarrow as pa

        opts = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                "AWS_S3_ADDRESSING_STYLE": "path", "AWS_ACCESS_KEY_ID": "cli-key",
                "AWS_SECRET_ACCESS_KEY": "cli-secret-never-printed"}
        deltalake.write_deltalake("s3://cli-bucket/t", pa.table({"a": [1, 2]}), storage_options=opts)
        assert deltalake.DeltaTable("s3://cli-bucket/t", storage_options=opts).to_pyarrow_table()["a"].to_pylist() == [1, 2]
        with pytest.raises(Exception):
            deltalake.DeltaTable("s3://cli-bucket/t", storage_options={**opts, "AWS_SECRET_ACCESS_KEY": "wrong"})
        for out in (r.stdout + r.stderr, st.stdout, (home / "s3proxy.log").read_text()):
            assert "cli-secret-never-printed" not in out
        assert len((home / "s3proxy.log").read_text().splitlines()) < 50  # WARN only, not S3Proxy's DEBUG flood
    finally:
        stop = _cli("s3", "stop", *flags)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    st = _cli("s3", "status", *flags)
    assert st.returncode == 1 and json.loads(st.stdout)["running"] is False


def test_a_pid_file_naming_another_process_is_never_signalled(tmp_path):
    home = tmp_path / "s3"
    home.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (home / "s3proxy.pid").write_text(str(other.pid))
        r = _cli("s3", "stop", "--port", str(free_port()), "--dir", str(home))
        assert r.returncode == 0 and "not this S3 server" in r.stdout and "no S3 server was running" in r.stdout
        assert other.poll() is None and not (home / "s3proxy.pid").exists()
    finally:
        other.kill()
        other.wait()


def test_port_taken_is_a_clear_error(s3_server, tmp_path):
    r = _cli("s3", "start", "--port", str(s3_server.port), "--dir", str(tmp_path / "s3b"))
    assert r.returncode == 2 and "already taken" in r.stderr and "Traceback" not in r.stderr
