"""Config parsing: valid files load, every mistake names the file, section and key."""

from pathlib import Path

import pytest

from core.errors import ConfigError
from streaming_app.settings import load_config, parse_config

GOOD = """
[job]
name = "t1"
lake_root = "lake"
[kafka]
bootstrap_servers = "127.0.0.1:1"
max_offsets_per_trigger = 5
[[tables]]
name = "items"
topic = "cdc.items"
primary_key = "id"
columns = { id = "long", price = "decimal(10,2)", day = "date" }
"""


def test_loads_and_resolves_paths(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text(GOOD)
    cfg = load_config(f)
    assert cfg.name == "t1"
    assert cfg.lake_root == tmp_path / "lake"
    assert cfg.checkpoint_dir == tmp_path / "checkpoints" / "t1"
    t = cfg.table("items")
    assert t.primary_key == ("id",) and t.column_names == ["id", "price", "day"]
    assert cfg.kafka.max_offsets_per_trigger == 5
    assert cfg.with_overrides(bootstrap_servers="x:1").kafka.bootstrap_servers == "x:1"


@pytest.mark.parametrize("snippet, needle", [
    ('[job]\nnmae = "x"', "unknown key"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="id"\ncolumns={id="uuid"}', "unknown column type"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="nope"\ncolumns={id="long"}', "primary_key"),
    ('[[tables]]\nname="a"\ntopic="t"\ncolumns={id="long"}', "missing key 'primary_key'"),
    ('[kafka]\nmax_offsets_per_trigger = "many"', "must be an integer"),
    ('[job]\nname = "has space"', "letters, digits"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="id"\ncolumns={id="long"}\n'
     '[[tables]]\nname="b"\ntopic="t"\nprimary_key="id"\ncolumns={id="long"}', "share topic"),
])
def test_bad_config_is_a_clear_error(tmp_path, snippet, needle):
    f = tmp_path / "bad.toml"
    f.write_text(snippet)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert needle in str(e.value) and str(f) in str(e.value)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.toml")
    f = tmp_path / "x.toml"
    f.write_text("[job\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f)


def test_cli_bad_config_exits_2_with_one_line(tmp_path, capsys):
    from streaming_app.cli import main

    rc = main(["run", "--config", str(tmp_path / "none.toml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("ivmstream: error: [IVM100]") and "Traceback" not in err


def test_unknown_top_level_section():
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({"jobs": {}})


MINIMAL = {"tables": [{"name": "t", "topic": "t", "primary_key": "k", "columns": {"k": "long"}}]}


def test_spark_ui_listens_on_loopback_unless_the_config_says_otherwise():
    from streaming_app.spark_session import ui_allowed

    cfg = parse_config(MINIMAL)
    assert cfg.spark.ui_host == "127.0.0.1"
    anywhere = parse_config({**MINIMAL, "spark": {"ui_host": "0.0.0.0"}})
    assert anywhere.spark.ui_host == "0.0.0.0"

    def jvm(value):
        return lambda: value

    # a local JVM we launch gets SPARK_LOCAL_IP = ui_host: nothing to check
    assert ui_allowed(cfg.spark, pinned=True, jvm_local_ip=jvm(None)) == (True, None)
    # a running driver JVM (spark-submit): its SPARK_LOCAL_IP decides where the UI would listen
    assert ui_allowed(cfg.spark, pinned=False, jvm_local_ip=jvm("127.0.0.1")) == (True, None)
    on, note = ui_allowed(cfg.spark, pinned=False, jvm_local_ip=jvm(None))
    assert not on and "every interface" in note and "SPARK_LOCAL_IP=127.0.0.1" in note
    on, note = ui_allowed(cfg.spark, pinned=False, jvm_local_ip=jvm("10.1.2.3"))
    assert not on and "10.1.2.3" in note
    # the config opted in: no check
    assert ui_allowed(anywhere.spark, pinned=False, jvm_local_ip=jvm(None)) == (True, None)


def test_broker_stop_signals_only_our_broker(tmp_path):
    import subprocess
    import sys
    import time

    from devstack.kafka_broker import EmbeddedBroker

    b = EmbeddedBroker(tmp_path / "kafka")
    b.home.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        b.pid_file.write_text(str(other.pid))
        assert b.pid() is None  # alive, but not a Kafka JVM with this folder's config
        assert b.stop() is False and other.poll() is None  # left alone
        assert not b.pid_file.exists()
        b.pid_file.write_text(str(other.pid))
        note = b.check_pid_file()
        assert f"pid {other.pid}" in note and "not this broker" in note and not b.pid_file.exists()
    finally:
        other.kill()
        other.wait()
    b.pid_file.write_text(str(other.pid))
    assert "not running" in b.check_pid_file()

    # a process that looks like our broker (Kafka's main class, this folder's config) is stopped
    mimic = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka",
                              str(b.config_file)])
    try:
        from devstack.process import cmdline

        deadline = time.monotonic() + 10  # a loaded machine: the child may not have exec'd yet
        while "kafka.Kafka" not in cmdline(mimic.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        b.pid_file.write_text(str(mimic.pid))
        assert b.pid() == mimic.pid and b.check_pid_file() is None
        elsewhere = EmbeddedBroker(tmp_path / "elsewhere")  # another folder's pid file naming it
        elsewhere.home.mkdir()
        elsewhere.pid_file.write_text(str(mimic.pid))
        assert elsewhere.pid() is None and elsewhere.stop() is False and mimic.poll() is None
        t0 = time.monotonic()
        assert b.stop(timeout_s=10) is True
        assert mimic.wait(timeout=10) is not None and time.monotonic() - t0 < 10
        assert not b.pid_file.exists()
    finally:
        mimic.kill()
        mimic.wait()


def test_broker_retention_is_bounded(tmp_path):
    from devstack.kafka_broker import RETENTION_BYTES, EmbeddedBroker

    b = EmbeddedBroker(tmp_path)
    b._write_config(controller_port=1)
    props = dict(line.split("=", 1) for line in b.config_file.read_text().splitlines())
    assert props["log.retention.hours"] == "168"
    assert int(props["log.retention.bytes"]) == RETENTION_BYTES >= 1 << 30
    assert int(props["log.segment.bytes"]) < RETENTION_BYTES


_UI_PROBE = """
import sys
from devstack.process import free_port
from streaming_app.settings import parse_config
from streaming_app.spark_session import SessionOptions, build_session

cfg = parse_config({"spark": {"master": "local[1]", "ui_port": free_port(), "ui_host": sys.argv[1]},
                    "tables": [{"name": "t", "topic": "t", "primary_key": "k", "columns": {"k": "long"}}]})
spark = build_session(cfg.spark, SessionOptions(ui=True))
port = spark.sparkContext._jsc.sc().ui().get().boundPort()
addrs = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        ip, p = local.split(":")
        if int(p, 16) == port and state == "0A":  # LISTEN
            addrs.append(ip)
print("LISTEN", port, ",".join(addrs))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc")
@pytest.mark.parametrize("host, loopback_only", [("127.0.0.1", True), ("0.0.0.0", False)])
def test_spark_ui_listening_address(host, loopback_only):
    """A real local session: the UI's socket listens on loopback only, unless ui_host opts out."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    r = subprocess.run([sys.executable, "-c", _UI_PROBE, host], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[2], env=env)
    line = next(x for x in r.stdout.splitlines() if x.startswith("LISTEN"))
    addrs = line.split()[2].split(",")
    # /proc/net/tcp6 writes 127.0.0.1 as ::ffff:127.0.0.1 (…FFFF00000100007F) and "any" as zeros
    loopback = all(a in ("0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000")
                   for a in addrs)
    assert addrs and loopback == loopback_only, line


def test_dump_toml_round_trips_keys_that_are_not_bare():
    """Spark conf names hold dots and column names may hold spaces: written bare they would
    become nested tables (or invalid TOML)."""
    import tomllib

    from core.config import dump_toml

    data = {"spark": {"conf": {"spark.sql.streaming.minBatchesToRetain": "100", "plain": 2}},
            "tables": [{"name": "t", "columns": {"my col": "long", "x.y": "int"}}]}
    assert tomllib.loads(dump_toml(data)) == data


def test_lake_and_checkpoint_roots_come_from_flag_then_environment_then_file(tmp_path, monkeypatch):
    """IVMSTREAM_LAKE_ROOT / IVMSTREAM_CHECKPOINT_ROOT are the defaults of --lake-root /
    --checkpoint-root (shown in --help); a flag wins over the variable, both over the file."""
    from streaming_app.cli import _job_config, build_parser

    f = tmp_path / "job.toml"
    f.write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    for var in ("IVMSTREAM_LAKE_ROOT", "IVMSTREAM_CHECKPOINT_ROOT", "IVMSTREAM_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    cfg = _job_config(build_parser().parse_args(["run", "--config", str(f)]))
    assert (cfg.lake_root, cfg.checkpoint_root) == (tmp_path / "lake", tmp_path / "checkpoints")
    monkeypatch.setenv("IVMSTREAM_LAKE_ROOT", "envlake")
    monkeypatch.setenv("IVMSTREAM_CHECKPOINT_ROOT", str(tmp_path / "envck"))
    cfg = _job_config(build_parser().parse_args(["run", "--config", str(f)]))
    assert (cfg.lake_root, cfg.checkpoint_root) == (tmp_path / "envlake", tmp_path / "envck")
    cfg = _job_config(build_parser().parse_args(["run", "--config", str(f), "--lake-root", "flaglake"]))
    assert (cfg.lake_root, cfg.checkpoint_root) == (tmp_path / "flaglake", tmp_path / "envck")
    assert "IVMSTREAM_LAKE_ROOT" in build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    with pytest.raises(ConfigError, match="--lake-root"):
        _job_config(build_parser().parse_args(["run", "--config", str(f), "--lake-root", " "]))
