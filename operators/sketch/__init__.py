"""Provenance-sketch maintenance engine (IMP): annotated deltas through incremental operators.

Public API::

    from operators.sketch import SketchMaintainer, RangePartition, SketchDelta

    m = SketchMaintainer.from_sql(sql, partitions={"lineitem": RangePartition("l_orderkey", bounds)})
    m.initialize({"lineitem": li, "orders": orders, ...})   # capture: table name -> pyarrow.Table
    d = m.apply({"lineitem": delta})   # delta = table's columns + int64 "__weight" (+1 insert, -1 delete)
    d.added, d.removed                 # table -> set of fragment ids that entered / left the sketch
    m.sketch                           # table -> sorted fragment ids of the current sketch
    m.predicate("lineitem")            # SQL condition selecting those fragments (ranges merged)
    m.result()                         # the query's current result (pyarrow.Table)
    blob = m.snapshot(); SketchMaintainer.restore(blob)

Fragments: ``RangePartition`` boundaries b_0 < ... < b_n give fragments 0..n-1 with
[b_i, b_{i+1}), the first and last open-ended, and fragment n for NULL.  Sketch semantics
are lineage (Perm/PBDS): a fragment is in the sketch iff some tuple of the partitioned
table in it contributes to a result row (for aggregation: every tuple of a group in the
result after HAVING/top-k).  ``RecaptureRequired`` (a ``StateError``) asks the caller to
``initialize`` again from the full tables (bounded MIN/MAX/top-k state exhausted, or an
earlier failure left the state unusable).

Layout: ``partition`` (fragments), ``delta`` (annotated batches), ``expr`` / ``sqlexpr``
(scalar expressions), one module per operator (``scan``, ``stateless``, ``join`` with
``joinstore`` and ``bloom``, ``aggregate``, ``topk``, ``merge``), ``plan`` (the tree and
its rewrites), ``frontend`` (SQL), ``maintainer`` (the API), ``reference`` (from-scratch
capture for tests); state encoding in ``operators/sketch/codec.py``.
"""

from operators.sketch.aggregate import RecaptureRequired
from operators.sketch.maintainer import SketchDelta, SketchMaintainer
from operators.sketch.partition import RangePartition

__all__ = ["SketchMaintainer", "RangePartition", "SketchDelta", "RecaptureRequired"]
