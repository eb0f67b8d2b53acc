"""What the Spark UI shows for the Spark jobs a batch's step starts: the step as the job's
description and as its call site.

Spark labels each job with its description (``setJobDescription``) and its call site, the
``callSite.short`` / ``callSite.long`` local properties of the thread that starts it. PySpark
sets the call site itself around each DataFrame action (``pyspark.traceback_utils.SCCallSiteSync``)
from the first Python frame outside pyspark; in foreachBatch that frame is py4j's callback
server, so every job of every step read ``call at .../site-packages/py4j/clientserver.py:644``.
PySpark leaves the call site alone while its nesting depth is above zero (an action inside an
action keeps the outer one's): a label holds one level of that depth, so each step names
itself in the Jobs and Stages tables (``ivmstream batch 12: mirror orders``). Local properties
belong to the calling thread: foreachBatch's, for every step of a batch.

Most of a batch starts no Spark job (the driver's Python, delta-rs), and a named accumulator
shows in the Stages pages only when tasks update it, so what the batch did would leave no trace
in the UI. ``summary`` closes each batch with a job of no tasks (an empty RDD's count: the
scheduler records it, description included, without an executor or a task) whose description is
the batch's record count, quarantined count by code and step times: one row per batch in the
Jobs table, beside the jobs its steps started.
"""

from __future__ import annotations

import threading

_held = threading.local()


def label(spark, text: str | None) -> None:
    """Label the Spark jobs this thread starts from now on (``spark``: a session or its
    context); None clears the label and gives the call site back to PySpark."""
    from pyspark.traceback_utils import SCCallSiteSync  # pyspark: heavy, loaded once a session exists

    sc = getattr(spark, "sparkContext", spark)
    sc.setJobDescription(text)
    sc.setLocalProperty("callSite.short", text)
    sc.setLocalProperty("callSite.long", text)
    holding = getattr(_held, "depth", False)
    if text is not None and not holding:
        SCCallSiteSync._spark_stack_depth += 1
        _held.depth = True
    elif text is None and holding:
        SCCallSiteSync._spark_stack_depth -= 1
        _held.depth = False


def summary(spark, text: str) -> None:
    """One Spark job of no tasks labelled ``text`` (the batch's figures) for the Jobs table."""
    sc = getattr(spark, "sparkContext", spark)
    label(sc, text)
    sc._jsc.emptyRDD().count()  # zero partitions: the job starts and ends at once, on the driver
