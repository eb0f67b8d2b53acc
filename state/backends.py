"""The state backend the one job is given (``[state] backend``): where a batch's events come from.

``streaming_app.job.IngestJob`` runs the same steps for every backend: read the batch, MERGE
each table's final images into its mirror, run the maintainers, write the quarantine and the
``batches`` row. A backend answers the few points where the backends differ, and nothing else
in the job looks at ``[state] backend`` (the runner builds the backend from it):

* ``maintainers(ms)``: which of the configured maintainers the job runs;
* ``setup(job)``: after the job's own set-up (its tables and the maintainers'); a backend may
  move the job's ``checkpoint_location``, ``starting_offsets`` and ``writer_id`` here;
* ``stream(job, kafka_df)``: what ``foreachBatch`` receives from the Kafka source;
* ``begin_batch(job, batch_df, batch_id) -> batch id`` and ``end_batch(job)``: around one
  micro-batch (the id the job records may differ from Spark's);
* ``read(job, batch_df, batch_id, steps) -> (decoded, offsets, raw_of)``: the batch's decoded
  events, its Kafka offsets, and a reader of raw records by (topic, partition, offset);
* ``plan(job, spark, table, decoded, before)``: the table's mirror write (a ``TablePlan``, or
  None when the batch has nothing for it), ``events_in(decoded)``: the ``events`` figure;
* ``after_maintainers(job, spark, ctx)``: outputs written after the maintainers and before the
  ``batches`` row;
* ``started(job)``: once the streaming query started (or failed to);
* ``restart_wanted`` and ``restarted(job) -> backend``: a backend whose streaming query must
  start again between two batches (the statestore's keyed operators take a query that got its
  fragment boundaries only from the job's first rows) says so; the runner stops the query
  after the running batch and starts it again over ``restarted(job)``.

``MemoryBackend`` (the default): the driver decodes the Kafka records (or the executors, with
``[job] decode = "executors"``) and plans each mirror write against the mirror; operator state
lives in the maintainers, in driver memory, with snapshots in ``state_snapshots``.
``state.statestore.backend.StatestoreBackend``: keyed operators inside the streaming query, state
in Spark's state store.
"""

from __future__ import annotations

import time
from typing import Protocol

from connectors import delta_sink as sink
from connectors.debezium import DecodedBatch, decode_batch
from connectors.decode_stage import KAFKA_COLUMNS, decode_on_executors, offset_ranges, raw_records
from core.faults import kill_point
from core.mirror_plan import plan_table


class StateBackend(Protocol):
    """What the job asks of its state backend (see the module docstring)."""

    name: str

    def maintainers(self, maintainers: list) -> list: ...

    def setup(self, job) -> None: ...

    def stream(self, job, kafka_df): ...

    def begin_batch(self, job, batch_df, batch_id: int) -> int: ...

    def end_batch(self, job) -> None: ...

    def read(self, job, batch_df, batch_id: int, steps: dict) -> tuple: ...

    def plan(self, job, spark, table, decoded: DecodedBatch, before: int): ...

    def events_in(self, decoded: DecodedBatch) -> int: ...

    def after_maintainers(self, job, spark, ctx) -> None: ...

    def started(self, job) -> None: ...

    restart_wanted: bool

    def restarted(self, job) -> "StateBackend": ...


class MemoryBackend:
    """Decode on the driver (or the executors), plan against the mirror; state in the maintainers."""

    name = "memory"

    def maintainers(self, maintainers: list) -> list:
        return list(maintainers)

    def setup(self, job) -> None:
        """Nothing beyond the job's own set-up."""

    def stream(self, job, kafka_df):
        """The Kafka records themselves."""
        return kafka_df

    def begin_batch(self, job, batch_df, batch_id: int) -> int:
        return batch_id

    def end_batch(self, job) -> None:
        """Nothing held per batch."""

    def read(self, job, batch_df, batch_id: int, steps: dict) -> tuple:
        t = time.perf_counter()
        if job.cfg.decode == "executors":
            # One Spark job reads and decodes the records in parallel tasks (decode_stage).
            decoded, offsets = decode_on_executors(job.cfg, batch_df, steps)
            kill_point("collect", batch_id)
            raw_of = lambda coords: raw_records(batch_df, coords)  # noqa: E731
        else:
            arrow = batch_df.select(*KAFKA_COLUMNS).toArrow()
            steps["collect"] = elapsed_ms(t)
            kill_point("collect", batch_id)
            t = time.perf_counter()
            cols = [arrow.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")]
            headers = [[(h["key"], h["value"]) for h in hs] if hs else None
                       for hs in arrow.column("headers").to_pylist()]
            decoded = decode_batch(job.cfg, zip(*cols, headers))
            steps["decode"] = elapsed_ms(t)
            offsets = offset_ranges(cols[0], cols[1], cols[2])
            # built only when a plan rejects an event, and only for those records
            raw_of = lambda coords: {(tp, p, o): (k, v) for tp, p, o, k, v in zip(*cols)  # noqa: E731
                                     if (tp, p, o) in coords}
        return decoded, offsets, raw_of

    def plan(self, job, spark, table, decoded: DecodedBatch, before: int):
        events = decoded.events.get(table.name) or []
        if not events:
            return None
        path = job.lake.mirror(table.name)
        return plan_table(events, lambda keys: sink.lookup_rows(spark, path, table, before, keys))

    def events_in(self, decoded: DecodedBatch) -> int:
        return sum(len(v) for v in decoded.events.values())

    def after_maintainers(self, job, spark, ctx) -> None:
        """No outputs of its own: the maintainers wrote theirs."""

    def started(self, job) -> None:
        """Nothing to restore."""

    restart_wanted = False  # the maintainers take new registrations between batches

    def restarted(self, job) -> "MemoryBackend":
        return self


def elapsed_ms(t0: float) -> float:
    """Milliseconds since ``t0`` (``time.perf_counter``), as the ``step_ms`` column holds them."""
    return round((time.perf_counter() - t0) * 1000.0, 3)
