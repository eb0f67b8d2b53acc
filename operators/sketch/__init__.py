"""Provenance-sketch maintenance engine (IMP): annotated deltas through incremental operators.

Public API: ``SketchMaintainer`` (one query's sketch: ``from_sql``, ``initialize``,
``apply``, ``sketch``, ``result``, ``snapshot``/``restore``), ``RangePartition`` (the
fragments) and ``SketchDelta`` (fragments added/removed by one batch).
"""

from operators.sketch.aggregate import RecaptureRequired
from operators.sketch.maintainer import SketchDelta, SketchMaintainer
from operators.sketch.partition import RangePartition

__all__ = ["SketchMaintainer", "RangePartition", "SketchDelta", "RecaptureRequired"]
