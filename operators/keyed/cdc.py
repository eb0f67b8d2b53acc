"""CDC -> signed deltas with the last image per primary key held in keyed state (one bucket).

Incremental rule: the events of one bucket of one table (``bucket_of(key)``) in one batch,
in log order, are reduced by ``core.mirror_plan.plan_table`` (the same rules as the
memory backend's mirror write: final image per key, truncate, TOAST); then for every key the
batch changed, the image the state held before (old image, -1) and the final image (+1) are
the key's signed delta, unless they are equal. A truncate reaches every bucket of its table
(the decode stage fans it out): each bucket emits -image for every key it holds, clears, and
applies the events after the truncate.
State kept: primary key -> last image (a dict of column values), in any store with
``get/put/remove/items``: a dict (``DictStore``, the reference) or ``PagedStore``
(``cdc.image_pages.v2``, what the executors hold): the bucket's keys cut into pages by their
hash, page id -> the page's {key: image} as one pickled blob, so that a state call moves a page,
not one key (a capture loads ~``PAGE_ROWS`` images per call; a batch reads and writes the pages
its keys fall in).
Deletions: the old image comes from the state, never from the mirror or the driver.
TOAST: a column Debezium left out takes its value from an earlier event of the batch or the
state; a key change (``old_key``) finds the old key's row only when it hangs in the same
bucket (else ``DATA_TOAST_UNKNOWN``; the memory backend reads the mirror there).
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass, field

from core.mirror_plan import TablePlan, plan_table

ENCODING = "cdc.image_pages.v2"
PAGE_ROWS = 64  # images per page a capture aims at (a page is read and written whole)
MIN_PAGES = 256  # pages per bucket at least, also for a table empty at the start


def key_hash(key: tuple) -> int:
    """A primary key's hash: stable across processes (no Python hash seed)."""
    return zlib.crc32(repr(tuple(key)).encode("utf-8"))


def bucket_of(key: tuple, buckets: int) -> int:
    """The bucket of a primary key (the keyed operator's key with its table)."""
    return key_hash(key) % buckets


def page_of(h: int, buckets: int, pages: int) -> int:
    """The page of a key of hash ``h`` within its bucket (the bits the bucket did not use)."""
    return (h // buckets) % pages


def pages_for(rows: int, buckets: int) -> int:
    """Pages per bucket for a table of ``rows`` rows: a power of two, ~``PAGE_ROWS`` images a page.
    Fixed for a checkpoint's life (chosen at its start); a table that grows makes pages fuller."""
    n = MIN_PAGES
    while n * buckets * PAGE_ROWS < rows:
        n *= 2
    return n


def encode_page(images: dict) -> bytes:
    return pickle.dumps(images, protocol=pickle.HIGHEST_PROTOCOL)


def decode_page(blob: bytes) -> dict:
    return pickle.loads(blob)


def page_from_parts(parts) -> bytes:
    """One page from its images as a capture writes them (each a pickled (key, image))."""
    return encode_page(dict(pickle.loads(b) for b in parts))


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


class PagedStore:
    """One bucket's last images over a map of pages (``get/put/remove/items`` of page id ->
    blob: a dict in the tests, Spark's MapState on the executors). Pages are read at their
    first touch and written back by ``flush``: one read and at most one write per page a batch
    touches; a truncate reads every page."""

    def __init__(self, pages_map, buckets: int, pages: int):
        self.map, self.buckets, self.pages = pages_map, buckets, pages
        self.loaded: dict = {}  # page id -> {key: image}
        self.dirty: set = set()

    def _page(self, key) -> tuple:
        pid = page_of(key_hash(key), self.buckets, self.pages)
        page = self.loaded.get(pid)
        if page is None:
            blob = self.map.get(pid)
            page = self.loaded[pid] = decode_page(blob) if blob is not None else {}
        return pid, page

    def get(self, key):
        return self._page(key)[1].get(key)

    def put(self, key, img) -> None:
        pid, page = self._page(key)
        page[key] = img
        self.dirty.add(pid)

    def remove(self, key) -> None:
        pid, page = self._page(key)
        if page.pop(key, None) is not None:
            self.dirty.add(pid)

    def items(self):
        for pid, blob in list(self.map.items()):
            if pid not in self.loaded:
                self.loaded[pid] = decode_page(blob)
        return [kv for page in self.loaded.values() for kv in page.items()]

    def flush(self) -> None:
        for pid in sorted(self.dirty):
            page = self.loaded[pid]
            if page:
                self.map.put(pid, encode_page(page))
            else:
                self.map.remove(pid)
        self.dirty.clear()


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
