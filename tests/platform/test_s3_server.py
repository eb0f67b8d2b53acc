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


@pytest.mark.kafka
@pytest.mark.spark
def test_the_readme_s3_steps_with_no_keys_and_a_wrong_pair_in_one_line(kafka_broker, tmp_path, monkeypatch):
    """Issue 42, blocker 1, as the README says it: `ivmstream s3 start` with no keys exported,
    a job whose [s3] gives only the endpoint (every key may be left out) runs on it, and the
    README's delta-rs reader of that lake (its options from the job's config) reads it; keys that
    are not the server's end in one line that says where they came from and what to export."""
    import os
    import textwrap

    from tests.platform.test_readme import blocks, run_block

    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer
    from core.config import dump_toml
    from streaming_app.settings import parse_config

    port, home = free_port(), tmp_path / "s3"
    no_keys = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    flags = ("--port", str(port), "--dir", str(home))
    r = subprocess.run([sys.executable, "-m", "streaming_app", "s3", "start", *flags], capture_output=True,
                       text=True, timeout=120, env=no_keys)
    assert r.returncode == 0, r.stderr
    try:
        data = {"job": {"name": "nokeys", "lake_root": f"s3a://lake/nokeys-{tmp_path.name}",
                        "checkpoint_root": str(tmp_path / "ckpt")},
                "kafka": {"bootstrap_servers": kafka_broker.bootstrap},
                "spark": {"master": "local[1]", "ui": False},
                "s3": {"endpoint": f"http://127.0.0.1:{port}"},
                "tables": [{"name": "t", "topic": f"nokeys.{tmp_path.name}", "primary_key": "id",
                            "columns": {"id": "long", "v": "string"}}]}
        cfg = parse_config(data)
        path = tmp_path / "job.toml"
        path.write_text(dump_toml(data))
        create_topics(kafka_broker.bootstrap, cfg.topics)
        prod = CdcProducer(kafka_broker.bootstrap)
        for i in range(3):
            prod.send(cfg.table("t"), "c", None, {"id": i, "v": f"row {i}"})
        prod.close()
        run = [sys.executable, "-m", "streaming_app", "run", "--config", str(path), "--available-now", "--no-ui"]
        r = subprocess.run(run, capture_output=True, text=True, timeout=400, env=no_keys)
        assert r.returncode == 0 and "batch     0:" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
        assert (home / "data" / "lake" / f"nokeys-{tmp_path.name}" / "mirrors" / "t" / "_delta_log").is_dir()
        (reader,) = blocks("## A lake on an object store (S3)", "**One job per lake")
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            monkeypatch.delenv(k)
        monkeypatch.chdir(tmp_path)  # the block reads job.toml
        ns = run_block(textwrap.dedent(reader) + "print(len(batches), int(batches.records_in.sum()))")
        assert ns.strip() == "1 3", ns

        wrong = {**no_keys, "AWS_ACCESS_KEY_ID": "someone", "AWS_SECRET_ACCESS_KEY": "not-the-servers-secret"}
        r = subprocess.run(run, capture_output=True, text=True, timeout=400, env=wrong)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout[-3000:] + r.stderr[-3000:]
        assert "HTTP 403" in r.stderr and "keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in r.stderr, r.stderr
        assert "not-the-servers-secret" not in r.stdout + r.stderr
    finally:
        subprocess.run([sys.executable, "-m", "streaming_app", "s3", "stop", *flags], capture_output=True,
                       timeout=120, env=no_keys)
