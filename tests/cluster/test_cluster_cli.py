"""`ivmstream cluster` and `ivmstream submit` without a cluster (fast tier): bad flags and an
unreachable or malformed master end in one line before anything starts, a pid file that names
someone else's process is removed and that process left alone, and the --py-files zip holds
the project's packages with their bytecode."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from streaming_app import cli
from streaming_app.cluster import StandaloneCluster
from streaming_app.submit import build_py_files, check_master


def _error(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("ivmstream: error: [IVM"), err
    return err


@pytest.mark.parametrize("flags, text", [
    (["--memory", "1x"], "--memory: must be an amount such as 512m or 2g"),
    (["--memory", "0g"], "--memory: must be an amount"),
    (["--workers", "0"], "--workers: must be an integer in 1..64"),
    (["--cores", "two"], "--cores: must be an integer"),
    (["--port", "70000"], "--port: must be an integer in 1..65535"),
    (["--ui-port", ""], "--ui-port: must be an integer"),
])
def test_cluster_flags_refused_in_one_line(capsys, tmp_path, flags, text):
    assert text in _error(capsys, ["cluster", "start", "--dir", str(tmp_path), *flags])


def test_cluster_env_variable_is_checked_like_its_flag(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("IVMSTREAM_CLUSTER_MEMORY", "lots")
    assert "--memory: must be an amount" in _error(capsys, ["cluster", "status", "--dir", str(tmp_path)])


def test_submit_refuses_bad_or_silent_master(capsys, tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text('[job]\nname = "j"\n[[tables]]\nname = "t"\ntopic = "t"\nprimary_key = ["id"]\n'
                   'columns = { id = "long" }\n')
    from devstack.process import free_port

    port = free_port()  # nothing listens there
    err = _error(capsys, ["submit", "--config", str(cfg), "--master", f"spark://127.0.0.1:{port}"])
    assert f"[IVM520] no Spark master answers at spark://127.0.0.1:{port}" in err and "ivmstream cluster start" in err
    assert "spark://HOST:PORT" in _error(capsys, ["submit", "--config", str(cfg), "--master", "spark://nohost"])
    assert "use spark://HOST:PORT, yarn" in _error(capsys, ["submit", "--config", str(cfg), "--master", "mesos://x:1"])
    with pytest.raises(Exception, match="no Spark master answers"):
        check_master(f"spark://127.0.0.1:{port},127.0.0.1:{port}")


def test_stale_pid_files_are_removed_and_their_process_left_alone(capsys, tmp_path):
    c = StandaloneCluster(tmp_path)
    (tmp_path / "master.pid").write_text(str(os.getpid()))  # alive, but not a Spark master
    (tmp_path / "worker-1.pid").write_text("999999999")      # not running
    assert c.status()["running"] is False
    assert c.stop() == []
    assert not (tmp_path / "master.pid").exists() and not (tmp_path / "worker-1.pid").exists()
    (tmp_path / "master.pid").write_text(str(os.getpid()))
    assert cli.main(["cluster", "stop", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "which is not this cluster's master; left it alone: removed the stale pid file" in out
    assert out.endswith("no cluster was running\n")


def test_py_files_zip_holds_the_packages_and_is_rebuilt_only_when_stale(tmp_path):
    out = tmp_path / "ivmstream.zip"
    assert build_py_files(out) is True
    names = zipfile.ZipFile(out).namelist()
    for must in ("streaming_app/cli.py", "streaming_app/log4j2-quiet.properties", "connectors/debezium.py",
                 "core/errors.py", "state/protocol.py"):
        assert must in names
    assert not any("__pycache__" in n for n in names)
    sources = [n for n in names if n.endswith(".py")]
    assert sources and all(n + "c" in names for n in sources)  # each module's bytecode beside it
    assert build_py_files(out) is False  # newer than every source
    os.utime(out, (1, 1))
    assert build_py_files(out) is True


# Imports two of the project's modules from the zip alone, printing the files Python compiled.
_IMPORT_FROM_ZIP = """
import builtins, sys
sys.path.insert(0, sys.argv[1])
compiled, real = [], builtins.compile
builtins.compile = lambda source, filename, *a, **k: (compiled.append(str(filename)), real(source, filename, *a, **k))[1]
import core.errors, streaming_app.flags
assert core.errors.__file__.startswith(sys.argv[1]) and streaming_app.flags.__file__.startswith(sys.argv[1])
print(sorted({f.split(".zip")[-1] for f in compiled if ".zip" in f}))
"""


def test_py_files_modules_load_from_their_bytecode_and_from_source_for_another_python(tmp_path):
    out = tmp_path / "ivmstream.zip"
    build_py_files(out)
    run = lambda zip_path: subprocess.run([sys.executable, "-c", _IMPORT_FROM_ZIP, str(zip_path)],  # noqa: E731
                                          capture_output=True, text=True, check=True).stdout.strip()
    assert run(out) == "[]"  # nothing compiled: the .pyc were used
    # A .pyc from another Python version (other magic number) is skipped for the source.
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\x00\x00\r\n" + data[4:] if info.filename == "core/errors.pyc" else data)
    assert run(other) == "['/core/errors.py']"


def test_submit_becomes_spark_submit_with_the_jvm_incubator_line_dropped_from_its_stderr():
    """exec_submit keeps the pid (signals reach spark-submit) and its exit code, and the JVM's
    incubator warning leaves its stderr as it leaves a local session's; other lines pass."""
    child = ("import os, sys; print(os.getpid(), flush=True); "
             "sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\nException: kept\\n'); "
             "sys.exit(3)")
    parent = ("import os, sys; from streaming_app.submit import exec_submit; print(os.getpid(), flush=True); "
              f"exec_submit([sys.executable, '-c', {child!r}], {{}})")
    r = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    pids = r.stdout.split()
    assert r.returncode == 3 and len(pids) == 2 and pids[0] == pids[1], (r.returncode, r.stdout, r.stderr)
    assert r.stderr == "Exception: kept\n"
