"""Self-tuning (PBDS §8): decide per incoming query whether to use, capture or skip a sketch.

For each query: find its template; if a stored sketch passes the reuse test, **use** it.
Otherwise

* ``eager``: **capture** a sketch for this query right away (if some attribute is safe);
* ``adaptive``: run without a sketch and remember the query as a candidate; every later miss
  of the same template counts, for each remembered candidate, whether the candidate's sketch
  *could have been used* (reuse test); once a candidate has been useful ``t`` times (itself
  included) its sketch is **captured** and the current query uses it. The artifact uses t = 5.

``choose(sql) -> {table: RangePartition} | None`` picks the partition (None: no safe
attribute, the query runs as is); ``capture(sql, partitions) -> ({table: fragment ids},
size or None)`` captures the sketch. Both are callbacks so that the tuner stays a pure
decision procedure: the engine, the reference or the advisor can plug in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from core.errors import ConfigError
from bench.sketch_reuse.store import SketchStore, StoredSketch
from bench.sketch_reuse.template import template_of


@dataclass
class Decision:
    action: str  # "use" | "capture" | "none"
    sketch: StoredSketch | None
    template: str
    reason: str


@dataclass
class _Waiting:
    sql: str
    count: int


@dataclass
class SelfTuner:
    store: SketchStore
    strategy: str = "adaptive"
    t: int = 5
    choose: Callable | None = None
    capture: Callable | None = None
    waiting: dict = field(default_factory=dict)  # template -> {binding: _Waiting}
    log: list = field(default_factory=list)

    def __post_init__(self):
        if self.strategy not in ("adaptive", "eager"):
            raise ConfigError(f"self-tuning strategy must be 'adaptive' or 'eager', got {self.strategy!r}")
        if self.t < 1:
            raise ConfigError(f"self-tuning threshold t must be >= 1, got {self.t}")

    def _capture(self, sql: str) -> StoredSketch | None:
        parts = self.choose(sql) if self.choose else None
        if not parts or self.capture is None:
            return None
        sketch, size = self.capture(sql, parts)
        return self.store.add(sql, sketch, parts, size)

    def observe(self, sql: str) -> Decision:
        inst = template_of(sql)
        hit = self.store.lookup(sql)
        if hit is not None:
            return self._log(Decision("use", hit, inst.template, "a stored sketch passes the reuse test"))
        if self.strategy == "eager":
            entry = self._capture(sql)
            if entry is None:
                return self._log(Decision("none", None, inst.template, "no safe attribute to capture on"))
            return self._log(Decision("capture", entry, inst.template, "eager: no reusable sketch"))
        waiting = self.waiting.setdefault(inst.template, {})
        for binding, w in waiting.items():
            cand = template_of(w.sql)
            if binding == inst.binding or self.store.reusable(cand, inst):
                w.count += 1
        if inst.binding not in waiting:
            waiting[inst.binding] = _Waiting(sql, 1)
        best_binding, best = max(waiting.items(), key=lambda kv: kv[1].count)
        if best.count < self.t:
            return self._log(Decision("none", None, inst.template,
                                      f"adaptive: best candidate could have been used {best.count} < {self.t} times"))
        del waiting[best_binding]
        entry = self._capture(best.sql)
        if entry is None:
            return self._log(Decision("none", None, inst.template, "no safe attribute to capture on"))
        usable = self.store.reusable(entry.instance, inst)
        return self._log(Decision("capture", entry if usable else None, inst.template,
                                  f"adaptive: a sketch would have helped {best.count} times"))

    def _log(self, d: Decision) -> Decision:
        self.log.append(d.action)
        return d
