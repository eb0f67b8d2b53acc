"""Issue 26, item 4: a newcomer's likely mistakes each end in one line that says what to do,
before Spark starts: a lake or checkpoint that cannot be written, a second job or demo on the
same lake or checkpoint (refused with the holder's pid, nothing of the first one wiped), no
broker (a line at once, retries, then an error, never a silent exit 0), a bad ``--master``,
a table typo in ``query --sql``. The missing topic needs a real broker: the ``kafka`` case
at the end. Spark is never started here (pyspark stays unimported)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_app import cli, preflight
from core.config import dump_toml

REPO = Path(__file__).resolve().parents[2]

CONFIG = {
    "job": {"name": "newbie", "lake_root": "lake", "checkpoint_root": "ckpt", "trigger_interval_s": 1},
    "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    "spark": {"master": "local[1]", "ui": False},
    "tables": [{"name": "orders", "topic": "nb.orders", "primary_key": ["id"],
                "columns": {"id": "long", "total": "double"}}],
}


def config(tmp_path, **job) -> Path:
    data = {**CONFIG, "job": {**CONFIG["job"], **job}}
    f = tmp_path / "job.toml"
    f.write_text(dump_toml(data))
    return f


def one_line(err: str, code: str, *words: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ivmstream: error: [{code}] "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture(autouse=True)
def no_spark(monkeypatch):
    """Spark must not start in any of these cases."""
    from streaming_app import spark_session

    def reached(*a, **k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(spark_session, "build_session", reached)
    for var in ("IVMSTREAM_CONFIG", "IVMSTREAM_BOOTSTRAP_SERVERS", "IVMSTREAM_SPARK_MASTER",
                "IVMSTREAM_LAKE_ROOT", "IVMSTREAM_CHECKPOINT_ROOT"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("key", ["lake_root", "checkpoint_root"])
def test_a_folder_that_cannot_be_written(tmp_path, capsys, key):
    (tmp_path / "afile").write_text("x")  # a folder under a file: cannot be made, even by root
    f = config(tmp_path, **{key: str(tmp_path / "afile" / "sub")})
    assert cli.main(["run", "--config", str(f)]) == 2
    one_line(capsys.readouterr().err, "IVM100", str(tmp_path / "afile" / "sub"), "cannot be written")


HOLD = """
import sys, time
from pathlib import Path
from streaming_app.preflight import folder_lock
with folder_lock(Path(sys.argv[1]), "lake_root", "job other"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding a folder's lock, as a running job does."""
    procs = []

    def hold(folder: Path) -> subprocess.Popen:
        folder.mkdir(parents=True, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p

    yield hold
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("which", ["lake", "ckpt/newbie"])
def test_a_second_job_on_the_same_lake_or_checkpoint(tmp_path, capsys, holder, which):
    f = config(tmp_path)
    other = holder(tmp_path / which)
    assert cli.main(["run", "--config", str(f)]) == 2
    one_line(capsys.readouterr().err, "IVM120", f"in use by pid {other.pid} (job other)", str(tmp_path / which))


def test_the_lock_goes_with_its_holder(tmp_path):
    """A killed job leaves its lock file, not its lock: the next job takes it."""
    folder = tmp_path / "lake"
    folder.mkdir()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    with pytest.raises(preflight.InUseError):
        with preflight.folder_lock(folder, "lake_root", "job me"):
            pass
    p.kill()
    p.wait()
    with preflight.folder_lock(folder, "lake_root", "job me"):
        with preflight.folder_lock(folder, "lake_root", "job me"):  # the same process again: fine
            assert (folder / preflight.LOCK_NAME).read_text().split()[0] == str(__import__("os").getpid())


def test_a_second_demo_wipes_nothing_of_the_first(tmp_path, capsys, holder, monkeypatch):
    """The demo takes its folders' locks before it starts a broker or empties anything."""
    from devstack import kafka_broker
    from streaming_app import demo_run
    from streaming_app.settings import load_config

    f = config(tmp_path)
    monkeypatch.setattr(demo_run, "load_config", lambda _path: load_config(f))
    monkeypatch.setattr(demo_run, "reset_topics", lambda *a, **k: pytest.fail("the second demo reset topics"))
    monkeypatch.setattr(kafka_broker.EmbeddedBroker, "start", lambda self: pytest.fail("it started a broker"))
    (tmp_path / "lake" / "mirrors").mkdir(parents=True)
    other = holder(tmp_path / "lake")
    assert cli.main(["demo", "--port", "1", "--broker-dir", str(tmp_path / "kafka")]) == 2
    one_line(capsys.readouterr().err, "IVM120", f"pid {other.pid}")
    assert (tmp_path / "lake" / "mirrors").is_dir()


def test_no_broker_a_line_at_once_then_retries_then_an_error(tmp_path, capsys, monkeypatch):
    from devstack.process import free_port

    monkeypatch.setattr(preflight, "BROKER_RETRY_S", 0.3)
    f = config(tmp_path)
    t0 = time.monotonic()
    rc = cli.main(["run", "--config", str(f), "--bootstrap-servers", f"127.0.0.1:{free_port()}",
                   "--duration", "1.5"])
    out = capsys.readouterr()
    assert rc == 2 and time.monotonic() - t0 < 30
    said = [x for x in out.out.splitlines() if "no Kafka broker answers at" in x]
    assert len(said) >= 2 and "retrying every" in said[0], out.out
    one_line(out.err, "IVM500", "no Kafka broker answered", "nothing was read")


@pytest.mark.parametrize("master", ["bogus", "local[0]", "spark://nohost", "local[*]x"])
def test_a_bad_master(tmp_path, capsys, master):
    f = config(tmp_path)
    assert cli.main(["run", "--config", str(f), "--master", master]) == 2
    one_line(capsys.readouterr().err, "IVM100", "--master", master, "local[*]")


def test_a_bad_master_in_the_file(tmp_path, capsys):
    data = {**CONFIG, "spark": {"master": "lokal[2]"}}
    (tmp_path / "job.toml").write_text(dump_toml(data))
    assert cli.main(["run", "--config", str(tmp_path / "job.toml")]) == 2
    one_line(capsys.readouterr().err, "IVM100", "[spark]", "lokal[2]")


def test_a_table_typo_in_query(tmp_path, capsys):
    f = config(tmp_path)
    assert cli.main(["query", "--config", str(f), "--sql", "SELECT count(*) FROM ordrs"]) == 2
    one_line(capsys.readouterr().err, "IVM200", "'ordrs'", "its tables: orders")


def test_a_query_before_the_job_wrote_the_table(tmp_path, capsys):
    f = config(tmp_path)
    assert cli.main(["query", "--config", str(f), "--sql", "WITH x AS (SELECT * FROM orders) SELECT * FROM x"]) == 2
    one_line(capsys.readouterr().err, "IVM100", "'orders' has no mirror in", str(tmp_path / "lake"))


@pytest.mark.kafka
def test_a_topic_that_does_not_exist(tmp_path, capsys, kafka_broker):
    """Named with its table, and how to create it; before Spark starts."""
    f = config(tmp_path)
    assert cli.main(["run", "--config", str(f), "--bootstrap-servers", kafka_broker.bootstrap]) == 2
    one_line(capsys.readouterr().err, "IVM500", "topic 'nb.orders' of table 'orders' does not exist",
             f"ivmstream produce --config {f} --table orders --count 0")


def test_the_batch_line_carries_the_sketch_figures_and_never_an_empty_list():
    """Item 6: the per-query sketch figures print with their batch's line (in order, before the
    next batch and the summary), and a batch that maintained no query prints no empty '()'."""
    import json

    from streaming_app.runner import batch_line

    row = {"batch_id": 3, "records_in": 20000, "events": 19990, "keys_changed": 19000, "quarantined": 2,
           "step_ms": {"collect": 400.0, "maintain:sketches": 120.0}, "operators": [
               {"name": "sketches", "rows_in": 300, "deltas_out": 2, "ms": 120.0, "state_size": 50}]}
    quiet = batch_line({**row, "metrics": json.dumps({"sketches": {"per_query": {}}})})
    assert "()" not in quiet and "sketches: 300 in, 2 out, 120 ms" in quiet and "fragments" not in quiet
    per = {"big_orders": {"delta_rows": 300, "added": 1, "removed": 1, "ms": 80.0}}
    loud = batch_line({**row, "metrics": json.dumps({"sketches": {"per_query": per}})})
    assert loud.splitlines()[-1].strip() == "sketches: big_orders 300 rows +1/-1 fragments 80 ms"


_UI_HANGUP = """
import socket, struct, sys
from devstack.process import free_port
from core.config import SparkConfig
from streaming_app.spark_session import SessionOptions, build_session
spark = build_session(SparkConfig(master="local[1]", ui_port=free_port()), SessionOptions(app_name="ui", ui=True))
host, port = spark.sparkContext.uiWebUrl.split("//")[1].split(":")
app = spark.sparkContext.applicationId
for _ in range(30):  # REST clients that hang up before the answer is written (a reset, not a close)
    s = socket.create_connection((host, int(port)))
    s.sendall(f"GET /api/v1/applications/{app}/environment HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
spark.range(10).count()  # the UI has had time to answer (and fail to)
print("ASKED", flush=True)
spark.stop()
"""


@pytest.mark.spark
def test_no_jetty_stack_when_a_ui_client_hangs_up(tmp_path):
    """A REST client of the Spark UI that hangs up printed a stack of ~100 lines per request
    (Jersey's ERROR for the reset connection); the job's console stays quiet."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    r = subprocess.run([sys.executable, "-c", _UI_HANGUP], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=600)
    assert "ASKED" in r.stdout, r.stderr[-2000:]
    noise = [x for x in r.stderr.splitlines() if "Exception" in x or x.startswith("\tat ")]
    assert not noise, "\n".join(noise[:10])
