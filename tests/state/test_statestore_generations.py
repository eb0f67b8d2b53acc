"""Checkpoint generations of the statestore backend without Spark: where a new generation
starts, which batch ids and writer it continues with, what a changed pin means, and the files.

The offsets log entries below have the layout Spark 4.2 writes (a version line, the batch
metadata, one line of offsets per source), copied from a checkpoint of the job."""

from __future__ import annotations

import json

import pytest

from state.statestore import generations as G

META = ('{"batchWatermarkMs":0,"batchTimestampMs":1795674427533,"conf":{"spark.sql.shuffle.partitions":"2",'
        '"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.state.'
        'RocksDBStateStoreProvider"}}')


def _spark_checkpoint(ckpt, planned: int, committed: int, qid: str = "81fc270d-9614") -> None:
    """A Spark checkpoint whose offsets log has batches 0..planned and commits 0..committed;
    batch b ends at offset 10 (b + 1) of topic t's partition 0."""
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    for b in range(planned + 1):
        (ckpt / "offsets" / str(b)).write_text(f"v1\n{META}\n{json.dumps({'t': {'0': 10 * (b + 1)}})}")
    for b in range(committed + 1):
        (ckpt / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (ckpt / "metadata").write_text(json.dumps({"id": qid}))


PIN = {"queries": {"a": "SELECT 1", "b": "SELECT 2"}, "partitions": {"a": [["t", "p", 4, "x"]], "b": [["t", "p", 4, "x"]]},
       "cdc_buckets": 8, "state": ["cdc_image_pages_v2", "imp_groups_v3", "mu_fragment_v1"], "group_buckets": 64}


def test_generation_one_is_the_checkpoint_root_until_a_switch_commits(tmp_path):
    gen = G.current(tmp_path)
    assert (gen.number, gen.path, gen.base, gen.app_id, gen.starting_offsets) == (1, tmp_path, 0, None, None)
    _spark_checkpoint(tmp_path, planned=3, committed=3)
    assert G.writer_id(gen, "job") == "job:81fc270d-9614"  # generation 1's writer: the job and its query id
    pos = G.position(gen, last_done=3)
    assert not G.pending(pos)
    new = G.successor(tmp_path, gen, "job:81fc270d-9614", pos, G.source_offsets(tmp_path, 3), {"t": 7}, ["c"])
    # batch ids go on after the last finished one, under the same writer, from batch 3's end offsets
    assert (new.number, new.base, new.app_id) == (2, 4, "job:81fc270d-9614")
    assert json.loads(new.starting_offsets) == {"t": {"0": 40}} and new.versions == {"t": 7}
    assert new.path == tmp_path / "generation-2" and new.added == ["c"]
    assert G.current(tmp_path).number == 1  # nothing switched until commit
    G.commit(tmp_path, new)
    assert G.current(tmp_path) == new
    assert G.writer_id(new, "job") == "job:81fc270d-9614"  # inherited, not generation 2's own query id
    # generation 3 after generation 2 finished batches 4..6 (its Spark batches 0..2)
    _spark_checkpoint(new.path, planned=2, committed=2, qid="other")
    third = G.successor(tmp_path, new, new.app_id, G.position(new, 6), G.source_offsets(new.path, 6 - new.base),
                        {"t": 9}, [])
    assert (third.number, third.base, json.loads(third.starting_offsets)) == (3, 7, {"t": {"0": 30}})


def test_a_planned_batch_without_its_batches_row_is_pending(tmp_path):
    _spark_checkpoint(tmp_path, planned=5, committed=4)
    gen = G.current(tmp_path)
    assert G.pending(G.position(gen, last_done=4))  # planned 5, its batches row missing: some writes may have landed
    with pytest.raises(ValueError, match="pending"):
        G.successor(tmp_path, gen, "a", G.position(gen, 4), None, {}, [])
    # the batches row of 5 exists but Spark's commit did not: finished, nothing pending
    assert not G.pending(G.position(gen, last_done=5))
    # in generation 2 (base 6) the offsets log counts from 0
    g2 = G.Generation(2, str(tmp_path / "g2"), "a", 6)
    _spark_checkpoint(tmp_path / "g2", planned=1, committed=0)
    assert G.position(g2, 6) == G.Position(6, 7) and G.pending(G.position(g2, 6))
    assert not G.pending(G.position(g2, 7))


def test_a_generation_that_finished_no_batch_is_replaced_from_its_own_start(tmp_path):
    g2 = G.Generation(2, str(tmp_path / "generation-2"), "a", 10, '{"t": {"0": 99}}', {"t": 4}, ["x"])
    pos = G.position(g2, last_done=9)  # batch 9 was generation 1's; generation 2 never planned one
    assert pos.last_planned is None and not G.pending(pos)
    g3 = G.successor(tmp_path, g2, "a", pos, None, {"t": 5}, ["y"])
    assert (g3.number, g3.base, g3.starting_offsets, g3.versions) == (3, 10, '{"t": {"0": 99}}', {"t": 4})
    g1 = G.current(tmp_path)  # never started: the config's startingOffsets and the newest versions
    g2b = G.successor(tmp_path, g1, None, G.position(g1, -1), None, {}, ["x"])
    assert (g2b.base, g2b.starting_offsets, g2b.versions, g2b.app_id) == (0, None, None, None)


def test_pins_compare_queries_partitions_buckets_and_layout():
    now = json.loads(json.dumps(PIN))
    assert not G.differs(PIN, now)
    more = {**now, "queries": {**now["queries"], "c": "SELECT 3"}, "partitions": {**now["partitions"], "c": []}}
    assert G.differs(PIN, more) and G.describe(PIN, more) == "queries changed (+c)"
    assert G.added(PIN, more) == ["c"]
    less = {**now, "queries": {"a": "SELECT 1"}}
    assert G.differs(PIN, less) and G.describe(PIN, less) == "queries changed (-b)" and G.added(PIN, less) == []
    other = {**now, "queries": {"a": "SELECT 1", "b": "SELECT 22"}}
    assert G.describe(PIN, other) == "queries changed (~b)" and G.added(PIN, other) == ["b"]
    rebound = {**now, "partitions": {**now["partitions"], "a": [["t", "p", 8, "y"]]}}
    assert G.differs(PIN, rebound) and G.added(PIN, rebound) == ["a"]
    assert G.describe(PIN, {**now, "cdc_buckets": 16}) == "cdc_buckets 8 -> 16"
    # a pin from before pins named partitions: compared on the rest only
    old = {k: v for k, v in PIN.items() if k != "partitions"}
    assert not G.differs(old, rebound) and G.differs(old, more)
    assert G.added(None, now) == ["a", "b"]


def test_an_older_state_layout_starts_a_new_generation_or_is_refused_with_what_to_do(tmp_path):
    """A checkpoint of the v2 layout (a group state per query and page): this release's operators
    cannot read it, so the pin differs and a new generation recaptures from the mirrors; with a
    batch that did not finish under it, the job refuses in one line (only the previous release
    can finish that batch)."""
    v2 = {k: v for k, v in PIN.items() if k != "group_buckets"}
    v2["state"] = ["cdc_image_pages_v2", "imp_group_pages_v2", "mu_fragment_v1"]
    assert G.differs(v2, PIN) and G.layout_changed(v2, PIN) and G.added(v2, PIN) == []  # same queries: no sketch rewritten
    assert G.describe(v2, PIN) == ("state ['cdc_image_pages_v2', 'imp_group_pages_v2', 'mu_fragment_v1'] -> "
                                   "['cdc_image_pages_v2', 'imp_groups_v3', 'mu_fragment_v1']; group_buckets None -> 64")
    _spark_checkpoint(tmp_path, planned=5, committed=4)
    gen = G.current(tmp_path)
    done = G.position(gen, last_done=5)
    assert G.unfinished_layout(v2, PIN, done) is None  # every batch finished: a successor recaptures
    new = G.successor(tmp_path, gen, "a", done, G.source_offsets(tmp_path, 5), {"t": 6}, G.added(v2, PIN))
    assert (new.number, new.base, new.versions) == (2, 6, {"t": 6})
    line = G.unfinished_layout(v2, PIN, G.position(gen, last_done=4))
    assert line == ("batch 5 did not finish under state layout ['cdc_image_pages_v2', 'imp_group_pages_v2', "
                    "'mu_fragment_v1'] (this release keeps ['cdc_image_pages_v2', 'imp_groups_v3', 'mu_fragment_v1']); "
                    "finish it once with the previous release, then start this one")
    assert "\n" not in line
    more = {**PIN, "queries": {**PIN["queries"], "c": "SELECT 3"}}
    assert G.unfinished_layout(PIN, more, G.position(gen, last_done=4)) is None  # same layout: finished by _finish


def test_offsets_files_and_removal(tmp_path):
    _spark_checkpoint(tmp_path, planned=2, committed=2)
    assert G.last_planned(tmp_path) == 2 and G.last_planned(tmp_path / "none") is None
    assert G.source_offsets(tmp_path, 1) == '{"t": {"0": 20}}'
    (tmp_path / "offsets" / "9").write_text(f"v1\n{META}\n{{}}\n{{}}")  # two sources: not a layout we start from
    with pytest.raises(ValueError, match="one Kafka source"):
        G.source_offsets(tmp_path, 9)
    G.write_pin(tmp_path, PIN)
    assert G.read_pin(tmp_path) == PIN
    for name in ("state/0/0", "capture/rows", "generation-2/offsets", "sources/0"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / ".ivmstream.lock").write_text("")
    (tmp_path / "ivmstream_capture.json").write_text("{}")
    G.commit(tmp_path, G.Generation(2, str(tmp_path / "generation-2")))
    G.remove(tmp_path, G.Generation(1, str(tmp_path)))
    # generation 1's Spark logs, state and capture go; the lock, the generation file and generation 2 stay
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".ivmstream.lock", G.FILE, "generation-2"])
    G.remove(tmp_path, G.current(tmp_path))
    assert not (tmp_path / "generation-2").exists()
