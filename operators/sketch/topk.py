"""ORDER BY ... LIMIT k (top-k) over annotated deltas (IMP Sec. 5.2.8, 7.1, 7.2).

Order and ties: rows are ordered by the ORDER BY keys (ASC puts NULLs last, DESC puts
them first, as Postgres does); ties on the keys are broken by all remaining columns in
ascending order (PBDS's ``<_O``), then by the row's sketch (its sorted fragment ids).
This is a total order on annotated tuples, so "the first k" is always well defined and
independent of batch boundaries; equal annotated tuples count with their multiplicity.
LIMIT without ORDER BY uses the same order with no keys (all columns ascending), where
SQL engines may return any k rows.
Incremental rule: remember the emitted top-k; apply the delta to the ordered state; take
the new top-k and emit the multiset difference (deletes for rows that left, inserts for
rows that entered) - at most one pair of changes per affected row and batch.
State kept (``topk.ordered.v2``): a SortedDict from order key to count - the key is one
flat tuple that embeds the whole row and its sketch ids, so row and sketch are read back
from it rather than stored beside it - the emitted top-k, and for the bounded variant
(keep only the best m rows) a frontier: every untracked row sorts at or after it.  When deletions leave fewer than k tracked
rows while some were dropped, ``RecaptureRequired`` is raised.
Sketches: the top-k rows keep their own sketches; rows outside the top-k contribute none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from sortedcontainers import SortedDict

from core.errors import InvariantError
from operators.sketch.aggregate import RecaptureRequired
from operators.sketch.delta import Delta, as_sets, bits_from_ids

ENCODING = "topk.ordered.v2"  # v2: flat keys (no per-value pairs), entries are bare counts


class _Edge:
    """Sorts before (``_FIRST``) or after (``_LAST``) every value: NULL in an order key."""

    __slots__ = ("last",)

    def __init__(self, last: bool):
        self.last = last

    def __lt__(self, o):
        return not self.last and o is not self

    def __le__(self, o):
        return not self.last or o is self

    def __gt__(self, o):
        return self.last and o is not self

    def __ge__(self, o):
        return self.last or o is self

    def __eq__(self, o):
        return o is self

    def __hash__(self):
        return 0x5EED + self.last

    def __reduce__(self):  # pickled by name, so it stays a singleton
        return "_LAST" if self.last else "_FIRST"


_FIRST, _LAST = _Edge(False), _Edge(True)


class _Rev:
    """A non-numeric value in reverse order (DESC); numbers are negated instead."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return isinstance(o, _Rev) and self.v == o.v

    def __lt__(self, o):
        return o.v < self.v if isinstance(o, _Rev) else NotImplemented

    def __le__(self, o):
        return o.v <= self.v if isinstance(o, _Rev) else NotImplemented

    def __gt__(self, o):
        return o.v > self.v if isinstance(o, _Rev) else NotImplemented

    def __ge__(self, o):
        return o.v >= self.v if isinstance(o, _Rev) else NotImplemented

    def __hash__(self):
        return hash(self.v)

    def __reduce__(self):
        return (_Rev, (self.v,))


def _desc(v):
    if v is None:
        return _FIRST
    t = type(v)
    return -v if (t is int or t is float) else _Rev(v)


def order_key(order, row, sketch_ids) -> tuple:
    """The total order described in the module docstring, as one flat tuple:
    ⟨ORDER BY values (DESC ones negated or reversed), every column, sketch ids⟩ with NULL
    as ``_LAST`` (``_FIRST`` under DESC); the tail holds the row itself for ``_from_key``."""
    main = tuple(_desc(row[i]) if desc else (_LAST if row[i] is None else row[i]) for i, desc in order)
    return main + tuple(_LAST if v is None else v for v in row) + (tuple(sketch_ids),)


@dataclass(frozen=True)
class TopKSpec:
    order: tuple  # ((column position, desc), ...)
    k: int
    columns: tuple  # column ids (input = output)
    nbits: int = 1
    bound: int | None = None
    name: str = "topk"
    annotated: bool = True  # False: no partitioned table below, emit width-0 sketches


@dataclass
class TopKState:
    entries: SortedDict = field(default_factory=SortedDict)  # order key -> count
    emitted: Counter = field(default_factory=Counter)  # key -> count in the current top-k
    frontier: tuple | None = None
    types: list | None = None
    encoding: str = ENCODING


def _kept(state) -> int:
    return sum(state.entries.values())


def _top(spec, state) -> Counter:
    out, left = Counter(), spec.k
    for key, n in state.entries.items():
        if left <= 0:
            break
        c = min(n, left)
        out[key] = c
        left -= c
    if left > 0 and state.frontier is not None:
        raise RecaptureRequired(f"{spec.name}: bounded top-{spec.k} state holds fewer than k rows")
    return out


def step(spec: TopKSpec, state: TopKState, d: Delta | None):
    if d is None or len(d) == 0:
        return state, None
    new_types = [d.table.schema.field(c).type for c in spec.columns]
    if state.types is None:
        state.types = new_types
    else:  # a column first seen all-NULL (null type) learns its real type later
        state.types = [n if pa.types.is_null(o) else o for o, n in zip(state.types, new_types)]
    rows = list(zip(*[d.table.column(c).to_pylist() for c in spec.columns]))
    sk = as_sets(d.sketch, spec.nbits)
    ent, F = state.entries, state.frontier
    net: dict = {}
    seen: dict = {}  # one ids tuple per distinct sketch, shared by the keys
    for row, bits, w in zip(rows, sk, d.weight.tolist()):
        ids = seen.get(bits)
        if ids is None:
            ids = seen[bits] = tuple(bits.search(1))
        key = order_key(spec.order, row, ids)
        net[key] = net.get(key, 0) + w
    for key, w in net.items():
        if w == 0:
            continue
        if F is not None and key >= F:
            continue  # untracked region of the bounded state
        n = ent.get(key, 0) + w
        if n > 0:
            ent[key] = n
        elif n == 0:
            del ent[key]
        elif n == w:
            raise InvariantError(f"{spec.name}: delete of a row not in the state: {_from_key(spec, key)[0]!r}")
        else:
            raise InvariantError(f"{spec.name}: negative multiplicity for row {_from_key(spec, key)[0]!r}")
    if spec.bound is not None:
        total = _kept(state)
        while total > spec.bound and len(ent) > 1:
            if total - ent.peekitem(-1)[1] < spec.k:
                break  # never evict below k rows (a heavy duplicate may exceed the bound)
            key, n = ent.popitem(-1)
            total -= n
            F = key if F is None or key < F else F
        state.frontier = F
    new = _top(spec, state)
    old = state.emitted
    out_rows, out_bits, out_w = [], [], []
    for key in set(old) | set(new):
        dc = new.get(key, 0) - old.get(key, 0)
        if dc == 0:
            continue
        row, bits = _from_key(spec, key)
        out_rows.append(row)
        out_bits.append(bits)
        out_w.append(dc)
    state.emitted = new
    if not out_rows:
        return state, None
    cols = list(zip(*out_rows))
    arrays = [pa.array(list(c), type=t) for c, t in zip(cols, state.types)]
    if spec.annotated:
        sk_out = np.empty(len(out_bits), dtype=object)
        for i, b in enumerate(out_bits):
            sk_out[i] = b
    else:
        sk_out = np.zeros((len(out_bits), 0), dtype=np.int64)
    return state, Delta(pa.Table.from_arrays(arrays, names=list(spec.columns)), np.asarray(out_w, np.int64), sk_out)


def _from_key(spec: TopKSpec, key):
    """Recover ⟨row, sketch⟩ from an order key (the key embeds the whole row and sketch)."""
    n = len(spec.columns)
    tail = key[len(spec.order):]
    row = tuple(None if v is _LAST else v for v in tail[:n])
    return row, bits_from_ids(tail[n], spec.nbits)


def reference_topk(spec: TopKSpec, columns, bag) -> list:
    """From scratch: sort the whole annotated bag by the total order and cut at k."""
    pos = [columns.index(c) for c in spec.columns]
    items = Counter()
    for row, sk, m in bag:
        r = tuple(row[p] for p in pos)
        items[(r, frozenset(sk))] += m
    ordered = sorted((k for k, m in items.items() if m > 0), key=lambda k: order_key(spec.order, k[0], sorted(k[1])))
    out, left = [], spec.k
    for k in ordered:
        if left <= 0:
            break
        c = min(items[k], left)
        out.append((k[0], k[1], c))
        left -= c
    return out
