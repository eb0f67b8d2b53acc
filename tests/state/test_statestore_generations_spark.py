"""A sketch added to, then removed from, a running statestore job: new checkpoint generations,
with driver kills around the switch; nothing lost, nothing doubled.

One lake, one history in three parts through the real broker, ``local[2]``, RocksDB, Delta:

a. sketch ``having`` only; part 1 (batch 0), in this process;
b. part 2 sent (batches 1-3); the driver is SIGKILLed in batch 2 after its mirror MERGE
   (generation 1 has a planned batch whose ``batches`` row is missing);
c. ``select`` added: generation 1 finishes batch 2 with its own query, generation 2 (both
   queries, captured from the mirrors as batch 2 left them) starts after it, and the driver is
   SIGKILLed in generation 2's first batch (3), right after the switch;
d. restart: generation 2 replays batch 3, to the end of part 2;
e. ``having`` dropped, part 3 (batch 4): generation 3 with ``select`` alone.

Oracles after d and e: the mirror equals the history's final rows; ``batches`` holds each batch
id once, contiguous across generations; per query, its ``sketch_deltas`` replayed from the
sketch it started with (empty for ``having``, a from-scratch capture of the mirror at the
generation's versions for ``select``) never add a fragment already in or remove one not in, and
end at the final ``sketches`` row, which equals a from-scratch capture of the final mirror by
the memory backend's engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import deltalake
import pyarrow as pa
import pytest

from connectors import delta_sink as sink
from connectors.delta_sink import arrow_schema
from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from operators.sketch import RangePartition, SketchMaintainer
from core.config import dump_toml
from streaming_app.settings import parse_config
from streaming_app.runner import run_job
from state.statestore import generations
from tests.state.statestore_fixture import BOUNDS, SKETCHES, config_data, final_rows, history, send

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _config(tmp_path, bootstrap: str, topic: str, names: list[str]):
    data = config_data(tmp_path, bootstrap, "statestore", name="ssgen", topic=topic,
                       sketches={n: SKETCHES[n] for n in names})
    path = tmp_path / "job.toml"
    path.write_text(dump_toml(data))
    return path, parse_config(data)


def _killed_run(path, kill_at: str) -> str:
    env = {**os.environ, "IVMSTREAM_KILL_AT": kill_at}
    proc = subprocess.Popen([sys.executable, "-m", "streaming_app", "run", "--config", str(path), "--available-now",
                             "--no-ui"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:  # the driver's JVM and Python workers with it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL and f"fault injection: SIGKILL at {kill_at}" in out, out[-3000:]
    return out


def _sketch_of(sql: str, rows: list[dict], cfg) -> list[int]:
    m = SketchMaintainer(sql, {"t": RangePartition("p", BOUNDS)})
    m.initialize({"t": pa.Table.from_pylist(sorted(rows, key=lambda r: r["id"]), schema=arrow_schema(cfg.table("t")))})
    return sorted(m.sketch["t"])


def _check(cfg, events, starts: dict) -> dict:
    """The oracles of the module docstring; ``starts``: query -> the sketch its deltas start from."""
    lake = cfg.lake_root
    mirror = sink.read_table(str(lake / "mirrors" / "t")).to_pylist()
    final = final_rows(events)
    assert sorted(mirror, key=lambda r: r["id"]) == sorted(final.values(), key=lambda r: r["id"])
    ids = deltalake.DeltaTable(str(lake / "batches")).to_pyarrow_table().column("batch_id").to_pylist()
    assert sorted(ids) == list(range(len(ids))), ids  # each batch once, ids going on across generations
    deltas = deltalake.DeltaTable(str(lake / "sketch_deltas")).to_pyarrow_table().to_pylist()
    sketches = {r["query"]: sorted(r["fragments"]) for r in
                deltalake.DeltaTable(str(lake / "sketches")).to_pyarrow_table().to_pylist()}
    for name, start in starts.items():
        held = set(start)
        for d in sorted((d for d in deltas if d["query"] == name), key=lambda d: (d["batch_id"], -d["change"])):
            f = d["fragment"]
            assert (f in held) == (d["change"] < 0), f"{name}: fragment {f} {d['change']:+d} in batch {d['batch_id']}"
            (held.add if d["change"] > 0 else held.discard)(f)
        want = _sketch_of(SKETCHES[name], list(final.values()), cfg)
        assert sorted(held) == want and sketches[name] == want, name
    return sketches


def test_sketches_added_and_removed_on_a_running_checkpoint(spark, kafka_broker, tmp_path):
    from streaming_app.sketches.register import drop_query

    topic = "ssgen.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    live: dict = {}
    parts = [history(80, keys=50, seed=31, live=live), history(240, keys=50, seed=32, truncate_every=120, live=live),
             history(80, keys=50, seed=33, live=live)]
    prod = CdcProducer(kafka_broker.bootstrap)
    path, cfg = _config(tmp_path, kafka_broker.bootstrap, topic, ["having"])
    root = cfg.checkpoint_dir

    send(prod, cfg.table("t"), parts[0])  # a
    run_job(cfg, available_now=True, quiet=True, spark=spark)
    send(prod, cfg.table("t"), parts[1])  # b
    _killed_run(path, "mirror.t:2")
    assert generations.last_planned(root) == 2

    path, cfg = _config(tmp_path, kafka_broker.bootstrap, topic, ["having", "select"])  # c
    out = _killed_run(path, "mirror.t:3")
    assert "statestore: batch 2 of state generation 1 did not finish; finishing it" in out, out[-3000:]
    assert "statestore: queries changed (+select); new state generation 2 from offsets" in out, out[-3000:]
    gen = generations.current(root)
    assert (gen.number, gen.base) == (2, 3) and not (root / "offsets").exists()  # generation 1 removed
    at_switch = sink.read_version(None, str(cfg.lake_root / "mirrors" / "t"), gen.versions["t"])
    select0 = _sketch_of(SKETCHES["select"], at_switch.to_pylist(), cfg)

    run_job(cfg, available_now=True, quiet=True, spark=spark)  # d
    _check(cfg, parts[0] + parts[1], {"having": [], "select": select0})

    drop_query(spark, cfg, "having")  # e
    path, cfg = _config(tmp_path, kafka_broker.bootstrap, topic, ["select"])
    send(prod, cfg.table("t"), parts[2])
    prod.close()
    run_job(cfg, available_now=True, quiet=True, spark=spark)
    gen3 = generations.current(root)
    assert (gen3.number, gen3.added) == (3, []) and not gen.path.exists()
    assert json.loads(gen3.starting_offsets)[topic]["0"] == len(parts[0]) + len(parts[1])
    sketches = _check(cfg, parts[0] + parts[1] + parts[2], {"select": select0})
    assert set(sketches) == {"select"}


V2_STATE = ["cdc_image_pages_v2", "imp_group_pages_v2", "mu_fragment_v1"]  # the layout before imp_groups_v3


def _as_previous_layout(ckpt) -> None:
    """The checkpoint's pin as the release before ``imp_groups_v3`` wrote it (its state is never
    read again: a new generation recaptures from the mirrors, which is what this checks)."""
    pin = generations.read_pin(ckpt)
    pin["state"] = V2_STATE
    pin.pop("group_buckets", None)
    generations.write_pin(ckpt, pin)


def test_a_checkpoint_of_the_previous_state_layout_recaptures_or_is_refused(spark, kafka_broker, tmp_path, capsys):
    """A checkpoint pinned with the previous state layout: this release starts a new generation
    captured from the mirrors (nothing lost or doubled: the oracles of ``_check``); and when a batch
    did not finish under the previous layout, it refuses to start with one line saying what to do."""
    from core.errors import ConfigError

    topic = "sslay.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    live: dict = {}
    parts = [history(80, keys=40, seed=41, live=live), history(80, keys=40, seed=42, truncate_every=50, live=live),
             history(80, keys=40, seed=43, live=live)]
    prod = CdcProducer(kafka_broker.bootstrap)
    path, cfg = _config(tmp_path, kafka_broker.bootstrap, topic, ["having", "select"])
    root = cfg.checkpoint_dir
    send(prod, cfg.table("t"), parts[0])
    run_job(cfg, available_now=True, quiet=True, spark=spark)  # batch 0, generation 1
    _as_previous_layout(root)
    send(prod, cfg.table("t"), parts[1])
    capsys.readouterr()
    run_job(cfg, available_now=True, quiet=True, spark=spark)
    out = capsys.readouterr().out
    assert f"state {V2_STATE} -> " in out and "new state generation 2 from offsets" in out, out[-3000:]
    gen = generations.current(root)
    assert (gen.number, gen.base, gen.added) == (2, 1, []) and generations.read_pin(gen.dir)["group_buckets"] == 64
    _check(cfg, parts[0] + parts[1], {"having": [], "select": []})

    send(prod, cfg.table("t"), parts[2])
    prod.close()
    _killed_run(path, "mirror.t:2")  # batch 2 planned, its batches row missing
    _as_previous_layout(gen.dir)
    with pytest.raises(ConfigError, match="batch 2 did not finish under state layout .*; finish it once with the "
                                          "previous release, then start this one") as e:
        run_job(cfg, available_now=True, quiet=True, spark=spark)
    assert "\n" not in str(e.value) and generations.current(root).number == 2
