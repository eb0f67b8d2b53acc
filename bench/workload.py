"""IMP's mixed workload (paper Sec. 8.4): queries and updates interleaved, three ways, in one run.

A stream of ``--ops`` operations over TPC-H lineitem mixes instances of two parameterised
Q-AGH templates (random HAVING/WHERE constants from a few values each, so instances recur
and contain each other) with updates (``--delta-rows``: 10 and 100 rows by default, half
deletes, half inserts) at query:update ratios 1:1, 5:1 and 1:5. The same seeded stream is run

* ``none``: every query on the whole table (DuckDB, native table, 1 thread);
* ``imp``: a ``SelfTuner`` (adaptive, t = 2) decides per query whether to use a stored
  sketch (reuse test), capture one (``SketchMaintainer.initialize``, partition chosen by the
  cost-based advisor among safe group-by attributes) or run plainly; every update is applied
  to each stored sketch incrementally (``SketchMaintainer.apply``); queries with a sketch
  run with its range predicate added to WHERE;
* ``full``: the same tuner, but every update recaptures every stored sketch from scratch
  (``initialize`` on the updated table) instead of maintaining it. Recapture is the slow
  baseline (~0.1–0.4 s per sketch and update; 1:5 alone would need ~5,000 of them), so it is
  timed on a measured subset: every ``--recapture-every``-th update recaptures every stored
  sketch and is timed; the other updates keep the sketches current with ``apply`` (so the
  queries stay correct) and are charged the mean measured recapture time of the stored
  sketches at that point instead of their own time. ``--recapture-every 1`` times every
  recapture. The table's "updates (timed)" column says how many updates were measured.

Total time includes the base-table update, tuning checks, captures, maintenance and query
execution. Every ``--check-every``-th sketched query is compared with the plain query's result
(and the run aborts if they differ), so the timings are for correct answers.

  .venv/bin/python bench/workload.py                 # SF0.01, 1000 operations per cell
  .venv/bin/python bench/workload.py --ops 200 --delta-rows 10   # quicker

Writes bench/results/workload.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from operators.sketch import RangePartition, SketchMaintainer  # noqa: E402
from operators.sketch_advisor import advise  # noqa: E402
from bench.harness.datasets import WEIGHT, load_tpch, random_delta  # noqa: E402
from bench.sketch_reuse import SelfTuner, SketchStore  # noqa: E402

RID = "__rid"
TEMPLATES = [
    "SELECT l_orderkey, sum(l_extendedprice) AS rev FROM lineitem GROUP BY l_orderkey "
    "HAVING sum(l_extendedprice) > {}",
    "SELECT l_orderkey, count(*) AS n FROM lineitem WHERE l_quantity > {} GROUP BY l_orderkey "
    "HAVING count(*) > {}",
]


def bindings(table: pa.Table) -> list[list[tuple]]:
    con = duckdb.connect()
    con.register("lineitem", table)
    sums = np.asarray([r[0] for r in con.execute(
        "SELECT sum(l_extendedprice) FROM lineitem GROUP BY l_orderkey").fetchall()], dtype=float)
    con.close()
    t1 = [(round(float(np.quantile(sums, q)), 2),) for q in (0.99, 0.995, 0.998, 0.999)]
    t2 = [(q, c) for q in (10, 20, 30) for c in (5, 6)]
    return [t1, t2]


def stream(n_ops: int, ratio: tuple[int, int], binds, rng) -> list:
    q, u = ratio
    ops = []
    for i in range(n_ops):
        if rng.random() < q / (q + u):
            t = int(rng.integers(len(TEMPLATES)))
            b = binds[t][int(rng.integers(len(binds[t])))]
            ops.append(("query", TEMPLATES[t].format(*b)))
        else:
            ops.append(("update", None))
    return ops


def with_predicate(sql: str, pred: str) -> str:
    """Add the sketch's range condition to the query's WHERE (string splice: the benchmark's
    templates are fixed and a sketch predicate can hold hundreds of ranges, too many to parse
    with sqlglot on every query)."""
    if " WHERE " in sql:
        return sql.replace(" GROUP BY ", f" AND ({pred}) GROUP BY ", 1)
    return sql.replace(" GROUP BY ", f" WHERE ({pred}) GROUP BY ", 1)


class Db:
    """The base table in DuckDB (native, sorted by l_orderkey so zone maps can skip) + an Arrow mirror."""

    def __init__(self, table: pa.Table):
        self.con = duckdb.connect()
        self.con.execute("SET threads TO 1")
        self.arrow = table.append_column(RID, pa.array(np.arange(table.num_rows, dtype=np.int64)))
        self.next_rid = table.num_rows
        self.con.register("src", self.arrow)
        self.con.execute("CREATE TABLE lineitem AS SELECT * FROM src ORDER BY l_orderkey")
        self.con.unregister("src")

    def plain(self) -> pa.Table:
        return self.arrow.drop_columns([RID])

    def update(self, n: int, rng) -> pa.Table:
        delta, after = random_delta(self.arrow, n, "mix", rng)
        w = delta.column(WEIGHT).to_numpy()
        gone = delta.filter(pa.array(w < 0)).column(RID).to_pylist()
        ins = delta.filter(pa.array(w > 0)).drop_columns([WEIGHT])
        new_rids = np.arange(self.next_rid, self.next_rid + ins.num_rows, dtype=np.int64)
        self.next_rid += ins.num_rows
        ins = ins.set_column(ins.column_names.index(RID), RID, pa.array(new_rids))
        if gone:
            self.con.execute(f"DELETE FROM lineitem WHERE {RID} IN ({', '.join(map(str, gone))})")
        if ins.num_rows:
            self.con.register("ins", ins)
            self.con.execute("INSERT INTO lineitem SELECT * FROM ins")
            self.con.unregister("ins")
        n_after = after.num_rows
        after = after.slice(0, n_after - ins.num_rows)
        self.arrow = pa.concat_tables([after, ins.cast(after.schema)]) if ins.num_rows else after
        d = delta.drop_columns([RID])
        return d.set_column(d.column_names.index(WEIGHT), WEIGHT, delta.column(WEIGHT))

    def run(self, sql: str) -> list:
        return self.con.execute(sql).fetchall()  # the templates are plain SQL DuckDB reads as is


def run_mode(mode: str, ops: list, base: pa.Table, args, seed: int, delta_rows: int) -> dict:
    rng = np.random.default_rng(seed)
    db = Db(base)
    maintainers: dict = {}  # sql of captured instance -> SketchMaintainer
    store = SketchStore({"lineitem": base.column_names})
    choices: dict = {}

    def choose(sql):
        from bench.sketch_reuse import template_of
        key = template_of(sql).template
        if key not in choices:
            cands = advise(sql, {"lineitem": db.plain()}, fragments=args.fragments, strategy="gb", seed=seed)
            choices[key] = cands[0].attribute if cands else None
        a = choices[key]
        if a is None:
            return None
        return {"lineitem": RangePartition.equi_depth(a, base.column(a), args.fragments)}

    def capture(sql, parts):
        m = SketchMaintainer.from_sql(sql, parts)
        m.initialize({"lineitem": db.plain()})
        maintainers[sql] = m
        return dict(m.sketch), None

    tuner = SelfTuner(store, "adaptive", args.t, choose, capture)
    counts = {"use": 0, "capture": 0, "none": 0, "update": 0, "checked": 0}
    t_query = t_maint = t_tune = 0.0
    t_untimed = 0.0  # full: time of the unmeasured updates' apply, replaced by the estimate
    recap_s = recap_n = 0.0  # full: measured recapture seconds and sketch recaptures
    counts["measured"] = 0
    last_n = 0  # sketches stored at the last measured recapture
    t0 = time.perf_counter()
    n_q = 0
    for kind, sql in ops:
        if kind == "update":
            counts["update"] += 1
            delta = db.update(delta_rows, rng)
            t1 = time.perf_counter()
            # measure every k-th update, and the first one after a capture changed the set
            measured = mode == "full" and bool(maintainers) and (
                (counts["update"] - 1) % args.recapture_every == 0 or len(maintainers) != last_n)
            last_n = len(maintainers) if measured else last_n
            for m in maintainers.values():
                if measured:
                    m.initialize({"lineitem": db.plain()})
                else:
                    m.apply({"lineitem": delta})
            for entries in store.by_template.values():
                for e in entries.values():
                    e.sketch = dict(maintainers[e.sql].sketch)
            dt = time.perf_counter() - t1
            if mode != "full":
                t_maint += dt
            elif measured:
                counts["measured"] += 1
                t_maint += dt
                recap_s, recap_n = recap_s + dt, recap_n + len(maintainers)
            else:
                # charged as if recaptured: mean measured seconds per sketch × sketches stored
                t_untimed += dt
                t_maint += (recap_s / recap_n) * len(maintainers) if recap_n else 0.0
            continue
        n_q += 1
        t1 = time.perf_counter()
        if mode == "none":
            rows = db.run(sql)
            counts["none"] += 1
        else:
            d = tuner.observe(sql)
            t_tune += time.perf_counter() - t1
            counts[d.action] += 1
            if d.sketch is not None:
                part = d.sketch.partitions["lineitem"]
                pred = part.predicate(d.sketch.sketch["lineitem"])
                rows = db.run(with_predicate(sql, pred or "FALSE"))
                if args.check_every and n_q % args.check_every == 0:
                    counts["checked"] += 1
                    want = db.run(sql)
                    if sorted(rows) != sorted(want):
                        raise AssertionError(f"{mode}: sketched result differs for {sql}")
            else:
                rows = db.run(sql)
        t_query += time.perf_counter() - t1
    total = time.perf_counter() - t0
    if mode == "full":  # swap the unmeasured updates' apply time for their estimated recapture
        est = t_maint - recap_s
        total += est - t_untimed
    return {"total": total, "query": t_query, "tune": t_tune, "maint": t_maint, **counts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--fragments", type=int, default=1000)
    ap.add_argument("--delta-rows", type=int, nargs="+", default=[10, 100], help="update sizes (rows)")
    ap.add_argument("--t", type=int, default=2, help="adaptive self-tuning threshold")
    ap.add_argument("--check-every", type=int, default=10)
    ap.add_argument("--recapture-every", type=int, default=10,
                    help="full: time the recapture on every k-th update (and after each capture); "
                         "the others are charged the measured mean (1 = time them all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base = load_tpch(args.sf, ("lineitem",))["lineitem"]
    binds = bindings(base)
    lines = ["# Mixed query/update workload (IMP Sec. 8.4)", "",
             f"TPC-H SF{args.sf:g} lineitem ({base.num_rows} rows), {args.ops} operations per cell, updates of "
             f"{' and '.join(map(str, args.delta_rows))} rows (half deletes, half inserts), {args.fragments} equi-depth fragments, "
             f"adaptive self-tuning t = {args.t}, 2 templates (HAVING sum > 99–99.9% quantile; WHERE l_quantity > q "
             f"HAVING count(*) > c). DuckDB native table (1 thread). Times in seconds; 'maint' = sketch maintenance "
             f"(incremental `apply` vs recapture), 'query' = tuning (template match, reuse test, advisor, capture) + "
             f"execution. The total also holds the base-table updates (DuckDB DELETE/INSERT), the same in all modes. Every "
             f"{args.check_every}th sketched query was checked against the plain result.", "",
             f"'full' recaptures were timed on every {args.recapture_every}th update (and on the first update after "
             f"each capture); the other updates are charged the measured mean per stored sketch (column 'updates "
             f"(timed)'), so 'full' maint and total are estimates from that measured subset.", "",
             "| Δ rows | ratio q:u | mode | total s | query s | of which tuning+capture s | maint s | queries used/captured/plain | updates (timed) | checked |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines[-2:]), flush=True)
    cells = [(d, ratio) for d in args.delta_rows for ratio in ((1, 1), (5, 1), (1, 5))]
    for d, ratio in cells:
        ops = stream(args.ops, ratio, binds, np.random.default_rng(args.seed + ratio[0] * 10 + ratio[1]))
        for mode in ("none", "imp", "full"):
            r = run_mode(mode, ops, base, args, args.seed, d)
            timed = f" ({r['measured']})" if mode == "full" else ""
            line = (f"| {d} | {ratio[0]}:{ratio[1]} | {mode} | {r['total']:.2f} | {r['query']:.2f} | {r['tune']:.2f} | {r['maint']:.2f} | "
                    f"{r['use']}/{r['capture']}/{r['none']} | {r['update']}{timed} | {r['checked']} |")
            lines.append(line)
            print(line, flush=True)
    lines.append("")
    (REPO / "bench" / "results" / "workload.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
