"""Where a record's time goes in the statestore backend's keyed operators (issue 40, item 3).

One job run (``[state] backend = "statestore"``) over one CDC table t(id, g, v, p) through the
real broker: ``--rows`` inserts, then ``--updates`` updates of uniformly random live ids
(``bench.statestore.produce``: each id of the table equally likely), in batches of
``--batch`` records, with ``--sketches`` aggregations ``GROUP BY id ... HAVING`` (one group per
row), in this process on ``--master``. The keyed operators run as the job runs them, each
processor replaced by a subclass that times, in its Python worker:

* ``logic``: our code inside ``handleInputRows`` (``operators.keyed``'s steps, routing),
  without what the next items count;
* ``state``: the state variables' calls (get/update/clear/... through pyspark's state client
  to the JVM's state server: a round trip each, RocksDB's own time inside), with their count;
* ``pickle``: our (de)serialization: payloads, pages, group states, deltas (``pickle`` as
  ``state.statestore.processors``, ``operators.keyed.cdc`` and ``operators.keyed.sketch`` call it);
* ``rows_in`` / ``rows_out``: pyspark handing us the key's input rows and taking our output
  rows (Arrow <-> Row);
* ``per_key``: pyspark between two keys of a task: its implicit-key and timestamp calls to the
  state server, the grouping of the Arrow batch, and a wait for the next input batch when the
  key was the last of one;

and from Spark's progress of each batch (a ``StreamingQueryListener``), per operator:
``rocksdb`` (``rocksdbGetLatency`` + ``rocksdbPutLatency``), ``commit`` (``commitTimeMs``).
Each measured item is summed over the tasks (so over the cores); ``wall`` is the driver's
``operators`` step of the batch (the one Spark job that runs decode, the shuffles and every
keyed operator). Keys that only pass rows through (``~``) are counted apart (``<op>/pass``).

Three parts are reported apart: the first batch after the start (it starts the Python
workers, loads RocksDB, plans the query), the steady batches of inserts (state grows), and the
steady batches of updates (the issue's bench rule: uniformly random keys).

    .venv/bin/python -m bench.statestore_costs --rows 2000 --updates 2000 --batch 500 --sketches 1

Writes ``--out`` (markdown) and ``--out`` with ``.json`` beside it. Smoke runs: tiny sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from state.statestore import processors as P  # noqa: E402  (pyspark's streaming API: bench only)

ENV = "IVMSTREAM_COSTS_DIR"  # where each Python worker appends its counters (one JSON line per task)
ITEMS = ("logic", "state", "pickle", "rows_in", "rows_out", "per_key")

# -- in the Python workers --------------------------------------------------------------------
_acc: dict = defaultdict(lambda: defaultdict(float))  # operator -> item -> seconds (or a count)
_now = [None]  # the operator whose code runs now (a worker runs one task at a time)
_last_end = [None]  # when our generator for the previous key of this task ended
_installed = [False]


class _TimedPickle:
    """``pickle`` as the keyed modules call it, timed under the running operator."""

    HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

    @staticmethod
    def dumps(*a, **k):
        t = time.perf_counter()
        try:
            return pickle.dumps(*a, **k)
        finally:
            _add("pickle", t)

    @staticmethod
    def loads(*a, **k):
        t = time.perf_counter()
        try:
            return pickle.loads(*a, **k)
        finally:
            _add("pickle", t)


def _add(item: str, t0: float) -> None:
    op = _now[0]
    if op is not None:
        a = _acc[op]
        a[item] += time.perf_counter() - t0
        a[item + "_n"] += 1


def _install() -> None:
    """Time the keyed modules' pickling in this worker (once per process)."""
    if _installed[0]:
        return
    from operators.keyed import cdc, sketch

    for mod in (P, cdc, sketch):
        mod.pickle = _TimedPickle
    _installed[0] = True


class _TimedState:
    """A state variable whose every call is timed as ``state``."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        f = getattr(self._inner, name)
        if not callable(f):
            return f

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                r = f(*a, **k)
            finally:
                _add("state", t)
            return _TimedIter(r) if name == "iterator" else r

        return timed


class _TimedIter:
    def __init__(self, it, item: str = "state"):
        self._it, self._item = iter(it), item

    def __iter__(self):
        return self

    def __next__(self):
        t = time.perf_counter()
        try:
            return next(self._it)
        finally:
            _add(self._item, t)


class _TimedHandle:
    """The processor's handle: the state variables it creates are timed."""

    def __init__(self, handle):
        self._handle = handle

    def getValueState(self, *a, **k):
        return _TimedState(self._handle.getValueState(*a, **k))

    def getMapState(self, *a, **k):
        return _TimedState(self._handle.getMapState(*a, **k))

    def __getattr__(self, name):
        return getattr(self._handle, name)


def _flush() -> None:
    """Append this task's counters to the worker's file (``close`` ends a task's partition)."""
    d = os.environ.get(ENV)
    _last_end[0] = None
    if not d or not _acc:
        _acc.clear()
        return
    line = json.dumps({op: dict(items) for op, items in _acc.items()})
    with open(Path(d) / f"worker-{os.getpid()}.jsonl", "a") as f:
        f.write(line + "\n")
    _acc.clear()


def _timed(op: str, cls):
    """``cls`` (one of ``state.statestore.processors``' processors) with its work timed."""

    class Timed(cls):
        def init(self, handle) -> None:
            _last_end[0] = None
            super().init(_TimedHandle(handle))

        def handleInputRows(self, key, rows, timerValues):
            _install()
            name = f"{op}/pass" if str(key[0]).startswith(P.PASS) else op
            start = time.perf_counter()
            if _last_end[0] is not None:
                _acc[name]["per_key"] += start - _last_end[0]
            a = _acc[name]
            a["keys"] += 1
            it = super().handleInputRows(key, _TimedIter(rows, "rows_in"), timerValues)
            inside = 0.0
            while True:
                _now[0] = name
                t = time.perf_counter()
                try:
                    row = next(it)
                except StopIteration:
                    break
                finally:
                    inside += time.perf_counter() - t
                    _now[0] = None
                a["rows"] += 1
                t = time.perf_counter()
                yield row
                a["rows_out"] += time.perf_counter() - t
            a["inside"] += inside
            _last_end[0] = time.perf_counter()

        def close(self) -> None:
            super().close()
            _flush()

    Timed.__name__ = Timed.__qualname__ = f"Timed{cls.__name__}"
    return Timed


TimedCdcProcessor = _timed("cdc", P.CdcProcessor)
TimedJoinProcessor = _timed("join", P.JoinProcessor)
TimedGroupBucketProcessor = _timed("group", P.GroupBucketProcessor)  # pickled by this name
TimedTopKProcessor = _timed("topk", P.TopKProcessor)
TimedMuProcessor = _timed("mu", P.MuProcessor)


def use_timed_processors() -> None:
    """The backend's ``stream`` builds these (it looks them up in the processors module)."""
    import bench.statestore_costs as me  # by this name, so that the workers import it too

    P.CdcProcessor, P.JoinProcessor, P.GroupBucketProcessor = me.TimedCdcProcessor, me.TimedJoinProcessor, \
        me.TimedGroupBucketProcessor
    P.TopKProcessor, P.MuProcessor = me.TimedTopKProcessor, me.TimedMuProcessor


# -- on the driver ----------------------------------------------------------------------------
def worker_items(entries: list) -> dict:
    """Worker counters (one dict per task) -> operator -> item -> seconds / counts, with
    ``logic`` = time inside our generator less state calls, pickling and input rows."""
    out: dict = defaultdict(lambda: defaultdict(float))
    for e in entries:
        for op, items in e.items():
            for k, v in items.items():
                out[op][k] += v
    for op, a in out.items():
        a["logic"] = max(0.0, a.get("inside", 0.0) - a.get("state", 0.0) - a.get("pickle", 0.0) - a.get("rows_in", 0.0))
    return out


def spark_items(progress: dict | None, ops: tuple) -> dict:
    """operator -> {rocksdb, commit (seconds), gets, puts} from one batch's progress."""
    out: dict = {}
    for name, o in zip(ops, (progress or {}).get("stateOperators", [])):
        m = o.get("customMetrics") or {}
        out[name] = {"rocksdb": ((m.get("rocksdbGetLatency") or 0) + (m.get("rocksdbPutLatency") or 0)) / 1000,
                     "commit": (o.get("commitTimeMs") or 0) / 1000,
                     "gets": m.get("rocksdbGetCount") or 0, "puts": m.get("rocksdbPutCount") or 0}
    return out


class Progress:
    """Spark's progress of each batch, as JSON dicts by Spark batch id (a query listener)."""

    def __init__(self):
        from pyspark.sql.streaming import StreamingQueryListener

        seen = self.by_batch = {}

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = json.loads(event.progress.json)
                seen[int(p["batchId"])] = p

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = Listener()


def breakdown(batches: list) -> dict:
    """Per record, in µs: each item summed over operators and the batches given."""
    records = sum(b["records"] for b in batches) or 1
    tot: dict = defaultdict(float)
    per_op: dict = defaultdict(lambda: defaultdict(float))
    for b in batches:
        for op, a in b["workers"].items():
            for k in (*ITEMS, "state_n", "pickle_n", "keys", "rows"):
                per_op[op][k] += a.get(k, 0.0)
        for op, s in b["spark"].items():
            for k in ("rocksdb", "commit", "gets", "puts"):
                per_op[op][k] += s[k]
        tot["wall"] += b["wall_s"]
    for op, a in per_op.items():
        for k in (*ITEMS, "rocksdb", "commit"):
            tot[k] += a[k]
    us = {k: round(v / records * 1e6, 1) for k, v in tot.items()}
    ops = {op: {k: (round(v / records * 1e6, 1) if k in (*ITEMS, "rocksdb", "commit") else round(v / records, 2))
                for k, v in a.items()} for op, a in sorted(per_op.items())}
    return {"records": records, "batches": len(batches), "us_per_record": us, "per_operator": ops}


def run(args) -> dict:
    from bench.statestore import config, produce
    from connectors.kafka import create_topics
    from devstack.kafka_broker import EmbeddedBroker
    from devstack.process import free_port
    from streaming_app.runner import run_job
    from streaming_app.settings import parse_config
    from streaming_app.spark_session import SessionOptions, build_session

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    costs = work / "costs"
    costs.mkdir(parents=True)
    # before the session starts: the Python workers inherit both
    os.environ[ENV] = str(costs)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    use_timed_processors()
    broker = EmbeddedBroker(work / "kafka", port=free_port()).start()
    try:
        topic = f"costs.t.{int(time.time())}"
        create_topics(broker.bootstrap, [topic], partitions=1)
        data = config(work, broker.bootstrap, topic, "statestore", args.sketches, args.rows, args.master, args.batch)
        cfg = parse_config(data)
        produce(broker.bootstrap, cfg.table("t"), args.rows, 0)
        produce(broker.bootstrap, cfg.table("t"), args.rows, args.updates, seed=2)
        spark = build_session(cfg.spark, SessionOptions(app_name="ivmstream:costs"))
        progress = Progress()
        spark.streams.addListener(progress.listener)
        rows: list = []

        def observed(row: dict) -> None:  # after the batch: every task of it closed and flushed
            b = row["batch_id"]
            entries = []
            for f in sorted(costs.glob("worker-*.jsonl")):
                entries += [json.loads(line) for line in f.read_text().splitlines() if line]
                f.unlink()
            rows.append({"batch_id": b, "records": int(row["records_in"]),
                         "wall_s": float((row.get("step_ms") or {}).get("operators", 0.0)) / 1000,
                         "workers": worker_items(entries)})

        t0 = time.monotonic()
        run_job(cfg, available_now=True, quiet=not args.verbose, spark=spark, observer=observed)
        seconds = time.monotonic() - t0
        time.sleep(1.0)  # the last batch's progress event reaches the listener after the batch
        spark.streams.removeListener(progress.listener)
    finally:
        broker.stop()
    ops = ("mu", "group", "cdc")  # the progress lists them from the sink back (state_operators; no join, no top-k)
    for r in rows:
        r["spark"] = spark_items(progress.by_batch.get(r["batch_id"]), ops)
        r["workers"] = {op: dict(a) for op, a in r["workers"].items()}
    rows.sort(key=lambda r: r["batch_id"])
    # after the first batch: the inserts' batches, then the updates' (a batch holding both counts as inserts)
    seen = rows[0]["records"] if rows else 0
    inserts, updates = [], []
    for r in rows[1:]:
        (inserts if seen < args.rows else updates).append(r)
        seen += r["records"]
    return {"args": vars(args), "seconds": round(seconds, 1), "load": os.getloadavg()[0],
            "first": breakdown(rows[:1]) if rows else None, "inserts": breakdown(inserts) if inserts else None,
            "updates": breakdown(updates) if updates else None, "batches": rows}


COLUMNS = (("logic", "Python logic"), ("state", "state calls"), ("pickle", "our pickling"),
           ("rows_in", "rows in (Arrow->Row)"), ("rows_out", "rows out (Row->Arrow)"),
           ("per_key", "pyspark between keys"), ("rocksdb", "RocksDB get+put"), ("commit", "commits"),
           ("wall", "operators' wall"))


def report(res: dict) -> str:
    a = res["args"]
    lines = [f"# statestore keyed operators: cost per record (bench/statestore_costs.py --rows {a['rows']} "
             f"--updates {a['updates']} --batch {a['batch']} --sketches {a['sketches']} --master {a['master']})", "",
             f"One run, load average {res['load']:.1f} at its end; µs per record; every item but the wall is "
             "summed over the tasks (all cores).", ""]
    titles = {"first": "the first batch after the start", "inserts": "steady batches of inserts",
              "updates": "steady batches of uniformly random updates"}
    for label, title in titles.items():
        b = res[label]
        if not b:
            continue
        lines += [f"## {title} ({b['batches']} batches, {b['records']:,} records)", "",
                  "| operator | " + " | ".join(c for _, c in COLUMNS[:-1]) + " | keys/rec | state calls/rec |",
                  "|" + "---|" * (len(COLUMNS) + 2)]
        for op, v in b["per_operator"].items():
            lines.append(f"| {op} | " + " | ".join(str(v.get(k, 0)) for k, _ in COLUMNS[:-1])
                         + f" | {v.get('keys', 0)} | {v.get('state_n', 0)} |")
        u = b["us_per_record"]
        lines.append("| **all** | " + " | ".join(f"**{u.get(k, 0)}**" for k, _ in COLUMNS[:-1]) + " | | |")
        lines += ["", f"operators' wall (the driver's `operators` step): **{u.get('wall', 0)} µs per record**", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--updates", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=2000, help="records per batch (maxOffsetsPerTrigger)")
    ap.add_argument("--sketches", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work", default=os.environ.get("BENCH_DIR", "/tmp/statestore/costs"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "statestore_costs.md"))
    ap.add_argument("--verbose", action="store_true", help="the job's line per batch")
    args = ap.parse_args()
    res = run(args)
    text = report(res)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    print(text)


if __name__ == "__main__":
    main()
