"""Benchmark: a triangle maintainer's restart, recount of the edge mirror vs snapshot + catch-up.

One run, real Delta tables on a local lake (delta-rs, as the job uses on a local lake):

  1. an edge mirror (change data feed on) with N power-law edges (one commit), then
     ``--batches`` job-like batches of ``--changes`` edge changes each (inserts and deletes,
     one delta-rs MERGE per batch, as the job writes its mirrors) after the snapshot: the
     gap a restart catches up when it lands just before the next snapshot
     (``[state] snapshot_every`` = ``--batches``);
  2. the snapshot is taken by the real maintainer (``TriangleMaintainer``) at the mirror
     version before those batches and written into the real store (``state_snapshots``);
  3. timed, alternating, ``--reps`` times each, at the final mirror version:
     *recount*: what ``start`` did before the store (and still does without a usable
     snapshot): read the whole edge mirror, feed it to a fresh counter;
     *restore*: what ``start`` does now: newest consistent snapshot from the store, decode,
     apply the change feed from its version to the committed one.
  Both give the same count (checked). Wall time (the job waits for it), median of the reps.

    nice -n 10 .venv/bin/python bench/restart.py [--edges 1000000] [--quick]

Writes bench/results/restart.md and restart.png (--quick: restart.quick.md, no png).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import types

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import deltalake  # noqa: E402

from connectors import delta_sink as sink  # noqa: E402
from operators.triangles.workloads import power_law_edges  # noqa: E402
from core.config import StateSettings, TrianglesConfig  # noqa: E402
from streaming_app.triangles.maintainer import TriangleMaintainer  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GOAL = 0.10  # restart <= 10% of a recount's time (issue 18)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_mirror(path: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    src, dst, _ = power_law_edges(n, seed=seed)
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    deltalake.DeltaTable.create(path, schema=schema, configuration={"delta.enableChangeDataFeed": "true"})
    deltalake.write_deltalake(path, pa.table({"src": src, "dst": dst}, schema=schema), mode="append")
    return src, dst


def change_batches(path: str, src, dst, batches: int, changes: int, seed: int) -> int:
    """``batches`` MERGE commits of ``changes`` rows: half deletes of live edges, half new edges."""
    rng = np.random.default_rng(seed + 1)
    live = set(zip(src.tolist(), dst.tolist()))
    nv = int(max(src.max(), dst.max())) + 1
    rows = 0
    for _ in range(batches):
        dels = rng.choice(len(src), changes // 2, replace=False)
        gone = {(int(src[i]), int(dst[i])) for i in dels} & live
        new = set()
        while len(new) < changes - changes // 2:
            u, v = (int(x) for x in rng.integers(0, nv, 2))
            if u != v and (u, v) not in live and (v, u) not in live:
                new.add((u, v))
        live -= gone
        live |= new
        keys = sorted(gone) + sorted(new)
        t = pa.table({"src": pa.array([k[0] for k in keys], pa.int64()), "dst": pa.array([k[1] for k in keys], pa.int64()),
                      "__deleted": [True] * len(gone) + [False] * len(new)})
        cols = {'"src"': 's."src"', '"dst"': 's."dst"'}
        (deltalake.DeltaTable(path).merge(t, 't."src" = s."src" AND t."dst" = s."dst"', source_alias="s",
                                          target_alias="t")
         .when_matched_delete(predicate='s."__deleted"')
         .when_not_matched_insert(updates=cols, predicate='NOT s."__deleted"').execute())
        rows += len(keys)
        # the live arrays for the next batch's deletes
        arr = np.array(sorted(live), dtype=np.int64)
        src, dst = arr[:, 0], arr[:, 1]
    return rows


def fake_job(root: str, version: int):
    """What a maintainer reads of the job: the lake, the committed mirror versions, a name."""
    return types.SimpleNamespace(lake=sink.Lake(root), versions={"edges": version},
                                 cfg=types.SimpleNamespace(name="bench"))


def run(n: int, batches: int, changes: int, reps: int, seed: int) -> dict:
    root = tempfile.mkdtemp(prefix="restart_bench_")
    try:
        path = sink.Lake(root).mirror("edges")
        t = time.perf_counter()
        src, dst = build_mirror(path, n, seed)
        log(f"mirror of {n:,} edges written in {time.perf_counter() - t:.1f} s")
        graph = TrianglesConfig(name="g", table="edges")
        state = StateSettings(snapshot_every=batches)
        v0 = int(deltalake.DeltaTable(path).version())

        m = TriangleMaintainer(graph, state)
        m.recovery.setup(None, fake_job(root, v0))
        t = time.perf_counter()
        m.start(None, fake_job(root, v0))
        log(f"initial state at v{v0}: {m.engine.count:,} triangles ({time.perf_counter() - t:.1f} s)")
        ctx = types.SimpleNamespace(batch_id=0, app_id="bench:q", metrics={})
        m.recovery.since = batches
        t = time.perf_counter()
        m.recovery.after_batch(None, fake_job(root, v0), ctx, m.engine, changed=False)
        snap = ctx.metrics[m.name]["snapshot"]
        snap_ms = (time.perf_counter() - t) * 1000
        log(f"snapshot written: {snap['bytes']:,} bytes in {snap_ms:.0f} ms")
        del m

        t = time.perf_counter()
        fed = change_batches(path, src, dst, batches, changes, seed)
        v1 = int(deltalake.DeltaTable(path).version())
        log(f"{batches} change batches ({fed:,} rows) committed in {time.perf_counter() - t:.1f} s: v{v0} -> v{v1}")
        job = fake_job(root, v1)

        recount_ms, restore_ms, recount_cpu, restore_cpu, counts, caught, edges = [], [], [], [], set(), 0, 0
        for i in range(reps):
            r = TriangleMaintainer(graph, state)
            r.recovery.setup(None, job)
            t, c = time.perf_counter(), time.process_time()
            edges = r._recount(None, job)  # the recount path of start
            recount_ms.append((time.perf_counter() - t) * 1000)
            recount_cpu.append((time.process_time() - c) * 1000)
            counts.add(("recount", r.engine.count, r.engine.edges))
            del r
            log(f"rep {i + 1}: recount {recount_ms[-1]:,.0f} ms (cpu {recount_cpu[-1]:,.0f} ms)")

            r = TriangleMaintainer(graph, state)
            r.recovery.setup(None, job)
            t, c = time.perf_counter(), time.process_time()
            r.start(None, job)
            restore_ms.append((time.perf_counter() - t) * 1000)
            restore_cpu.append((time.process_time() - c) * 1000)
            assert r.recovery.last_start.get("restored"), r.recovery.last_start
            caught = r.recovery.last_start["caught_up"]
            counts.add(("restore", r.engine.count, r.engine.edges))
            del r
            log(f"rep {i + 1}: restore {restore_ms[-1]:,.0f} ms (cpu {restore_cpu[-1]:,.0f} ms)")
        parts = breakdown(root, graph, state, job)
        values = {c[1:] for c in counts}
        assert len(values) == 1, counts
        count, n_edges = values.pop()
        return {"n": n, "mirror_rows": edges, "batches": batches, "changes": changes, "fed_rows": fed,
                "caught_up": caught, "triangles": count, "edges": n_edges, "snapshot_bytes": snap["bytes"],
                "snapshot_write_ms": snap_ms, "recount_ms": recount_ms, "restore_ms": restore_ms,
                "recount_cpu": recount_cpu, "restore_cpu": restore_cpu, "parts": parts,
                "v0": v0, "v1": v1}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def breakdown(root: str, graph, state, job) -> dict:
    """One more restore, step by step as ``Recovery.start`` does it: CPU ms of reading the
    snapshot from the store, decoding it into the engine, reading the change feed, applying it."""
    from state.snapshot_store import SnapshotStore

    m = TriangleMaintainer(graph, state)
    out, c = {}, time.process_time()

    def lap(name):
        nonlocal c
        now = time.process_time()
        out[name] = (now - c) * 1000
        c = now

    snap = SnapshotStore(root).latest(m.name, job.versions)
    lap("store read")
    m.engine.restore(snap.encoding, snap.state)
    lap("decode")
    m.source.version = snap.versions["edges"]
    delta = m.source.changes(None, job.lake, job.versions["edges"])
    lap("change feed read")
    m.engine.apply({"edges": delta})
    lap("catch-up apply")
    out["encoding"] = snap.encoding
    return out


def report(r: dict, quick: bool) -> str:
    rec, res = statistics.median(r["recount_ms"]), statistics.median(r["restore_ms"])
    crec, cres = statistics.median(r["recount_cpu"]), statistics.median(r["restore_cpu"])
    ratio, cratio = res / rec, cres / crec
    load = os.getloadavg()[0]
    lines = [
        "# Restart of a triangle maintainer: recount vs snapshot + catch-up",
        "",
        f"Run: `nice -n 10 .venv/bin/python bench/restart.py{' --quick' if quick else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, one process, wall time, median of "
        f"{len(r['recount_ms'])} alternating repetitions (2-core machine shared with other jobs; load average "
        f"{load:.1f} at the end). Local lake, real Delta tables through delta-rs (the job's path on a local "
        "lake), the real snapshot store (`state_snapshots`) and the real `TriangleMaintainer`.",
        "",
        f"Graph: power-law (Chung–Lu, γ = 2.2) with {r['n']:,} undirected edges in one commit (v{r['v0']}); "
        f"snapshot taken there ({r['snapshot_bytes']:,} bytes, written in {r['snapshot_write_ms']:,.0f} ms); then "
        f"{r['batches']} job-like batches of {r['changes']:,} edge changes each (half deletes of live edges, half "
        f"new edges; one MERGE commit each, v{r['v0']}→v{r['v1']}): the gap a restart catches up when it lands "
        f"just before the next snapshot with `[state] snapshot_every = {r['batches']}`. Final mirror: "
        f"{r['mirror_rows']:,} edges, {r['triangles']:,} triangles (both paths agree).",
        "",
        "| path | what it does | wall ms (median) | each rep, wall ms | CPU ms (median) | each rep, CPU ms |",
        "|---|---|---:|---|---:|---|",
        f"| recount | read the whole edge mirror at v{r['v1']}, build the counter | {rec:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in r["recount_ms"]) + f" | {crec:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in r["recount_cpu"]) + " |",
        f"| restore | newest consistent snapshot from the store, decode, apply the change feed "
        f"v{r['v0']}→v{r['v1']} ({r['caught_up']:,} change rows) | {res:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in r["restore_ms"]) + f" | {cres:,.0f} | "
        + ", ".join(f"{x:,.0f}" for x in r["restore_cpu"]) + " |",
        "",
        f"**restore / recount = {ratio:.3f} wall** ({ratio * 100:.1f}%; goal ≤ {GOAL * 100:.0f}%: "
        f"{'met' if ratio <= GOAL else 'not met'}), **{cratio:.3f} CPU** ({cratio * 100:.1f}%: "
        f"{'met' if cratio <= GOAL else 'not met'}); recount / restore = {rec / res:.1f}x wall, "
        f"{crec / cres:.1f}x CPU. CPU time is the process's (all threads; delta-rs reads in parallel), "
        "less disturbed by the other jobs on the machine than wall time.",
        "",
        "## Where the restore's time goes (one more restore in the same run, step by step, CPU ms)",
        "",
        "| step | CPU ms |",
        "|---|---:|",
        *[f"| {k} | {v:,.0f} |" for k, v in r["parts"].items() if k != "encoding"],
        "",
        f"The snapshot's encoding is `{r['parts']['encoding']}`: the counter's own containers (adjacency, heavy",
        "sets, heavy index, view) pickled and unpickled with every global refused, so the decode is building the",
        "dicts and nothing else (the v1 encoding rebuilt the heavy index and the view on restore, and built the",
        "dicts from int64 arrays: about 0.5 s CPU at 10^6 edges against about 0.2 s now), with cyclic GC off while",
        "it runs. The recount feeds the edges through IVM^ε one update at a time.",
        "",
    ]
    return "\n".join(lines)


def plot(r: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    names = ["recount", "restore + catch-up"]
    meds = [statistics.median(r["recount_ms"]) / 1000, statistics.median(r["restore_ms"]) / 1000]
    ax.bar(names, meds, color=["#999999", "#2a7ab0"])
    for i, reps in enumerate((r["recount_ms"], r["restore_ms"])):
        ax.scatter([i] * len(reps), [x / 1000 for x in reps], color="black", s=10, zorder=3)
    ax.set_ylabel("seconds (wall)")
    ax.set_title(f"Triangle maintainer restart at {r['n']:,} edges")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=10, help="change batches after the snapshot (snapshot_every)")
    ap.add_argument("--changes", type=int, default=1_000, help="edge changes per batch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="10^5 edges, 2 reps; writes restart.quick.md")
    a = ap.parse_args(argv)
    if a.quick:
        a.edges, a.reps = min(a.edges, 100_000), 2
    r = run(a.edges, a.batches, a.changes, a.reps, a.seed)
    text = report(r, a.quick)
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    name = "restart.quick" if a.quick else "restart"
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as f:
        f.write(text)
    if not a.quick:
        plot(r, os.path.join(RESULTS, "restart.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
