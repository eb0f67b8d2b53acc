"""IMP's TPC-H experiment (paper Sec. 8, Fig. 5a) for the sketch engine: incremental vs full maintenance, in one run.

Setup as in the IMP artifact (anchor imp-gprom-artifacts.md §2.1): TPC-H SF1, lineitem
partitioned on l_orderkey into 1000 equi-depth fragments, only lineitem updated, deltas of
10/50/100/500/1000 rows as inserts, deletes and a 50/50 mix, the 12 IMP TPC-H queries.

For every query and delta the script measures
  * incremental: ``SketchMaintainer.apply(delta)`` (median of ``--reps`` runs; between runs the
    inverse delta is applied, untimed, so each run starts from the same state);
and, on the updated database, the full-maintenance alternatives a user would otherwise run
  * engine recapture: ``SketchMaintainer.from_sql(...).initialize(tables)`` from scratch
    (once per query and delta kind: its cost depends on the database, not on the delta);
  * DuckDB recapture: ``tests.oracles.sketch_reference.reference_sketch`` (the lineage-rewritten
    capture query in DuckDB, 1 thread), after every delta; it doubles as a correctness check
    (the incremental sketch must equal it).
Speedup = full time / incremental time; throughput = delta rows / incremental seconds.

  .venv/bin/python bench/imp.py            # SF1, all 12 queries, all sizes (heavy: run alone)
  .venv/bin/python bench/imp.py --quick    # SF0.1, 4 queries, sizes 10/100/1000

Writes bench/results/imp.md (tables), imp.json (raw figures) and imp.png (speedup vs delta size).
"""

from __future__ import annotations

import argparse
import json
import datetime as _dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.oracles.sketch_reference import reference_sketch  # noqa: E402
from bench.harness.datasets import LINEITEM_GROUPS, WEIGHT, load_tpch, random_delta  # noqa: E402
from tests.sketch_tpch.queries import tpch_queries  # noqa: E402

RESULTS = REPO / "bench" / "results"
KINDS = ("insert", "delete", "mix")
SIZES = (10, 50, 100, 500, 1000)
QUICK_QUERIES = ("tpch_q01", "tpch_q03", "tpch_q06", "tpch_q10")
TARGET_SINGLE, TARGET_JOIN = 100.0, 10.0


def log(msg: str) -> None:
    print(f"[{_dt.datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def inverse(delta: pa.Table) -> pa.Table:
    return delta.set_column(delta.schema.get_field_index(WEIGHT), WEIGHT, pc.negate(delta.column(WEIGHT)))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def run(args) -> dict:
    from operators.sketch import RangePartition, SketchMaintainer

    log(f"loading TPC-H SF{args.sf:g} (generated with tpchgen-cli on first use)")
    base = load_tpch(args.sf)
    lineitem0 = base["lineitem"]
    part = RangePartition.equi_depth("l_orderkey", lineitem0.column("l_orderkey"), args.fragments)
    partitions = {"lineitem": part}
    log(f"lineitem {lineitem0.num_rows:,} rows, {part.n_fragments} fragments on l_orderkey")
    queries = tpch_queries()
    names = [n for n in queries if n in args.queries] if args.queries else list(queries)
    rows = []
    meta = {"queries": {}}
    for name in names:
        q = queries[name]
        rng = np.random.default_rng(args.seed)
        tables = dict(base)
        t_parse, m = timed(lambda: SketchMaintainer.from_sql(q.sql, partitions=partitions))
        t_init, _ = timed(lambda: m.initialize(tables))
        t_ref0, ref0 = timed(lambda: reference_sketch(q.sql, tables, partitions))
        ok0 = list(m.sketch.get("lineitem", [])) == ref0["lineitem"]
        meta["queries"][name] = {"init_s": t_init, "duckdb_capture_s": t_ref0, "sketch_size": len(ref0["lineitem"]), "initial_ok": ok0}
        log(f"{name}: initialize {t_init:.2f}s, duckdb capture {t_ref0:.3f}s, sketch {len(ref0['lineitem'])} fragments, equal={ok0}")
        for kind in KINDS:
            full_engine = None
            for size in args.sizes:
                delta, after = random_delta(tables["lineitem"], size, kind, rng, LINEITEM_GROUPS)
                times = []
                for rep in range(args.reps):
                    t, _ = timed(lambda: m.apply({"lineitem": delta}))
                    times.append(t)
                    if rep < args.reps - 1:
                        m.apply({"lineitem": inverse(delta)})
                t_inc = statistics.median(times)
                tables["lineitem"] = after
                t_duck, ref = timed(lambda: reference_sketch(q.sql, tables, partitions))
                ok = list(m.sketch.get("lineitem", [])) == ref["lineitem"]
                if full_engine is None:  # engine recapture: once per query and kind (delta-size independent)
                    m2 = SketchMaintainer.from_sql(q.sql, partitions=partitions)
                    full_engine, _ = timed(lambda: m2.initialize(tables))
                    ok = ok and list(m2.sketch.get("lineitem", [])) == ref["lineitem"]
                    del m2
                row = {
                    "query": name, "single": q.single_table, "kind": kind, "size": size, "inc_s": t_inc,
                    "full_engine_s": full_engine, "full_duckdb_s": t_duck,
                    "speedup_engine": full_engine / t_inc, "speedup_duckdb": t_duck / t_inc,
                    "rows_per_s": size / t_inc, "equal": ok, "sketch_size": len(ref["lineitem"]),
                }
                rows.append(row)
                log(
                    f"{name} {kind:6s} {size:5d} rows: inc {t_inc * 1e3:9.2f} ms ({size / t_inc:12,.0f} rows/s) | "
                    f"engine full {full_engine:7.2f}s → {row['speedup_engine']:9.1f}x | duckdb full {t_duck:6.3f}s → "
                    f"{row['speedup_duckdb']:8.1f}x | sketch {len(ref['lineitem'])} equal={ok}"
                )
        del m
    meta.update(sf=args.sf, fragments=part.n_fragments, lineitem_rows=lineitem0.num_rows, reps=args.reps, seed=args.seed)
    return {"rows": rows, "meta": meta}


def write_markdown(res: dict, path: Path, args) -> None:
    rows, meta = res["rows"], res["meta"]
    out = [
        "# IMP TPC-H benchmark: incremental vs full sketch maintenance",
        "",
        f"Generated by `bench/imp.py{' --quick' if args.quick else ''}` on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"commit {git_head()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}.",
        "",
        f"TPC-H SF{meta['sf']:g} (tpchgen-cli), lineitem {meta['lineitem_rows']:,} rows, {meta['fragments']} equi-depth fragments on "
        f"l_orderkey; random lineitem deltas (inserts recombine existing rows, deletes remove existing rows); "
        f"incremental time = median of {meta['reps']} run(s) of `SketchMaintainer.apply`; engine full = `initialize` from scratch on the "
        f"updated tables (once per query and delta kind); DuckDB full = lineage-rewritten capture query (1 thread) after every delta. "
        f"`equal` = incremental sketch == DuckDB recapture (and == engine recapture).",
        "",
        "## Initial capture",
        "",
        "| query | engine initialize (s) | DuckDB capture (s) | sketch fragments | equal |",
        "|---|---:|---:|---:|---|",
    ]
    for q, d in meta["queries"].items():
        out.append(f"| {q} | {d['init_s']:.2f} | {d['duckdb_capture_s']:.3f} | {d['sketch_size']} | {d['initial_ok']} |")
    out += [
        "",
        "## 1000-row deltas against the targets",
        "",
        f"Target: ≥{TARGET_SINGLE:.0f}× faster than full recapture on single-table queries, ≥{TARGET_JOIN:.0f}× on join queries "
        "(worst of the three delta kinds shown).",
        "",
        "| query | type | min speedup vs engine full | min speedup vs DuckDB full | target | met (engine) | met (DuckDB) |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    big = max(r["size"] for r in rows) if rows else 0
    for q in dict.fromkeys(r["query"] for r in rows):
        rs = [r for r in rows if r["query"] == q and r["size"] == big]
        if not rs:
            continue
        target = TARGET_SINGLE if rs[0]["single"] else TARGET_JOIN
        se, sd = min(r["speedup_engine"] for r in rs), min(r["speedup_duckdb"] for r in rs)
        out.append(
            f"| {q} | {'single' if rs[0]['single'] else 'join'} | {se:,.1f}× | {sd:,.1f}× | {target:.0f}× | "
            f"{'yes' if se >= target else 'NO'} | {'yes' if sd >= target else 'NO'} |"
        )
    out += [
        "",
        "## All measurements",
        "",
        "| query | kind | delta rows | incremental (ms) | throughput (rows/s) | engine full (s) | speedup vs engine | DuckDB full (s) | speedup vs DuckDB | sketch | equal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['query']} | {r['kind']} | {r['size']} | {r['inc_s'] * 1e3:.2f} | {r['rows_per_s']:,.0f} | {r['full_engine_s']:.2f} | "
            f"{r['speedup_engine']:,.1f}× | {r['full_duckdb_s']:.3f} | {r['speedup_duckdb']:,.1f}× | {r['sketch_size']} | {r['equal']} |"
        )
    path.write_text("\n".join(out) + "\n")


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=False)
    names = list(dict.fromkeys(r["query"] for r in rows))
    colors = plt.cm.tab20(np.linspace(0, 1, 20))
    markers = "osD^v<>phX*P"
    for ax, key, title in ((axes[0], "speedup_engine", "vs engine recapture (initialize)"), (axes[1], "speedup_duckdb", "vs DuckDB lineage capture")):
        for i, q in enumerate(names):
            sizes = sorted({r["size"] for r in rows if r["query"] == q})
            med = [statistics.median(r[key] for r in rows if r["query"] == q and r["size"] == s) for s in sizes]
            single = next(r["single"] for r in rows if r["query"] == q)
            ax.plot(sizes, med, marker=markers[i % len(markers)], color=colors[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20],
                    linestyle="-" if single else "--", label=q.replace("tpch_", "").upper())
        ax.axhline(TARGET_SINGLE, color="grey", linewidth=0.8, linestyle=":")
        ax.axhline(TARGET_JOIN, color="grey", linewidth=0.8, linestyle="-.")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("delta size (lineitem rows)")
        ax.set_ylabel("speedup (full / incremental), median over insert/delete/mix")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, ncol=2, title="solid: single table, dashed: joins")
    sf = res["meta"]["sf"]
    fig.suptitle(f"IMP TPC-H SF{sf:g}: incremental sketch maintenance speedup ({res['meta']['fragments']} fragments on l_orderkey)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="SF0.1, 4 queries, sizes 10/100/1000, 1 rep")
    ap.add_argument("--sf", type=float, default=None, help="TPC-H scale factor (default 1, --quick 0.1)")
    ap.add_argument("--queries", default=None, help="comma list, e.g. tpch_q01,tpch_q03 (default: all 12; --quick: 4)")
    ap.add_argument("--sizes", default=None, help="comma list of delta sizes (default 10,50,100,500,1000)")
    ap.add_argument("--reps", type=int, default=None, help="timed runs per delta (default 3, --quick 1)")
    ap.add_argument("--fragments", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--replot", default=None, metavar="JSON", help="only redraw the plot from a saved results .json")
    ap.add_argument("--out", default=None, help="output path without extension (default bench/results/imp; --quick: bench/out/imp_quick, git-ignored)")
    args = ap.parse_args(argv)
    if args.replot:
        res = json.loads(Path(args.replot).read_text())
        plot(res, Path(args.replot).with_suffix(".png"))
        return 0
    args.sf = args.sf if args.sf is not None else (0.1 if args.quick else 1.0)
    args.sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([10, 100, 1000] if args.quick else list(SIZES))
    args.queries = args.queries.split(",") if args.queries else (list(QUICK_QUERIES) if args.quick else None)
    args.reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    res = run(args)
    out = Path(args.out) if args.out else (REPO / "bench" / "out" / "imp_quick" if args.quick else RESULTS / "imp")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(res, out.with_suffix(".md"), args)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    plot(res, out.with_suffix(".png"))
    bad = [r for r in res["rows"] if not r["equal"]]
    log(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.png')}; {len(bad)} step(s) where the sketch differed from recapture")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
