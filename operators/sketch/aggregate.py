"""Grouped aggregation SUM/COUNT/AVG/MIN/MAX (and DISTINCT) over annotated deltas (IMP 5.2.6-7).

Incremental rule: per group g touched by the batch, SUM/CNT are updated by ``±n·t.a`` and
``±n``, MIN/MAX by inserting/removing values in an ordered multiset, and the per-fragment
counts F_g by ``±n`` for every fragment in each input row's sketch; the group's sketch is
``{r | F_g[r] > 0}``.  The operator emits **one delete/insert pair per changed group per
batch** (Sec. 7.1): the previously emitted ⟨row, sketch⟩ is deleted and the new one
inserted; a group whose row and sketch did not change emits nothing.  A group appears
with an insert only, and vanishes (hidden count(*) = 0) with a delete only.  Without
GROUP BY there is always exactly one output row (SQL: SUM of nothing is NULL, COUNT 0).
DISTINCT is this operator with every column a group column and no aggregate.
State kept (``aggregate.groups.v2``): group key -> slot; per slot numpy entries for the
hidden count, per aggregate the running sum and non-NULL count, a SortedDict per MIN/MAX
aggregate as value -> multiplicity (IMP's ORDMAP; optionally bounded to the m best
distinct values plus a "frontier" behind which values are untracked, Sec. 7.2), the
dict F_g and the last emitted ⟨row, sketch⟩.
Sketches: lineage - a group's sketch holds every fragment of every member (also for
MIN/MAX, as IMP's F_g does; PBDS's argmin-only rule would be smaller).  Deletions are
exact because F_g counts, not bits, are maintained.  Bounded MIN/MAX raises
``RecaptureRequired`` when deletions exhaust the kept values of a live group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from sortedcontainers import SortedDict

from operators.errors import InvariantError, StateError
from operators.sketch.delta import Delta, bits_from_ids, group_codes, ids_of, is_compact

ENCODING = "aggregate.groups.v2"  # v2: MIN/MAX state is value -> count


class RecaptureRequired(StateError):
    """Bounded MIN/MAX or top-k state lost the values needed: recapture from the full tables."""

    code = "IVM410"


@dataclass(frozen=True)
class AggCall:
    func: str  # sum | count | count_star | avg | min | max
    arg: str | None
    out: str


@dataclass(frozen=True)
class AggSpec:
    group: tuple  # ((input col id, output col id), ...)
    aggs: tuple  # (AggCall, ...)
    nbits: int = 1
    bound: int | None = None  # keep only the best m values per MIN/MAX group
    name: str = "aggregate"
    annotated: bool = True  # False: no partitioned table below, emit width-0 sketches


@dataclass
class AggState:
    slot_of: dict = field(default_factory=dict)
    keys: list = field(default_factory=list)
    free: list = field(default_factory=list)
    cnt: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    acc: list = field(default_factory=list)  # per agg: np.ndarray | None
    nn: list = field(default_factory=list)
    arg_int: list = field(default_factory=list)
    ordered: list = field(default_factory=list)  # per agg: {slot: SortedDict value -> count}
    frontier: list = field(default_factory=list)  # per agg: {slot: value}
    frag: list = field(default_factory=list)  # per slot: {global fragment: count}
    out_row: list = field(default_factory=list)
    out_bits: list = field(default_factory=list)
    out_types: list | None = None
    started: bool = False
    encoding: str = ENCODING


def new_state(spec: AggSpec) -> AggState:
    k = len(spec.aggs)
    return AggState(acc=[None] * k, nn=[None] * k, arg_int=[None] * k,
                    ordered=[{} for _ in range(k)], frontier=[{} for _ in range(k)])


def _grow(state: AggState, need: int) -> None:
    cap = len(state.cnt)
    if need <= cap:
        return
    new = max(need, 2 * cap, 16)

    def g(a, dt):
        b = np.zeros(new, dtype=dt)
        b[: len(a)] = a
        return b

    state.cnt = g(state.cnt, np.int64)
    for j in range(len(state.acc)):
        if state.acc[j] is not None:
            state.acc[j] = g(state.acc[j], state.acc[j].dtype)
        if state.nn[j] is not None:
            state.nn[j] = g(state.nn[j], np.int64)
    extra = new - len(state.frag)
    state.frag.extend({} for _ in range(extra))
    state.out_row.extend([None] * extra)
    state.out_bits.extend([None] * extra)
    state.keys.extend([None] * extra)


def _slot(state: AggState, key) -> int:
    s = state.slot_of.get(key)
    if s is None:
        s = state.free.pop() if state.free else len(state.slot_of)
        if s >= len(state.cnt):
            _grow(state, s + 1)
        state.slot_of[key] = s
        state.keys[s] = key
    return s


def _learn_types(spec: AggSpec, state: AggState, d: Delta) -> None:
    sch = d.table.schema
    types = [sch.field(i).type for i, _ in spec.group]
    for j, a in enumerate(spec.aggs):
        t = sch.field(a.arg).type if a.arg is not None else None
        if a.func in ("sum", "avg", "count"):
            is_int = t is not None and (pa.types.is_integer(t) or pa.types.is_boolean(t))
            state.arg_int[j] = is_int
            if a.func in ("sum", "avg"):
                state.acc[j] = np.zeros(len(state.cnt), np.int64 if (is_int and a.func == "sum") else np.float64)
            state.nn[j] = np.zeros(len(state.cnt), np.int64)
        elif a.func in ("min", "max"):
            state.nn[j] = np.zeros(len(state.cnt), np.int64)
        types.append({"sum": pa.int64() if state.arg_int[j] else pa.float64(), "count": pa.int64(),
                      "count_star": pa.int64(), "avg": pa.float64()}.get(a.func, t))
    state.out_types = types


def _numeric(col: pa.Array, is_int: bool) -> np.ndarray:
    if pa.types.is_boolean(col.type):
        col = col.cast(pa.int64())
    arr = col.fill_null(0) if col.null_count else col
    return arr.to_numpy(zero_copy_only=False).astype(np.int64 if is_int else np.float64)


def _values(col: pa.Array) -> list:
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return col.to_numpy(zero_copy_only=False).tolist()
    return col.to_pylist()


def _update_ordered(spec, state, j, col, valid, inv, slots, w):
    is_min = spec.aggs[j].func == "min"
    sel = np.flatnonzero(valid)
    if len(sel) == 0:
        return
    vals = _values(col.take(pa.array(sel)))
    gs = inv[sel]
    ws = w[sel]
    order = np.argsort(gs, kind="stable")
    gs_sorted = gs[order]
    bounds = np.flatnonzero(np.diff(gs_sorted)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(order)]])
    od, fr = state.ordered[j], state.frontier[j]
    m = spec.bound
    for s0, e0 in zip(starts.tolist(), ends.tolist()):
        slot = int(slots[gs_sorted[s0]])
        sd = od.get(slot)
        if sd is None:
            sd = od[slot] = SortedDict()
        F = fr.get(slot)
        net: dict = {}
        for k in order[s0:e0].tolist():
            v = vals[k]
            net[v] = net.get(v, 0) + int(ws[k])  # net per value: deletes may precede inserts
        for v, c in net.items():
            if c == 0 or (F is not None and ((v >= F) if is_min else (v <= F))):
                continue  # no net change, or beyond the frontier of the bounded state
            n = sd.get(v, 0) + c
            if n > 0:
                sd[v] = n
            elif n == 0:
                del sd[v]
            else:
                raise InvariantError(f"{spec.name}: delete of value {v!r} absent from group {state.keys[slot]!r}")
        # bounded state keeps the m best *distinct* values with their multiplicities, so ties
        # at the minimum never push the minimum itself out
        while m is not None and len(sd) > m:
            worst = sd.popitem(-1 if is_min else 0)[0]
            F = worst if F is None else (min(F, worst) if is_min else max(F, worst))
        if F is not None:
            fr[slot] = F
        if state.nn[j][slot] == 0:  # no non-NULL value left: forget the frontier
            fr.pop(slot, None)
            sd.clear()


def _update_frags(spec, state, sketch, inv, slots, w) -> set:
    if is_compact(sketch):
        if sketch.shape[1] == 0:
            return set()
        r, c = np.nonzero(sketch >= 0)
        fr = sketch[r, c]
        gi = inv[r]
        ww = w[r]
    else:
        gl, fl, wl = [], [], []
        for i, b in enumerate(sketch):
            ids = ids_of(b)
            gl.extend([inv[i]] * len(ids))
            fl.extend(ids)
            wl.extend([w[i]] * len(ids))
        gi, fr, ww = np.asarray(gl, np.int64), np.asarray(fl, np.int64), np.asarray(wl, np.int64)
    if len(fr) == 0:
        return set()
    nb = spec.nbits
    key = gi.astype(np.int64) * nb + fr
    u, ik = np.unique(key, return_inverse=True)
    sums = np.bincount(ik.reshape(-1), weights=ww, minlength=len(u)).astype(np.int64)
    changed = set()
    frag = state.frag
    for k, s in zip(u.tolist(), sums.tolist()):
        if s == 0:
            continue
        g, f = divmod(k, nb)
        slot = int(slots[g])
        dct = frag[slot]
        v = dct.get(f, 0) + s
        if v > 0:
            dct[f] = v
        elif v == 0:
            del dct[f]
        else:
            raise InvariantError(f"{spec.name}: fragment count below zero in group {state.keys[slot]!r}")
        changed.add(slot)
    return changed


def _row(spec: AggSpec, state: AggState, slot: int):
    vals = list(state.keys[slot])
    for j, a in enumerate(spec.aggs):
        f = a.func
        if state.out_types is None:  # nothing seen yet (global aggregate over no rows)
            vals.append(0 if f in ("count", "count_star") else None)
            continue
        if f == "count_star":
            vals.append(int(state.cnt[slot]))
        elif f == "count":
            vals.append(int(state.nn[j][slot]))
        elif f == "sum":
            nn = state.nn[j][slot]
            vals.append(None if nn == 0 else state.acc[j][slot].item())
        elif f == "avg":
            nn = state.nn[j][slot]
            vals.append(None if nn == 0 else float(state.acc[j][slot]) / float(nn))
        else:
            sd = state.ordered[j].get(slot)
            if sd:
                vals.append(sd.peekitem(0 if f == "min" else -1)[0])
            elif state.nn[j][slot] > 0:
                raise RecaptureRequired(f"{spec.name}: bounded {f} state of group {state.keys[slot]!r} exhausted")
            else:
                vals.append(None)
    return tuple(vals)


def step(spec: AggSpec, state: AggState, d: Delta | None):
    """Apply one annotated delta; returns (state, Delta of ±⟨group row, sketch⟩ or None)."""
    glob = not spec.group
    if d is not None and len(d) and state.out_types is None:
        _learn_types(spec, state, d)
    if d is None or len(d) == 0:
        if glob and not state.started:
            d = None
            touched, changed = [_slot(state, ())], set()
        else:
            return state, None
    else:
        n = len(d)
        if glob:
            inv, first = np.zeros(n, np.int64), np.zeros(1, np.int64)
            keys = [()]
        else:
            inv, first = group_codes([d.table.column(i) for i, _ in spec.group], n)
            reps = d.table.take(pa.array(first))
            keys = list(zip(*[reps.column(i).to_pylist() for i, _ in spec.group]))
        slots = np.fromiter((_slot(state, k) for k in keys), dtype=np.int64, count=len(keys))
        w = d.weight
        G = len(first)
        state.cnt[slots] += np.bincount(inv, weights=w, minlength=G).astype(np.int64)
        if (state.cnt[slots] < 0).any():
            bad = state.keys[int(slots[np.flatnonzero(state.cnt[slots] < 0)[0]])]
            raise InvariantError(f"{spec.name}: more deletes than rows in group {bad!r}")
        for j, a in enumerate(spec.aggs):
            if a.func == "count_star":
                continue
            col = d.table.column(a.arg)
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            valid = (~col.is_null().to_numpy(zero_copy_only=False)) if col.null_count else np.ones(n, bool)
            state.nn[j][slots] += np.bincount(inv[valid], weights=w[valid], minlength=G).astype(np.int64)
            if a.func in ("sum", "avg"):
                x = _numeric(col, state.arg_int[j] and a.func == "sum")
                contrib = x * w
                if state.acc[j].dtype == np.int64:
                    part = np.zeros(G, np.int64)
                    np.add.at(part, inv[valid], contrib[valid])
                else:
                    part = np.bincount(inv[valid], weights=contrib[valid], minlength=G)
                state.acc[j][slots] += part
                empty = slots[state.nn[j][slots] == 0]
                state.acc[j][empty] = 0  # no drift carried into a group's next life
            elif a.func in ("min", "max"):
                _update_ordered(spec, state, j, col, valid, inv, slots, w)
        changed = _update_frags(spec, state, d.sketch, inv, slots, w)
        touched = slots.tolist()
    state.started = True
    out_rows, out_bits, out_w = [], [], []
    for slot in touched:
        alive = glob or state.cnt[slot] > 0
        old_row, old_bits = state.out_row[slot], state.out_bits[slot]
        if alive:
            bits = bits_from_ids(state.frag[slot].keys(), spec.nbits) if (slot in changed or old_bits is None) else old_bits
            row = _row(spec, state, slot)
        else:
            bits = row = None
        if old_row is not None and (row != old_row or bits != old_bits):
            out_rows.append(old_row)
            out_bits.append(old_bits)
            out_w.append(-1)
        if row is not None and (row != old_row or bits != old_bits):
            out_rows.append(row)
            out_bits.append(bits)
            out_w.append(1)
        state.out_row[slot], state.out_bits[slot] = row, bits
        if not alive:
            _free(spec, state, slot)
    if not out_rows:
        return state, None
    return state, _build(spec, state, out_rows, out_bits, out_w)


def _free(spec, state, slot):
    key = state.keys[slot]
    state.slot_of.pop(key, None)
    state.keys[slot] = None
    state.frag[slot] = {}
    for j in range(len(spec.aggs)):
        state.ordered[j].pop(slot, None)
        state.frontier[j].pop(slot, None)
        if state.acc[j] is not None:
            state.acc[j][slot] = 0
        if state.nn[j] is not None:
            state.nn[j][slot] = 0
    state.free.append(slot)


def out_columns(spec: AggSpec) -> list:
    return [o for _, o in spec.group] + [a.out for a in spec.aggs]


def _build(spec, state, rows, bits, w) -> Delta:
    names = out_columns(spec)
    types = state.out_types or [None] * len(names)
    cols = list(zip(*rows))
    arrays = []
    for i, (c, t) in enumerate(zip(cols, types)):
        if t is None or pa.types.is_null(t):  # first seen all-NULL: infer, and remember
            a = pa.array(list(c))
            if state.out_types is not None and not pa.types.is_null(a.type):
                state.out_types[i] = a.type
        else:
            a = pa.array(list(c), type=t)
        arrays.append(a)
    if not spec.annotated:
        sk = np.zeros((len(bits), 0), dtype=np.int64)
    else:
        sk = np.empty(len(bits), dtype=object)
        for i, b in enumerate(bits):
            sk[i] = b
    return Delta(pa.Table.from_arrays(arrays, names=names), np.asarray(w, np.int64), sk)


# -- from-scratch twin -----------------------------------------------------------------------

def reference_aggregate(spec: AggSpec, columns, bag) -> list:
    """[(row, frozenset sketch, 1)] computed from the full annotated input bag."""
    pos = {c: i for i, c in enumerate(columns)}
    groups: dict = {}
    for row, sk, m in bag:
        if m == 0:
            continue
        key = tuple(row[pos[i]] for i, _ in spec.group)
        g = groups.setdefault(key, {"rows": [], "sk": set()})
        g["rows"].append((row, m))
        g["sk"] |= set(sk)
    if not spec.group and not groups:
        groups[()] = {"rows": [], "sk": set()}
    out = []
    for key, g in groups.items():
        vals = list(key)
        for a in spec.aggs:
            if a.func == "count_star":
                vals.append(sum(m for _, m in g["rows"]))
                continue
            xs = [(r[pos[a.arg]], m) for r, m in g["rows"] if r[pos[a.arg]] is not None]
            if a.func == "count":
                vals.append(sum(m for _, m in xs))
            elif not xs:
                vals.append(None)
            elif a.func == "sum":
                vals.append(sum(x * m for x, m in xs))
            elif a.func == "avg":
                vals.append(sum(x * m for x, m in xs) / sum(m for _, m in xs))
            elif a.func == "min":
                vals.append(min(x for x, _ in xs))
            else:
                vals.append(max(x for x, _ in xs))
        out.append((tuple(vals), frozenset(g["sk"]), 1))
    return out
