"""Versioned byte encoding of a TriangleCounter state (``triangles.ivm_eps.v1``).

Layout: ``b"IVMTRI"`` | version (uint16, big-endian) | header length (uint32) | JSON header |
int64 arrays, little-endian, in header order.  Per relation i: x_i, y_i, m_i (the tuples)
and heavy_i (the heavy values: a non-strict partition depends on history, so it is stored);
then the graph-mode extra references (u, v, refs).  Views and reverse indexes are derived
data and are rebuilt on restore from the parts (their definitions), so a restored state is
equal to the saved one.  Q is stored (its recount costs O(|D|^1.5)).

Incremental rule, deletions: not applicable (a codec).  State kept: none.
"""

from __future__ import annotations

import json
import struct
from itertools import repeat

import numpy as np

from operators.errors import ConfigError, StateError

MAGIC = b"IVMTRI"
VERSION = 1
NAME = "triangles.ivm_eps.v1"


def _i64(values: list, what: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype="<i8")
    except OverflowError as exc:
        raise StateError(f"triangles snapshot: {what} does not fit int64") from exc


def encode(counter) -> bytes:
    core = counter._core
    arrays: list[tuple[str, np.ndarray]] = []
    for i in range(core.nrel):
        xs, ys, ms = [], [], []
        for x, row in core.rows[i].items():
            xs.extend([x] * len(row))
            ys.extend(row.keys())
            ms.extend(row.values())
        arrays += [(f"x{i}", _i64(xs, "vertex id")), (f"y{i}", _i64(ys, "vertex id")),
                   (f"m{i}", _i64(ms, "a multiplicity")),
                   (f"heavy{i}", _i64(sorted(core.heavy[i]), "vertex id"))]
    keys = list(counter._extra)
    arrays += [("extra_u", _i64([k[0] for k in keys], "vertex id")),
               ("extra_v", _i64([k[1] for k in keys], "vertex id")),
               ("extra_refs", _i64([counter._extra[k] for k in keys], "a reference count"))]
    header = {
        "name": NAME, "mode": counter.mode, "epsilon": core.epsilon, "n": core.n,
        "witnesses": getattr(core, "witnesses", False),
        "q": str(core.q), "size": core.size, "major": core.major, "minor": core.minor,
        "moved": core.moved, "rejected": counter.rejected,
        "arrays": [[name, len(a)] for name, a in arrays],
    }
    hb = json.dumps(header, sort_keys=True).encode()
    return b"".join([MAGIC, struct.pack(">HI", VERSION, len(hb)), hb] +
                    [a.tobytes() for _, a in arrays])


def decode(cls, data: bytes):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateError(f"triangles snapshot: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < 12 or data[:6] != MAGIC:
        raise StateError("triangles snapshot: not a triangle-counter snapshot (bad magic)")
    version, hlen = struct.unpack(">HI", data[6:12])
    if version != VERSION:
        raise StateError(f"triangles snapshot: unknown encoding version {version} "
                         f"(this build reads {VERSION}: {NAME})")
    try:
        header = json.loads(data[12:12 + hlen])
        pos = 12 + hlen
        arrays = {}
        for name, count in header["arrays"]:
            end = pos + 8 * count
            if end > len(data):
                raise ValueError("truncated")
            arrays[name] = np.frombuffer(data, dtype="<i8", count=count, offset=pos)  # no copy
            pos = end
        if pos != len(data):
            raise ValueError("trailing bytes")
        counter = cls(epsilon=header["epsilon"], mode=header["mode"],
                      witnesses=header.get("witnesses", False))  # absent before the option
        core = counter._core
        for i in range(core.nrel):
            _rows_into(core.rows[i], arrays[f"x{i}"], arrays[f"y{i}"], arrays[f"m{i}"])
            rows = core.rows[i]
            heavy = set(arrays[f"heavy{i}"].tolist())
            if not heavy <= rows.keys():
                raise ValueError("heavy value without tuples")
            core.heavy[i] = heavy
            core.reindex(i)
        core.size = sum(len(r) for rels in core.rows for r in rels.values())
        if core.size != header["size"]:
            raise ValueError("tuple count differs from |D|")
        core.set_n(int(header["n"]))
        for i in range(core.nrel):
            core.views[i] = core.compute_view(i)
        core.bind()
        core.q = int(header["q"])
        core.major, core.minor, core.moved = header["major"], header["minor"], header["moved"]
        counter.rejected = header["rejected"]
        for u, v, r in zip(*(arrays[k].tolist() for k in ("extra_u", "extra_v", "extra_refs"))):
            counter._extra[(u, v)] = r
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise StateError(f"triangles snapshot: corrupt {NAME} payload: {exc}") from exc
    return counter


def _rows_into(rows: dict, xs: np.ndarray, ys: np.ndarray, ms: np.ndarray) -> None:
    """rows[x] = {y: m}: one dict per run of equal x (``encode`` writes each row as one run),
    so the loop is per vertex, not per tuple (about 5x faster at 10^6 edges)."""
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
