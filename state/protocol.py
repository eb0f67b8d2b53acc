"""The one interface every incremental engine offers to the job: apply, snapshot, restore.

An engine (triangle counter, recursive view, sketch maintainer) is driven by its maintainer
with batches of *signed deltas* and persisted by the snapshot store (``state.snapshot_store``)
as opaque bytes under a versioned encoding name, so that the store never knows an engine's
internals and an engine never knows where its bytes are kept (DBSP's operator/trace split,
bytewax's ``snapshot()``).

A batch of signed deltas is ``{table name: pyarrow.Table}``: the table's columns plus the
int64 column ``__weight`` (+1 insert, -1 delete; an update is -before, +after). An optional
int64 column ``__version`` (the mirror commit of each row) orders changes that span several
commits, as a catch-up from the change feed does: rows apply commit by commit, and within a
commit deletes before inserts (an update's pre-image leaves before its post-image arrives).

``snapshot()`` returns ``(encoding, bytes)``; the encoding names the format and its version
(``triangles.engine.v1``): change the format, bump the version. ``restore(encoding, bytes)``
replaces the engine's state, and refuses an encoding it does not read, or bytes that do not
decode, with ``StateError``; the caller then rebuilds the state from the mirrors.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from core.errors import StateError

WEIGHT = "__weight"  # the same name as connectors.delta_sink.WEIGHT and operators.sketch.scan.WEIGHT
VERSION = "__version"


@runtime_checkable
class Engine(Protocol):
    """An incremental engine whose state the job can snapshot and restore."""

    encoding: str  # the encoding snapshot() writes today

    def apply(self, deltas: Mapping[str, pa.Table]):
        """Apply one batch of signed deltas; returns the engine's output for the batch."""

    def snapshot(self) -> tuple[str, bytes]:
        """The whole state as (encoding name, bytes)."""

    def restore(self, encoding: str, data: bytes) -> None:
        """Replace the state by a snapshot; ``StateError`` on an unknown encoding or bad bytes."""


def check_encoding(who: str, encoding: str, readable: Iterable[str]) -> None:
    """Refuse an encoding this build does not read (one message naming both)."""
    readable = tuple(readable)
    if encoding not in readable:
        raise StateError(f"{who}: unknown state encoding {encoding!r}; this build reads "
                         f"{', '.join(repr(e) for e in readable)}")


def ordered(delta: pa.Table) -> pa.Table:
    """Rows in apply order: by ``__version`` when present, deletes first within a version."""
    w = delta.column(WEIGHT).to_numpy(zero_copy_only=False)
    if VERSION in delta.column_names:
        v = delta.column(VERSION).to_numpy(zero_copy_only=False)
        order = np.lexsort((w, v))  # last key is primary: version, then weight (-1 before +1)
    else:
        order = np.argsort(w, kind="stable")
    return delta.take(order)


def by_version(delta: pa.Table) -> list[pa.Table]:
    """The delta split into one table per commit, oldest first (the whole delta without ``__version``)."""
    if VERSION not in delta.column_names or delta.num_rows == 0:
        return [delta]
    v = delta.column(VERSION).to_numpy(zero_copy_only=False)
    return [delta.filter(pa.array(v == x)) for x in np.unique(v)]
