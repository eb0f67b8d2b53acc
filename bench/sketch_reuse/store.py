"""SketchStore: captured sketches keyed by (template, binding), looked up by the reuse test.

``lookup(sql)`` matches the query to its template (one dict probe), then runs the reuse test
against every sketch stored for that template and returns the smallest reusable one (fewest
rows covered when sizes are known, else fewest fragments) — the artifact's choice. Reuse
verdicts are cached per (captured binding, new binding): a check costs a few z3 calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.sketch_reuse.template import Instance, reusable, template_of


@dataclass
class StoredSketch:
    instance: Instance
    sketch: dict  # table -> sorted fragment ids
    partitions: dict  # table -> RangePartition
    size: int | None = None  # rows covered, if known
    uses: int = 0

    @property
    def sql(self) -> str:
        return self.instance.sql

    def cost(self) -> tuple:
        n = sum(len(v) for v in self.sketch.values())
        return (self.size if self.size is not None else n, n)


@dataclass
class SketchStore:
    schema: dict
    stats: dict | None = None
    by_template: dict = field(default_factory=dict)  # template -> {binding: StoredSketch}
    _verdicts: dict = field(default_factory=dict)

    def add(self, sql: str, sketch: dict, partitions: dict, size: int | None = None) -> StoredSketch:
        inst = template_of(sql)
        entry = StoredSketch(inst, {t: sorted(v) for t, v in sketch.items()}, dict(partitions), size)
        self.by_template.setdefault(inst.template, {})[inst.binding] = entry
        return entry

    def candidates(self, sql: str) -> list[StoredSketch]:
        """Every stored sketch that passes the reuse test for ``sql``, smallest first."""
        inst = template_of(sql)
        out = []
        for binding, entry in self.by_template.get(inst.template, {}).items():
            if self.reusable(entry.instance, inst):
                out.append(entry)
        return sorted(out, key=StoredSketch.cost)

    def reusable(self, captured: Instance, new: Instance) -> bool:
        key = (captured.template, captured.binding, new.binding)
        if key not in self._verdicts:
            self._verdicts[key] = reusable(captured, new, self.schema, self.stats)[0]
        return self._verdicts[key]

    def lookup(self, sql: str) -> StoredSketch | None:
        found = self.candidates(sql)
        if not found:
            return None
        found[0].uses += 1
        return found[0]

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_template.values())
