"""A sketch registered on an empty mirror under the statestore backend (issue #40, item 5).

As a newcomer does it: ``sketch register`` (``register_query``, what the CLI calls) on a lake
whose mirror has no rows yet, so the registration has no fragment boundaries ("pending"), then
the job over a CDC history from the real broker. The memory backend captures such a query at
the first batch after the mirror got values; the statestore job must do the same: run the
first batches without it, take the boundaries from the mirror as that batch left it, and go
on in a new state generation with the query captured there. Both lakes get the same history;
every output table is compared row for row, and the sketch ends equal to a from-scratch
capture of the final rows by the memory engine.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from connectors import delta_sink as sink
from connectors.delta_sink import arrow_schema
from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from operators.sketch import RangePartition, SketchMaintainer
from streaming_app.runner import run_job
from streaming_app.settings import parse_config
from streaming_app.sketches.register import register_query
from streaming_app.sketches.registry import read_registry
from tests.state.statestore_fixture import COMPARED, SKETCHES, config_data, final_rows, history, send, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FRAGMENTS = 4


@pytest.mark.parametrize("trigger", ["available_now", "processing_time"])
def test_sketch_registered_on_an_empty_mirror_runs_under_statestore(spark, kafka_broker, tmp_path, capsys, trigger):
    """``processing_time``: the statestore job runs as ``ivmstream run`` does (a trigger every
    0.5 s, stopped once it has read the whole history), so its query restarts while it waits
    for batches instead of ending with the topic."""
    topic = f"sspend.{trigger}.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    events = history(420, keys=50, seed=21, truncate_every=160)
    cfgs = {b: parse_config(config_data(tmp_path / b, kafka_broker.bootstrap, b, name=f"sp{b}", topic=topic,
                                        sketches={}))
            for b in ("memory", "statestore")}
    for cfg in cfgs.values():
        for name, sql in SKETCHES.items():
            reg = register_query(spark, cfg, name, sql, [("t", "p", FRAGMENTS)])
            assert not reg.captured  # the mirror is empty: "pending"
    prod = CdcProducer(kafka_broker.bootstrap)
    send(prod, cfgs["memory"].table("t"), events)
    prod.close()
    run_job(cfgs["memory"], available_now=True, quiet=True, spark=spark)
    if trigger == "available_now":
        run_job(cfgs["statestore"], available_now=True, quiet=True, spark=spark)
    else:
        read, done = [0], threading.Event()

        def observed(row):
            read[0] += row["records_in"]
            if read[0] >= len(events):
                done.set()

        run_job(cfgs["statestore"], duration_s=240, stop_event=done, quiet=True, spark=spark, observer=observed)
        assert done.is_set(), f"read {read[0]} of {len(events)} records"
    out = capsys.readouterr().out
    assert "waits for rows" in out and "new state generation 2" in out, out[-3000:]

    lake = {b: cfg.lake_root for b, cfg in cfgs.items()}
    final = final_rows(events)
    want = sorted(tuple(str(r[c]) for c in ("id", "g", "v", "p")) for r in final.values())
    assert table_rows(spark, lake["statestore"] / "mirrors" / "t") == want
    for table, drop in COMPARED.items():
        a = table_rows(spark, lake["memory"] / table, drop)
        b = table_rows(spark, lake["statestore"] / table, drop)
        assert a == b, f"{table}: memory and statestore differ"
    keep = ("batch_id", "records_in", "events", "keys_changed", "quarantined", "kafka_offsets", "mirror_versions")
    rows = {b: sorted(tuple(str(r[c]) for c in keep) for r in spark.read.format("delta")
                      .load(str(lake[b] / "batches")).collect()) for b in lake}
    assert rows["memory"] == rows["statestore"] and len(rows["memory"]) >= 5
    assert [int(r[0]) for r in sorted(rows["statestore"], key=lambda r: int(r[0]))] == list(range(len(rows["statestore"])))

    # both registrations got the same boundaries, from the mirror after the first batch
    regs = {b: read_registry(spark, sink.Lake(cfg.lake_root)) for b, cfg in cfgs.items()}
    for name in SKETCHES:
        assert regs["statestore"][name].captured
        assert regs["statestore"][name].parts[0].boundaries == regs["memory"][name].parts[0].boundaries
    # and the sketch is the memory engine's capture of the final rows with those boundaries
    sketches = {r["query"]: sorted(r["fragments"]) for r in
                spark.read.format("delta").load(str(lake["statestore"] / "sketches")).collect()}
    table = cfgs["statestore"].table("t")
    rows_t = pa.Table.from_pylist(sorted(final.values(), key=lambda r: r["id"]), schema=arrow_schema(table))
    for name, sql in SKETCHES.items():
        m = SketchMaintainer(sql, {"t": RangePartition("p", regs["statestore"][name].parts[0].boundaries)})
        m.initialize({"t": rows_t})
        assert sketches[name] == m.sketch["t"], name
