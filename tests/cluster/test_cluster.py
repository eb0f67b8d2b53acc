"""The job submitted to a real Spark standalone cluster (a master and two workers of 1 core and
1 GB each, started with `ivmstream cluster` on free loopback ports, one for the module): a
SIGKILL of the driver in the middle of a batch and a restart lose and double nothing, and then
the mirrors equal the produced history value for value, a sketch equals a recapture by the
reference oracle, the triangle count and the reachability view equal networkx. Tables are read
back with delta-rs: the test process starts no Spark of its own."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import networkx as nx
import pytest

from connectors import delta_sink as sink
from connectors import object_store as store
from connectors.kafka import create_topics
from core.config import REPO_ROOT, dump_toml
from devstack.process import free_port
from devstack.producer import CdcProducer
from streaming_app.settings import parse_config
from tests.platform.cdc_fixture import History
from tests.platform.test_graph_e2e import _send

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]

SKETCH_SQL = "SELECT name, MAX(qty) AS top FROM items GROUP BY name HAVING MAX(qty) > 90"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`ivmstream cluster start` (2 workers x 1 core x 1g) on free ports; `stop` at the end."""
    from streaming_app.cluster import StandaloneCluster

    # the master's UI and the two workers' UIs on consecutive ports
    c = StandaloneCluster(tmp_path_factory.mktemp("spark"), port=free_port(), ui_port=_free_run(3),
                          workers=2, cores=1, memory="1g")
    flags = ["--dir", str(c.home), "--port", str(c.port), "--ui-port", str(c.ui_port)]
    r = _cli("cluster", "start", *flags, "--workers", "2", "--cores", "1", "--memory", "1g")
    assert r.returncode == 0 and f"Spark master ready at {c.url} with 2 workers" in r.stdout, r.stdout + r.stderr
    try:
        st = json.loads(_cli("cluster", "status", *flags).stdout)
        assert st["running"] and st["workers_alive"] == 2 and st["cores"] == 2 and st["memory_mb"] == 2048
        yield c
    finally:
        r = _cli("cluster", "stop", *flags)
        assert r.stdout.startswith("stopped worker-2, worker-1, master"), r.stdout + r.stderr
        assert _cli("cluster", "status", *flags).returncode == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming_app", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)


def _free_run(n: int) -> int:
    """A port p with p .. p+n-1 free (the workers' UIs follow the master's)."""
    from devstack.process import port_open

    while True:
        p = free_port()
        if p + n < 65536 and not any(port_open(p + i) for i in range(n)):
            return p


def _config(tmp_path, bootstrap: str, name: str, master: str, s3=None) -> tuple[dict, object]:
    """The job's config; with ``s3`` (the S3 server fixture) its lake lives in the server's bucket."""
    data = {
        "job": {"name": name, "lake_root": s3.lake(f"{name}-{tmp_path.name}") if s3 else str(tmp_path / "lake"),
                "checkpoint_root": str(tmp_path / "ckpt"), "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 400},
        "spark": {"master": master, "ui": False, "driver_memory": "1g"},
        "tables": [
            {"name": "items", "topic": f"{name}.items", "primary_key": "id",
             "columns": {"id": "long", "name": "string", "price": "decimal(10,2)", "qty": "int",
                         "day": "date", "ts": "timestamp", "ok": "boolean"}},
            {"name": "pairs", "topic": f"{name}.pairs", "primary_key": ["a", "b"],
             "columns": {"a": "long", "b": "string", "v": "double"}},
            {"name": "edges", "topic": f"{name}.edges", "primary_key": ["src", "dst"],
             "columns": {"src": "long", "dst": "long", "cost": "double"}},
        ],
        "sketches": [{"name": "top_qty", "sql": SKETCH_SQL, "partition": "items.id:8"}],
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected"}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
    }
    if s3:
        data["s3"] = s3.s3_section()
    (tmp_path / "job.toml").write_text(dump_toml(data))
    cfg = parse_config(data)
    store.use(cfg.s3)  # this process reads the tables back with delta-rs, on either lake
    return data, cfg


def _submit(cfg_file, master: str, kill_at: str | None = None, timeout: float = 900,
            on_line=None) -> tuple[int, str]:
    """(exit code, output) of `ivmstream submit --available-now` to ``master``; with ``kill_at``
    the driver's Python process SIGKILLs itself there, and the whole driver (spark-submit's JVM
    included) is SIGKILLed right after, as a lost driver host would be. ``on_line`` sees each
    line of output as it comes."""
    env = dict(os.environ)
    env.pop("IVMSTREAM_KILL_AT", None)
    if kill_at:
        env["IVMSTREAM_KILL_AT"] = kill_at
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "submit", "--config", str(cfg_file),
                             "--master", master, "--available-now", "--no-ui"], env=env, cwd=REPO_ROOT,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line)
        proc.wait()
        out = "".join(lines)
    finally:
        timer.cancel()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if kill_at:
        assert f"fault injection: SIGKILL at {kill_at}" in out, out[-3000:]
    assert "Using incubator modules" not in out  # dropped from the console as a local session drops it
    return proc.returncode, out


def _readme_submit(cfg_file, master: str, timeout: float = 900) -> tuple[int, str]:
    """The README's plain spark-submit block (Running on a cluster), run as written with this
    test's master and config."""
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("<!-- tests/cluster/test_cluster.py runs this block", 1)[1].split("```bash\n", 1)[1]
    block = block.split("```", 1)[0]
    assert "spark://127.0.0.1:7177" in block and "--config job.toml" in block
    block = block.replace("spark://127.0.0.1:7177", master).replace("--config job.toml", f"--config {cfg_file}")
    proc = subprocess.Popen(["bash", "-euc", block], cwd=REPO_ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out


def _rows(lake, *parts: str) -> list[dict]:
    return sink.read_table(store.join(lake, *parts)).to_pylist()


def _produce(bootstrap: str, cfg, seed: int):
    create_topics(bootstrap, cfg.topics, partitions=1)  # a TRUNCATE is exact on one partition
    hist = History(cfg, seed=seed)
    prod = CdcProducer(bootstrap)
    hist.send(prod, 900, debezium_kinds=True)
    rng, live = random.Random(seed), {}
    _send(prod, cfg.table("edges"), live, rng, 300, [])
    prod.close()
    return hist, live, prod.sent


def _check(cfg, hist, live, sent):
    lake = cfg.lake_root
    norm = lambda rows: [{k: (v.replace(tzinfo=None) if k == "ts" and v is not None else v)  # noqa: E731
                          for k, v in r.items()} for r in rows]
    items = sorted(_rows(lake, "mirrors", "items"), key=lambda r: r["id"])
    pairs = sorted(_rows(lake, "mirrors", "pairs"), key=lambda r: (r["a"], r["b"]))
    assert norm(items) == norm(hist.expected_rows("items"))
    assert norm(pairs) == norm(hist.expected_rows("pairs"))
    edges = _rows(lake, "mirrors", "edges")
    assert {(e["src"], e["dst"]): e for e in edges} == live

    batches = _rows(lake, "batches")
    ids = [b["batch_id"] for b in batches]
    assert len(ids) == len(set(ids)) and len(ids) >= 3
    assert sum(b["records_in"] for b in batches) == sent  # every Kafka record once
    # the edge table's self-loops are the graph engines' DATA_BAD_EDGE rows: only the history's here
    bad = [r["error_code"] for r in _rows(lake, "quarantine") if r["topic"] != cfg.table("edges").topic]
    assert sorted(bad) == sorted(hist.bad)

    _check_graph(lake, live)

    import pyarrow as pa

    from operators.sketch import RangePartition
    from tests.oracles.sketch_reference import reference_sketch

    reg = [r for r in _rows(lake, "registered_queries") if r["name"] == "top_qty"]
    part = {"items": RangePartition("id", json.loads(reg[0]["boundaries"])["values"])}
    want = reference_sketch(SKETCH_SQL, {"items": pa.Table.from_pylist(items)}, part)["items"]
    got = [r for r in _rows(lake, "sketches") if r["query"] == "top_qty"]
    assert want and list(got[0]["fragments"]) == want


def _check_graph(lake, live: dict) -> None:
    """The triangle count of graph g and the reachability view equal networkx's on the live edges."""
    g = nx.Graph((u, v) for (u, v) in live if u != v)
    counts = [r for r in _rows(lake, "triangle_counts") if r["graph"] == "g"]
    assert len({r["batch_id"] for r in counts}) == len(counts)
    assert max(counts, key=lambda r: r["batch_id"])["triangles"] == sum(nx.triangles(g).values()) // 3
    d = nx.DiGraph(list(live))
    closure = {(x, y) for x in d for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    assert {(int(r["src"]), int(r["dst"])) for r in _rows(lake, "reachability") if r["view"] == "reach"} == closure


def test_driver_sigkill_mid_batch_then_restart_equals_history_sketch_and_networkx(cluster, kafka_broker, tmp_path):
    """`ivmstream submit` runs batch 0 and is SIGKILLed inside batch 1 (after its items commit, before
    its pairs and edges commits and its record); the README's plain spark-submit restarts it on the
    same checkpoint and lake. Two submissions in one test: each costs a driver and two executors."""
    _, cfg = _config(tmp_path, kafka_broker.bootstrap, "clk", cluster.url)
    hist, live, sent = _produce(kafka_broker.bootstrap, cfg, seed=9)
    rc, out = _submit(tmp_path / "job.toml", cluster.url, kill_at="mirror.items:1")
    assert rc != 0 and "batch     0:" in out, out[-4000:]
    rc, out = _readme_submit(tmp_path / "job.toml", cluster.url)  # restarted with plain spark-submit
    assert rc == 0 and "Traceback" not in out, out[-4000:]
    assert "batch     1:" in out, out[-4000:]  # the killed batch ran again, whole
    _check(cfg, hist, live, sent)


def test_submit_refuses_bad_flags_before_spark(cluster, tmp_path):
    _config(tmp_path, "127.0.0.1:1", "bad", cluster.url)
    for extra, text in ((["--master", "spark://127.0.0.1:1"], "no Spark master answers at spark://127.0.0.1:1"),
                        (["--master", "spark://nowhere"], "a standalone master is spark://HOST:PORT"),
                        (["--duration", "-3"], "--duration")):
        r = subprocess.run([sys.executable, "-m", "streaming_app", "submit", "--config", str(tmp_path / "job.toml"),
                            *extra], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
        assert r.returncode == 2 and r.stdout == "", (extra, r.stdout, r.stderr)
        assert r.stderr.startswith("ivmstream: error: [IVM") and text in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.s3
def test_lake_on_the_s3_server_driver_sigkill_then_restart(cluster, kafka_broker, s3_server, tmp_path):
    """Deployed as production runs: the job on the 2-worker cluster with every table in the S3
    server's bucket (the checkpoint on a filesystem: README, where the checkpoint may live).
    `ivmstream submit` is SIGKILLed inside batch 1, after its items commit on the store; a second
    `ivmstream submit` finishes the history, and the bucket's tables equal it, once each."""
    _, cfg = _config(tmp_path, kafka_broker.bootstrap, "cls3", cluster.url, s3=s3_server)
    assert str(cfg.lake_root).startswith("s3a://")
    hist, live, sent = _produce(kafka_broker.bootstrap, cfg, seed=9)
    rc, out = _submit(tmp_path / "job.toml", cluster.url, kill_at="mirror.items:1")
    assert rc != 0 and "batch     0:" in out, out[-4000:]
    assert "Py4JException" not in out and "StreamingQueryListenerBus" not in out, out[-4000:]  # issue 42, 6
    rc, out = _submit(tmp_path / "job.toml", cluster.url)
    assert rc == 0 and "Traceback" not in out, out[-4000:]
    assert "SLF4J" not in out, out[-4000:]  # the AWS SDK's shaded notice (issue 42, blocker 6)
    assert "batch     1:" in out, out[-4000:]  # the killed batch ran again, whole
    _check(cfg, hist, live, sent)


def _executors(cluster) -> list[int]:
    """The executor JVMs the cluster's workers run now for the newest application (an ended
    one's may still be going away)."""
    from devstack.process import descendants

    found = {}
    for name in ("worker-1", "worker-2"):
        pid = cluster.pid(name)
        for p in descendants(pid) if pid else ():
            try:
                args = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
                found[p] = args[args.index(b"--app-id") + 1]
    newest = max(found.values(), default=None)
    return [p for p, app in found.items() if app == newest]


@pytest.mark.s3
@pytest.mark.spark
def test_statestore_backend_on_the_cluster_and_s3_kills_and_a_rebalancing_restart(cluster, kafka_broker, s3_server,
                                                                                    tmp_path):
    """The statestore backend as production runs it: keyed state in RocksDB on the cluster's two
    executors, every table in the S3 server's bucket. Run 1 is SIGKILLed in batch 1 after the
    mirror's commit on the store (the state store had committed that batch's version); run 2
    replays it, and one executor JVM is SIGKILLed as batch 2 begins (the master starts another,
    which opens that executor's state partitions from the checkpoint); run 3, after more changes,
    gets one executor (``spark.cores.max = 1``), which opens every state partition. Then the
    mirror equals the history, each batch is written once, per query and fragment the sketch
    changes alternate +1/-1 (a doubled or lost change breaks that), the sketches equal a
    from-scratch capture of the final rows by the memory engine, and the triangle count and
    reachability view (on the driver beside the keyed state) equal networkx."""
    from tests.state.statestore_fixture import check_sketch_outputs, config_data, final_rows, history, send

    data = config_data(tmp_path, kafka_broker.bootstrap, "statestore", name="clss", topic="clss.t",
                       max_offsets=100, master=cluster.url)
    data["job"]["lake_root"] = s3_server.lake(f"clss-{tmp_path.name}")
    data["s3"] = s3_server.s3_section()
    data["tables"].append({"name": "edges", "topic": "clss.edges", "primary_key": ["src", "dst"],
                           "columns": {"src": "long", "dst": "long", "cost": "double"}})
    data["graphs"] = [{"name": "g", "table": "edges", "mode": "undirected"}]  # on the driver beside the keyed state
    data["views"] = [{"name": "reach", "table": "edges", "kind": "reachability"}]
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    cfg = parse_config(data)
    store.use(cfg.s3)
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=1)
    live: dict = {}
    first = history(290, keys=40, seed=5, truncate_every=170, live=live)
    prod = CdcProducer(kafka_broker.bootstrap)
    send(prod, cfg.table("t"), first)
    edges: dict = {}
    _send(prod, cfg.table("edges"), edges, random.Random(5), 200, [])

    rc, out = _submit(path, cluster.url, kill_at="mirror.t:1")
    assert rc != 0 and "batch     0:" in out, out[-4000:]

    killed = []

    def kill_one_executor(line: str) -> None:
        if not killed and line.startswith("batch     1:"):
            until = time.monotonic() + 60
            while len(victims := _executors(cluster)) < 2 and time.monotonic() < until:
                time.sleep(0.5)
            assert len(victims) == 2, f"expected two executor JVMs, found {victims}"
            os.kill(victims[0], signal.SIGKILL)
            killed.append(victims[0])

    rc, out = _submit(path, cluster.url, on_line=kill_one_executor)
    assert rc == 0 and killed and "Traceback" not in out, out[-4000:]
    assert "batch     1:" in out and "batch     2:" in out, out[-4000:]  # batch 1 again, whole; 2 after the kill

    second = history(150, keys=40, seed=6, live=live)
    send(prod, cfg.table("t"), second)
    _send(prod, cfg.table("edges"), edges, random.Random(6), 100, [])
    prod.close()
    data["spark"]["conf"] = {"spark.cores.max": "1"}  # one executor holds every state partition now
    path.write_text(dump_toml(data))
    seen = []

    def count_executors(line: str) -> None:
        if line.startswith("batch "):
            seen.append(len(_executors(cluster)))

    rc, out = _submit(path, cluster.url, on_line=count_executors)
    assert rc == 0 and "Traceback" not in out, out[-4000:]
    assert seen and max(seen) == 1, seen  # a batch ran, on one executor

    events = first + second
    lake = cfg.lake_root
    mirror = sorted(_rows(lake, "mirrors", "t"), key=lambda r: r["id"])
    assert mirror == sorted(final_rows(events).values(), key=lambda r: r["id"])
    ids = sorted(r["batch_id"] for r in _rows(lake, "batches"))
    assert ids == list(range(len(ids))) and len(ids) >= 5
    check_sketch_outputs(_rows(lake, "sketch_deltas"), _rows(lake, "sketches"), events, cfg.table("t"))
    _check_graph(lake, edges)  # the driver's graph maintainers beside the statestore backend, against networkx
