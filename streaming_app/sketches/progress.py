"""The streaming query's progress with the sketch figures of each batch, kept for readers
(tests); the console line is the runner's, printed in order with its batch line
(``runner.batch_line``): this listener hears a batch after it committed, on Spark's thread,
and its line came after the next batch's or the demo's summary."""

from __future__ import annotations

_LISTENERS: dict = {}


def progress_listener(spark, maintainer) -> None:
    """Keep each batch's sketch metrics with the streaming query's progress (one listener per
    session; it follows the latest maintainer)."""
    from pyspark.sql.streaming import StreamingQueryListener

    key = id(spark)
    if key in _LISTENERS:
        _LISTENERS[key].maintainer = maintainer
        return

    class _Listener(StreamingQueryListener):
        def __init__(self):
            self.maintainer = maintainer
            self.lines: list = []  # the last lines printed (tests read them)

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            try:
                self._keep(event.progress)
            except Exception as e:  # noqa: BLE001 - figures for readers: never the query's error
                self.lines = (self.lines + [f"progress listener: {type(e).__name__}: {e}"])[-64:]

        def _keep(self, p):
            m = self.maintainer.recent.get(p.batchId)
            if m and m["per_query"]:
                per = ", ".join(f"{q} {v['delta_rows']} rows +{v['added']}/-{v['removed']} {v['ms']:.0f}ms"
                                for q, v in m["per_query"].items())
                line = (f"[{p.name}] batch {p.batchId} progress: {p.numInputRows} input rows, "
                        f"{p.processedRowsPerSecond:.0f} rows/s; sketches: {m['delta_rows_in']} delta rows, "
                        f"{m['sketch_changes']} fragment changes, {m['ms']:.0f} ms ({per})")
                self.lines = (self.lines + [line])[-64:]

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = _Listener()
    spark.streams.addListener(listener)
    _LISTENERS[key] = listener
