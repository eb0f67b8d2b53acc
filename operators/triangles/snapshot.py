"""Versioned byte encoding of a TriangleCounter state (``triangles.ivm_eps.v2``; reads v1).

Layout: ``b"IVMTRI"`` | version (uint16, big-endian) | header length (uint32) | JSON header |
int64 arrays, little-endian, in header order.  Per relation i: x_i, y_i, m_i (the tuples)
and heavy_i (the heavy values: a non-strict partition depends on history, so it is stored);
then the graph-mode extra references (u, v, refs).  Q is stored (its recount costs
O(|D|^1.5)).

v2 also stores the derived structures when the header says ``"derived": true``: per
relation the heavy and light reverse indexes (hx_i, hy_i, hm_i and lx_i, ly_i, lm_i: outer
key, inner key, value) and the view (vx_i, vy_i, vm_i: ``views[i][vx][vy] = vm``), each
outer key's entries as one run.  Restore then fills them instead of rebuilding them from the
parts (``reindex``, ``compute_view``: about a third of a 10^6-edge restore).  A witness view
(sets of middles, not numbers) is not stored; ``"derived": false`` and v1 snapshots rebuild
the derived structures, so a restored state is equal to the saved one either way.

Incremental rule, deletions: not applicable (a codec).  State kept: none.
"""

from __future__ import annotations

import gc
import json
import struct
from contextlib import contextmanager
from itertools import chain, repeat

import numpy as np

from operators.errors import ConfigError, StateError

MAGIC = b"IVMTRI"
VERSION = 2
NAME = "triangles.ivm_eps.v2"
READS = {1: "triangles.ivm_eps.v1", 2: NAME}


def _i64(values: list, what: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype="<i8")
    except OverflowError as exc:
        raise StateError(f"triangles snapshot: {what} does not fit int64") from exc


def _flat(d: dict, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``{x: {y: m}}`` as three arrays, each x's entries one run (the loops run in C)."""
    lens = np.fromiter(map(len, d.values()), dtype=np.int64, count=len(d))
    xs = np.repeat(_i64(list(d), what), lens)
    ys = _i64(list(chain.from_iterable(d.values())), what)
    ms = _i64(list(chain.from_iterable(map(dict.values, d.values()))), what)
    return xs, ys, ms


def encode(counter) -> bytes:
    core = counter._core
    # a witness view holds sets of middles, not numbers: rebuilt on restore instead
    derived = not getattr(core, "witnesses", False)
    arrays: list[tuple[str, np.ndarray]] = []
    for i in range(core.nrel):
        xs, ys, ms = _flat(core.rows[i], "vertex id")
        arrays += [(f"x{i}", xs), (f"y{i}", ys), (f"m{i}", ms),
                   (f"heavy{i}", _i64(sorted(core.heavy[i]), "vertex id"))]
    if derived:
        for i in range(core.nrel):
            for p, d in (("h", core.rev_h[i]), ("l", core.rev_l[i]), ("v", core.views[i])):
                xs, ys, ms = _flat(d, "a derived entry")
                arrays += [(f"{p}x{i}", xs), (f"{p}y{i}", ys), (f"{p}m{i}", ms)]
    keys = list(counter._extra)
    arrays += [("extra_u", _i64([k[0] for k in keys], "vertex id")),
               ("extra_v", _i64([k[1] for k in keys], "vertex id")),
               ("extra_refs", _i64([counter._extra[k] for k in keys], "a reference count"))]
    header = {
        "name": NAME, "mode": counter.mode, "epsilon": core.epsilon, "n": core.n,
        "witnesses": getattr(core, "witnesses", False), "derived": derived,
        "q": str(core.q), "size": core.size, "major": core.major, "minor": core.minor,
        "moved": core.moved, "rejected": counter.rejected,
        "arrays": [[name, len(a)] for name, a in arrays],
    }
    hb = json.dumps(header, sort_keys=True).encode()
    return b"".join([MAGIC, struct.pack(">HI", VERSION, len(hb)), hb] +
                    [a.tobytes() for _, a in arrays])


@contextmanager
def _no_gc():
    """Cyclic GC off while a restore builds its ~10^6 dicts: the collections they trigger
    find nothing (the new dicts hold ints only) and cost about a quarter of the restore."""
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
    data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    if len(data) < 12 or bytes(data[:6]) != MAGIC:
        raise StateError("triangles snapshot: not a triangle-counter snapshot (bad magic)")
    version, hlen = struct.unpack(">HI", data[6:12])
    if version not in READS:
        raise StateError(f"triangles snapshot: unknown encoding version {version} "
                         f"(this build reads {', '.join(f'{v}: {n}' for v, n in READS.items())})")
    with _no_gc():
        return _decode(cls, data, version, hlen)


def _decode(cls, data, version: int, hlen: int):
    try:
        header = json.loads(bytes(data[12:12 + hlen]))
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
        derived = version >= 2 and header.get("derived", False)
        for i in range(core.nrel):
            _rows_into(core.rows[i], arrays[f"x{i}"], arrays[f"y{i}"], arrays[f"m{i}"])
            rows = core.rows[i]
            heavy = set(arrays[f"heavy{i}"].tolist())
            if not heavy <= rows.keys():
                raise ValueError("heavy value without tuples")
            core.heavy[i] = heavy
            if derived:
                _derived_into(core, i, arrays)
            else:
                core.reindex(i)
        core.size = sum(len(r) for rels in core.rows for r in rels.values())
        if core.size != header["size"]:
            raise ValueError("tuple count differs from |D|")
        core.set_n(int(header["n"]))
        if not derived:
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
        raise StateError(f"triangles snapshot: corrupt {READS[version]} payload: {exc}") from exc
    return counter


def _derived_into(core, i: int, arrays: dict) -> None:
    """The stored reverse indexes and view of relation i, checked against the parts' sizes
    (an entry count that differs means the bytes do not belong to these tuples)."""
    rev_h, rev_l, view = {}, {}, {}
    _rows_into(rev_h, arrays[f"hx{i}"], arrays[f"hy{i}"], arrays[f"hm{i}"])
    _rows_into(rev_l, arrays[f"lx{i}"], arrays[f"ly{i}"], arrays[f"lm{i}"])
    _rows_into(view, arrays[f"vx{i}"], arrays[f"vy{i}"], arrays[f"vm{i}"])
    rows, heavy = core.rows[i], core.heavy[i]
    in_heavy = sum(len(rows[x]) for x in heavy)
    light = 0 if getattr(core, "symmetric", False) else sum(map(len, rows.values())) - in_heavy
    if len(arrays[f"hy{i}"]) != in_heavy or len(arrays[f"ly{i}"]) != light:
        raise ValueError("reverse index sizes differ from the tuples")
    core.rev_h[i], core.rev_l[i], core.views[i] = rev_h, rev_l, view


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
