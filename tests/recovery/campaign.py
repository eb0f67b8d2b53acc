"""The kill campaign: one job (two CDC tables with poison records, an edge table with a sketch,
a triangle count and a reachability view) run as a process again and again, SIGKILLed at
seeded random points, then checked against oracles that know what was sent.

Kinds of kill point:

* ``delta_commit`` - a step's ``.begin`` fault with a random delay, so the kill lands inside
  the Spark MERGE of a mirror, the quarantine or batches append, or the delta-rs writes of the
  sketch maintainer that follow;
* ``commit_log`` - after the batch record: ``batch_record:<b>@<ms>`` from inside, or SIGKILL of
  the process group from outside a random time after the batch's line is printed, so the kill
  lands in Spark's commit-log write or the next batch's offset-log write;
* ``state_snapshot`` - inside the sketch maintainer's snapshot appends to ``state_snapshots``
  (delta-rs, one per query);
* ``batch0`` - any of the above on the first batch of a fresh lake;
* ``register`` - `ivmstream sketch register` killed inside its registry append or capture
  writes, then run again.

Used by tests/recovery/test_kill_campaign.py and bench/kill_campaign.py; no Spark in this
process (the lake is read with delta-rs)."""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pyarrow as pa

from connectors.kafka import create_topics
from core.config import dump_toml
from devstack.producer import CdcProducer
from streaming_app.settings import parse_config
from tests.platform.cdc_fixture import History, job_config
from tests.platform.test_graph_e2e import _send as send_edges

SKETCH_SQL = "SELECT src, COUNT(*) AS n FROM edges GROUP BY src HAVING COUNT(*) > 2"
REGISTER_SQL = "SELECT dst, SUM(cost) AS c FROM edges GROUP BY dst HAVING SUM(cost) > 10"
REGISTER_NAME = "heavy_dst"

# natural key of every output table: two rows with the same key are one row written twice
NATURAL_KEYS = {
    "mirrors/items": ["id"], "mirrors/pairs": ["a", "b"], "mirrors/edges": ["src", "dst"],
    "batches": ["app_id", "batch_id"],
    # a decoder rejection is one Kafka record; a maintainer's (a self-loop edge: offset -1) is
    # one change of one batch, so the batch and the payload belong to the key as well
    "quarantine": ["topic", "partition", "offset", "batch_id", "key", "value", "error_code"],
    "sketch_deltas": ["query", "batch_id", "table_name", "fragment", "change"],
    # every maintainer's engine snapshots (sketch.<query>, triangles.g, view.reach): the job
    # writes one per maintainer and batch; `sketch register` one at batch -1
    "state_snapshots": ["maintainer", "batch_id"], "sketches": ["query", "table_name"],
    "registered_queries": ["name", "partition_table"],
    "triangle_counts": ["graph", "batch_id"], "reachability": ["view", "src", "dst"],
    "view_stats": ["view", "batch_id"],
}

# (fault step, largest delay in ms): Spark writes take a second or more, delta-rs ones tens of ms
COMMIT_STEPS = [("mirror.begin.items", 1500), ("mirror.begin.pairs", 1500), ("mirror.begin.edges", 1500),
                ("quarantine.begin", 1200), ("batch_record.begin", 1200), ("sketch.deltas", 60),
                ("maintain.sketches", 1500)]


@dataclass
class Point:
    kind: str
    batch: int
    spec: str | None = None         # IVMSTREAM_KILL_AT, or None for a kill from outside
    after_line_ms: int | None = None  # outside kill: ms after the batch's line

    def __str__(self) -> str:
        return self.spec if self.spec else f"outside:{self.batch}+{self.after_line_ms}ms"


@dataclass
class Run:
    code: int
    out: str
    landed: bool
    seconds: float


@dataclass
class Tally:
    tried: collections.Counter = field(default_factory=collections.Counter)
    landed: collections.Counter = field(default_factory=collections.Counter)
    restarts: int = 0
    runs: int = 0
    log: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def config_data(root: Path, bootstrap: str, max_offsets: int = 50, snapshot_every: int = 1) -> dict:
    data, _ = job_config(root, bootstrap, name="kc", max_offsets=max_offsets, topic_prefix="kc")
    data["tables"].append({"name": "edges", "topic": "kc.edges", "primary_key": ["src", "dst"],
                           "columns": {"src": "long", "dst": "long", "cost": "double"}})
    data["sketch"] = {"snapshot_every": snapshot_every}
    data["sketches"] = [{"name": "busy_src", "sql": SKETCH_SQL, "partition": ["edges.src:4"]}]
    data["graphs"] = [{"name": "g", "table": "edges", "mode": "undirected"}]
    data["views"] = [{"name": "reach", "table": "edges", "kind": "reachability"}]
    return data


class Campaign:
    """A lake, a broker, a history that knows its expected outcome, and the job as a process."""

    def __init__(self, root: Path, bootstrap: str, seed: int, max_offsets: int = 50,
                 snapshot_every: int = 1):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = config_data(self.root, bootstrap, max_offsets, snapshot_every)
        self.cfg = parse_config(self.data)
        self.path = self.root / "job.toml"
        self.path.write_text(dump_toml(self.data))
        self.bootstrap = bootstrap
        create_topics(bootstrap, self.cfg.topics, partitions=2)  # as written: keys over two partitions
        self.rng = random.Random(seed)
        self.hist = History(self.cfg, seed=seed)
        self.edges: dict = {}
        self._loops: list = []
        self._edge_rng = random.Random(seed + 1)
        self.sent = 0
        self.tally = Tally()
        self.registered = False

    # -- the source ------------------------------------------------------------------------
    def send(self, n_rows: int, n_edges: int) -> None:
        prod = CdcProducer(self.bootstrap)
        self.hist.send(prod, n_rows)
        send_edges(prod, self.cfg.table("edges"), self.edges, self._edge_rng, n_edges, self._loops)
        prod.close()
        self.sent += prod.sent

    # -- processes -------------------------------------------------------------------------
    def _spawn(self, args: list[str], spec: str | None) -> subprocess.Popen:
        env = dict(os.environ)
        env.pop("IVMSTREAM_KILL_AT", None)
        if spec:
            env["IVMSTREAM_KILL_AT"] = spec
        return subprocess.Popen([sys.executable, "-m", "streaming_app", *args, "--config", str(self.path)],
                                env=env, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def run_job(self, spec: str | None = None, *, on_line=None, timeout: float = 400) -> Run:
        """One ``ivmstream run --available-now``; ``on_line(proc, line)`` sees every output line."""
        t0 = time.monotonic()
        proc = self._spawn(["run", "--available-now", "--no-ui"], spec)
        lines: list[str] = []

        def read():
            for line in proc.stdout:
                lines.append(line)
                if on_line:
                    on_line(proc, line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        finally:
            _killpg(proc)  # the JVM child goes with its Python parent; make sure of it
        reader.join(10)
        out = "".join(lines)
        self.tally.runs += 1
        landed = proc.returncode == -signal.SIGKILL and (spec is None or f"fault injection: SIGKILL at {spec}" in out)
        return Run(proc.returncode, out, landed, time.monotonic() - t0)

    def kill_at(self, point: Point) -> Run:
        """Run once with ``point`` armed; count it."""
        self.tally.tried[point.kind] += 1
        if point.spec:
            run = self.run_job(point.spec)
        else:
            want = f"batch {point.batch:>5}:"
            fired = threading.Event()

            def on_line(proc, line):
                if line.startswith(want) and not fired.is_set():
                    fired.set()
                    threading.Timer(point.after_line_ms / 1000.0, _killpg, (proc,)).start()

            run = self.run_job(None, on_line=on_line)
            run.landed = fired.is_set() and run.code == -signal.SIGKILL
        if run.landed:
            self.tally.landed[point.kind] += 1
            self.tally.restarts += 1
        elif run.code != 0:
            raise AssertionError(f"run with {point} ended with {run.code}:\n{run.out[-4000:]}")
        self.tally.log.append((point.kind, str(point), run.code, run.landed, round(run.seconds, 1)))
        return run

    def drain(self) -> Run:
        run = self.run_job(None)
        if run.code != 0:
            raise AssertionError(f"draining run ended with {run.code}:\n{run.out[-4000:]}")
        self.tally.log.append(("drain", "-", run.code, False, round(run.seconds, 1)))
        return run

    def sigterm_between_batches(self, after_batch: int) -> Run:
        """SIGTERM to the job process once ``after_batch``'s line is out: it must stop cleanly."""
        want = f"batch {after_batch:>5}:"
        sent = threading.Event()

        def on_line(proc, line):
            if line.startswith(want) and not sent.is_set():
                sent.set()
                os.kill(proc.pid, signal.SIGTERM)

        self.tally.tried["sigterm"] += 1
        run = self.run_job(None, on_line=on_line)
        run.landed = sent.is_set()
        if run.landed:
            self.tally.landed["sigterm"] += 1
        self.tally.log.append(("sigterm", f"after batch {after_batch}", run.code, run.landed, round(run.seconds, 1)))
        return run

    @staticmethod
    def stopped_after(run: Run) -> int | None:
        """The last batch a signalled run must have finished, from its own stop line: the
        batch that was running when the signal came, or else the last one it finished."""
        m = re.search(r"SIG\w+: (?:finishing batch (\d+), then stopping|stopping after batch (\d+))", run.out)
        return None if m is None else int(m.group(1) or m.group(2))

    def register(self, spec: str | None) -> Run:
        """`ivmstream sketch register` of a second query, optionally killed inside its writes."""
        t0 = time.monotonic()
        args = ["sketch", "register", "--name", REGISTER_NAME, "--sql", REGISTER_SQL, "--partition", "edges.dst:3"]
        proc = self._spawn(args, spec)
        try:
            out, _ = proc.communicate(timeout=300)
        finally:
            _killpg(proc)
        landed = spec is not None and proc.returncode == -signal.SIGKILL and "fault injection: SIGKILL at" in out
        return Run(proc.returncode, out, landed, time.monotonic() - t0)

    def kill_register(self, spec: str) -> tuple[Run, Run]:
        """Kill a register at ``spec``, then run it again (as a user would) until it says done."""
        self.tally.tried["register"] += 1
        killed = self.register(spec)
        if killed.landed:
            self.tally.landed["register"] += 1
            self.tally.restarts += 1
        again = self.register(None)
        if again.code != 0:
            if "already registered" in again.out:
                self.tally.notes.append(f"register killed at {spec}: the re-run said 'already registered'; "
                                        "the job captured the half-registered query itself")
            else:
                raise AssertionError(f"re-register after {spec} ended with {again.code}:\n{again.out[-3000:]}")
        self.registered = True
        self.tally.log.append(("register", spec, killed.code, killed.landed, round(killed.seconds + again.seconds, 1)))
        return killed, again

    # -- the lake --------------------------------------------------------------------------
    def table(self, name: str) -> pa.Table | None:
        from connectors.delta_sink import read_table

        path = self.cfg.lake_root / name
        if not (path / "_delta_log").exists():
            return None
        return read_table(str(path))

    def next_batch(self) -> int:
        b = self.table("batches")
        return 0 if b is None or b.num_rows == 0 else max(b.column("batch_id").to_pylist()) + 1

    def consumed(self) -> int:
        b = self.table("batches")
        return 0 if b is None else sum(b.column("records_in").to_pylist())

    def check(self) -> dict:
        """Compare every output with its oracle. Returns rows compared/lost/doubled and the
        mismatches (empty when the lake is right)."""
        return check_lake(self)


def _killpg(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _norm(v):
    if hasattr(v, "tzinfo") and getattr(v, "tzinfo", None) is not None:
        return v.replace(tzinfo=None)
    return v


def _keyed(rows: list[dict], key: list[str]) -> dict:
    return {tuple(r[k] for k in key): {k: _norm(x) for k, x in r.items()} for r in rows}


def check_lake(c: Campaign) -> dict:
    from operators.sketch import RangePartition
    from tests.oracles.sketch_reference import reference_sketch
    from streaming_app.sketches.tables import bounds_from_json

    res = {"compared": 0, "lost": 0, "doubled": 0, "wrong": 0, "problems": []}

    def problem(kind: str, n: int, what: str) -> None:
        res[kind] += n
        res["problems"].append(f"{kind} {n}: {what}")

    # duplicates by natural key, every output table
    for name, key in NATURAL_KEYS.items():
        t = c.table(name)
        if t is None:
            if name != "quarantine":
                problem("lost", 1, f"table {name} missing")
            continue
        rows = t.select(key).to_pylist()
        counts = collections.Counter(tuple(r[k] for k in key) for r in rows)
        twice = sum(n - 1 for n in counts.values() if n > 1)
        if twice:
            problem("doubled", twice, f"{name}: {twice} rows share a natural key {key}")

    # mirrors against the history
    expected = {"items": _keyed(c.hist.expected_rows("items"), ["id"]),
                "pairs": _keyed(c.hist.expected_rows("pairs"), ["a", "b"]),
                "edges": _keyed(list(c.edges.values()), ["src", "dst"])}
    for t, key in (("items", ["id"]), ("pairs", ["a", "b"]), ("edges", ["src", "dst"])):
        got = _keyed(c.table(f"mirrors/{t}").to_pylist(), key)
        want = expected[t]
        res["compared"] += len(want)
        lost = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        wrong = [k for k in want if k in got and got[k] != want[k]]
        if lost:
            problem("lost", len(lost), f"mirror {t}: keys missing {lost[:5]}")
        if extra:
            problem("wrong", len(extra), f"mirror {t}: keys that should be gone {extra[:5]}")
        if wrong:
            problem("wrong", len(wrong), f"mirror {t}: values differ at {wrong[:3]}: "
                                         f"{[(got[k], want[k]) for k in wrong[:2]]}")

    # every record counted once
    consumed = c.consumed()
    res["compared"] += c.sent
    if consumed < c.sent:
        problem("lost", c.sent - consumed, f"batches count {consumed} records in, {c.sent} were sent")
    elif consumed > c.sent:
        problem("doubled", consumed - c.sent, f"batches count {consumed} records in, {c.sent} were sent")

    q = c.table("quarantine")
    codes = collections.Counter(r["error_code"] for r in (q.to_pylist() if q is not None else [])
                                if r["offset"] >= 0)  # self-loop rows of the graph maintainers aside
    want = collections.Counter(c.hist.bad)
    res["compared"] += sum(want.values())
    if codes - want:
        problem("doubled", sum((codes - want).values()), f"quarantine: extra {dict(codes - want)}")
    if want - codes:
        problem("lost", sum((want - codes).values()), f"quarantine: missing {dict(want - codes)}")

    # triangles and reachability against networkx
    g = nx.Graph()
    g.add_edges_from((u, v) for (u, v) in c.edges if u != v)
    tri = c.table("triangle_counts").to_pylist()
    last = max(tri, key=lambda r: r["batch_id"])
    res["compared"] += 1
    if last["triangles"] != sum(nx.triangles(g).values()) // 3:
        problem("wrong", 1, f"triangles {last['triangles']} != networkx {sum(nx.triangles(g).values()) // 3}")
    d = nx.DiGraph()
    d.add_edges_from(c.edges)
    closure = {(str(x), str(y)) for x in d.nodes for s in d.successors(x) for y in {s} | nx.descendants(d, s)}
    reach = {(str(r["src"]), str(r["dst"])) for r in c.table("reachability").to_pylist() if r["view"] == "reach"}
    res["compared"] += len(closure)
    if closure - reach:
        problem("lost", len(closure - reach), f"reachability: missing {sorted(closure - reach)[:5]}")
    if reach - closure:
        problem("wrong", len(reach - closure), f"reachability: extra {sorted(reach - closure)[:5]}")

    # every sketch equals a recapture on the final mirrors
    mirrors = {"edges": c.table("mirrors/edges")}
    regs = [r for r in c.table("registered_queries").to_pylist() if r["boundaries"]]
    sk = {(r["query"], r["table_name"]): r for r in c.table("sketches").to_pylist()}
    names = {"busy_src"} | ({REGISTER_NAME} if c.registered else set())
    for r in regs:
        names.discard(r["name"])
        part = {r["partition_table"]: RangePartition(r["attribute"], bounds_from_json(r["boundaries"]))}
        want_fr = reference_sketch(r["sql"], mirrors, part)[r["partition_table"]]
        row = sk.get((r["name"], r["partition_table"]))
        res["compared"] += 1
        if row is None:
            problem("lost", 1, f"sketch {r['name']}: no sketches row")
        elif sorted(row["fragments"]) != want_fr:
            problem("wrong", 1, f"sketch {r['name']}: {sorted(row['fragments'])} != recapture {want_fr}")
    for n in names:
        problem("lost", 1, f"sketch {n}: not registered with boundaries")
    return res


def plan_points(rng: random.Random, n: int) -> list[tuple[str, int]]:
    """(kind, batches ahead of the next one) for ``n`` points: two on batch 0 first, then the
    others shuffled so every kind comes up."""
    kinds = ["register", "register"] if n >= 8 else ["register"]
    rest = n - 2 - len(kinds)
    per = ["state_snapshot", "commit_log", "delta_commit", "delta_commit"]
    kinds += [per[i % len(per)] for i in range(max(rest, 0))]
    rng.shuffle(kinds)
    return [("batch0", 0), ("batch0", 0)] + [(k, rng.choice([0, 1, 1, 2])) for k in kinds]


def make_point(rng: random.Random, kind: str, batch: int) -> Point:
    if kind == "state_snapshot":
        return Point(kind, batch, f"sketch.state.begin:{batch}@{rng.randrange(0, 60)}")
    if kind == "commit_log":
        if rng.random() < 0.5:
            return Point(kind, batch, f"batch_record:{batch}@{rng.randrange(0, 400)}")
        return Point(kind, batch, None, rng.randrange(0, 700))
    if kind == "batch0":
        sub = rng.choice(["delta_commit", "state_snapshot", "commit_log", "collect"])
        if sub == "collect":
            return Point(kind, 0, "collect:0")
        p = make_point(rng, sub, 0)
        return Point(kind, 0, p.spec, p.after_line_ms)
    step, most = rng.choice(COMMIT_STEPS)
    return Point(kind, batch, f"{step}:{batch}@{rng.randrange(0, most)}")


def register_spec(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"register.begin:-1@{rng.randrange(0, 2500)}"
    return f"register.capture:-1@{rng.randrange(0, 2500)}"
