"""The statestore backend on two executor JVMs (``local-cluster[2,1,1024]``): the driver killed
mid-batch, then an executor killed mid-run; nothing lost, nothing doubled.

Run 1 is SIGKILLed in batch 1 after the mirror MERGE and before the sketch outputs (the state
store had already committed that batch's version on the executors). Run 2 replays batch 1,
and one of its two executor JVMs is SIGKILLed as soon as batch 2 begins: Spark starts another,
which loads its state partitions from the checkpoint. Checked after run 2: the mirror equals
the history's final rows; every batch id appears once in ``batches``; per query and fragment
the ``sketch_deltas`` alternate +1/-1 starting with +1 and end at the final sketch; the final
``sketches`` equal a from-scratch capture of the final mirror by the memory engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from connectors.kafka import create_topics
from core.config import dump_toml
from devstack.process import descendants
from devstack.producer import CdcProducer
from streaming_app.settings import parse_config
from tests.state.statestore_fixture import check_sketch_outputs, config_data, final_rows, history, send

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _executors(pid: int) -> list[int]:
    found = []
    for p in descendants(pid):
        try:
            if b"CoarseGrainedExecutorBackend" in open(f"/proc/{p}/cmdline", "rb").read():
                found.append(p)
        except OSError:
            pass
    return found


def _run(config_path, kill_at=None, kill_executor_at: str | None = None, timeout: float = 900):
    env = {k: v for k, v in os.environ.items() if k != "IVMSTREAM_KILL_AT"}
    if kill_at:
        env["IVMSTREAM_KILL_AT"] = kill_at
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(config_path),
                             "--available-now", "--no-ui"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, seen, killed = [], [0], None
    done = threading.Event()

    def count_executors():  # the most executor JVMs seen at once
        while not done.is_set():
            seen[0] = max(seen[0], len(_executors(proc.pid)))
            time.sleep(0.5)

    sampler = threading.Thread(target=count_executors, daemon=True)
    sampler.start()
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:
            lines.append(line)
            if kill_executor_at and killed is None and line.startswith(kill_executor_at):
                until = time.monotonic() + 120
                while len(victims := _executors(proc.pid)) < 2 and time.monotonic() < until:
                    time.sleep(0.5)
                assert len(victims) == 2, f"expected two executor JVMs, found {victims}"
                killed = victims[0]
                os.kill(killed, signal.SIGKILL)
            assert time.monotonic() < deadline, "run timed out"
        proc.wait(timeout=60)
    finally:
        done.set()
        sampler.join()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    seen_executors = seen[0]
    return proc.returncode, "".join(lines), seen_executors, killed


def test_driver_and_executor_kills_on_two_executors(spark, kafka_broker, tmp_path):
    topic = "sscluster.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    data = config_data(tmp_path, kafka_broker.bootstrap, "statestore", name="sscl", topic=topic, max_offsets=100,
                       master="local-cluster[2,1,1024]")
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    cfg = parse_config(data)
    events = history(290, keys=40, seed=5, truncate_every=170)
    prod = CdcProducer(kafka_broker.bootstrap)
    send(prod, cfg.table("t"), events)
    prod.close()

    rc, out, n_exec, _ = _run(path, kill_at="mirror.t:1")
    assert rc == -signal.SIGKILL and "fault injection: SIGKILL at mirror.t:1" in out, out[-3000:]
    rc, out, n_exec, killed = _run(path, kill_executor_at="batch     1:")
    assert rc == 0 and killed is not None, out[-3000:]

    lake = cfg.lake_root
    mirror = spark.read.format("delta").load(str(lake / "mirrors" / "t")).toArrow().to_pylist()
    assert sorted(mirror, key=lambda r: r["id"]) == sorted(final_rows(events).values(), key=lambda r: r["id"])
    ids = [r["batch_id"] for r in spark.read.format("delta").load(str(lake / "batches")).collect()]
    assert sorted(ids) == list(range(len(ids))) and len(ids) >= 3
    check_sketch_outputs(spark.read.format("delta").load(str(lake / "sketch_deltas")).collect(),
                         spark.read.format("delta").load(str(lake / "sketches")).collect(), events, cfg.table("t"))
