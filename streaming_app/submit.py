"""`ivmstream submit`: the job handed to a Spark cluster with spark-submit, with all it needs.

What a submitted job needs and a local session sets by itself (streaming_app.spark_session):
the extra jars (Delta, Spark's Kafka source: ``jars.spark_jars()``), Delta's SQL extension and
catalog, the driver's JVM options and quiet logging, the driver memory from ``[spark]``, the
project's packages for the executors' Python workers (``dist/ivmstream.zip``, built by `make
setup` and again here when a source file is newer), and the Python that runs the driver and
the executors' workers (``PYSPARK_PYTHON``: this venv's, which has pyarrow, msgspec and the
rest; the system Python has not). The command is plain spark-submit from the pyspark wheel:
``--print`` shows it for a cluster manager of your own.
"""

from __future__ import annotations

import os
import py_compile
import re
import shlex
import shutil
import socket
import sys
import tempfile
import zipfile
from pathlib import Path

from connectors import object_store
from core.errors import ConfigError
from streaming_app.cluster import ClusterError, spark_home
from core.config import REPO_ROOT, JobConfig
from core.jars import archive_options, s3a_classpath, spark_jars
from streaming_app import metrics
from streaming_app.spark_session import EXECUTOR_JVM_OPTIONS, JVM_OPTIONS, QUIET_LOG4J

PACKAGES = ("core", "streaming_app", "operators", "state", "connectors", "devstack")
PY_FILES = REPO_ROOT / "dist" / "ivmstream.zip"
MAIN = REPO_ROOT / "streaming_app" / "__main__.py"
STDERR_FILTER = REPO_ROOT / "streaming_app" / "stderr_filter.py"
_SPARK_MASTER = re.compile(r"spark://[A-Za-z0-9_.\[\]:-]+:[0-9]{1,5}(,[A-Za-z0-9_.\[\]:-]+:[0-9]{1,5})*")


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def build_py_files(out: Path = PY_FILES) -> bool:
    """Zip the project's packages for ``--py-files`` unless the zip is newer than every source
    file; True if it was (re)built.

    Each module goes in with its bytecode beside it (``mod.pyc``, checked against the source's
    hash): Python never writes bytecode for a zip, so without it the driver and every Python
    worker on the executors compiled each module they imported at every start (the job's
    modules, 4 interleaved runs each: 0.49-0.65 s from the zip without bytecode, 0.34-0.45 s
    with it). A Python of another version ignores the .pyc and compiles the source, as before."""
    files = _sources()
    if out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in files):
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".zip.tmp")
    with tempfile.TemporaryDirectory(prefix="ivmstream-pyc-") as work, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            name = p.relative_to(REPO_ROOT).as_posix()
            z.write(p, name)
            if p.suffix == ".py":
                pyc = py_compile.compile(str(p), cfile=str(Path(work) / "m.pyc"), dfile=name, doraise=True,
                                         invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                z.write(pyc, name + "c")
    tmp.replace(out)
    return True


def check_master(master: str) -> None:
    """A master URL spark-submit understands; a ``spark://`` master must accept a connection.
    Raises the one-line error before any JVM starts."""
    if master.startswith("spark://"):
        if not _SPARK_MASTER.fullmatch(master):
            raise ConfigError(f"--master {master!r}: a standalone master is spark://HOST:PORT")
        reasons = []
        for part in master.removeprefix("spark://").split(","):
            host, _, port = part.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
                    return
            except OSError as e:
                reasons.append(f"{part}: {e.strerror or e}")
        raise ClusterError(f"no Spark master answers at {master} ({'; '.join(reasons)}); start one with "
                           "`ivmstream cluster start` or give --master")
    if not (master.startswith(("local", "k8s://")) or master == "yarn"):
        raise ConfigError(f"--master {master!r}: use spark://HOST:PORT, yarn, k8s://https://HOST:PORT or local[N]")


def _loopback(master: str) -> bool:
    return master.startswith("local") or all(
        p.rpartition(":")[0] in ("127.0.0.1", "localhost") for p in master.removeprefix("spark://").split(","))


def submit_command(cfg: JobConfig, config_path: str | Path, master: str, run_args: list[str],
                   python: str = sys.executable) -> tuple[list[str], dict[str, str]]:
    """(argv, environment additions) of the spark-submit that runs ``ivmstream run`` on ``master``."""
    # The class archive `make setup` writes (jvm/cds) serves the driver and the executors alike:
    # they load the same jars. A JVM that cannot map it (another host without the file, other
    # jars on its classpath) starts as before, silently.
    cds = archive_options()
    driver_opts = f"{JVM_OPTIONS} -Dlog4j2.configurationFile=file:{QUIET_LOG4J} {cds}".strip()
    confs = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": f"{EXECUTOR_JVM_OPTIONS} {cds}".strip(),
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        **(metrics.spark_conf() if cfg.metrics.enabled and cfg.metrics.spark else {}),  # Spark's Prometheus servlet
        **dict(cfg.spark.extra_conf),
    }
    s3 = object_store.lake_s3(cfg)
    if s3 is not None:  # a lake on S3: the S3A jars beside Hadoop's, its settings (the keys are set by the job, in the JVM)
        confs = {"spark.driver.extraClassPath": s3a_classpath(), "spark.executor.extraClassPath": s3a_classpath(),
                 **{f"spark.hadoop.{k}": v for k, v in object_store.hadoop_conf(s3, keys=False).items()}, **confs}
    argv = [str(spark_home() / "bin" / "spark-submit"), "--master", master, "--name", f"ivmstream:{cfg.name}",
            "--driver-memory", cfg.spark.driver_memory,
            "--jars", ",".join(str(p) for p in spark_jars()),
            "--py-files", str(PY_FILES)]
    for k, v in confs.items():
        argv += ["--conf", f"{k}={v}"]
    argv += [str(MAIN), "run", "--config", str(Path(config_path).resolve()), *run_args]
    env = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_HOME": str(spark_home())}
    if _loopback(master):
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # driver, block manager and UI on loopback
    return argv, env


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *(shlex.quote(a) for a in argv)])


def exec_submit(argv: list[str], env: dict[str, str]) -> None:
    """Become spark-submit (this process's pid, so signals such as Ctrl-C reach it and the
    driver directly), its stderr piped through streaming_app/stderr_filter.py: the lines a local
    session drops (the JVM's incubator warning) are dropped here too."""
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **env}
    bash = shutil.which("bash")
    if bash is None:  # spark-submit is a bash script: not reached where it runs
        os.execve(argv[0], argv, env)
    script = 'exec "$@" 2> >(exec "$IVMSTREAM_FILTER_PYTHON" "$IVMSTREAM_FILTER" >&2)'
    env.update(IVMSTREAM_FILTER_PYTHON=sys.executable, IVMSTREAM_FILTER=str(STDERR_FILTER))
    os.execve(bash, [bash, "-c", script, "spark-submit", *argv], env)
