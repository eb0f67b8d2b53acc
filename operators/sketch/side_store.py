"""The current annotated rows of one join input, behind one declared interface.

The join operator (``operators.sketch.join``) keeps each input's state in a ``SideStore`` and
asks three things of it: ``add`` a delta, ``probe`` with the key hashes (and key values) of
the other side's delta rows for candidate partners, and ``key_weights`` for its counting bloom
filter. Where the rows live is the store's business: ``operators.sketch.memory_side.MemoryIndex`` keeps
them in driver memory; ``streaming_app.sketches.delta_side.DeltaSide`` keeps only net weights
per key hash and reads the rows back from the Delta mirror at the version the state reflects.
A RocksDB or Delta state-table backend implements the same class and joins the contract test
(``tests/state/test_side_store_contract.py``) with one line.

Rules every store keeps:

* ``probe(hashes, keys)`` returns ``(probe_idx, rows)``: ``rows`` (a ``Delta``, or None when
  empty) are stored rows whose key hash equals ``hashes[probe_idx[i]]``, each pairing with the
  probing row ``probe_idx[i]``; every stored row with a matching hash appears once per probing
  row (hash collisions included: the join compares key values afterwards). ``keys`` holds the
  probing rows' key columns in the same order as ``hashes`` (a store that looks rows up by value
  needs them; one that matches hashes ignores them).
* Rows and their weights are what was added (signed weights; a delete is a negative row), up
  to consolidation: a store may merge rows of the same tuple and drop rows whose weights cancel.
* ``key_weights()`` is (distinct key hashes, net weight per hash), zero weights left out or not.
* ``len(store)`` is the net number of stored rows (sum of weights).
* A store pickles (it travels inside the sketch maintainer's snapshot, ``operators.sketch.codec``)
  under its versioned ``encoding``; what cannot be pickled (a Spark session, a version source)
  is attached again by ``bind`` after construction or restore. A memory store ignores ``bind``.

A ``StoreFactory`` picks the store of each join input:
``factory(nbits, key_ids, side, tables, node=..., ctx=...) -> SideStore`` with ``side`` "left"
or "right", ``tables`` the base tables under the input, ``node`` and ``ctx`` the input's plan
node and the planning context (``operators.sketch.memory_side.memory_factory`` ignores them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # the Delta type of the sketch engine (operators.sketch.delta)
    from operators.sketch.delta import Delta


@runtime_checkable
class SideStore(Protocol):
    """A join input's current annotated rows."""

    encoding: str  # versioned name of the pickled form (e.g. ``join.side.memory.v2``)
    nbits: int  # sketch width of the stored rows
    key_ids: tuple  # the join key columns (ids in the input's output)

    def __len__(self) -> int:
        """Net number of stored rows (sum of weights)."""

    def add(self, d: "Delta", hashes: np.ndarray, order: np.ndarray | None = None) -> None:
        """Store a delta (signed weights); ``hashes`` its key hashes, ``order`` optionally
        ``argsort(hashes)`` when the caller has it already."""

    def probe(self, hashes: np.ndarray, keys: pa.Table) -> tuple[np.ndarray, "Delta | None"]:
        """-> (probe_idx, candidate rows aligned with probe_idx); see the module docstring."""

    def key_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """-> (distinct key hashes, net weight per hash) of the stored rows (for bloom filters)."""

    def bind(self, node, ctx, resources) -> None:
        """Attach what the store needs at run time and cannot pickle (after capture or restore)."""


StoreFactory = Callable[..., SideStore]

