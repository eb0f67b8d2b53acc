"""Issue 42, tables by name (``[catalog] database``): the job registers every table it writes in
Spark's catalog; with Hive's metastore in an embedded Derby folder, another Spark session (another
process, after the job) reads them by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.config import REPO_ROOT, dump_toml
from streaming_app.catalog import table_name
from streaming_app.settings import parse_config


def test_catalog_names_of_lake_tables():
    assert table_name("/data/lake", "/data/lake/mirrors/orders") == "orders_mirror"
    assert table_name("/data/lake", "/data/lake/batches") == "batches"
    assert table_name("s3a://b/lake", "s3a://b/lake/mirrors/orders") == "orders_mirror"
    assert table_name("s3a://b/lake", "s3a://b/lake/triangle_counts") == "triangle_counts"
    assert table_name("/data/lake", "/data/other/batches") is None
    assert table_name("/data/lake", "/data/lake2/batches") is None


def test_catalog_database_must_be_an_identifier():
    from core.errors import ConfigError

    tables = [{"name": "t", "topic": "c.t", "primary_key": "id", "columns": {"id": "long"}}]
    assert parse_config({"tables": tables}).catalog.database is None
    assert parse_config({"tables": tables, "catalog": {"database": "ivm"}}).catalog.database == "ivm"
    with pytest.raises(ConfigError, match="identifier"):
        parse_config({"tables": tables, "catalog": {"database": "ivm; DROP"}})


READER = """
import json, sys
from core.config import SparkConfig
from streaming_app.spark_session import SessionOptions, build_session
conf = tuple(json.loads(sys.argv[1]).items())
spark = build_session(SparkConfig(master="local[1]", extra_conf=conf), SessionOptions(app_name="reader"))
names = sorted(r.tableName for r in spark.sql("SHOW TABLES IN ivm").collect())
mirror = sorted(r.id for r in spark.sql("SELECT id FROM ivm.t_mirror").collect())
batches = spark.sql("SELECT sum(records_in) AS n FROM ivm.batches").first().n
tri = spark.sql("SELECT max_by(triangles, batch_id) AS n FROM ivm.triangle_counts").first().n
print(json.dumps({"names": names, "mirror": mirror, "records": batches, "triangles": tri}))
"""


@pytest.mark.kafka
@pytest.mark.spark
def test_the_jobs_tables_by_name_in_a_derby_metastore(kafka_broker, tmp_path):
    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer

    conf = {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true",
            "spark.sql.warehouse.dir": str(tmp_path / "warehouse")}
    suffix = tmp_path.name[-10:]
    data = {"job": {"name": "named", "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ck")},
            "kafka": {"bootstrap_servers": kafka_broker.bootstrap},
            "spark": {"master": "local[1]", "ui": False, "conf": conf},
            "catalog": {"database": "ivm"},
            "tables": [{"name": "t", "topic": f"cat.t.{suffix}", "primary_key": "id",
                        "columns": {"id": "long", "v": "string"}},
                       {"name": "e", "topic": f"cat.e.{suffix}", "primary_key": ["src", "dst"],
                        "columns": {"src": "long", "dst": "long"}}],
            "graphs": [{"name": "g", "table": "e", "mode": "undirected"}]}
    cfg = parse_config(data)
    (tmp_path / "job.toml").write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=1)
    prod = CdcProducer(kafka_broker.bootstrap)
    for i in range(5):
        prod.send(cfg.table("t"), "c", None, {"id": i, "v": str(i)})
    for a, b in ((1, 2), (2, 3), (1, 3), (3, 4)):
        prod.send(cfg.table("e"), "c", None, {"src": a, "dst": b})
    prod.close()
    r = subprocess.run([sys.executable, "-m", "streaming_app", "run", "--config", str(tmp_path / "job.toml"),
                        "--available-now", "--no-ui"], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "in-memory catalog" not in r.stdout

    r = subprocess.run([sys.executable, "-c", READER, json.dumps(conf)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert {"t_mirror", "e_mirror", "batches", "quarantine", "triangle_counts"} <= set(got["names"]), got
    assert got["mirror"] == [0, 1, 2, 3, 4] and got["records"] == 9 and got["triangles"] == 1
