"""A lake on an object store, without a server: lake paths, delta-rs URIs and options, S3A settings,
and the config's [s3] section (keys from the file or the AWS variables, never shown)."""

from __future__ import annotations

import pytest

from connectors import object_store as store
from connectors.delta_sink import Lake
from core.errors import ConfigError
from core.config import S3Config
from streaming_app.settings import parse_config

TABLES = [{"name": "t", "topic": "t", "primary_key": ["id"], "columns": {"id": "long"}}]
SECRET = "s3cr3t-never-shown"


def _cfg(job: dict, s3: dict | None = None):
    data = {"job": job, "tables": TABLES}
    if s3 is not None:
        data["s3"] = s3
    return parse_config(data)


def test_lake_paths_under_a_folder_and_under_a_bucket(tmp_path):
    local = Lake(tmp_path / "lake")
    assert local.mirror("orders") == str(tmp_path / "lake" / "mirrors" / "orders")
    remote = Lake("s3a://bucket/some/lake")
    assert remote.mirror("orders") == "s3a://bucket/some/lake/mirrors/orders"
    assert remote.output("batches") == "s3a://bucket/some/lake/batches"
    assert Lake("s3a://bucket/lake/").output("quarantine") == "s3a://bucket/lake/quarantine"


def test_delta_rs_uri_and_options():
    s3 = S3Config(endpoint="http://127.0.0.1:9333", region="eu-west-1", path_style=True,
                  access_key="AK", secret_key=SECRET)
    assert store.rs_uri("s3a://b/lake/mirrors/t") == "s3://b/lake/mirrors/t"
    assert store.rs_uri("/data/lake/t") == "/data/lake/t"
    assert store.rs_options("/data/lake/t", s3) is None
    assert store.rs_options("s3a://b/lake/t", s3) == {
        "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9333", "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ADDRESSING_STYLE": "path", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": SECRET}
    # AWS itself: no endpoint, virtual-hosted addressing, keys from the SDK's own chain
    assert store.rs_options("s3a://b/t", S3Config(region="us-west-2")) == {"AWS_REGION": "us-west-2"}
    assert store.rs_reaches("s3a://b/t") and store.rs_reaches("/x") and not store.rs_reaches("abfss://c@a/t")


def test_s3a_settings_for_spark():
    s3 = S3Config(endpoint="http://127.0.0.1:9333", path_style=True, access_key="AK", secret_key=SECRET)
    conf = store.hadoop_conf(s3)
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9333"
    assert conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["fs.s3a.endpoint.region"] == "us-east-1"
    assert conf["fs.s3a.aws.credentials.provider"] == "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    assert conf["fs.s3a.access.key"] == "AK" and conf["fs.s3a.secret.key"] == SECRET
    assert conf["fs.s3a.checksum.generation"] == "false" and conf["fs.s3a.request.md5.header"] == "true"
    public = store.hadoop_conf(s3, keys=False)  # what may go on a command line
    assert SECRET not in public.values() and "AK" not in public.values()
    aws = store.hadoop_conf(S3Config(endpoint="https://s3.eu-west-1.amazonaws.com", region="eu-west-1"))
    assert aws["fs.s3a.connection.ssl.enabled"] == "true" and "fs.s3a.aws.credentials.provider" not in aws


def test_config_s3_section_and_the_aws_variables(monkeypatch, tmp_path):
    for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(v, raising=False)
    cfg = _cfg({"lake_root": "s3a://bucket/lake", "checkpoint_root": str(tmp_path)},
               {"endpoint": "http://127.0.0.1:9333", "access_key": "AK", "secret_key": SECRET})
    assert cfg.lake_root == "s3a://bucket/lake" and store.lake_s3(cfg) is cfg.s3
    assert cfg.s3.path_style is True and cfg.s3.region == "us-east-1"  # path style by default with an endpoint
    assert SECRET not in repr(cfg) and SECRET not in repr(cfg.s3)
    # the variables fill what the file leaves out
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9444")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    cfg = _cfg({"lake_root": "s3a://bucket/lake"})
    assert (cfg.s3.endpoint, cfg.s3.region, cfg.s3.access_key, cfg.s3.secret_key) == (
        "http://127.0.0.1:9444", "eu-central-1", "ENVKEY", "ENVSECRET")
    assert cfg.s3.keys_from == "environment"
    # a local lake needs no S3 at all
    assert store.lake_s3(_cfg({"lake_root": str(tmp_path)})) is None


def test_no_keys_on_a_loopback_endpoint_sign_with_the_local_servers_pair(monkeypatch):
    """Issue 42, blocker 1: `ivmstream s3 start` without keys and a job without keys agree."""
    from core.config.s3 import LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY

    for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(v, raising=False)
    for endpoint in ("http://127.0.0.1:9333", "http://localhost:9333/", "http://[::1]:9333"):
        s3 = _cfg({"lake_root": "s3a://bucket/lake"}, {"endpoint": endpoint}).s3
        assert (s3.access_key, s3.secret_key, s3.keys_from) == (LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY, "local server")
    for endpoint in ("http://10.0.0.7:9000", "https://s3.eu-west-1.amazonaws.com", None):
        s3 = _cfg({"lake_root": "s3a://bucket/lake"}, {"endpoint": endpoint} if endpoint else {}).s3
        assert (s3.access_key, s3.keys_from) == (None, None)  # the AWS SDKs' own chain
    s3 = _cfg({"lake_root": "s3a://bucket/lake"}, {"endpoint": "http://127.0.0.1:9333", "access_key": "AK",
                                                    "secret_key": SECRET}).s3
    assert (s3.access_key, s3.keys_from) == ("AK", "config")


@pytest.mark.parametrize("job, s3, says", [
    ({"lake_root": "s3://bucket/lake"}, None, "s3a://bucket/path"),
    ({"lake_root": "s3a://B_ad/lake"}, None, "not a folder or an s3a://bucket/path"),
    ({"lake_root": "gs://bucket/lake"}, None, "not a folder or an s3a://bucket/path"),
    ({"lake_root": "s3a://bucket/lake"}, {"endpoint": "127.0.0.1:9333"}, "must be http://host:port"),
    ({"lake_root": "s3a://bucket/lake"}, {"access_key": "AK"}, "give both access_key and secret_key"),
    ({"lake_root": "s3a://bucket/lake"}, {"access_key": "AK", "secret_key": ""}, "secret_key must be a non-empty"),
    ({"lake_root": "s3a://bucket/lake"}, {"path_style": "yes"}, "path_style must be true or false"),
    ({"lake_root": "s3a://bucket/lake"}, {"bucket": "x"}, "unknown key"),
    ({"lake_root": "s3a://bucket/lake", "checkpoint_root": "s3a://bucket/ckpt"}, None,
     "the checkpoint stays on a filesystem"),
])
def test_config_s3_mistakes_are_one_line_errors(monkeypatch, job, s3, says):
    for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")) as e:
        _cfg(job, s3)
    assert SECRET not in str(e.value)


def test_a_bucket_that_does_not_answer_is_one_line_before_spark(tmp_path):
    import subprocess
    import sys

    from core.config import dump_toml
    from devstack.process import free_port

    data = {"job": {"name": "nobucket", "lake_root": "s3a://lake/x", "checkpoint_root": str(tmp_path / "ck")},
            "s3": {"endpoint": f"http://127.0.0.1:{free_port()}", "access_key": "AK", "secret_key": SECRET},
            "tables": TABLES}
    (tmp_path / "job.toml").write_text(dump_toml(data))
    r = subprocess.run([sys.executable, "-m", "streaming_app", "run", "--config", str(tmp_path / "job.toml"),
                        "--available-now", "--no-ui"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("ivmstream: error: [IVM500] lake_root s3a://lake/x: the bucket does not answer")
    assert "Traceback" not in r.stderr and SECRET not in r.stdout + r.stderr and len(r.stderr.splitlines()) == 1


# the spark-submit line names the jars `make setup` resolves (jvm/spark, jvm/s3a): slow tier, after setup
@pytest.mark.spark
def test_submit_of_a_job_on_an_s3_lake_brings_the_s3a_jars_and_no_key(tmp_path, monkeypatch):
    from streaming_app import submit
    from core.config import dump_toml

    data = {"job": {"name": "sub", "lake_root": "s3a://lake/x", "checkpoint_root": str(tmp_path / "ck")},
            "s3": {"endpoint": "http://127.0.0.1:9333", "access_key": "AK", "secret_key": SECRET}, "tables": TABLES}
    (tmp_path / "job.toml").write_text(dump_toml(data))
    argv, _ = submit.submit_command(parse_config(data), tmp_path / "job.toml", "spark://127.0.0.1:7177", [])
    confs = dict(a.split("=", 1) for a in argv[argv.index("--conf") + 1::2] if "=" in a and a.startswith("spark."))
    assert "hadoop-aws-3.5.0.jar" in confs["spark.executor.extraClassPath"]
    assert confs["spark.driver.extraClassPath"] == confs["spark.executor.extraClassPath"]
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9333"
    assert SECRET not in " ".join(argv) and "AK" not in argv  # the job sets the keys inside the JVM
    local = {**data, "job": {**data["job"], "lake_root": str(tmp_path / "lake")}}
    argv, _ = submit.submit_command(parse_config(local), tmp_path / "job.toml", "spark://127.0.0.1:7177", [])
    assert not any("extraClassPath" in a for a in argv)
