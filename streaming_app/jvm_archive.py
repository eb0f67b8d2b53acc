"""A class-data-sharing archive of the driver JVM's classes, made once by `make setup`.

A local job spends its first seconds loading and verifying some ten thousand classes (Spark,
Delta, Arrow, the Kafka source) before it reads a record. Java 17 can archive the classes a
run loaded (``-XX:ArchiveClassesAtExit``) and map them at the next start
(``-XX:SharedArchiveFile``): measured here, session start 4.5 -> 2.9 s and the first Arrow
collect 1.7 -> 0.9 s. `make setup` runs ``python -m streaming_app.jvm_archive``, which starts a
session, does a batch's kinds of work (Arrow in and out, Delta write, change feed, MERGE, the
Kafka source's classes) and exits, leaving ``jvm/cds/spark.jsa`` (git-ignored, ~150 MB).

The archive only ever speeds things up: a JVM that cannot use it (other jars, another JDK, a
heap over 32 GB) starts as before, silently (its CDS log lines are off). Under spark-submit the
JVM is not ours and nothing changes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import streaming_app.spark_session as session
from core.config import SparkConfig
from core.jars import ARCHIVE, CDS_QUIET


def _workload(spark, work: Path) -> None:

    spark.range(1000).selectExpr("id", "id % 7 AS k", "CAST(id AS STRING) AS s").toArrow()
    path = str(work / "t")
    data = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
    spark.createDataFrame(data).write.format("delta").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    from delta.tables import DeltaTable

    (DeltaTable.forPath(spark, path).alias("t").merge(spark.createDataFrame(data).alias("s"), "t.id = s.id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(path)
     .groupBy("_change_type").count().toArrow())
    spark.read.format("delta").option("versionAsOf", 0).load(path).where("id < 10").toArrow()
    # the Kafka source's classes, without a broker: resolving the source is enough
    spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "x").load()

def main() -> int:
    """Write the archive from one representative session; returns 0 (also when the JVM
    cannot archive: the job then simply starts without one)."""
    from pyspark import SparkContext

    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    partial = ARCHIVE.with_suffix(".jsa.part")
    partial.unlink(missing_ok=True)
    session.EXTRA_DRIVER_OPTIONS = f"-XX:ArchiveClassesAtExit={partial} {CDS_QUIET}"
    t0 = time.monotonic()
    spark = session.build_session(SparkConfig(master="local[2]"), session.SessionOptions(app_name="ivmstream-archive"))
    with tempfile.TemporaryDirectory(prefix="ivm-archive-") as tmp:
        _workload(spark, Path(tmp))
    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        gateway.shutdown()
    if proc is not None:  # the JVM writes the archive as it exits, which it does when stdin closes
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=300)
    if partial.is_file() and partial.stat().st_size > 0:
        partial.replace(ARCHIVE)
        print(f"JVM class archive: {ARCHIVE} ({ARCHIVE.stat().st_size // 2**20} MB, {time.monotonic() - t0:.0f} s)")
    else:
        print("JVM class archive: this JVM wrote none; jobs start without it", file=sys.stderr)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
