"""The sketch tables as the statestore backend reads and writes them (``KeyedSketchTables``).

With ``[state] backend = "statestore"`` the keyed operators in the streaming query keep the
sketches (``state.statestore.backend``) and the sketch maintainer does not run; the backend
still registers the config's sketches, reads the registry and writes ``sketch_deltas`` and
``sketches`` rows, through this object, so that state/ needs nothing of the job's wiring.
"""

from __future__ import annotations

from streaming_app.sketches import outputs
from streaming_app.sketches.register import register_query
from streaming_app.sketches.registry import (
    SPARK_BOUNDARIES_ROWS,
    Part,
    Registration,
    compute_boundaries,
    read_registry,
    store_boundaries,
)
from streaming_app.sketches.tables import SKETCHES, bounds_from_json, bounds_to_json, ensure_tables, fmt


class KeyedSketchTables:
    """``state.statestore.backend.SketchTables`` over the lake's sketch tables."""

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, spark, lake) -> None:
        ensure_tables(spark, lake)
        have = read_registry(spark, lake)
        for s in self.cfg.sketches:
            if s.name not in have:
                register_query(spark, self.cfg, s.name, s.sql, s.partitions, s.mode, capture=False,
                               boundaries=s.boundaries)

    def eager(self, spark, lake) -> dict:
        return {n: r for n, r in read_registry(spark, lake).items() if r.mode == "eager"}

    def take_boundaries(self, spark, lake, regs: dict, versions: dict) -> list[str]:
        """Equi-depth boundaries, from the mirrors at ``versions``, for the registrations of
        ``regs`` that have none yet (registered on an empty mirror), recorded in the registry as
        the memory backend's capture records them; returns the names that now have all theirs."""
        done = []
        for name, reg in sorted(regs.items()):
            for p in reg.parts:
                if p.boundaries is not None:
                    continue
                v = int(versions.get(p.table, versions.get(p.table.lower(), 0)))
                bounds = compute_boundaries(spark, lake, p.table, p.attribute, p.fragments, v,
                                            spark_above=SPARK_BOUNDARIES_ROWS)
                if bounds is None:
                    break
                p.boundaries, p.capture_version = bounds, v
                store_boundaries(spark, lake, name, p)
            if reg.captured:
                done.append(name)
        return done

    def pinned_partitions(self, regs: dict) -> dict:
        return {n: [[p.table, p.attribute, p.fragments, bounds_to_json(p.boundaries)] for p in r.parts]
                for n, r in regs.items()}

    def from_pin(self, pin: dict) -> dict:
        parts = pin["partitions"]
        return {n: Registration(n, sql, [Part(t, a, int(f), bounds_from_json(b)) for t, a, f, b in parts[n]])
                for n, sql in pin["queries"].items()}

    def load_current(self, spark, lake, regs: dict) -> dict:
        out: dict = {}
        for r in spark.read.format("delta").load(lake.output(SKETCHES)).collect():
            if r["query"] in regs:
                out.setdefault(r["query"], {})[r["table_name"].lower()] = set(r["fragments"] or [])
        return out

    def write_sketches(self, spark, lake, regs: dict, queries: dict, current: dict, names, versions: dict,
                       batch_id: int, app_id: str | None) -> None:
        rows = [_SketchRow(regs[n], queries[n], current.get(n, {}), versions) for n in names]
        outputs.write_sketch_rows(spark, lake, rows, batch_id, app_id)

    def write_deltas(self, spark, lake, regs: dict, queries: dict, changes: list, versions: dict,
                     batch_id: int, app_id: str) -> int:
        deltas = []
        for name, g, change in sorted(changes):
            q = queries[name]
            table, frag = q.split_fragment(g)
            part = regs[name].part(table)
            lo, hi = q.ctx.partitions[table].range_of(frag)
            deltas.append({"query": name, "batch_id": batch_id, "table_name": part.table, "fragment": int(frag),
                           "change": change, "lower": fmt(lo), "upper": fmt(hi),
                           "mirror_version": versions.get(part.table)})
        deltas.sort(key=lambda d: (d["query"], d["table_name"], -d["change"], d["fragment"]))
        outputs.write_deltas(spark, lake, deltas, batch_id, app_id)
        return len(deltas)


class _SketchRow:
    """What ``outputs.write_sketch_rows`` asks of a query: its rows, and a dirty flag it clears."""

    def __init__(self, reg, q, current: dict, versions: dict):
        self.reg, self.q, self.current, self.dirty = reg, q, current, True
        self.versions = {t: v for t, v in versions.items() if q.reads(t)}

    def sketch_rows(self, batch_id: int) -> list[dict]:
        return outputs.sketch_rows(self.reg, self.q.ctx.partitions, lambda t: sorted(self.current.get(t.lower(), ())),
                                   batch_id, self.versions)
