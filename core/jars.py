"""Where the project's JVM jars are, and which of them Spark must be handed.

`make jars` resolves five Maven poms into git-ignored folders: ``jvm/spark/jars`` (Delta and
Spark's Kafka source with their transitive jars), ``jvm/s3a/jars`` (hadoop-aws and the AWS SDK,
for a lake on s3a://), ``jvm/kafka/libs`` (the Kafka broker), ``jvm/connect/libs`` (a Kafka
Connect worker with the Debezium PostgreSQL connector) and ``jvm/s3proxy/libs`` (S3Proxy, the
local S3-API server); a sixth, ``jvm/registry/pom.xml``, is a tarball unpacked into
``jvm/registry/app`` (Apicurio Registry, the local schema registry for Avro).
Maven's transitive closure repeats many jars that the pyspark wheel already ships (Hadoop,
Jackson, Parquet, Scala); handing Spark a second, older copy of those breaks class loading,
so ``spark_jars()`` keeps only the artifacts pyspark does not have.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from core.config.common import REPO_ROOT, env
from core.errors import ConfigError

SPARK_JARS_DIR = Path(env("spark_jars", str(REPO_ROOT / "jvm" / "spark" / "jars")))
KAFKA_LIBS_DIR = Path(env("kafka_libs", str(REPO_ROOT / "jvm" / "kafka" / "libs")))
CONNECT_LIBS_DIR = Path(env("connect_libs", str(REPO_ROOT / "jvm" / "connect" / "libs")))
S3A_JARS_DIR = Path(env("s3a_jars", str(REPO_ROOT / "jvm" / "s3a" / "jars")))
S3PROXY_LIBS_DIR = Path(env("s3proxy_libs", str(REPO_ROOT / "jvm" / "s3proxy" / "libs")))
REGISTRY_APP_DIR = Path(env("registry_app", str(REPO_ROOT / "jvm" / "registry" / "app")))

# The driver JVM's class-data-sharing archive, written by `make setup` (streaming_app.jvm_archive).
ARCHIVE = Path(env("jvm_archive", str(REPO_ROOT / "jvm" / "cds" / "spark.jsa")))
CDS_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"  # an unusable archive is skipped silently

_ARTIFACT = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^/]*)\.jar$")

def artifact_name(jar_file: str) -> str:
    """``jackson-core-2.21.2.jar`` -> ``jackson-core`` (the name without its version)."""
    m = _ARTIFACT.match(jar_file)
    return m.group("artifact") if m else jar_file.removesuffix(".jar")

def pyspark_jars_dir() -> Path:

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConfigError("pyspark is not installed in this environment (run `make setup`)")
    return Path(spec.origin).parent / "jars"

def spark_jars() -> list[Path]:
    """The jars to put on ``spark.jars``: our Maven closure minus what pyspark ships."""
    if not SPARK_JARS_DIR.is_dir() or not any(SPARK_JARS_DIR.glob("*.jar")):
        raise ConfigError(
            f"Spark's extra jars are missing from {SPARK_JARS_DIR}; run `make jars` "
            "(resolves jvm/spark/pom.xml from Maven Central once)"
        )
    shipped = {artifact_name(p.name) for p in pyspark_jars_dir().glob("*.jar")}
    return sorted(p for p in SPARK_JARS_DIR.glob("*.jar") if artifact_name(p.name) not in shipped)

def s3a_jars() -> list[Path]:
    """The jars Spark needs to read and write s3a:// paths (hadoop-aws 3.5.0 and the AWS SDK
    bundle), for a session whose lake is on an object store; the rest keep them off."""
    jars = sorted(S3A_JARS_DIR.glob("*.jar")) if S3A_JARS_DIR.is_dir() else []
    if not any(p.name.startswith("hadoop-aws-") for p in jars):
        raise ConfigError(
            f"the s3a jars (hadoop-aws, AWS SDK) are missing from {S3A_JARS_DIR}; run `make jars` "
            "(resolves jvm/s3a/pom.xml from Maven Central once)"
        )
    return jars

def s3a_classpath() -> str:
    """``s3a_jars()`` as one class path (``spark.driver.extraClassPath``, ``spark.executor.extraClassPath``,
    or spark-submit's ``--driver-class-path``)."""
    return ":".join(str(p) for p in s3a_jars())

def kafka_classpath() -> str:
    """Classpath of the embedded Kafka broker."""
    if not KAFKA_LIBS_DIR.is_dir() or not any(KAFKA_LIBS_DIR.glob("kafka_2.13-*.jar")):
        raise ConfigError(
            f"Kafka broker jars are missing from {KAFKA_LIBS_DIR}; run `make jars` "
            "(resolves jvm/kafka/pom.xml from Maven Central once)"
        )
    return str(KAFKA_LIBS_DIR / "*")

def connect_classpath() -> str:
    """Classpath of the Kafka Connect worker, the Debezium PostgreSQL connector included.

    Debezium sits on the worker's own classpath rather than in a ``plugin.path`` folder: the
    worker runs only this one connector, and Maven has already resolved connect-runtime and
    Debezium into one consistent closure (one kafka-clients, one Jackson), which is exactly
    what plugin isolation would otherwise have to guarantee. It also spares the worker its
    plugin scan of a folder at start-up, which costs seconds on a 2-core machine.
    """
    if not CONNECT_LIBS_DIR.is_dir() or not any(CONNECT_LIBS_DIR.glob("debezium-connector-postgres-*.jar")) \
            or not any(CONNECT_LIBS_DIR.glob("connect-runtime-*.jar")):
        raise ConfigError(
            f"Kafka Connect / Debezium jars are missing from {CONNECT_LIBS_DIR}; run `make jars` "
            "(resolves jvm/connect/pom.xml from Maven Central once)"
        )
    return str(CONNECT_LIBS_DIR / "*")

def s3proxy_classpath() -> str:
    """Classpath of the local S3-API server (S3Proxy)."""
    if not S3PROXY_LIBS_DIR.is_dir() or not any(S3PROXY_LIBS_DIR.glob("s3proxy-*.jar")):
        raise ConfigError(
            f"S3Proxy jars are missing from {S3PROXY_LIBS_DIR}; run `make jars` "
            "(resolves jvm/s3proxy/pom.xml from Maven Central once)"
        )
    return str(S3PROXY_LIBS_DIR / "*")

def archive_options() -> str:
    """Driver JVM options that map the class archive, or '' when there is none."""
    if env("jvm_archive_off") or not ARCHIVE.is_file():
        return ""
    return f"-XX:SharedArchiveFile={ARCHIVE} {CDS_QUIET}"

def registry_runner() -> Path:
    """Apicurio Registry's Quarkus runner jar (its lib/ beside it), or a ConfigError naming the fix."""
    jars = sorted(REGISTRY_APP_DIR.glob("apicurio-registry-app-*-runner.jar")) if REGISTRY_APP_DIR.is_dir() else []
    if not jars:
        raise ConfigError(f"Apicurio Registry is missing from {REGISTRY_APP_DIR}; run `make jars` "
                          "(unpacks jvm/registry/pom.xml's tarball from Maven Central once)")
    return jars[-1]
