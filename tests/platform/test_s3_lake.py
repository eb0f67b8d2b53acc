"""The job with its lake on a real S3-API server (S3Proxy): every table it writes lives in the
bucket (mirrors, quarantine, batches, triangle counts, views, sketches, state snapshots), the
mirrors equal the produced history value for value, a restart restores the engines from their
snapshots in the bucket, and a second job on the same lake is refused while the first runs.
The checkpoint stays on a local folder (README: where the checkpoint may live)."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import networkx as nx
import pytest

from connectors import delta_sink as sink
from connectors import object_store as store
from connectors.kafka import create_topics
from core.config import dump_toml
from devstack.producer import CdcProducer
from streaming_app.settings import parse_config
from tests.jobproc import run_job_process
from tests.platform.cdc_fixture import History
from tests.platform.test_graph_e2e import _send
from tests.platform.test_ingest_e2e import _norm

pytestmark = [pytest.mark.s3, pytest.mark.kafka, pytest.mark.spark]


def _rows(path: str, key) -> list[dict]:
    return sorted(sink.read_table(path).to_pylist(), key=key)


def test_job_on_an_s3_lake_restart_and_one_writer(kafka_broker, s3_server, tmp_path):
    lake = s3_server.lake(f"e2e-{tmp_path.name}")
    data = {
        "job": {"name": "on_s3", "lake_root": lake, "checkpoint_root": str(tmp_path / "ckpt"),
                "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": kafka_broker.bootstrap, "max_offsets_per_trigger": 150},
        "spark": {"master": "local[2]", "ui": False, "driver_memory": "1g"},
        "s3": s3_server.s3_section(),
        "state": {"snapshot_every": 1},
        "tables": [
            {"name": "items", "topic": "s3l.items", "primary_key": "id",
             "columns": {"id": "long", "name": "string", "price": "decimal(10,2)", "qty": "int",
                         "day": "date", "ts": "timestamp", "ok": "boolean"}},
            {"name": "pairs", "topic": "s3l.pairs", "primary_key": ["a", "b"],
             "columns": {"a": "long", "b": "string", "v": "double"}},
            {"name": "edges", "topic": "s3l.edges", "primary_key": ["src", "dst"],
             "columns": {"src": "long", "dst": "long", "cost": "double"}},
        ],
        "graphs": [{"name": "g", "table": "edges", "mode": "undirected"}],
        "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
        "sketches": [{"name": "big_qty", "sql": "SELECT id, qty FROM items WHERE qty > 50",
                      "partition": "items.id", "fragments": 8}],
    }
    cfg = parse_config(data)
    store.use(cfg.s3)
    config = tmp_path / "job.toml"
    config.write_text(dump_toml(data))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    hist, rng, live, loops = History(cfg, seed=7), random.Random(7), {}, []
    prod = CdcProducer(kafka_broker.bootstrap)
    hist.send(prod, 200)
    _send(prod, cfg.table("edges"), live, rng, 100, loops)

    # while the first run holds the lake, a second job on it is refused before Spark starts
    first = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(config),
                              "--available-now", "--no-ui"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        time.sleep(3)
        other = tmp_path / "other.toml"
        other.write_text(dump_toml({**data, "job": {**data["job"], "name": "intruder",
                                                    "checkpoint_root": str(tmp_path / "ckpt2")}}))
        t0 = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "streaming_app", "run", "--config", str(other),
                                 "--available-now", "--no-ui"], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "in use" in second.stderr, second.stdout[-2000:] + second.stderr
        assert time.monotonic() - t0 < 60  # refused before a Spark session starts
        # so is a command that writes the lake from another process
        drop = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "drop", "--config", str(config),
                               "big_qty"], capture_output=True, text=True, timeout=120)
        assert drop.returncode == 2 and "in use" in drop.stderr, drop.stdout[-2000:] + drop.stderr
        out, _ = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, out[-3000:]

    # a second history, and a restart that restores every engine from its snapshot in the bucket
    hist.send(prod, 80)
    _send(prod, cfg.table("edges"), live, rng, 50, loops)
    prod.close()
    rc, out = run_job_process(config, None, timeout=600)
    assert rc == 0, out[-3000:]
    assert "triangles.g: restored from snapshot of batch" in out, out[-3000:]
    assert "view.reach: restored from snapshot of batch" in out, out[-3000:]

    lake_rs = lambda name: store.join(lake, name)  # noqa: E731
    assert _norm(_rows(lake_rs("mirrors/items"), lambda r: r["id"])) == _norm(hist.expected_rows("items"))
    assert _rows(lake_rs("mirrors/pairs"), lambda r: (r["a"], r["b"])) == hist.expected_rows("pairs")
    assert {(r["src"], r["dst"]): r for r in _rows(lake_rs("mirrors/edges"), lambda r: (r["src"], r["dst"]))} == live

    quarantine = store.rs_table(lake_rs("quarantine")).to_pyarrow_table().to_pylist()
    assert sorted(q["error_code"] for q in quarantine if q["topic"] != "s3l.edges") == sorted(hist.bad)
    batches = store.rs_table(lake_rs("batches")).to_pyarrow_table().to_pylist()
    assert sum(b["records_in"] for b in batches) == prod.sent
    assert len({(b["app_id"], b["batch_id"]) for b in batches}) == len(batches)

    g = nx.Graph()
    g.add_edges_from((u, v) for (u, v) in live if u != v)
    counts = store.rs_table(lake_rs("triangle_counts")).to_pyarrow_table().to_pylist()
    assert max(counts, key=lambda c: c["batch_id"])["triangles"] == sum(nx.triangles(g).values()) // 3
    d = nx.DiGraph()
    d.add_edges_from(live)
    closure = {(x, y) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = store.rs_table(lake_rs("reachability")).to_pyarrow_table().to_pylist()
    assert sorted((int(r["src"]), int(r["dst"])) for r in reach) == sorted(closure)

    shown = subprocess.run([sys.executable, "-m", "streaming_app", "sketch", "show", "--config", str(config),
                            "big_qty"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "big_qty" in shown.stdout, shown.stdout[-2000:] + shown.stderr
    sketch = store.rs_table(lake_rs("sketches")).to_pyarrow_table().to_pylist()
    assert [r["query"] for r in sketch] == ["big_qty"]
    items = hist.expected_rows("items")
    assert sketch[0]["n_fragments"] >= 1 and any(r["qty"] > 50 for r in items)
    snaps = store.rs_table(lake_rs("state_snapshots")).to_pyarrow_table(columns=["maintainer"]).column(
        "maintainer").to_pylist()
    assert {"triangles.g", "view.reach", "sketch.big_qty"} <= set(snaps)
    # nothing of the lake was written to a local folder
    assert not (tmp_path / "e2e").exists() and (s3_server.data_dir / s3_server.bucket / f"e2e-{tmp_path.name}").is_dir()

    # issue 42, blocker 2: the README's Spark SQL reader on this lake, through the job's config
    code = ("from streaming_app.spark_session import lake_session\n"
            f"spark, lake = lake_session(config={str(config)!r})\n"
            "print(lake, spark.sql(f'SELECT count(*) AS n FROM delta.`{lake}/batches`').first().n)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == [lake, str(len(batches))], r.stdout + r.stderr[-3000:]
    assert "SLF4J" not in r.stderr and "Exception" not in r.stderr, r.stderr[-3000:]
