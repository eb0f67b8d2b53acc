"""The one Spark session factory: Delta, the Kafka source, RocksDB state, loopback when embedded.

Every entry point (the job, the demo, the tests, the benchmarks, the sketch commands) builds
its session here so that they all run with the same jars and settings. The JVM jars come from
``jvm/spark/jars`` through ``spark.jars`` (resolved once by `make jars`): no Ivy resolution
ever happens when a session starts.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from streaming_app.config import SparkConfig
from streaming_app.jars import spark_jars

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# -Xss16m: deep py4j/foreachBatch stacks under Delta MERGE planning.
# -XX:-DontCompileHugeMethods: a sketch predicate of many ranges compiles to generated methods
# over HotSpot's 8000-bytecode JIT limit, which would run interpreted: on 3M rows in 256 files
# with 169 ranges, a repeated scan took 39 s with the JVM's default and 5.8 s with this
# (bench/results/predicate_forms.md).
JVM_OPTIONS = "-Xss16m -Duser.timezone=UTC -XX:-DontCompileHugeMethods"


@dataclass(frozen=True)
class SessionOptions:
    app_name: str = "ivmstream"
    ui: bool = False
    embedded: bool = True  # bind driver and UI to loopback
    warehouse_dir: str | None = None
    log_level: str = "WARN"


def _python_env() -> None:
    # Workers must run the venv's interpreter (the one that has pyarrow, the operators...).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_session(spark_cfg: SparkConfig, opts: SessionOptions = SessionOptions()):
    """Create (or return the running) SparkSession configured for ivmstream."""
    _python_env()
    local = spark_cfg.master.startswith("local")
    if opts.embedded and local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    # Under spark-submit the JVM is already up with the submitted master, jars and memory:
    # setting them again here would be ignored or, for the master, override the cluster.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    b = SparkSession.builder.appName(opts.app_name)
    if not submitted:
        b = (b.master(spark_cfg.master)
             .config("spark.jars", ",".join(str(p) for p in spark_jars()))
             .config("spark.driver.memory", spark_cfg.driver_memory)
             .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
             .config("spark.executor.extraJavaOptions", JVM_OPTIONS))
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
        .config("spark.ui.enabled", str(bool(opts.ui)).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    if opts.ui:
        b = b.config("spark.ui.port", str(spark_cfg.ui_port))
    if opts.embedded and local and not submitted:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if opts.warehouse_dir:
        b = b.config("spark.sql.warehouse.dir", opts.warehouse_dir)
    for k, v in spark_cfg.extra_conf:
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(opts.log_level)
    return spark


def ui_url(spark) -> str | None:
    return spark.sparkContext.uiWebUrl
