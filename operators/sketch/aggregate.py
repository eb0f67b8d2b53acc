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
State kept (``aggregate.groups.v3``): group key (the bare value for one GROUP BY column)
-> slot; per slot numpy entries for the hidden count, per aggregate the running sum and
non-NULL count, a SortedDict per MIN/MAX aggregate as value -> multiplicity (IMP's ORDMAP;
optionally bounded to the m best distinct values plus a "frontier" behind which values are
untracked, Sec. 7.2), and F_g: a group in a single fragment (the common case when grouping
by or near the partition attribute) keeps fragment and count in two numpy entries, only a
group spanning several fragments gets a dict.  The last emitted ⟨row, sketch⟩ is not
stored: it is recomputed from the state before the batch is applied.  A GROUP BY over
TPC-H lineitem by l_orderkey holds ~140 B per group this way (v2: ~850 B).
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

from core.errors import InvariantError, StateError
from operators.sketch.delta import Delta, bits_from_ids, group_codes, ids_of, is_compact

ENCODING = "aggregate.groups.v3"  # v2: MIN/MAX state is value -> count; v3: compact F_g, no emitted copy
MULTI = -1  # frag_n of a group whose F_g spans several fragments (kept in frag_multi)


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
    # F_g per slot: frag_n > 0 -> the one fragment frag_id with that count; 0 -> none;
    # MULTI -> frag_multi[slot] = {global fragment: count} with two or more entries
    frag_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    frag_n: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    frag_multi: dict = field(default_factory=dict)
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
    new = max(need, cap + cap // 8, 16)  # capture sizes exactly; 1/8 headroom amortises growth

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
    state.frag_id = g(state.frag_id, np.int32)
    state.frag_n = g(state.frag_n, np.int64)
    state.keys.extend([None] * (new - len(state.keys)))


def _slots(state: AggState, keys: list):
    """Slots of the batch's group keys (new ones allocated) and the slots that existed before."""
    slot_of = state.slot_of
    pre = [slot_of.get(k) for k in keys]
    old = [s for s in pre if s is not None]
    if len(old) < len(pre):
        _grow(state, len(slot_of) + max(len(state.free), len(pre) - len(old)))  # slots in use + free + new
        for i, s in enumerate(pre):
            if s is None:
                k = keys[i]
                s = slot_of.get(k)  # keys distinct to Arrow may be equal in Python (0.0, -0.0)
                if s is None:
                    s = state.free.pop() if state.free else len(slot_of)
                    slot_of[k] = s
                    state.keys[s] = k
                pre[i] = s
    return np.asarray(pre, dtype=np.int64), old


def _ids(state: AggState, slots) -> list:
    """Each slot's sketch as a sorted tuple of global fragment ids (F_g's support)."""
    slots = np.asarray(slots, dtype=np.int64)
    fn = state.frag_n[slots].tolist()
    fi = state.frag_id[slots].tolist()
    multi = state.frag_multi
    out = []
    for s, n, f in zip(slots.tolist(), fn, fi):
        out.append((f,) if n > 0 else (() if n == 0 else tuple(sorted(multi[s]))))
    return out


def learn_types(spec: AggSpec, state: AggState, d: Delta) -> None:
    """The accumulators' dtypes and the output column types from the schema of ``d`` (the
    aggregation's input): what ``step`` does at its first non-empty delta."""
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


def _update_frags(spec, state, sketch, inv, slots, w) -> tuple:
    """Apply the batch to F_g; returns (slots whose fragment set changed, {slot: its old
    non-empty fragment ids} for those of them that had fragments before)."""
    if is_compact(sketch):
        if sketch.shape[1] == 0:
            return set(), {}
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
        return set(), {}
    nb = spec.nbits
    key = gi.astype(np.int64) * nb + fr
    u, ik = np.unique(key, return_inverse=True)
    sums = np.bincount(ik.reshape(-1), weights=ww, minlength=len(u)).astype(np.int64)
    nz = sums != 0
    u, sums = u[nz], sums[nz]
    if len(u) == 0:
        return set(), {}
    g, f = np.divmod(u, nb)
    sl = slots[g]
    # vectorised: a slot with one changed fragment in this batch whose F_g is empty or that
    # same fragment stays (or becomes) single-fragment
    _, si, sc = np.unique(sl, return_inverse=True, return_counts=True)
    n0 = state.frag_n[sl]
    fast = (sc[si.reshape(-1)] == 1) & ((n0 == 0) | ((n0 > 0) & (state.frag_id[sl] == f)))
    fs, v = sl[fast], n0[fast] + sums[fast]
    if (v < 0).any():
        bad = state.keys[int(fs[np.flatnonzero(v < 0)[0]])]
        raise InvariantError(f"{spec.name}: fragment count below zero in group {bad!r}")
    n0f = n0[fast]
    gone = (n0f > 0) & (v == 0)
    flipped = set(fs[gone | (n0f == 0)].tolist())
    was = dict(zip(fs[gone].tolist(), [(x,) for x in f[fast][gone].tolist()]))
    state.frag_n[fs] = v
    state.frag_id[fs] = np.where(v > 0, f[fast], 0)
    slow = np.flatnonzero(~fast)
    if len(slow) == 0:
        return flipped, was
    fid, fn, multi = state.frag_id, state.frag_n, state.frag_multi
    seen = {}
    for slot, fr_, s in zip(sl[slow].tolist(), f[slow].tolist(), sums[slow].tolist()):
        dct = seen.get(slot)
        if dct is None:
            dct = multi.get(slot)
            if dct is None:  # spill the single fragment (if any) into a dict
                n = int(fn[slot])
                dct = multi[slot] = {int(fid[slot]): n} if n > 0 else {}
                fn[slot] = MULTI
            seen[slot] = dct
            was[slot] = tuple(sorted(dct))
        v = dct.get(fr_, 0) + s
        if v > 0:
            dct[fr_] = v
        elif v == 0:
            del dct[fr_]
        else:
            raise InvariantError(f"{spec.name}: fragment count below zero in group {state.keys[slot]!r}")
    for slot, dct in seen.items():
        if len(dct) != len(was[slot]) or any(x not in dct for x in was[slot]):
            flipped.add(slot)
            if not was[slot]:
                del was[slot]
        else:
            del was[slot]
        if len(dct) < 2:  # back to the compact form when at most one fragment is left
            del multi[slot]
            (fid[slot], fn[slot]), = dct.items() if dct else [(0, 0)]
    return flipped, was


def _rows(spec: AggSpec, state: AggState, slots: list) -> list:
    """The output rows ⟨group values, aggregate values⟩ of the given slots."""
    n = len(slots)
    if n == 0:
        return []
    idx = np.asarray(slots, dtype=np.int64)
    keys = state.keys
    if len(spec.group) == 1:
        cols = [[keys[s] for s in slots]]
    else:
        cols = [list(c) for c in zip(*[keys[s] for s in slots])] if spec.group else []
    for j, a in enumerate(spec.aggs):
        f = a.func
        if state.out_types is None:  # nothing seen yet (global aggregate over no rows)
            cols.append([0 if f in ("count", "count_star") else None] * n)
        elif f == "count_star":
            cols.append(state.cnt[idx].tolist())
        elif f == "count":
            cols.append(state.nn[j][idx].tolist())
        elif f in ("sum", "avg"):
            nn = state.nn[j][idx]
            v = state.acc[j][idx]
            if f == "avg":
                v = v.astype(np.float64) / np.where(nn == 0, 1, nn).astype(np.float64)
            cols.append([None if k == 0 else x for x, k in zip(v.tolist(), nn.tolist())])
        else:
            od, is_min = state.ordered[j], f == "min"
            col = []
            for s, k in zip(slots, state.nn[j][idx].tolist()):
                sd = od.get(s)
                if sd:
                    col.append(next(iter(sd)) if is_min else next(reversed(sd)))
                elif k > 0:
                    raise RecaptureRequired(f"{spec.name}: bounded {f} state of group {keys[s]!r} exhausted")
                else:
                    col.append(None)
            cols.append(col)
    return list(zip(*cols)) if cols else [()] * n


def step(spec: AggSpec, state: AggState, d: Delta | None):
    """Apply one annotated delta; returns (state, Delta of ±⟨group row, sketch⟩ or None)."""
    glob = not spec.group
    if d is not None and len(d) and state.out_types is None:
        learn_types(spec, state, d)
    if d is None or len(d) == 0:
        if glob and not state.started:
            d = None
            slots, before = _slots(state, [()])
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
            cols = [reps.column(i).to_pylist() for i, _ in spec.group]
            keys = cols[0] if len(cols) == 1 else list(zip(*cols))  # one column: bare values
        slots, before = _slots(state, keys)
        # the rows emitted last time, recomputed before the state moves on (their sketches
        # are the current ones unless _update_frags reports a change)
        old = dict(zip(before, _rows(spec, state, before)))
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
        flipped, was = _update_frags(spec, state, d.sketch, inv, slots, w)
    if d is None:
        old, flipped, was = {}, set(), {}
    state.started = True
    touched = list(dict.fromkeys(slots.tolist()))
    live = touched if glob else [s for s, a in zip(touched, (state.cnt[touched] > 0).tolist()) if a]
    new = dict(zip(live, _rows(spec, state, live)))
    emit = [s for s in touched if s in flipped or old.get(s) != new.get(s)]
    out_rows, out_ids, out_w = [], [], []
    for slot, ids in zip(emit, _ids(state, emit)):
        o, nw = old.get(slot), new.get(slot)
        if o is not None:
            out_rows.append(o)
            out_ids.append(was.get(slot, ()) if slot in flipped else ids)
            out_w.append(-1)
        if nw is not None:
            out_rows.append(nw)
            out_ids.append(ids)
            out_w.append(1)
    for slot in touched:
        if slot not in new:
            _free(spec, state, slot)
    if not out_rows:
        return state, None
    return state, _build(spec, state, out_rows, out_ids, out_w)


def _free(spec, state, slot):
    key = state.keys[slot]
    state.slot_of.pop(key, None)
    state.keys[slot] = None
    state.frag_id[slot] = 0
    state.frag_n[slot] = 0
    state.frag_multi.pop(slot, None)
    for j in range(len(spec.aggs)):
        state.ordered[j].pop(slot, None)
        state.frontier[j].pop(slot, None)
        if state.acc[j] is not None:
            state.acc[j][slot] = 0
        if state.nn[j] is not None:
            state.nn[j][slot] = 0
    state.free.append(slot)


# -- groups apart: one group's entries as a plain record --------------------------------------
#
# ``take`` cuts groups out of a many-group state, ``assemble`` puts records of any groups
# together into a state that ``step`` runs on like on the whole (the keyed operators hold
# records per group and run one ``step`` over the touched groups of a bucket). A record
# (``RECORD``) is a plain tuple of Python values, no numpy, no dataclass:
#   (key, started, cnt, frag_id, frag_n, frag_multi {fragment: count} | None,
#    (acc | None, nn | None, ((value, count), ...) | None, frontier | None) per aggregate)

RECORD = "imp.group.v3"


def take(spec: AggSpec, state: AggState, slots) -> list:
    """The records of the given slots (groups in use) of ``state``."""
    idx = np.asarray(list(slots), dtype=np.int64)
    if len(idx) == 0:
        return []
    sl = idx.tolist()
    cnt, fid, fn = state.cnt[idx].tolist(), state.frag_id[idx].tolist(), state.frag_n[idx].tolist()
    per = []
    for j in range(len(spec.aggs)):
        acc = state.acc[j][idx].tolist() if state.acc[j] is not None else [None] * len(sl)
        nn = state.nn[j][idx].tolist() if state.nn[j] is not None else [None] * len(sl)
        od, fr = state.ordered[j], state.frontier[j]
        per.append([(a, n, (tuple(od[s].items()) if od.get(s) else None), fr.get(s))
                    for s, a, n in zip(sl, acc, nn)])
    multi, keys, started = state.frag_multi, state.keys, state.started
    return [(keys[s], started, cnt[i], fid[i], fn[i], (dict(multi[s]) if s in multi else None),
             tuple(p[i] for p in per)) for i, s in enumerate(sl)]


def assemble(spec: AggSpec, records: list, d: Delta | None) -> AggState:
    """A state holding the groups of ``records`` in slots 0..n-1, its types learned from the
    schema of ``d`` (the delta ``step`` will apply; None: no types yet, only for no record)."""
    state = new_state(spec)
    n = len(records)
    if d is not None:
        learn_types(spec, state, d)
    elif n:
        raise InvariantError(f"{spec.name}: records assembled without the input's schema")
    if n == 0:
        return state
    _grow(state, n)
    keys = [r[0] for r in records]
    state.keys[:n] = keys
    state.slot_of = {k: i for i, k in enumerate(keys)}
    state.started = any(r[1] for r in records)
    state.cnt[:n] = [r[2] for r in records]
    state.frag_id[:n] = [r[3] for r in records]
    state.frag_n[:n] = [r[4] for r in records]
    state.frag_multi = {i: dict(r[5]) for i, r in enumerate(records) if r[5] is not None}
    for j in range(len(spec.aggs)):
        col = [r[6][j] for r in records]
        if state.acc[j] is not None:
            state.acc[j][:n] = [0 if c[0] is None else c[0] for c in col]
        if state.nn[j] is not None:
            state.nn[j][:n] = [0 if c[1] is None else c[1] for c in col]
        state.ordered[j] = {i: SortedDict(c[2]) for i, c in enumerate(col) if c[2]}
        state.frontier[j] = {i: c[3] for i, c in enumerate(col) if c[3] is not None}
    return state


def slots_of(state: AggState, keys: list) -> list:
    """The slot of each group key (None for a group the state does not hold)."""
    return [state.slot_of.get(k) for k in keys]


def out_columns(spec: AggSpec) -> list:
    return [o for _, o in spec.group] + [a.out for a in spec.aggs]


def _build(spec, state, rows, ids, w) -> Delta:
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
        sk = np.zeros((len(ids), 0), dtype=np.int64)
    else:
        sk = np.empty(len(ids), dtype=object)
        nb = spec.nbits
        for i, x in enumerate(ids):
            sk[i] = bits_from_ids(x, nb)
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
