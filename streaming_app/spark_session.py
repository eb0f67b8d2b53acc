"""The one Spark session factory: Delta, the Kafka source, RocksDB state, loopback when embedded.

Every entry point (the job, the demo, the tests, the benchmarks, the sketch commands) builds
its session here so that they all run with the same jars and settings. The JVM jars come from
``jvm/spark/jars`` through ``spark.jars`` (resolved once by `make jars`): no Ivy resolution
ever happens when a session starts.

The Spark UI has no login and shows the job's SQL, configuration and samples of its data, so it
listens on ``[spark] ui_host`` (127.0.0.1 unless the config says otherwise). Spark 4 binds the
UI to the driver JVM's ``SPARK_LOCAL_IP`` environment variable, else to every interface
(``WebUI.bind``; ``spark.driver.bindAddress`` covers only the RPC endpoints). A session whose
JVM we launch locally gets that variable; for a JVM that exists already (spark-submit, a
cluster client) the variable is read back, and if the UI would listen on more than loopback
when the config asks for loopback, the UI stays off and a line says how to turn it on.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass

from connectors import object_store
from core.config import S3Config, SparkConfig
from core.errors import ConfigError
from core.jars import archive_options, s3a_classpath, spark_jars
from streaming_app import stderr_filter
from streaming_app.settings import load_config

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# -Xss16m: deep py4j/foreachBatch stacks under Delta MERGE planning.
# -XX:-DontCompileHugeMethods: a sketch predicate of many ranges compiles to generated methods
# over HotSpot's 8000-bytecode JIT limit, which would run interpreted: on 3M rows in 256 files
# with 169 ranges, a repeated scan took 39 s with the JVM's default and 5.8 s with this
# (bench/results/predicate_forms.md).
JVM_OPTIONS = "-Xss16m -Duser.timezone=UTC -XX:-DontCompileHugeMethods"
# Executors also wait 4x longer before JIT-compiling a method (-XX:CompileThresholdScaling=4):
# each executor sees only its share of the records, and at its start the compiler spent more
# CPU on code that runs a few thousand times (class loading, RPC set-up, the first Kafka fetches)
# than that code took. Measured on the 2-worker cluster (bench/results/cluster_jvm_options.md):
# executors' CPU 17.9 -> 14.4 s (medians of 8 and 6 runs), batch 0's collect ~1 s shorter, the warm
# batches unchanged.
EXECUTOR_JVM_OPTIONS = f"{JVM_OPTIONS} -XX:CompileThresholdScaling=4"

@dataclass(frozen=True)
class SessionOptions:
    app_name: str = "ivmstream"
    ui: bool = False
    embedded: bool = True  # bind driver and UI to loopback
    warehouse_dir: str | None = None
    log_level: str | None = None  # None: ERROR, or WARN once set_verbose(True)
    s3: S3Config | None = None  # the lake is on S3: the S3A jars and settings (object_store.lake_s3)

# Spark and its libraries log hundreds of WARN lines per demo (RDD lineage, duplicated map
# keys, "Current batch is falling behind", Delta statistics...): by default the driver logs
# errors only, from its JVM's first line on (a log4j2 file given at launch); `--verbose` on
# `run`/`demo` keeps Spark's own defaults.
QUIET_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")
_verbose = False
# Options for the driver JVM we launch in place of the class archive's (streaming_app.jvm_archive
# sets -XX:ArchiveClassesAtExit here while it writes the archive).
EXTRA_DRIVER_OPTIONS: str | None = None

def set_verbose(on: bool) -> None:
    """Spark's own log output (WARN and up) for the sessions built after this call."""
    global _verbose
    _verbose = bool(on)

def _python_env() -> None:
    # Workers must run the venv's interpreter (the one that has pyarrow, the operators...).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

LOOPBACK = ("127.0.0.1", "localhost", "::1")

def _is_loopback(host: str | None) -> bool:
    return bool(host) and (host in LOOPBACK or host.startswith("127."))

def ui_allowed(spark_cfg: SparkConfig, *, pinned: bool, jvm_local_ip) -> tuple[bool, str | None]:
    """Whether the UI may start, and the note to print when it may not.

    ``pinned``: we launch the driver JVM locally with SPARK_LOCAL_IP = ui_host (driver RPC
    pinned to loopback separately), so the UI listens where the config says. Otherwise
    ``jvm_local_ip()`` gives the driver JVM's SPARK_LOCAL_IP (None if unset: every interface)."""
    if pinned or not _is_loopback(spark_cfg.ui_host):
        return True, None
    bound = jvm_local_ip()
    if _is_loopback(bound):
        return True, None
    where = f"SPARK_LOCAL_IP={bound}" if bound else "every interface (SPARK_LOCAL_IP is not set)"
    return False, (f"Spark UI off: the driver JVM would serve it on {where}, and [spark] ui_host is "
                   f"{spark_cfg.ui_host}. Start the driver with SPARK_LOCAL_IP=127.0.0.1 (and reach the UI "
                   "through an SSH tunnel), or set [spark] ui_host = \"0.0.0.0\" to serve it on every interface")

def _jvm_local_ip(submitted: bool) -> str | None:
    """SPARK_LOCAL_IP of the driver JVM: read from the JVM if it is up, else the environment it
    will inherit from this process."""
    from pyspark import SparkContext

    if SparkContext._gateway is None and not submitted:
        return os.environ.get("SPARK_LOCAL_IP")
    SparkContext._ensure_initialized()  # connects to the running JVM; starts nothing new
    return SparkContext._jvm.java.lang.System.getenv("SPARK_LOCAL_IP")

def _start_jvm_without_incubator_line(start):
    """Run ``start()`` (which launches the driver JVM) with our stderr replaced by a pipe that
    the JVM inherits, and copy everything from that pipe to the real stderr but the lines
    ``stderr_filter.StderrFilter`` drops."""

    r, w = os.pipe()
    saved = os.dup(2)

    def copy() -> None:
        stderr_filter.copy(r, saved)
        os.close(r)

    sys.stderr.flush()
    os.dup2(w, 2)
    try:
        threading.Thread(target=copy, name="jvm-stderr", daemon=True).start()
        return start()
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # our own stderr back; the JVM keeps the pipe
        os.close(w)

def build_session(spark_cfg: SparkConfig, opts: SessionOptions = SessionOptions()):
    """Create (or return the running) SparkSession configured for ivmstream."""
    _python_env()
    local = spark_cfg.master.startswith("local")
    # Under spark-submit the JVM is already up with the submitted master, jars and memory:
    # setting them again here would be ignored or, for the master, override the cluster.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    from pyspark import SparkContext

    # A local driver JVM that we are about to launch: driver and block manager are pinned to
    # loopback below, and SPARK_LOCAL_IP (inherited by the JVM) places the UI.
    pinned = opts.embedded and local and not submitted and SparkContext._gateway is None
    if pinned:
        os.environ["SPARK_LOCAL_IP"] = spark_cfg.ui_host if opts.ui else "127.0.0.1"
    elif opts.embedded and local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    ui = opts.ui
    if ui:
        ui, note = ui_allowed(spark_cfg, pinned=pinned, jvm_local_ip=lambda: _jvm_local_ip(submitted))
        if note:
            print(note, file=sys.stderr, flush=True)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(opts.app_name)
    if not submitted:
        quiet = not _verbose and os.path.exists(QUIET_LOG4J)  # absent from an install without package data
        driver_opts = f"{JVM_OPTIONS} -Dlog4j2.configurationFile=file:{QUIET_LOG4J}" if quiet else JVM_OPTIONS
        extra = EXTRA_DRIVER_OPTIONS if EXTRA_DRIVER_OPTIONS is not None else archive_options()
        driver_opts = f"{driver_opts} {extra}".strip()
        b = (b.master(spark_cfg.master)
             .config("spark.jars", ",".join(str(p) for p in spark_jars()))
             .config("spark.driver.memory", spark_cfg.driver_memory)
             .config("spark.driver.extraJavaOptions", driver_opts)
             .config("spark.executor.extraJavaOptions", EXECUTOR_JVM_OPTIONS))
    b = (
        b.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage", "true")
        .config("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", "256")
        .config("spark.sql.shuffle.partitions", str(spark_cfg.shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, spark_cfg.shuffle_partitions)))
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        # Delta rebuilds table state after every commit in this many partitions (default 50):
        # 50 tiny tasks per commit made each micro-batch's MERGE 3-4x slower on 2 cores.
        .config("spark.databricks.delta.snapshotPartitions", str(max(2, spark_cfg.shuffle_partitions)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", str(bool(ui)).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    if ui:
        b = b.config("spark.ui.port", str(spark_cfg.ui_port))
    if opts.embedded and local and not submitted:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if opts.warehouse_dir:
        b = b.config("spark.sql.warehouse.dir", opts.warehouse_dir)
    if opts.s3 is not None:

        if not submitted:
            # On the JVMs' own class path, beside the Hadoop client they extend, rather than on
            # spark.jars: a local executor would copy the 690 MB SDK bundle into its work folder
            # at every session start.
            cp = s3a_classpath()
            b = b.config("spark.driver.extraClassPath", cp).config("spark.executor.extraClassPath", cp)
        for k, v in object_store.hadoop_conf(opts.s3, keys=False).items():
            b = b.config(f"spark.hadoop.{k}", v)
    for k, v in spark_cfg.extra_conf:
        b = b.config(k, v)
    launching = not submitted and SparkContext._gateway is None
    spark = _start_jvm_without_incubator_line(b.getOrCreate) if launching else b.getOrCreate()
    if opts.s3 is not None:  # the keys too, into the running JVM (never on its command line)
        object_store.apply_to_spark(spark, opts.s3)
    spark.sparkContext.setLogLevel(opts.log_level or ("WARN" if _verbose else "ERROR"))
    return spark

def ui_url(spark) -> str | None:
    return spark.sparkContext.uiWebUrl

def lake_session(lake: str | None = None, *, config: str | None = None, master: str = "local[2]",
                 app_name: str = "read-the-lake"):
    """(spark, lake root) for reading a job's lake from Spark SQL: a local folder by path
    (``lake="var/demo/lake"``), or the lake of a job's config (``config="job.toml"``), which on
    S3 brings the S3A jars, the ``fs.s3a.*`` settings and the keys the job itself uses (its
    ``[s3]`` section, else the AWS variables). The root comes back absolute (local) or as its
    ``s3a://`` URI, ready for ``delta.`{lake}/batches```."""
    if (lake is None) == (config is None):
        raise ConfigError("lake_session: give the lake's folder or a job config, one of them")
    s3 = None
    if config is not None:
        cfg = load_config(config)
        root, s3 = str(cfg.lake_root), object_store.lake_s3(cfg)
    else:
        root = str(lake)
        if object_store.is_s3(root):
            raise ConfigError(f"lake_session: {root} is on S3; give the job's config (config=...) for its [s3] "
                              "settings")
        root = os.path.abspath(root)
    spark = build_session(SparkConfig(master=master), SessionOptions(app_name=app_name, ui=False, s3=s3))
    return spark, root
