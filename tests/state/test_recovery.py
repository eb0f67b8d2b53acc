"""Start-up of a maintainer's engine from the snapshot store: restore the newest consistent
snapshot and catch up from the mirror's change feed, with the same state as a recount; fall
back to the recount, saying why, when the snapshot is absent, undecodable, taken under other
settings, or the change feed no longer covers the gap. No Spark: a local lake (delta-rs)."""

from __future__ import annotations

import shutil

import networkx as nx

from state.snapshot_store import SnapshotStore
from core.config import StateSettings, TrianglesConfig, ViewConfig
from streaming_app.triangles.maintainer import TriangleMaintainer
from streaming_app.views.maintainer import ViewMaintainer
from tests.state.conftest import ctx

GRAPH = TrianglesConfig(name="g", table="edges")


def triangles(live) -> int:
    g = nx.Graph()
    g.add_edges_from(live)
    return sum(nx.triangles(g).values()) // 3


def started(cls, conf, job, every=1):
    m = cls(conf, StateSettings(snapshot_every=every))
    m.recovery.setup(None, job)
    m.engine = m._fresh()
    line = m.recovery.start(None, job, m.engine, m._recount if cls is TriangleMaintainer else m._rebuild)
    return m, line


def test_restore_and_catch_up_equals_recount(mirror):
    for _ in range(3):
        mirror.batch()
    m, line = started(TriangleMaintainer, GRAPH, mirror.job())
    assert "recounted" in line and "no snapshot consistent with the mirrors" in line
    assert m.recovery.after_batch(None, mirror.job(), ctx(3), m.engine, changed=True)
    snap_version = mirror.version
    for _ in range(4):
        mirror.batch()
    r, line = started(TriangleMaintainer, GRAPH, mirror.job())
    assert line.startswith(f"triangles.g: restored from snapshot of batch 3 (mirror v{snap_version}) in ")
    assert "caught up" in line and r.recovery.last_start["caught_up"] > 0
    assert r.source.version == mirror.version
    assert (r.engine.count, r.engine.edges) == (triangles(mirror.live), len(mirror.live))

    view = ViewConfig(name="sp", table="edges", kind="shortest_paths", cost="cost")
    v, _ = started(ViewMaintainer, view, mirror.job())
    v.recovery.after_batch(None, mirror.job(), ctx(7), v.engine, changed=True)
    for _ in range(3):
        mirror.batch()
    v2, line = started(ViewMaintainer, view, mirror.job())
    assert "restored from snapshot of batch 7" in line
    g = nx.DiGraph()
    g.add_weighted_edges_from((u, w, c) for (u, w), c in mirror.live.items())
    want = {(x, y): d for x in g for y, d in nx.single_source_dijkstra_path_length(g, x).items() if y != x}
    got = {k: c for k, (c, _) in v2.engine.view.rows().items() if k[0] != k[1]}
    assert got == want


def test_falls_back_to_the_recount_and_says_why(mirror):
    mirror.batch()
    m, _ = started(TriangleMaintainer, GRAPH, mirror.job())
    m.recovery.after_batch(None, mirror.job(), ctx(0), m.engine, changed=True)
    mirror.batch()
    # other settings: a snapshot of epsilon 0.5 is not used for epsilon 0.3
    other = TrianglesConfig(name="g", table="edges", epsilon=0.3)
    r, line = started(TriangleMaintainer, other, mirror.job())
    assert "recounted" in line and "taken with other settings" in line
    assert r.engine.count == triangles(mirror.live)
    # undecodable bytes under the right name
    store = SnapshotStore(mirror.root)
    store.write("triangles.g", "job:q1", 1, {"edges": mirror.version}, "triangles.engine.v1", b"\0" * 30,
                m.recovery.config)
    r, line = started(TriangleMaintainer, GRAPH, mirror.job())
    assert "recounted" in line and "does not decode" in line
    # an unknown encoding
    store.write("triangles.g", "job:q1", 2, {"edges": mirror.version}, "triangles.engine.v99", b"x",
                m.recovery.config)
    r, line = started(TriangleMaintainer, GRAPH, mirror.job())
    assert "unknown state encoding 'triangles.engine.v99'" in line
    assert r.engine.count == triangles(mirror.live)


def test_falls_back_when_the_change_feed_is_gone(mirror):
    mirror.batch()
    m, _ = started(TriangleMaintainer, GRAPH, mirror.job())
    m.recovery.after_batch(None, mirror.job(), ctx(0), m.engine, changed=True)
    mirror.batch()
    mirror.batch()
    shutil.rmtree(f"{mirror.path}/_change_data")  # as a VACUUM past the retention would
    r, line = started(TriangleMaintainer, GRAPH, mirror.job())
    assert "recounted" in line and "change feed of edges does not cover versions" in line
    assert r.engine.count == triangles(mirror.live)
