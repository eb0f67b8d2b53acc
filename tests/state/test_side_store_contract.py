"""The ``operators.sketch.side_store.SideStore`` contract, the same assertions over every backend.

A backend is an adapter with ``make(key_ids, node, ctx)`` (a new store) and ``sync(store,
live)`` (the world the store may read catches up with what was added: nothing for a memory
store; for the Delta-backed store, the mirror is rewritten and the store bound to the new
version, as the job's mirror MERGE precedes the sketch maintainer). Add a backend by adding its
adapter to ``BACKENDS`` (one line, with its marker).

Rows come from a real plan (a scan feeding a join), so a store sees what the join operator
hands it; answers are compared as net weight per (probe, row), which is what the join's
consumers see whatever a store consolidates.
"""

from __future__ import annotations

import inspect
import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from operators.sketch import RangePartition, SketchMaintainer
from operators.sketch import plan as P
from operators.sketch.joinstore import key_hash
from operators.sketch.memory_side import MemoryIndex
from operators.sketch.side_store import SideStore

SQL = "select t.v, u.w from t join u on t.k = u.k"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


class Memory:
    name = "memory"

    def __init__(self, request, tmp_path):
        pass

    def make(self, key_ids, node, ctx):
        return MemoryIndex(1, key_ids)

    def sync(self, store, live: Counter) -> None:
        pass


class DeltaMirror:
    """``DeltaSide`` over a real Delta table of ``t``, read with Spark."""

    name = "delta"

    def __init__(self, request, tmp_path):
        from connectors import delta_sink as sink

        self.spark = request.getfixturevalue("spark")
        self.lake = sink.Lake(tmp_path)
        self.version = -1

    def make(self, key_ids, node, ctx):
        from streaming_app.sketches.delta_side import DeltaSide

        self.node, self.ctx = node, ctx
        return DeltaSide(1, key_ids, "t")

    def sync(self, store, live: Counter) -> None:
        from streaming_app.sketches.delta_side import Binding

        rows = [r for r, n in sorted(live.items()) for _ in range(n)]
        t = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
        self.spark.createDataFrame(t.to_pandas(), "k long, v string").write.format("delta") \
            .mode("overwrite").save(self.lake.mirror("t"))
        self.version += 1
        v = self.version
        store.bind(self.node, self.ctx, Binding(self.spark, self.lake, lambda table: v,
                                                {"t": {"k": "long", "v": "string"}}))


BACKENDS = [
    pytest.param(Memory, id="memory"),
    pytest.param(DeltaMirror, id="delta", marks=pytest.mark.spark),
]


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    return request.param(request, tmp_path)


class Harness:
    """One store of the join's left input ``t`` plus the model of what it must hold."""

    def __init__(self, backend):
        m = SketchMaintainer.from_sql(SQL, {"t": RangePartition("k", [0, 10, 20])})
        m.prepare({"t": ["k", "v"], "u": ["k", "w"]})
        m.initialize({"t": SCHEMA.empty_table(), "u": pa.table({"k": pa.array([], pa.int64()),
                                                               "w": pa.array([], pa.string())})})
        join = next(n for n in m.query.root.walk() if isinstance(n, P.JoinNode))
        self.node, self.ctx, self.key_ids = join.children[0], m.ctx, tuple(join.lkeys)
        self.kid, self.vid = self.node.out
        self.backend = backend
        self.store = backend.make(self.key_ids, self.node, self.ctx)
        self.live: Counter = Counter()  # (k, v) -> multiplicity

    def add(self, rows: list, weights: list) -> None:
        """Rows of ``t`` with signed weights, through the scan as the join would get them."""
        t = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
        d = self.node.run(self.ctx, {"t": (t, np.asarray(weights, np.int64))}, False)
        self.store.add(d, key_hash(d.table, self.key_ids))
        for r, w in zip(rows, weights):
            self.live[r] += w
            assert self.live[r] >= 0
        self.live = +self.live
        self.backend.sync(self.store, self.live)

    def probe_keys(self, keys: list):
        kt = pa.table({self.kid: pa.array(keys, pa.float64())})  # the engine's numeric keys
        return self.store.probe(key_hash(kt, [self.kid]), kt)

    def answer(self, keys: list) -> dict:
        pi, rows = self.probe_keys(keys)
        out: Counter = Counter()
        if rows is not None:
            assert len(pi) == len(rows)
            ks, vs = rows.table.column(self.kid).to_pylist(), rows.table.column(self.vid).to_pylist()
            for i, k, v, w in zip(pi.tolist(), ks, vs, rows.weight.tolist()):
                assert k == keys[i]  # the store answered for the hash it was asked
                out[(i, int(k), v)] += w
        return {x: w for x, w in out.items() if w}

    def expected(self, keys: list) -> dict:
        return {(i, k, v): n for i, key in enumerate(keys) for (k, v), n in self.live.items() if k == key and n}

    def check(self, keys: list) -> None:
        assert self.answer(keys) == self.expected(keys)
        assert len(self.store) == sum(self.live.values())
        h, w = self.store.key_weights()
        got = {int(a): int(b) for a, b in zip(h.tolist(), w.tolist()) if b}
        want: Counter = Counter()
        for (k, _), n in self.live.items():
            kt = pa.table({self.kid: pa.array([float(k)], pa.float64())})
            want[int(key_hash(kt, [self.kid])[0])] += n
        assert got == {a: b for a, b in want.items() if b}


def test_declares_the_interface_exactly(backend):
    h = Harness(backend)
    cls = type(h.store)
    assert isinstance(h.store, SideStore) and SideStore in cls.__mro__
    for name in ("__len__", "add", "probe", "key_weights", "bind"):
        impl = next(c for c in cls.__mro__ if name in vars(c))
        assert impl is not SideStore, f"{cls.__name__} does not implement {name}"
        want = inspect.signature(getattr(SideStore, name))
        got = inspect.signature(getattr(cls, name))
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
               [(p.name, p.kind, p.default) for p in want.parameters.values()], name
    assert isinstance(h.store.encoding, str) and h.store.encoding.rsplit(".", 1)[-1].startswith("v")


def test_empty_store_answers_nothing(backend):
    h = Harness(backend)
    h.backend.sync(h.store, h.live)
    pi, rows = h.probe_keys([1, 2])
    assert len(pi) == 0 and rows is None
    h.check([1, 2])


def test_inserts_deletes_and_reinserts(backend):
    h = Harness(backend)
    h.add([(1, "a"), (1, "b"), (2, "c"), (15, "d"), (15, "d")], [1, 1, 1, 1, 1])
    h.check([1, 2, 3, 15, 1])  # a missing key, a key probed twice, a row held twice
    h.add([(1, "a"), (15, "d")], [-1, -1])
    h.check([1, 15, 2])
    h.add([(2, "c"), (1, "a"), (7, "e")], [-1, 1, 1])
    h.check([2, 1, 7, 15])


def test_many_batches_against_the_model(backend):
    rng = np.random.default_rng(7)
    h = Harness(backend)
    batches = 4 if isinstance(backend, DeltaMirror) else 40
    for _ in range(batches):
        rows, weights = [], []
        for _ in range(int(rng.integers(1, 30))):
            k = int(rng.integers(0, 12))
            live = [r for r in h.live if r[0] == k and h.live[r] > 0]
            if live and rng.random() < 0.4:
                r = live[int(rng.integers(0, len(live)))]
                if h.live[r] + sum(w for x, w in zip(rows, weights) if x == r) > 0:
                    rows.append(r)
                    weights.append(-1)
                continue
            rows.append((k, f"v{int(rng.integers(0, 3))}"))
            weights.append(1)
        if rows:
            h.add(rows, weights)
    h.check(list(range(12)))


def test_pickles_under_its_encoding_and_rebinds(backend):
    h = Harness(backend)
    h.add([(1, "a"), (2, "b"), (2, "c")], [1, 1, 1])
    before = h.answer([2, 1])
    h.store = pickle.loads(pickle.dumps(h.store))  # what a sketch snapshot does
    h.backend.sync(h.store, h.live)  # bind again after restore
    assert h.answer([2, 1]) == before
    h.add([(2, "b")], [-1])
    h.check([1, 2])
