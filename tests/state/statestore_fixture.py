"""A CDC history and a config shared by the statestore backend's Spark tests and its benchmark."""

from __future__ import annotations

import random

import pyarrow as pa

from devstack.producer import envelope

COLUMNS = {"id": "long", "g": "long", "v": "long", "p": "long"}
BOUNDS = [0, 25, 50, 75, 100]
COMPARED = {  # table -> columns that differ by nature (times, the writer's app id)
    "mirrors/t": (),
    "sketch_deltas": ("committed_at",),
    "sketches": ("updated_at",),
    "quarantine": ("quarantined_at", "job"),
}
SKETCHES = {
    "having": "SELECT g, SUM(v) AS s, COUNT(*) AS c FROM t GROUP BY g HAVING COUNT(*) > 2",
    "minmax": "SELECT g, MIN(v) AS lo, MAX(v) AS hi FROM t WHERE v > 10 GROUP BY g HAVING MIN(v) < 30",
    "select": "SELECT id, v FROM t WHERE v < 20",
}


def config_data(root, bootstrap: str, backend: str, *, name: str = "ss", topic: str = "ss.t",
                max_offsets: int = 80, master: str = "local[2]", buckets: int = 8, sketches=SKETCHES) -> dict:
    return {
        "job": {"name": name, "lake_root": str(root / "lake"), "checkpoint_root": str(root / "ckpt"),
                "trigger_interval_s": 0.5},
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": max_offsets},
        "spark": {"master": master, "ui": False, "driver_memory": "1g"},
        "state": {"backend": backend, "cdc_buckets": buckets},
        "tables": [{"name": "t", "topic": topic, "primary_key": ["id"], "columns": COLUMNS}],
        "sketches": [{"name": n, "sql": sql, "partition": "t.p", "boundaries": BOUNDS} for n, sql in sketches.items()],
    }


def history(n: int, keys: int = 60, seed: int = 7, truncate_every: int = 0, live: dict | None = None) -> list[tuple]:
    """[(op, before, after)] of one live table: inserts, updates (also of the group and the
    partition attribute), deletes, keys that come back, and a truncate (op "t") every
    ``truncate_every`` events. ``live``: id -> row the table holds before (updated in place)."""
    rnd = random.Random(seed)
    live = {} if live is None else live
    out = []
    for i in range(n):
        if truncate_every and i and i % truncate_every == 0:
            out.append(("t", None, None))
            live.clear()
            continue
        k = rnd.randrange(keys)
        row = {"id": k, "g": rnd.randrange(8), "v": rnd.randrange(100), "p": rnd.randrange(100)}
        if k in live and rnd.random() < 0.3:
            out.append(("d", live.pop(k), None))
        elif k in live:
            out.append(("u", live[k], row))
            live[k] = row
        else:
            out.append(("c", None, row))
            live[k] = row
    return out


def send(prod, table, events) -> None:
    for op, before, after in events:
        if op == "t":
            prod.send_raw(table.topic, None, envelope(table, "t", None, None))
        else:
            prod.send(table, op, before, after)
    prod.flush()


def rows(n: int, keys: int, seed: int) -> dict:
    """id -> row: ``n`` random rows of t (a mirror's content before the stream starts)."""
    rnd = random.Random(seed)
    return {k: {"id": k, "g": rnd.randrange(8), "v": rnd.randrange(100), "p": rnd.randrange(100)}
            for k in rnd.sample(range(keys), n)}


def final_rows(events, live: dict | None = None) -> dict:
    live = dict(live or {})
    for op, before, after in events:
        if op == "t":
            live.clear()
        elif op == "d":
            live.pop(before["id"], None)
        else:
            live[after["id"]] = after
    return live


def table_rows(spark, path, drop=()) -> list[tuple]:
    t: pa.Table = spark.read.format("delta").load(str(path)).toArrow()
    t = t.drop_columns([c for c in drop if c in t.column_names])
    cols = t.column_names
    rows = [tuple(str(r[c]) for c in cols) for r in t.to_pylist()]
    return sorted(rows)


def check_sketch_outputs(delta_rows, sketch_rows, events, table) -> None:
    """After a run that was killed and restarted: per query and fragment the ``sketch_deltas``
    alternate +1/-1 starting with +1 (a doubled or lost change breaks that), and the final
    ``sketches`` and the fragments left at +1 equal a from-scratch capture of the history's
    final rows by the memory engine."""
    from collections import defaultdict

    from connectors.delta_sink import arrow_schema
    from operators.sketch import RangePartition, SketchMaintainer

    runs = defaultdict(list)
    for d in sorted(delta_rows, key=lambda d: d["batch_id"]):
        runs[(d["query"], d["fragment"])].append(d["change"])
    for key, changes in runs.items():
        assert changes == [1, -1] * (len(changes) // 2) + [1] * (len(changes) % 2), key
    sketches = {r["query"]: sorted(r["fragments"]) for r in sketch_rows}
    final = pa.Table.from_pylist(sorted(final_rows(events).values(), key=lambda r: r["id"]),
                                 schema=arrow_schema(table))
    for name, sql in SKETCHES.items():
        m = SketchMaintainer(sql, {"t": RangePartition("p", BOUNDS)})
        m.initialize({"t": final})
        assert sketches[name] == m.sketch["t"], name
        assert sorted(f for (q, f), ch in runs.items() if q == name and len(ch) % 2) == m.sketch["t"], name
