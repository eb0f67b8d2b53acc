"""`ivmstream demo`: the embedded default, end to end on built-in data.

Starts the Kafka broker if none is running (and stops it at the end if it started it),
recreates the demo topics, loads the IMP paper's `sales` table and a small generated TPC-H
subset as Debezium snapshot records, then runs the job while a background producer streams
seeded random inserts, updates and deletes, plus a few malformed records that must land in
the quarantine. Prints a line per batch, the Spark UI URL and a summary.
"""

from __future__ import annotations

import multiprocessing
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

from connectors.kafka import reset_topics
from core.config import REPO_ROOT
from devstack.kafka_broker import EmbeddedBroker
from devstack.producer import CdcProducer, RandomUpdates, conform, read_rows
from streaming_app.preflight import empty_folder, job_folders
from streaming_app.settings import load_config
from streaming_app.sketches import query as sq

DEMO_DIR = Path(__file__).resolve().parent / "demo"
VAR = REPO_ROOT / "var"
TPCH_TABLES = ("nation", "customer", "orders", "lineitem")
# One partition per table topic, as Debezium's topics get by default (the broker's
# num.partitions): Spark reads each topic-partition in a task of its own, and the first batch
# opens a Kafka consumer per task.
DEMO_PARTITIONS = 1

def tpch_subset(scale: float = 0.01) -> Path:
    """Generate (once) a small TPC-H database as Parquet with the tpchgen-cli package."""
    out = VAR / "data" / f"tpch-sf{scale}"
    if not all((out / f"{t}.parquet").exists() for t in TPCH_TABLES):
        out.mkdir(parents=True, exist_ok=True)
        exe = Path(shutil.which("tpchgen-cli") or (Path(__file__).resolve().parent.parent / ".venv/bin/tpchgen-cli"))
        subprocess.run([str(exe), "parquet", "-s", str(scale), f"--tables={','.join(TPCH_TABLES)}",
                        f"--output-dir={out}"], check=True, capture_output=True)
    return out

class EdgeChanges:
    """Seeded edge inserts, cost updates and deletes over a small vertex set (a graph dense
    enough for triangles and long paths, small enough for the views to stay cheap)."""

    def __init__(self, seed: int, vertices: int = 40, edges: int = 90):
        self.rng = random.Random(seed)
        self.vertices = vertices
        self.live: dict[tuple[int, int], dict] = {}
        while len(self.live) < edges:
            self._insert()

    def _insert(self) -> dict:
        while True:
            u, v = self.rng.sample(range(self.vertices), 2)
            if (u, v) not in self.live:
                row = {"src": u, "dst": v, "cost": float(self.rng.randrange(1, 10))}
                self.live[(u, v)] = row
                return row

    def next(self) -> tuple[str, dict | None, dict | None]:
        x = self.rng.random()
        if len(self.live) < 20 or (x < 0.4 and len(self.live) < 120):  # stays near 90-120 edges
            return "c", None, self._insert()
        key = self.rng.choice(sorted(self.live))
        before = self.live[key]
        if x < 0.7:
            after = dict(before, cost=float(self.rng.randrange(1, 10)))
            self.live[key] = after
            return "u", before, after
        del self.live[key]
        return "d", before, None

class Feed:
    """What the demo sends while the job runs, and when it stops the job. A producer process of
    its own (``_produce``: a Python producer in the job's process would take the interpreter's
    lock from the batches' decoding) sends the snapshot, a progress line every few seconds,
    then seeded random changes for ``duration_s``; then ``run`` waits until the job has read
    every record sent (at most ``drain_s``) and stops the job. ``observe`` is the job's
    per-batch hook: records read, step times, when the first batch committed."""

    def __init__(self, cfg, bootstrap: str, duration_s: float, rate: float):

        mp = multiprocessing.get_context("spawn")  # no fork of a process with threads (and, later, a JVM)
        self.sent, self.snapshot = mp.Value("q", 0), mp.Value("q", 0)
        self.done, self.halt = mp.Event(), mp.Event()  # all sent and flushed; stop sending
        self.proc = mp.Process(target=_produce, daemon=True, args=(
            cfg, bootstrap, duration_s, rate, self.sent, self.snapshot, self.done, self.halt))
        self.duration_s, self.rate = duration_s, rate
        self.drain_s = max(60.0, duration_s)
        self.stop = threading.Event()  # stops the job
        self.read = 0
        self.steps: list[dict] = []
        self.first_at: float | None = None
        self._final: tuple[int, int] | None = None  # (sent, snapshot) once close() has released them

    @property
    def produced(self) -> int:
        return self.sent.value if self._final is None else self._final[0]

    @property
    def snapshot_records(self) -> int:
        return self.snapshot.value if self._final is None else self._final[1]

    def observe(self, row: dict) -> None:
        if self.first_at is None:
            self.first_at = time.monotonic()
        self.read += row["records_in"]
        self.steps.append(dict(row["step_ms"]))

    def run(self) -> None:
        """A thread of the demo: start the producer, wait until it is done, drain, stop the job."""
        self.proc.start()
        try:
            while not self.done.is_set() and not self.stop.is_set() and self.proc.is_alive():
                self.done.wait(0.5)
            if self.done.is_set():
                self._drain()
        finally:
            self.stop.set()

    def close(self) -> None:
        """Stop the producer process and release the shared counters and events. Each is a
        POSIX semaphore the resource tracker unlinks when the object is collected; the CLI
        leaves with ``os._exit``, which skips multiprocessing's exit hooks, so anything still
        referenced then is reported as "leaked semaphore objects" after the summary."""
        if self._final is not None:
            return
        self.halt.set()
        if self.proc.pid is not None:  # started
            self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)
        self._final = (self.sent.value, self.snapshot.value)
        if self.proc.exitcode is not None:
            self.proc.close()  # drops it from multiprocessing's list of children
        self.proc = self.sent = self.snapshot = self.done = self.halt = None

    def _drain(self) -> None:
        produced = self.produced
        print(f"stopped producing: {produced:,} records sent; the job runs until it has read them all "
              f"(at most {self.drain_s:.0f} s more)", flush=True)
        t0 = last = time.monotonic()
        while not self.stop.is_set() and self.read < produced and time.monotonic() - t0 < self.drain_s:
            self.stop.wait(0.5)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                print(f"draining: {self.read:,} of {produced:,} records read ({100 * self.read / produced:.0f}%)",
                      flush=True)

    def first_batch_s(self, launched: float) -> str:
        return "never" if self.first_at is None else f"{self.first_at - launched:.1f} s"

    def step_means(self) -> str:
        """Mean milliseconds per batch of each step (maintainers by name), slowest first."""
        if not self.steps:
            return "no batch"
        keys = {k for s in self.steps for k in s}
        means = {k.removeprefix("maintain:"): sum(s.get(k, 0.0) for s in self.steps) / len(self.steps) for k in keys}
        return ", ".join(f"{k} {v:,.0f}" for k, v in sorted(means.items(), key=lambda kv: -kv[1]))

    def why_behind(self) -> str:
        if not self.steps:
            return "no batch committed: Spark or the first batch did not finish in time"
        per = sum(sum(s.values()) for s in self.steps) / len(self.steps)
        slowest = max({k for s in self.steps for k in s}, key=lambda k: sum(s.get(k, 0.0) for s in self.steps))
        return (f"{len(self.steps)} batches of ~{per / 1000:.1f} s each; the slowest step is "
                f"{slowest.removeprefix('maintain:')}")

def _produce(cfg, bootstrap: str, duration_s: float, rate: float, sent, snapshot, done, halt) -> None:
    """The demo's producer process: the snapshot in a seeded random order, then the changes."""
    prod = CdcProducer(bootstrap)
    try:
        gens = _send_snapshot(cfg, prod, sent, snapshot, halt)
        if gens is not None:
            _send_changes(cfg, prod, gens, duration_s, rate, sent, halt)
        prod.flush()
        sent.value = prod.sent
        if not halt.is_set():
            done.set()
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the demo says the rest
        pass
    finally:
        prod.close()

def _send_snapshot(cfg, prod, sent, snapshot, halt) -> dict | None:
    tpch = tpch_subset()
    data = {"sales": conform(cfg.table("sales"), read_rows(DEMO_DIR / "sales.csv"))}
    for t in TPCH_TABLES:
        data[t] = conform(cfg.table(t), read_rows(tpch / f"{t}.parquet"))
    edges = EdgeChanges(seed=7)
    data["edges"] = list(edges.live.values())
    # in a seeded random order: the sketches capture at the first batch that brings rows,
    # and their equi-depth boundaries are only as good as that batch's sample of the keys
    rng = random.Random(11)
    for rows in data.values():
        rng.shuffle(rows)
    total = sum(map(len, data.values()))
    t0 = last = time.monotonic()
    for name, rows in data.items():
        table = cfg.table(name)
        for row in rows:
            prod.send(table, "r", None, row)
            if prod.sent % 1000 == 0:
                sent.value = prod.sent
                if halt.is_set():
                    return None
                if time.monotonic() - last >= 3:
                    last = time.monotonic()
                    print(f"snapshot: {prod.sent:,} of {total:,} records sent ({100 * prod.sent / total:.0f}%), "
                          f"{prod.sent / (last - t0):,.0f} records/s", flush=True)
    prod.flush()
    sent.value = snapshot.value = prod.sent
    print(f"snapshot: {total:,} records sent in {time.monotonic() - t0:.1f} s ("
          + ", ".join(f"{n} {len(r):,}" for n, r in data.items()) + ")", flush=True)
    # lineitem's values stay in TPC-H's ranges (quantities 1..50), so that an order's total
    # quantity rarely crosses big_orders' threshold and its sketch keeps skipping most orders
    gens = {n: RandomUpdates(cfg.table(n), seed=i, live=data[n], domain=50 if n == "lineitem" else 1000)
            for i, n in enumerate(("sales", "customer", "orders", "lineitem"))}
    gens["edges"] = edges
    return gens

def _send_changes(cfg, prod, gens: dict, duration_s: float, rate: float, sent, halt) -> None:
    print(f"streaming random changes at {rate:.0f}/s for {duration_s:.0f} s ...", flush=True)
    tables = list(gens)
    i = 0
    interval = 1.0 / rate if rate > 0 else 0.0
    t0 = time.monotonic()
    while not halt.is_set() and time.monotonic() - t0 < duration_s:
        name = tables[i % len(tables)]
        op, before, after = gens[name].next()
        prod.send(cfg.table(name), op, before, after)
        i += 1
        if i % 500 == 0:  # a few malformed records, which must be quarantined, not lost
            prod.send_raw(cfg.table("sales").topic, b'{"id": 999999}', b'{"op": "c", "after": {"id": "x"')
        if i % 100 == 0:
            sent.value = prod.sent
        if interval:
            delay = t0 + i * interval - time.monotonic()
            if delay > 0:
                halt.wait(delay)

def print_sketches(cfg) -> None:
    """One line per sketch and partitioned table: its fragments and the share of the table's
    rows they hold (what a query reading through the sketch still scans)."""
    from connectors.delta_sink import Lake

    lake = Lake(cfg.lake_root)
    for s in cfg.sketches:
        try:
            reg, recs = sq.records(None, cfg, s.name)
        except Exception:  # noqa: BLE001 - no sketch captured (no batch brought rows)
            print(f"sketch            {s.name}: not captured (no batch brought its tables' rows)")
            continue
        for part in reg.parts:
            rec = recs.get(part.table.lower())
            if rec is None:
                continue
            inside, total = sq.coverage(lake, rec, part)
            print(f"sketch            {s.name} on {part.table}.{part.attribute}: {len(rec['fragments'])} of "
                  f"{rec['n_fragments'] + 1} fragments, {inside:,} of {total:,} rows kept "
                  f"({100.0 * inside / total if total else 0:.1f}% of the table; the rest is skipped), "
                  f"as of batch {rec['batch_id']}")

def _print_graph_outputs(cfg) -> int:
    """The triangle count and the views against a recount from the edge mirror (networkx);
    then every output table with its row count. 1 if a figure disagrees with its recount."""
    import networkx as nx

    from connectors.delta_sink import Lake, read_table

    lake = Lake(cfg.lake_root)

    def rows(path: str) -> list[dict]:
        try:
            return read_table(path).to_pylist()
        except Exception:  # noqa: BLE001 - not written (no batch reached it)
            return []

    edges = rows(lake.mirror("edges"))
    g = nx.Graph((e["src"], e["dst"]) for e in edges if e["src"] != e["dst"])
    want = sum(nx.triangles(g).values()) // 3
    counts = [r for r in rows(lake.output("triangle_counts")) if r["graph"] == "social"]
    got = max(counts, key=lambda r: r["batch_id"])["triangles"] if counts else 0
    d = nx.DiGraph((e["src"], e["dst"]) for e in edges)
    closure = {(x, y) for x in d for s in d.successors(x) for y in {s} | nx.descendants(d, s)}  # paths of length >= 1
    reach = [r for r in rows(lake.output("reachability")) if r["view"] == "reach"]
    routes = [r for r in rows(lake.output("shortest_paths")) if r["view"] == "routes"]
    cheapest = _cheapest(nx, edges)
    ok_t, ok_r = got == want, {(int(r["src"]), int(r["dst"])) for r in reach} == closure
    ok_p = cheapest is None or {(int(r["src"]), int(r["dst"])): r["cost"] for r in routes} == cheapest
    print(f"triangles         {got} in graph 'social' ({len(edges)} edges; recount {want}: "
          f"{'equal' if ok_t else 'DIFFERENT'})")
    print(f"reachability      {len(reach)} pairs in view 'reach' (networkx closure {len(closure)}: "
          f"{'equal' if ok_r else 'DIFFERENT'})")
    print(f"shortest paths    {len(routes)} pairs in view 'routes' " + (
        "(not checked: an edge in the mirror has no positive cost)" if cheapest is None else
        f"(networkx Dijkstra {len(cheapest)}: {'equal' if ok_p else 'DIFFERENT'})"))
    print("output tables     " + ", ".join(
        f"{name} {len(rows(lake.output(name)))}" for name in
        ("quarantine", "batches", "schema_changes", "registered_queries", "sketches", "sketch_deltas",
         "triangle_counts", "reachability", "shortest_paths", "view_stats")))
    return 0 if ok_t and ok_r and ok_p else 1

def _cheapest(nx, edges: list[dict]):
    """{(src, dst): cost of the cheapest path of length >= 1} by Dijkstra; None without positive costs."""
    if any(e["cost"] is None or not e["cost"] > 0 for e in edges):
        return None
    d = nx.DiGraph()
    d.add_weighted_edges_from((e["src"], e["dst"], e["cost"]) for e in edges)
    out = {}
    for x in d:
        dist = nx.single_source_dijkstra_path_length(d, x)
        out.update({(x, y): c for y, c in dist.items() if y != x})
        loops = [dist[w] + d[w][x]["weight"] for w in d.predecessors(x) if w in dist]
        if loops:  # x to itself: the cheapest cycle through x
            out[(x, x)] = min(loops)
    return out

def run_demo(duration_s: float = 60.0, port: int = 9092, broker_dir: Path = VAR / "kafka",
             rate: float = 200.0, ui: bool = True, ui_port: int = 4040) -> int:

    broker = EmbeddedBroker(broker_dir, port=port)
    cfg = load_config(DEMO_DIR / "demo.toml")  # its lake: var/demo/lake, its checkpoint: checkpoints/demo
    cfg = cfg.with_overrides(bootstrap_servers=broker.bootstrap, ui=ui, ui_port=ui_port)
    with job_folders(cfg):  # a second demo stops here, before it wipes anything of the first
        return _run_demo(cfg, broker, duration_s, rate, ui)

def _run_demo(cfg, broker, duration_s: float, rate: float, ui: bool) -> int:
    from streaming_app.runner import run_job

    launched = time.monotonic()
    started_broker = broker.pid() is None
    print(f"{'starting' if started_broker else 'using running'} Kafka broker on {broker.bootstrap} ...", flush=True)
    broker.start()
    try:
        empty_folder(cfg.lake_root)
        empty_folder(cfg.checkpoint_dir)
        reset_topics(broker.bootstrap, cfg.topics, partitions=DEMO_PARTITIONS,
                     replication_factor=cfg.kafka.replication_factor)
        feed = Feed(cfg, broker.bootstrap, duration_s, rate)
        # the snapshot and the changes are sent while Spark starts and the job runs
        feeder = threading.Thread(target=feed.run, daemon=True)
        feeder.start()
        try:
            res = run_job(cfg, ui=ui, stop_event=feed.stop, observer=feed.observe)
        finally:
            feed.stop.set()
            feeder.join(timeout=30)  # its loop polls the stop every 0.5 s
            feed.close()
        t = res.totals
        print("\n=== demo summary ===")
        print(f"batches           {t['batches']}  (first committed {feed.first_batch_s(launched)} after launch)")
        print(f"records produced  {feed.produced}  (snapshot {feed.snapshot_records}, then changes for "
              f"{duration_s:.0f} s at {rate:.0f}/s, a few malformed)")
        caught_up = t["records"] >= feed.produced
        print(f"records read      {t['records']}  " + ("(all of them)" if caught_up else
                                                       f"(BEHIND by {feed.produced - t['records']}: {feed.why_behind()})"))
        print(f"rows applied      {t['events']}  (events applied to the Delta mirrors)")
        print(f"quarantined       {t['quarantined']}")
        print(f"tombstones        {t['tombstones']}")
        print(f"ms per batch      {feed.step_means()}")
        print(f"lake              {cfg.lake_root}  (mirrors/, quarantine, batches, sketches)")
        print_sketches(cfg)
        if not caught_up:
            print("outputs           not compared with recounts: the job had not read everything produced "
                  "(run longer with --duration, or on a less busy machine)")
            return 1
        return _print_graph_outputs(cfg)
    finally:
        if started_broker:
            broker.stop()
            print("stopped the Kafka broker the demo started")
