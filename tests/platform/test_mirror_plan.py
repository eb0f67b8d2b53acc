"""core.mirror_plan against a row-by-row replay of the same events (no Spark).

The oracle applies each event to a dict in log order, as PostgreSQL did: truncate empties
the table, a TOASTed column keeps the value of the row that is there (or, for the create of
a primary-key change, of the old key's row just deleted), and an event whose kept value does
not exist is rejected and changes nothing (unless a later truncate erases it anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from core.mirror_plan import plan_table
from core import errors as E


@dataclass(frozen=True)
class Ev:
    op: str
    key: tuple
    after: dict | None = None
    unavailable: frozenset = frozenset()
    old_key: tuple | None = None


def _row(k, a, b):
    return {"id": k[0], "a": a, "b": b}


def oracle(mirror: dict, history: dict, events: list[Ev]):
    db = dict(mirror)
    last = dict(history)  # key -> the image its newest delete removed (before the batch)
    last.update(db)
    rejected = []
    for ev in events:
        if ev.op == "t":  # every row goes, and what came before can no longer be seen
            db.clear()
            last.clear()
            rejected.clear()
            continue
        if ev.op == "d":
            if ev.key in db:
                last[ev.key] = db.pop(ev.key)
            continue
        row = dict(ev.after)
        if ev.unavailable:
            if ev.old_key is not None:
                prior = db.get(ev.old_key) or last.get(ev.old_key)
            else:
                prior = db.get(ev.key)
            if prior is None:
                rejected.append(ev)
                continue
            for c in ev.unavailable:
                row[c] = prior[c]
        db[ev.key] = row
        last[ev.key] = row
    return db, rejected


keys = st.integers(0, 5).map(lambda i: (i,))
vals = st.integers(0, 3)


@st.composite
def histories(draw):
    mirror = {k: _row(k, draw(vals), draw(vals)) for k in draw(st.sets(keys, max_size=4))}
    gone = {k: _row(k, draw(vals), draw(vals)) for k in draw(st.sets(keys, max_size=3)) if k not in mirror}
    events = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["c", "u", "u_toast", "d", "t", "pk_toast"]))
        k = draw(keys)
        if kind in ("c", "u"):
            events.append(Ev(kind, k, _row(k, draw(vals), draw(vals))))
        elif kind == "u_toast":
            cols = draw(st.sets(st.sampled_from(["a", "b"]), min_size=1))
            after = _row(k, None if "a" in cols else draw(vals), None if "b" in cols else draw(vals))
            events.append(Ev("u", k, after, frozenset(cols)))
        elif kind == "d":
            events.append(Ev("d", k))
        elif kind == "t":
            events.append(Ev("t", ()))
        else:
            old = draw(keys.filter(lambda o: o != k))
            events.append(Ev("d", old))
            events.append(Ev("c", k, _row(k, None, draw(vals)), frozenset({"a"}), old_key=old))
    return mirror, gone, events


def _lookup(mirror, gone, calls):
    def lookup(ks):
        calls.append(set(ks))
        return ({k: mirror[k] for k in ks if k in mirror}, {k: gone[k] for k in ks if k in gone and k not in mirror})
    return lookup


@settings(max_examples=400, deadline=None)
@given(histories())
def test_plan_equals_row_by_row_replay(h):
    mirror, gone, events = h
    calls: list = []
    plan = plan_table(events, _lookup(mirror, gone, calls))
    got = {} if plan.truncate else dict(mirror)
    for k, row in plan.final.items():
        if row is None:
            got.pop(k, None)
        else:
            got[k] = row
    want, rejected = oracle(mirror, gone, events)
    assert got == want
    assert [ev for ev, _, _ in plan.rejected] == rejected
    assert all(code == E.DATA_TOAST_UNKNOWN for _, code, _ in plan.rejected)
    assert len(calls) <= 1  # one mirror read per batch and table at most


def test_truncate_keeps_only_what_follows_and_needs_no_lookup():
    ev = [Ev("c", (1,), _row((1,), 1, 1)), Ev("t", ()), Ev("c", (2,), _row((2,), 2, 2)),
          Ev("u", (2,), _row((2,), None, 3), frozenset({"a"}))]
    calls: list = []
    plan = plan_table(ev, _lookup({(9,): _row((9,), 0, 0)}, {}, calls))
    assert plan.truncate and plan.final == {(2,): _row((2,), 2, 3)} and not calls and plan.toast_filled == 1


def test_toast_on_unknown_row_is_rejected_with_its_code():
    plan = plan_table([Ev("u", (1,), _row((1,), None, 5), frozenset({"a"}))], _lookup({}, {}, []))
    assert plan.final == {} and [c for _, c, _ in plan.rejected] == [E.DATA_TOAST_UNKNOWN]
