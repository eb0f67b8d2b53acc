"""A handful of the kill campaign's points in the suite (the whole campaign is
bench/kill_campaign.py): a kill inside a mirror MERGE on batch 0, inside a quarantine append,
inside the sketch maintainer's snapshot writes (state_snapshots), from outside right after a
batch record (Spark's commit-log write), and a SIGTERM between batches; then the lake equals
its oracles."""

from __future__ import annotations

import random

import pytest

from tests.recovery.campaign import Campaign, Point

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_kills_inside_commits_and_a_sigterm_lose_and_double_nothing(kafka_broker, tmp_path):
    rng = random.Random(15)
    c = Campaign(tmp_path, kafka_broker.bootstrap, seed=15, max_offsets=50)
    c.send(110, 90)
    points = [Point("batch0", 0, f"mirror.begin.items:0@{rng.randrange(0, 1200)}"),
              Point("delta_commit", 1, f"quarantine.begin:1@{rng.randrange(0, 900)}"),
              Point("state_snapshot", 2, f"sketch.state.begin:2@{rng.randrange(0, 40)}"),
              Point("commit_log", 3, None, rng.randrange(0, 500))]
    for p in points:
        run = c.kill_at(p)
        assert run.landed, f"{p} did not land (exit {run.code}):\n{run.out[-3000:]}"
    c.send(40, 30)  # two more batches: the SIGTERM comes after the first of them
    stop = c.next_batch()
    term = c.sigterm_between_batches(stop)
    assert term.landed and term.code == 0, term.out[-3000:]
    last = c.stopped_after(term)
    # The signal comes right after batch `stop`'s line; batch stop + 1 may already be running
    # by then (the job then says so and finishes it), but no batch may begin after it.
    assert last in (stop, stop + 1), term.out[-3000:]
    assert c.next_batch() == last + 1, "SIGTERM did not stop right after the batch it came in"
    again = c.drain()
    assert "already committed before a restart" not in again.out  # Spark had committed it too
    res = c.check()
    assert res["problems"] == [], res["problems"]
    assert res["lost"] == res["doubled"] == 0 and res["compared"] > 300
