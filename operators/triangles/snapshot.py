"""Versioned byte encoding of a TriangleCounter state (``triangles.ivm_eps.v2``; reads v1).

Both versions: ``b"IVMTRI"`` | version (uint16, big-endian) | header length (uint32) | JSON
header (mode, ε, N, Q, |D|, counters) | body.  Q is stored (its recount costs O(|D|^1.5)).

v2 body: one pickle (protocol 5) of ``(rows, heavy, rev_h, rev_l, views, extra)``, the
engine's own containers (per relation: forward index, heavy set, reverse indexes, view; the
graph-mode extra references), unpickled with every global refused, so the bytes can only
build dicts, sets, lists, tuples and numbers.  Restore fills the derived structures instead
of rebuilding them (v1 rebuilt them: a third of a 10^6-edge restore) and unpickling builds
the dicts in C: a 10^6-edge state restores in about 0.2 s CPU instead of about 0.5 s.
Checked on restore: the containers' types, |D| against the header, heavy values having
tuples, and the reverse indexes' entry counts against the tuples.

v1 body: int64 arrays, little-endian, in header order.  Per relation i: x_i, y_i, m_i (the
tuples, each x's as one run) and heavy_i; then the graph-mode extra references (u, v, refs).
The reverse indexes and the views are rebuilt from the parts on restore.

Both restores run with cyclic GC off: the collections that building ~10^6 dicts triggers
find nothing (the new containers hold numbers only) and cost about a quarter of a restore.

Incremental rule, deletions: not applicable (a codec).  State kept: none.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
import struct
from contextlib import contextmanager
from itertools import repeat

import numpy as np

from core.errors import ConfigError, StateError

MAGIC = b"IVMTRI"
VERSION = 2
NAME = "triangles.ivm_eps.v2"
READS = {1: "triangles.ivm_eps.v1", 2: NAME}


def encode(counter) -> bytes:
    core = counter._core
    header = {
        "name": NAME, "mode": counter.mode, "epsilon": core.epsilon, "n": core.n,
        "witnesses": getattr(core, "witnesses", False),
        "q": str(core.q), "size": core.size, "major": core.major, "minor": core.minor,
        "moved": core.moved, "rejected": counter.rejected,
    }
    body = pickle.dumps((core.rows, core.heavy, core.rev_h, core.rev_l, core.views, counter._extra),
                        protocol=5)
    hb = json.dumps(header, sort_keys=True).encode()
    return b"".join([MAGIC, struct.pack(">HI", VERSION, len(hb)), hb, body])


@contextmanager
def _no_gc():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode(cls, data: bytes):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateError(f"triangles snapshot: expected bytes, got {type(data).__name__}")
    if isinstance(data, memoryview):
        data = data.cast("B")
    if len(data) < 12 or bytes(data[:6]) != MAGIC:
        raise StateError("triangles snapshot: not a triangle-counter snapshot (bad magic)")
    version, hlen = struct.unpack(">HI", data[6:12])
    if version not in READS:
        raise StateError(f"triangles snapshot: unknown encoding version {version} "
                         f"(this build reads {', '.join(f'{v}: {n}' for v, n in READS.items())})")
    try:
        header = json.loads(bytes(data[12:12 + hlen]))
        with _no_gc():
            counter = cls(epsilon=header["epsilon"], mode=header["mode"],
                          witnesses=header.get("witnesses", False))  # absent before the option
            (_body_v2 if version == 2 else _body_v1)(counter, header, data, 12 + hlen)
            core = counter._core
            core.set_n(int(header["n"]))
            core.bind()
            core.q = int(header["q"])
            core.major, core.minor, core.moved = header["major"], header["minor"], header["moved"]
            counter.rejected = header["rejected"]
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, ConfigError, pickle.UnpicklingError, EOFError) as exc:
        raise StateError(f"triangles snapshot: corrupt {READS[version]} payload: {exc}") from exc
    return counter


class _Containers(pickle.Unpickler):
    """Unpickles containers and numbers only: any class or function reference is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a triangle state")


def _body_v2(counter, header: dict, data, pos: int) -> None:
    core = counter._core
    parts = _Containers(io.BytesIO(data[pos:])).load()
    if not (isinstance(parts, tuple) and len(parts) == 6):
        raise ValueError("body is not the six state parts")
    rows, heavy, rev_h, rev_l, views, extra = parts
    for name, part, kind in (("rows", rows, dict), ("heavy", heavy, set), ("rev_h", rev_h, dict),
                             ("rev_l", rev_l, dict), ("views", views, dict)):
        if not (isinstance(part, list) and len(part) == core.nrel and all(isinstance(p, kind) for p in part)):
            raise ValueError(f"{name} is not {core.nrel} {kind.__name__}(s)")
    if not isinstance(extra, dict):
        raise ValueError("extra references are not a dict")
    sizes = [sum(map(len, r.values())) for r in rows]
    if sum(sizes) != header["size"]:
        raise ValueError("tuple count differs from |D|")
    symmetric = getattr(core, "symmetric", False)
    for i in range(core.nrel):
        if not heavy[i] <= rows[i].keys():
            raise ValueError("heavy value without tuples")
        in_heavy = sum(len(rows[i][x]) for x in heavy[i])
        if (sum(map(len, rev_h[i].values())) != in_heavy or
                sum(map(len, rev_l[i].values())) != (0 if symmetric else sizes[i] - in_heavy)):
            raise ValueError("reverse index sizes differ from the tuples")
    core.rows, core.heavy, core.rev_h, core.rev_l, core.views = rows, heavy, rev_h, rev_l, views
    core.size = sum(sizes)
    counter._extra = extra


def _body_v1(counter, header: dict, data, pos: int) -> None:
    core = counter._core
    arrays = {}
    for name, count in header["arrays"]:
        end = pos + 8 * count
        if end > len(data):
            raise ValueError("truncated")
        arrays[name] = np.frombuffer(data, dtype="<i8", count=count, offset=pos)  # no copy
        pos = end
    if pos != len(data):
        raise ValueError("trailing bytes")
    for i in range(core.nrel):
        _rows_into(core.rows[i], arrays[f"x{i}"], arrays[f"y{i}"], arrays[f"m{i}"])
        heavy = set(arrays[f"heavy{i}"].tolist())
        if not heavy <= core.rows[i].keys():
            raise ValueError("heavy value without tuples")
        core.heavy[i] = heavy
        core.reindex(i)
    core.size = sum(len(arrays[f"x{i}"]) for i in range(core.nrel))  # _rows_into checked each
    if core.size != header["size"]:
        raise ValueError("tuple count differs from |D|")
    core.set_n(int(header["n"]))  # the views' loop order depends on it
    for i in range(core.nrel):
        core.views[i] = core.compute_view(i)
    for u, v, r in zip(*(arrays[k].tolist() for k in ("extra_u", "extra_v", "extra_refs"))):
        counter._extra[(u, v)] = r


def _rows_into(rows: dict, xs: np.ndarray, ys: np.ndarray, ms: np.ndarray) -> None:
    """rows[x] = {y: m}: one dict per run of equal x (the v1 encoder wrote each row as one
    run), so the loop is per vertex, not per tuple (about 5x faster at 10^6 edges)."""
    if len(xs) != len(ys) or len(xs) != len(ms):
        raise ValueError("tuple arrays differ in length")
    if not len(xs):
        return
    if not ms.all():
        raise ValueError("zero multiplicity")
    cut = np.flatnonzero(xs[1:] != xs[:-1]) + 1
    starts, ends = np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [len(xs)])).tolist()
    keys = xs[np.asarray(starts, dtype=np.int64)].tolist()
    if len(set(keys)) != len(keys) or rows:
        raise ValueError("a vertex's tuples are not in one run")
    yl = ys.tolist()
    runs = list(map(slice, starts, ends))
    if (ms == 1).all():  # the graph modes: every multiplicity is 1; the loops run in C
        rows.update(zip(keys, map(dict.fromkeys, map(yl.__getitem__, runs), repeat(1))))
    else:
        ml = ms.tolist()
        rows.update(zip(keys, map(dict, map(zip, map(yl.__getitem__, runs), map(ml.__getitem__, runs)))))
    if sum(map(len, rows.values())) != len(xs):
        raise ValueError("duplicate tuple")
