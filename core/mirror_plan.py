"""One batch's events of one table -> the mirror write: final image per key, truncate, rejections.

Pure Python (no Spark): the job calls ``plan_table`` with a ``lookup`` that reads rows of the
mirror as the previous batch left it, and turns the plan into one Delta MERGE.

The rules, applied in log order:

- ``c``/``r``/``u`` put the after image, ``d`` removes the key, ``t`` (truncate) removes every
  row of the table: the events before the last truncate cannot reach the mirror, so the plan
  keeps only what follows it and marks the write ``truncate`` (the MERGE then also deletes
  every row the batch does not write).
- TOAST: a column whose value Debezium left out (``CdcEvent.unavailable``) keeps the value
  the row had: from an earlier event of this batch, else from the mirror. A create that
  re-inserts a row under a new primary key (``old_key``) takes it from the old key's row.
  Where no current value exists (the row is unknown, or was deleted or truncated) the event
  is rejected with ``DATA_TOAST_UNKNOWN`` and the row stays as it was.

Cost: one ``lookup`` call per batch and table, only when some event has TOASTed columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from core import errors as E

# keys -> ({key: row} live in the mirror before the batch, {key: row} its newest delete removed)
Lookup = Callable[[set], tuple[dict, dict]]


@dataclass
class TablePlan:
    final: dict = field(default_factory=dict)  # key -> final image, or None (delete)
    truncate: bool = False
    rejected: list = field(default_factory=list)  # (event, code, reason)
    toast_filled: int = 0  # column values taken from the earlier row


def _source_key(ev):
    """The key whose current row holds the values of ``ev``'s unavailable columns."""
    return ev.old_key if ev.op in ("c", "r") and ev.old_key is not None else ev.key


def plan_table(events: Iterable, lookup: Lookup | None = None) -> TablePlan:
    events = list(events)
    plan = TablePlan()
    last_t = max((i for i, ev in enumerate(events) if ev.op == "t"), default=-1)
    if last_t >= 0:
        plan.truncate = True
        events = events[last_t + 1:]

    # Keys whose TOASTed values may have to come from the mirror: every source key (an
    # earlier event of the batch may hold it, but that event may itself be rejected).
    need = {_source_key(ev) for ev in events if ev.unavailable and ev.op != "d"}
    live, gone = lookup(need) if need and lookup is not None and not plan.truncate else ({}, {})

    images: dict = {}  # key -> the last full image this batch knows, kept past a delete
    for ev in events:
        if ev.op == "d":
            plan.final[ev.key] = None
            continue
        row = ev.after
        if ev.unavailable:
            src = _source_key(ev)
            if src == ev.key and ev.key in plan.final and plan.final[ev.key] is None:
                prior = None  # deleted earlier in this batch: nothing to keep
            elif src in images:
                prior = images[src]
            elif src == ev.key:
                prior = live.get(src)  # an update keeps the values of the row that is there
            else:  # a key change re-inserts the old row's values, whose delete may be committed
                prior = live.get(src) or gone.get(src)
            if prior is None:
                plan.rejected.append((ev, E.DATA_TOAST_UNKNOWN,
                                      f"columns {sorted(ev.unavailable)} were not sent (TOAST) and the row "
                                      f"with key {list(src)} has no current value"))
                continue
            row = dict(row)
            for c in ev.unavailable:
                row[c] = prior[c]
            plan.toast_filled += len(ev.unavailable)
        plan.final[ev.key] = row
        images[ev.key] = row
    return plan

