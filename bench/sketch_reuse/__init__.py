"""Sketch reuse across instances of a parameterised query (PBDS §7) and self-tuning (PBDS §8).

``template_of(sql)`` (constants → parameters), ``reusable(captured, new, schema)`` (ge ∧
uconds, z3), ``SketchStore`` ((template, binding) → sketch; ``lookup(sql)``) and
``SelfTuner(store, strategy="adaptive"|"eager", t=5, choose=…, capture=…)``.
"""

from bench.sketch_reuse.store import SketchStore, StoredSketch
from bench.sketch_reuse.template import Instance, reusable, template_of
from bench.sketch_reuse.tuner import Decision, SelfTuner

__all__ = ["Decision", "Instance", "SelfTuner", "SketchStore", "StoredSketch", "reusable", "template_of"]
