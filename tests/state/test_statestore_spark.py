"""The statestore backend in Spark against the memory backend: the same CDC history through the
real broker into two jobs, one per backend, every output table compared row for row.

The history has inserts, updates of the group and of the partition attribute, deletes, keys
that come back, and truncates; ~10 micro-batches. The statestore job runs its three keyed
operators in the streaming query on RocksDB; the test also reads the checkpoint's state
metadata and the last progress's stateOperators.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.kafka import create_topics
from devstack.producer import CdcProducer
from operators.keyed.cdc import decode_page
from streaming_app.settings import parse_config
from streaming_app.runner import run_job
from tests.state.statestore_fixture import COMPARED, config_data, final_rows, history, send, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_statestore_backend_equals_memory_backend(spark, kafka_broker, tmp_path):
    topic = "ssdiff.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    events = history(420, keys=50, seed=11, truncate_every=160)
    cfgs = {b: parse_config(config_data(tmp_path / b, kafka_broker.bootstrap, b, name=f"ss{b}", topic=topic))
            for b in ("memory", "statestore")}
    prod = CdcProducer(kafka_broker.bootstrap)
    send(prod, cfgs["memory"].table("t"), events)
    prod.close()
    for b, cfg in cfgs.items():
        run_job(cfg, available_now=True, quiet=True, spark=spark)

    lake = {b: cfg.lake_root for b, cfg in cfgs.items()}
    want = sorted(tuple(str(r[c]) for c in ("id", "g", "v", "p")) for r in final_rows(events).values())
    assert table_rows(spark, lake["statestore"] / "mirrors" / "t") == want
    for table, drop in COMPARED.items():
        a = table_rows(spark, lake["memory"] / table, drop)
        b = table_rows(spark, lake["statestore"] / table, drop)
        assert a == b, f"{table}: memory and statestore differ"
    deltas = table_rows(spark, lake["statestore"] / "sketch_deltas")
    assert len(deltas) > 10 and {d[4] for d in deltas} == {"1", "-1"}  # fragments came and went
    keep = ("batch_id", "records_in", "events", "keys_changed", "quarantined", "kafka_offsets", "mirror_versions")
    rows = {b: sorted(tuple(str(r[c]) for c in keep) for r in spark.read.format("delta")
                      .load(str(lake[b] / "batches")).collect()) for b in lake}
    assert rows["memory"] == rows["statestore"] and len(rows["memory"]) >= 5

    # the operators' state is in the checkpoint's state store, one operator per keyed stage
    meta = spark.read.format("state-metadata").load(str(cfgs["statestore"].checkpoint_dir)).collect()
    assert len(meta) == 3 and {m["numPartitions"] for m in meta} == {int(spark.conf.get("spark.sql.shuffle.partitions"))}
    props = " ".join(m["operatorProperties"] for m in meta)
    for var in ("cdc_image_pages_v2", "imp_groups_v3", "mu_fragment_v1"):
        assert var in props
    cdc = next(m["operatorId"] for m in meta if "cdc_image_pages_v2" in m["operatorProperties"])
    pages = spark.read.format("statestore").option("operatorId", cdc).option("stateVarName", "cdc_image_pages_v2") \
        .load(str(cfgs["statestore"].checkpoint_dir)).collect()
    held = {k: img for p in pages for k, img in decode_page(p["user_map_value"]["images"]).items()}
    # one last image per live key, none for deleted ones; no empty page
    assert held == {(k,): r for k, r in final_rows(events).items()}
    assert all(decode_page(p["user_map_value"]["images"]) for p in pages)


def test_statestore_capture_over_loaded_mirrors_equals_memory_backend(spark, kafka_broker, tmp_path):
    """Capture at registration: both backends start on mirrors that already hold rows (loaded
    before the stream), then a history that updates, deletes and truncates the captured rows.
    The statestore job builds its keyed state from the mirrors with Spark (initialState of its
    first batch); a second run (a restart past batch 0) must not load it again."""
    import pyarrow as pa

    from connectors import delta_sink as sink
    from tests.state.statestore_fixture import COLUMNS, rows

    topic = "sscap.t"
    create_topics(kafka_broker.bootstrap, [topic], partitions=1)
    loaded = rows(45, keys=60, seed=5)
    cfgs = {b: parse_config(config_data(tmp_path / b, kafka_broker.bootstrap, b, name=f"sc{b}", topic=topic))
            for b in ("memory", "statestore")}
    for cfg in cfgs.values():  # the mirrors as a bulk load leaves them: one Delta commit of rows
        path = sink.ensure_mirror(spark, sink.Lake(cfg.lake_root), cfg.table("t"))
        tbl = pa.Table.from_pylist(list(loaded.values()), schema=pa.schema([(c, pa.int64()) for c in COLUMNS]))
        spark.createDataFrame(tbl).write.format("delta").mode("append").save(path)
    live = dict(loaded)
    first = history(160, keys=60, seed=12, truncate_every=0, live=live)
    second = history(120, keys=60, seed=13, truncate_every=70, live=live)
    lake = {b: cfg.lake_root for b, cfg in cfgs.items()}
    from state.statestore.backend import READER_ROWS

    reader_rows = spark.conf.get(READER_ROWS)  # the capture's load reads fewer rows a batch, in its query only
    prod = CdcProducer(kafka_broker.bootstrap)
    for events, upto in ((first, first), (second, first + second)):
        send(prod, cfgs["memory"].table("t"), events)
        for cfg in cfgs.values():
            run_job(cfg, available_now=True, quiet=True, spark=spark)
        want = sorted(tuple(str(r[c]) for c in ("id", "g", "v", "p")) for r in final_rows(upto, loaded).values())
        assert table_rows(spark, lake["statestore"] / "mirrors" / "t") == want
        for table, drop in COMPARED.items():
            a = table_rows(spark, lake["memory"] / table, drop)
            b = table_rows(spark, lake["statestore"] / table, drop)
            assert a == b, f"{table}: memory and statestore differ"
        assert spark.conf.get(READER_ROWS) == reader_rows
    prod.close()
    deltas = table_rows(spark, lake["statestore"] / "sketch_deltas")
    assert {d[4] for d in deltas} == {"1", "-1"}
    from state.statestore.capture import pinned

    rec = pinned(cfgs["statestore"].checkpoint_dir)
    assert rec["images"] == len(loaded) and rec["versions"]["t"] >= 1


JOIN_TOPK = {  # over two tables t and u (the same columns), the sketch on t.p (shapes its safety check accepts)
    "topk": "SELECT g, COUNT(*) AS c FROM t GROUP BY g ORDER BY c DESC, g LIMIT 3",
    "topk_rows": "SELECT id, v FROM t WHERE v < 50 ORDER BY v DESC, id LIMIT 5",
    "join_agg": "SELECT t.g, SUM(u.v) AS s, COUNT(*) AS c FROM t JOIN u ON t.g = u.g GROUP BY t.g HAVING COUNT(*) > 20",
    "join_rows": "SELECT t.id, u.v FROM t JOIN u ON t.id = u.id WHERE u.v < 30",
    "join_topk": "SELECT u.g, COUNT(*) AS c FROM t JOIN u ON t.id = u.id GROUP BY u.g ORDER BY c DESC, u.g LIMIT 2",
}


def _two_tables(root, bootstrap: str, backend: str, name: str, topics: dict, sketches=JOIN_TOPK) -> dict:
    from tests.state.statestore_fixture import COLUMNS

    data = config_data(root, bootstrap, backend, name=name, topic=topics["t"], sketches=sketches)
    data["tables"].append({"name": "u", "topic": topics["u"], "primary_key": ["id"], "columns": COLUMNS})
    return data


def _both_backends_equal(spark, kafka_broker, cfgs: dict, hist: dict) -> dict:
    """Send the histories of t and u, drain them with each backend's job, and assert every
    output table and both mirrors equal across the backends; the lakes by backend."""
    prod = CdcProducer(kafka_broker.bootstrap)
    for t, events in hist.items():
        send(prod, cfgs["memory"].table(t), events)
    prod.close()
    for cfg in cfgs.values():
        run_job(cfg, available_now=True, quiet=True, spark=spark)
    lake = {b: cfg.lake_root for b, cfg in cfgs.items()}
    for table, drop in {**COMPARED, "mirrors/u": ()}.items():
        a = table_rows(spark, lake["memory"] / table, drop)
        b = table_rows(spark, lake["statestore"] / table, drop)
        assert a == b, f"{table}: memory and statestore differ"
    return lake


def test_statestore_topk_and_joins_equal_memory_backend(spark, kafka_broker, tmp_path):
    """Top-k (over groups and over rows) and joins (with an aggregation, HAVING, a top-k above,
    and without) on two tables whose histories update join keys and order values, delete and
    truncate: every output table equal to the memory backend's; the join and top-k operators
    are in the checkpoint's state store."""
    topics = {"t": "ssjk.t", "u": "ssjk.u"}
    create_topics(kafka_broker.bootstrap, list(topics.values()), partitions=1)
    hist = {"t": history(260, keys=40, seed=21, truncate_every=150), "u": history(220, keys=40, seed=22)}
    cfgs = {b: parse_config(_two_tables(tmp_path / b, kafka_broker.bootstrap, b, f"jk{b}", topics))
            for b in ("memory", "statestore")}
    lake = _both_backends_equal(spark, kafka_broker, cfgs, hist)
    deltas = table_rows(spark, lake["statestore"] / "sketch_deltas")
    for q in JOIN_TOPK:  # every query's sketch moved both ways
        assert {d[4] for d in deltas if d[0] == q} == {"1", "-1"}, q
    meta = spark.read.format("state-metadata").load(str(cfgs["statestore"].checkpoint_dir)).collect()
    props = " ".join(m["operatorProperties"] for m in meta)
    assert len(meta) == 5 and "sketch_join_v1" in props and "topk_ordered_v2" in props


def test_statestore_capture_of_topk_and_joins_equals_memory_backend(spark, kafka_broker, tmp_path):
    """Capture at registration of join and top-k state: a top-k over groups, a join and a join
    with an aggregation and a top-k above, over mirrors t and u that already hold rows, then
    histories that update join keys, group and order values, delete and (t) truncate the
    captured rows: every output table equal to the memory backend's, and the capture built the
    join and top-k operators' state."""
    import pyarrow as pa

    from connectors import delta_sink as sink
    from state.statestore.capture import pinned
    from tests.state.statestore_fixture import COLUMNS, rows

    topics = {"t": "sscj.t", "u": "sscj.u"}
    create_topics(kafka_broker.bootstrap, list(topics.values()), partitions=1)
    queries = {n: JOIN_TOPK[n] for n in ("topk", "join_rows", "join_topk")}
    loaded = {"t": rows(30, keys=40, seed=31), "u": rows(30, keys=40, seed=32)}
    cfgs = {}
    for b in ("memory", "statestore"):
        data = _two_tables(tmp_path / b, kafka_broker.bootstrap, b, f"cj{b}", topics, queries)
        data["kafka"]["max_offsets_per_trigger"] = 100
        cfgs[b] = parse_config(data)
    schema = pa.schema([(c, pa.int64()) for c in COLUMNS])
    for cfg in cfgs.values():  # the mirrors as a bulk load leaves them: one Delta commit of rows each
        for t, live in loaded.items():
            path = sink.ensure_mirror(spark, sink.Lake(cfg.lake_root), cfg.table(t))
            spark.createDataFrame(pa.Table.from_pylist(list(live.values()), schema=schema)).write.format("delta") \
                .mode("append").save(path)
    hist = {"t": history(100, keys=40, seed=33, truncate_every=70, live=dict(loaded["t"])),
            "u": history(80, keys=40, seed=34, live=dict(loaded["u"]))}
    lake = _both_backends_equal(spark, kafka_broker, cfgs, hist)
    rec = pinned(cfgs["statestore"].checkpoint_dir)
    assert {"joins", "topk"} <= set(rec["stages"]) and rec["images"] == 60
    assert {q for q, _ in rec["sketch"]} == set(queries)  # every query had a sketch from the loaded rows
    states = spark.read.parquet(str(Path(rec["dir"]) / "joins")).filter("k1 like 'j:%'").collect()
    assert {r["k1"] for r in states} == {"j:join_rows", "j:join_topk"}
    deltas = table_rows(spark, lake["statestore"] / "sketch_deltas")
    assert {d[4] for d in deltas} == {"1", "-1"}
    batches = spark.read.format("delta").load(str(lake["statestore"] / "batches")).count()
    assert batches >= 2  # the captured state went through more than one batch
