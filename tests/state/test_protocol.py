"""Every engine adapter implements state.protocol.Engine: apply signed deltas, snapshot to
(encoding, bytes), restore them into an equal state, refuse unknown encodings and bad bytes."""

from __future__ import annotations

import networkx as nx
import pyarrow as pa
import pytest

from core.errors import StateError
from operators.sketch import SketchMaintainer
from operators.sketch.partition import RangePartition
from state.engines import SketchEngine, TriangleEngine, ViewEngine
from state.protocol import Engine, by_version, ordered


def delta(rows, version=None):
    """rows: (src, dst, cost, weight)."""
    cols = {"src": [r[0] for r in rows], "dst": [r[1] for r in rows], "cost": [float(r[2]) for r in rows],
            "__weight": pa.array([r[3] for r in rows], pa.int64())}
    if version is not None:
        cols["__version"] = pa.array(version, pa.int64())
    return {"edges": pa.table(cols)}


EDGES = [(1, 2, 1, 1), (2, 3, 1, 1), (3, 1, 5, 1), (3, 4, 1, 1), (4, 1, 1, 1), (1, 1, 1, 1)]


def test_every_adapter_is_an_engine():
    sk = SketchEngine(SketchMaintainer.from_sql("SELECT a FROM t WHERE a > 1", {"t": RangePartition("a", [0, 5, 10])}))
    for e in (TriangleEngine("edges", "src", "dst"), ViewEngine("edges", "reachability", "src", "dst"), sk):
        assert isinstance(e, Engine)


def test_triangles_round_trip_and_refusals():
    e = TriangleEngine("edges", "src", "dst")
    bad = e.apply(delta(EDGES))
    assert [(b.src, b.dst) for b in bad] == [(1, 1)]  # self-loop rejected
    assert (e.count, e.edges) == (2, 5)
    enc, data = e.snapshot()
    assert enc == "triangles.engine.v2"
    r = TriangleEngine("edges", "src", "dst")
    r.restore(enc, data)
    assert (r.count, r.edges) == (2, 5)
    r.apply(delta([(2, 4, 1, 1)]))  # closes {1, 2, 4} and {2, 3, 4}
    assert r.count == 4 and e.count == 2
    with pytest.raises(StateError, match="unknown state encoding 'triangles.engine.v0'"):
        r.restore("triangles.engine.v0", data)
    with pytest.raises(StateError):
        r.restore(enc, data[:40])
    with pytest.raises(StateError, match="epsilon"):
        TriangleEngine("edges", "src", "dst", epsilon=0.3).restore(enc, data)


def test_changes_of_several_commits_apply_in_commit_order():
    # commit 5 inserts (1,2), commit 6 deletes it, commit 7 inserts it again with another cost
    rows = [(1, 2, 1, 1), (1, 2, 1, -1), (1, 2, 3, 1), (2, 3, 1, 1), (3, 1, 1, 1)]
    d = delta(rows, version=[5, 6, 7, 5, 5])
    assert ordered(d["edges"]).column("__version").to_pylist() == [5, 5, 5, 6, 7]
    assert [p.num_rows for p in by_version(d["edges"])] == [3, 1, 1]
    t = TriangleEngine("edges", "src", "dst")
    assert t.apply(d) == [] and t.count == 1 and t.edges == 3
    v = ViewEngine("edges", "shortest_paths", "src", "dst", cost="cost")
    out = v.apply(d)
    assert v.view.rows()[(1, 2)][0] == 3.0 and out.added[(1, 2)][0] == 3.0


def test_views_round_trip_and_refusals():
    for kind in ("reachability", "shortest_paths"):
        e = ViewEngine("edges", kind, "src", "dst", cost="cost")
        e.apply(delta(EDGES))
        enc, data = e.snapshot()
        r = ViewEngine("edges", kind, "src", "dst", cost="cost")
        r.restore(enc, data)
        assert r.view.rows() == e.view.rows()
        r.apply(delta([(4, 1, 1, -1)]))
        e.apply(delta([(4, 1, 1, -1)]))
        assert r.view.rows() == e.view.rows()
        with pytest.raises(StateError, match="unknown state encoding"):
            r.restore("ivmstream.recursive.v0", data)
    reach = ViewEngine("edges", "reachability", "src", "dst")
    reach.apply(delta(EDGES))
    with pytest.raises(StateError):  # a reachability snapshot is not a shortest-path state
        ViewEngine("edges", "shortest_paths", "src", "dst", cost="cost").restore(*reach.snapshot())
    g = nx.DiGraph([(r[0], r[1]) for r in EDGES])
    assert reach.view.rows() == {(x, y) for x in g for y in nx.descendants(g, x)} | {(1, 1), (2, 2), (3, 3), (4, 4)}


def test_sketch_engine_round_trip():
    part = {"t": RangePartition("a", [0, 5, 10, 15])}
    m = SketchMaintainer.from_sql("SELECT a FROM t WHERE a > 6", part)
    m.initialize({"t": pa.table({"a": [1, 7, 12]})})
    e = SketchEngine(m)
    enc, data = e.snapshot()
    r = SketchEngine()
    r.restore(enc, data)
    d = {"t": pa.table({"a": [7], "__weight": pa.array([-1], pa.int64()), "__version": pa.array([3], pa.int64())})}
    assert r.maintainer.sketch == m.sketch
    out = r.apply(d)
    assert out.removed["t"] == {1} and r.maintainer.sketch["t"] == [2]
    with pytest.raises(StateError, match="unknown state encoding"):
        r.restore("sketch.maintainer.v9", data)


def test_triangles_engine_reads_its_v1_encoding():
    """``triangles.engine.v1`` (row count + ``triangles.ivm_eps.v1`` bytes, the store's rows of
    earlier builds) restores; the next snapshot is v2."""
    import struct
    from pathlib import Path

    v1 = (Path(__file__).parents[1] / "triangles" / "fixtures" / "ivm_eps_v1_undirected.bin").read_bytes()
    e = TriangleEngine("edges", "src", "dst")
    e.restore("triangles.engine.v1", struct.pack("<q", 41) + v1)
    assert (e.count, e.edges) == (313, 41)
    assert e.snapshot()[0] == "triangles.engine.v2"
