"""What the real-chain demos share (`demo --source postgres|mariadb`, pg_demo.py and mariadb_demo.py).

Each starts the services it needs that are not running (and stops those at the end), runs a
seeded history in its database while the job runs, stops the job once it has applied the
history's last change (a marker row of key -1 in every table), and ends with a summary that
compares every mirror with its source table value for value: only when the job has caught up,
else it says how far it got and compares nothing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import deltalake

from connectors import delta_sink as sink


def start_services(services: list) -> list:
    """Start each (name, service) that does not run yet; the ones started, in order."""
    started = []
    for name, svc in services:
        if svc.pid() is None:
            print(f"starting {name} ...", flush=True)
            t0 = time.monotonic()
            svc.start()
            started.append((name, svc))
            print(f"  {name} ready in {time.monotonic() - t0:.1f}s", flush=True)
        else:
            print(f"using the running {name}", flush=True)
    return started

def stop_services(started: list) -> None:
    for name, svc in reversed(started):
        svc.stop()
        print(f"stopped the {name} the demo started", flush=True)

def markers_applied(cfg) -> bool:
    """Every mirror holds the history's last row (key -1)."""

    for t in cfg.tables:
        try:
            rows = sink.read_table(str(cfg.lake_root / "mirrors" / t.name),
                                   columns=[t.primary_key[0]]).column(0).to_pylist()
        except Exception:  # noqa: BLE001 - the mirror has no commit yet
            return False
        if -1 not in rows:
            return False
    return True

def run_with_history(cfg, work, source: str, what: str, duration_s: float, ui: bool):
    """Run the job while ``work.run()`` plays the history in ``source``; stop it once the job has
    applied the last change, or after ``duration_s``. The job's RunResult."""
    from streaming_app.runner import run_job

    stop = threading.Event()

    def feed() -> None:
        print(f"running the history in {source} ({what}) ...", flush=True)
        done = work.run()
        print(f"history done in {source}: {done}", flush=True)
        deadline = time.monotonic() + duration_s
        while not stop.is_set() and time.monotonic() < deadline:
            if markers_applied(cfg):
                print("the job has applied the history's last change", flush=True)
                break
            stop.wait(2)
        stop.set()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    res = run_job(cfg, duration_s=duration_s, ui=ui, stop_event=stop)
    stop.set()
    feeder.join(timeout=30)
    return res

def summary(cfg, res, chain: str, source: str, compare: Callable, quarantine_note: str,
            edges: Callable[[], list]) -> int:
    """Print the summary; 0 if every mirror equals its source table and the triangle count its
    recount. ``compare(table, mirror rows) -> (text, mismatches)``; ``edges()``: the source's
    (src, dst) rows."""
    import networkx as nx

    from streaming_app.demo_run import print_sketches

    t = res.totals
    print(f"\n=== demo summary ({chain}) ===")
    print(f"batches           {t['batches']}")
    print(f"records read      {t['records']}  (tombstones {t['tombstones']}, quarantined {t['quarantined']})")
    if not markers_applied(cfg):
        print(f"BEHIND            the job had not applied the history's last change when the demo stopped "
              f"(after {res.seconds:.0f} s of running): mirrors not compared with {source}. Give it longer "
              "(--duration), or a less busy machine")
        return 1
    lake = Path(cfg.lake_root)
    failed = 0
    for t in cfg.tables:
        mirror = sink.read_table(str(lake / "mirrors" / t.name)).to_pylist()
        text, bad = compare(t.name, mirror)
        failed += len(bad)
        print(f"mirror {t.name:<10} {text}" + (f" e.g. {bad[:2]}" if bad else ""))
    codes: dict = {}
    for r in deltalake.DeltaTable(str(lake / "quarantine")).to_pyarrow_table().to_pylist():
        codes[r["error_code"]] = codes.get(r["error_code"], 0) + 1
    print(f"quarantine        {codes or 'empty'}  ({quarantine_note})")
    sc = deltalake.DeltaTable(str(lake / "schema_changes")).to_pyarrow_table().to_pylist()
    print(f"schema changes    {[(r['table'], r['column'], r['change']) for r in sc]}")
    print_sketches(cfg)
    g = nx.Graph()
    g.add_edges_from(edges())
    want = sum(nx.triangles(g).values()) // 3
    counts = deltalake.DeltaTable(str(lake / "triangle_counts")).to_pyarrow_table().to_pylist()
    got = max(counts, key=lambda r: r["batch_id"])["triangles"] if counts else None
    print(f"triangles         {got} (recount from {source}'s edges: {want})")
    failed += got != want
    print(f"lake              {lake}")
    return 0 if failed == 0 else 1
