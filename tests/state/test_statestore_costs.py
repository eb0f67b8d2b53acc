"""bench/statestore_costs.py's timed processors, without Spark: a timed processor answers as
the processor it wraps, and its counters (keys, rows, state calls, pickling) are what it did.

The state handle is a dict-backed stand-in for pyspark's (the same calls the processors make);
the Spark run of the harness is its smoke check (``python -m bench.statestore_costs``, tiny sizes).
"""

from __future__ import annotations

import json
import pickle

import pytest
from pyspark.sql import Row

import bench.statestore_costs as costs
from operators.keyed import cdc, sketch
from state.statestore import processors as P


class _Value:
    """A ValueState over one slot of a dict (the processors' calls: get/update/clear)."""

    def __init__(self, store: dict, name: str):
        self.store, self.name = store, name

    def get(self):
        return self.store.get(self.name)

    def update(self, v) -> None:
        self.store[self.name] = v

    def clear(self) -> None:
        self.store.pop(self.name, None)


class _Handle:
    def __init__(self, store: dict):
        self.store = store

    def getValueState(self, name, schema):
        return _Value(self.store, name)


@pytest.fixture
def worker(monkeypatch, tmp_path):
    """The harness's worker set-up, undone after the test (its pickling patch is process-wide)."""
    for mod in (P, cdc, sketch):
        monkeypatch.setattr(mod, "pickle", pickle)
    monkeypatch.setattr(costs, "_installed", [False])
    monkeypatch.setenv(costs.ENV, str(tmp_path))
    costs._acc.clear()
    return tmp_path


def _run(proc, store, key, rows):
    proc.init(_Handle(store))
    out = list(proc.handleInputRows(key, iter(rows), None))
    proc.close()
    return out


def test_a_timed_mu_processor_answers_as_the_processor_and_counts_its_calls(worker):
    rows = [Row(k1="f:q", k2="3", kind=P.FRAGMENT, w=2, a=None), Row(k1="f:q", k2="3", kind=P.FRAGMENT, w=-1, a=None)]
    plain, timed = {}, {}
    want = _run(P.MuProcessor(), plain, ("f:q", "3"), rows)
    got = _run(costs.TimedMuProcessor(), timed, ("f:q", "3"), rows)
    assert got == want and timed == plain == {P.MU_STATE: (1,)}
    assert len(got) == 1 and got[0].w == 1  # the fragment entered the sketch: +1
    lines = [json.loads(x) for f in worker.glob("worker-*.jsonl") for x in f.read_text().splitlines()]
    assert len(lines) == 1 and set(lines[0]) == {"mu"}
    mu = lines[0]["mu"]
    assert (mu["keys"], mu["rows"], mu["state_n"], mu["pickle_n"], mu["rows_in_n"]) == (1, 1, 2, 1, 3)
    items = costs.worker_items(lines)["mu"]  # logic: inside less state calls, pickling and input rows
    assert items["logic"] == pytest.approx(max(0.0, mu["inside"] - mu["state"] - mu["pickle"] - mu["rows_in"]))


def test_pass_through_keys_are_counted_apart(worker):
    rows = [Row(k1=P.PASS, k2="0", kind=P.SLICE, w=0, a=b"x")]
    got = _run(costs.TimedMuProcessor(), {}, (P.PASS, "0"), rows)
    assert [tuple(r) for r in got] == [tuple(r) for r in rows]
    lines = [json.loads(x) for f in worker.glob("worker-*.jsonl") for x in f.read_text().splitlines()]
    assert set(lines[0]) == {"mu/pass"}  # not under "mu": rows that only pass through
    assert lines[0]["mu/pass"]["keys"] == 1 and lines[0]["mu/pass"]["rows"] == 1
    assert "state_n" not in lines[0]["mu/pass"]  # a pass-through key makes no state call


def test_breakdown_is_per_record_and_sums_the_operators():
    batch = {"records": 4, "wall_s": 0.01,
             "workers": costs.worker_items([{"cdc": {"inside": 0.004, "state": 0.001, "pickle": 0.001, "keys": 2},
                                             "group": {"inside": 0.002, "state": 0.002}}]),
             "spark": {"cdc": {"rocksdb": 0.0004, "commit": 0.002, "gets": 3, "puts": 1}}}
    b = costs.breakdown([batch, dict(batch)])
    assert b["records"] == 8 and b["batches"] == 2
    assert b["us_per_record"]["logic"] == pytest.approx(2 * (0.002 + 0.0) / 8 * 1e6, abs=0.1)
    assert b["us_per_record"]["state"] == pytest.approx(2 * 0.003 / 8 * 1e6, abs=0.1)
    assert b["us_per_record"]["commit"] == pytest.approx(2 * 0.002 / 8 * 1e6, abs=0.1)
    assert b["us_per_record"]["wall"] == pytest.approx(2 * 0.01 / 8 * 1e6, abs=0.1)
    assert b["per_operator"]["cdc"]["keys"] == pytest.approx(2 * 2 / 8)
