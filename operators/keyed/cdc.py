"""CDC -> signed deltas with the last image per primary key held in keyed state (one bucket).

Incremental rule: the events of one bucket of one table (``bucket_of(key)``) in one batch,
in log order, are reduced by ``connectors.mirror_plan.plan_table`` (the same rules as the
memory backend's mirror write: final image per key, truncate, TOAST); then for every key the
batch changed, the image the state held before (old image, -1) and the final image (+1) are
the key's signed delta, unless they are equal. A truncate reaches every bucket of its table
(the decode stage fans it out): each bucket emits -image for every key it holds, clears, and
applies the events after the truncate.
State kept (``cdc.last_image.v1``): primary key -> last image (a dict of column values), in
any store with ``get/put/remove/items`` (a dict here; Spark's MapState on the executors).
Deletions: the old image comes from the state, never from the mirror or the driver.
TOAST: a column Debezium left out takes its value from an earlier event of the batch or the
state; a key change (``old_key``) finds the old key's row only when it hangs in the same
bucket (else ``DATA_TOAST_UNKNOWN``; the memory backend reads the mirror there).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from connectors.mirror_plan import TablePlan, plan_table

ENCODING = "cdc.last_image.v1"


def bucket_of(key: tuple, buckets: int) -> int:
    """The bucket of a primary key: stable across processes (no Python hash seed)."""
    return zlib.crc32(repr(tuple(key)).encode("utf-8")) % buckets


@dataclass
class BucketOut:
    """What one bucket's batch produced: the mirror's plan and the signed deltas."""

    plan: TablePlan
    deltas: list = field(default_factory=list)  # (weight, image)


class DictStore(dict):
    """The state as a plain dict (tests, and the reference of the keyed path)."""

    def put(self, key, value):
        self[key] = value

    def remove(self, key):
        self.pop(key, None)


def step(store, events: list) -> BucketOut:
    """Apply one bucket's events (``CdcEvent``-like, any order) to ``store``."""
    events = sorted(events, key=lambda ev: (ev.partition, ev.offset))
    plan = plan_table(events, lambda keys: ({k: v for k in keys if (v := store.get(k)) is not None}, {}))
    out = BucketOut(plan)
    if plan.truncate:  # every key the bucket holds goes, unless the batch writes it again
        pairs = {key: (img, None) for key, img in list(store.items())}
        for key, img in plan.final.items():
            pairs[key] = (pairs.get(key, (None, None))[0], img)
    else:
        pairs = {key: (store.get(key), img) for key, img in plan.final.items()}
    for key, (old, img) in pairs.items():
        if old == img:  # also a key truncated and written back as it was: no delta
            continue
        if old is not None:
            out.deltas.append((-1, old))
        if img is None:
            store.remove(key)
        else:
            out.deltas.append((1, img))
            store.put(key, img)
    return out
