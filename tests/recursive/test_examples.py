"""The digest's worked examples (§4, §10 O1–O7) as oracles for the recursive views."""

from __future__ import annotations

import pytest

from core.errors import ConfigError, IvmError
from bench.recursive_research import (
    DRedReachabilityView,
    ReachabilityView,
    RecomputeReachabilityView,
    RegionView,
    ShortestPathView,
)
from bench.recursive_research.provenance import Provenance, ProvTable

FIG3 = [("A", "B"), ("B", "C"), ("C", "A"), ("C", "B")]  # p1, p2, p3, p4
P1, P2, P3, P4 = "A→B", "B→C", "C→A", "C→B"


def witnesses(s: str) -> set[frozenset[str]]:
    """Parse explain() output back into its set of minimal witnesses."""
    if s == "false":
        return set()
    terms = s.split(" ∨ ")
    if len(terms) > 1:
        terms = [t[1:-1] for t in terms]  # each term is parenthesised when there are several
    return {frozenset(t.split(" ∧ ")) for t in terms}


def W(*terms):
    return {frozenset(t) for t in terms}


O1 = {
    ("A", "A"): W((P1, P2, P3)),
    ("A", "B"): W((P1,)),
    ("A", "C"): W((P1, P2)),
    ("B", "A"): W((P2, P3)),
    ("B", "B"): W((P2, P4), (P1, P2, P3)),
    ("B", "C"): W((P2,)),
    ("C", "A"): W((P3,)),
    ("C", "B"): W((P4,), (P1, P3)),
    ("C", "C"): W((P2, P4), (P1, P2, P3)),
}


def table(view, complete: bool = True) -> dict:
    return {row: witnesses(view.explain(row, complete=complete)) for row in view.rows()}


def implied(kept: dict, full: dict) -> bool:
    """Lazy provenance: every kept witness contains a minimal one, and every row keeps one."""
    return kept.keys() == full.keys() and all(
        kept[r] and all(any(m <= w for m in full[r]) for w in kept[r]) for r in kept)


@pytest.mark.parametrize("ship", ["lazy", "eager", "plain"])
@pytest.mark.parametrize("nodes", ["vertex", 1, 2])
def test_o1_final_provenance(ship, nodes):
    v = ReachabilityView(nodes=nodes, ship=ship)
    delta = v.apply(FIG3)
    assert delta.added == set(O1) and delta.removed == set()
    assert table(v) == O1
    kept = table(v, complete=False)
    assert kept == O1 if ship != "lazy" else implied(kept, O1)


def test_explain_format():
    v = ReachabilityView()  # the default: one witness derived on demand (fewest hops), all on request
    v.apply([("a", "b"), ("b", "c"), ("a", "c")])
    assert v.explain(("a", "c")) == "a→c"
    assert v.explain(("a", "c"), complete=True) == "(a→c) ∨ (a→b ∧ b→c)"
    v.apply(deletes=[("a", "c")])
    assert v.explain(("a", "c")) == "a→b ∧ b→c"
    assert v.explain(("a", "b")) == "a→b"
    assert v.explain(("c", "a")) == "false" and v.explain(("c", "a"), complete=True) == "false"
    lazy = ReachabilityView(nodes=2)  # the provenance engine keeps the witnesses that reached the row
    lazy.apply([("a", "b"), ("b", "c"), ("a", "c")])
    assert lazy.explain(("a", "c")) == "(a→c) ∨ (a→b ∧ b→c)"


def test_o2_absorption_and_canonicity():
    prov = Provenance()
    p = {i: prov.var(prov.fresh(f"p{i}")) for i in range(1, 5)}
    t = ProvTable(prov)
    assert t.merge(("A", "B"), p[1])
    assert not t.merge(("A", "B"), p[1] & p[2] & p[4])  # (a) absorbed: nothing to emit
    assert t.merge(("B", "B"), p[2] & p[4])
    assert t.merge(("B", "B"), p[1] & p[2] & p[3])  # (b) a new witness changes P
    assert t.get(("B", "B")) == (p[2] & p[4]) | (p[1] & p[2] & p[3])
    assert (p[1] | (p[1] & p[2] & p[4])) == p[1]  # (c)
    assert (p[4] | (p[1] & p[3]) | (p[1] & p[3] & p[4])) == (p[4] | (p[1] & p[3]))


def test_o3_delete_p4_removes_nothing():
    v = ReachabilityView(nodes="vertex")
    v.apply(FIG3)
    delta = v.apply(deletes=[("C", "B")])
    assert not delta
    want = dict(O1)
    want[("B", "B")] = W((P1, P2, P3))
    want[("C", "B")] = W((P1, P3))
    want[("C", "C")] = W((P1, P2, P3))
    assert table(v) == want


def test_o3_delete_p1():
    v = ReachabilityView(nodes="vertex")
    v.apply(FIG3)
    delta = v.apply(deletes=[("A", "B")])
    assert delta.removed == {("A", "A"), ("A", "B"), ("A", "C")} and not delta.added
    assert table(v) == {
        ("B", "A"): W((P2, P3)), ("B", "B"): W((P2, P4)), ("B", "C"): W((P2,)),
        ("C", "A"): W((P3,)), ("C", "B"): W((P4,)), ("C", "C"): W((P2, P4)),
    }


def test_o3_delete_p4_then_p3():
    v = ReachabilityView(nodes="vertex", ship="eager")
    v.apply(FIG3)
    v.apply(deletes=[("C", "B")])
    v.apply(deletes=[("C", "A")])
    assert table(v) == {("A", "B"): W((P1,)), ("A", "C"): W((P1, P2)), ("B", "C"): W((P2,))}


def test_o3_reinsert_gets_fresh_variable():
    v = ReachabilityView(nodes="vertex")
    v.apply(FIG3)
    var_before = v._front.store.live[("C", "B")][0]
    v.apply(deletes=[("C", "B")])
    v.apply(inserts=[("C", "B")])
    assert v._front.store.live[("C", "B")][0] != var_before
    assert table(v) == O1  # same table, p4 renamed (same label)


def test_o4_message_counts():
    counts = {}
    for ship in ("plain", "lazy"):
        v = ReachabilityView(nodes="vertex", ship=ship)
        v.apply(FIG3)
        counts[ship] = v.stats()["tuples_shipped"]
    d = DRedReachabilityView(nodes="vertex")
    d.apply(FIG3)
    counts["set"] = d.stats()["tuples_shipped"]
    assert counts == {"plain": 20, "lazy": 16, "set": 16}


def test_o4_dred_overdeletes_everything_absorption_does_not():
    d = DRedReachabilityView(nodes="vertex")
    d.apply(FIG3)
    before = d.stats()["tuples_shipped"]
    delta = d.apply(deletes=[("C", "B")])
    s = d.stats()
    assert not delta and len(d.rows()) == 9
    assert s["overdeleted"] == 9  # the whole view is emptied, then re-derived
    dred_shipped = s["tuples_shipped"] - before
    a = ReachabilityView(nodes="vertex")
    a.apply(FIG3)
    before = a.stats()["tuples_shipped"]
    a.apply(deletes=[("C", "B")])
    s = a.stats()
    assert s["deletion_broadcasts"] == 2  # the paper: zeroing p4 "only requires two message transmissions"
    assert s.get("removed", 0) == 1  # only reachable(C,B) loses its shipped derivation ...
    assert s["reships"] >= 1  # ... and the buffered alternative replaces it
    assert s["tuples_shipped"] - before < dred_shipped


def test_o5_shortest_paths_and_delete():
    links = [("A", "B", 1), ("B", "C", 1), ("A", "C", 5), ("C", "A", 1)]
    v = ShortestPathView(nodes="vertex")
    v.apply(links)
    want = {
        ("A", "A"): (3, ("A", "B", "C", "A")), ("A", "B"): (1, ("A", "B")),
        ("A", "C"): (2, ("A", "B", "C")), ("B", "A"): (2, ("B", "C", "A")),
        ("B", "B"): (3, ("B", "C", "A", "B")), ("B", "C"): (1, ("B", "C")),
        ("C", "A"): (1, ("C", "A")), ("C", "B"): (2, ("C", "A", "B")),
        ("C", "C"): (3, ("C", "A", "B", "C")),
    }
    assert v.rows() == want
    assert witnesses(v.explain(("A", "C"))) == W(("A→B", "B→C"))
    delta = v.apply(deletes=[("B", "C")])
    rows = v.rows()
    assert not any(k[0] == "B" for k in rows)
    assert rows[("A", "C")] == (5, ("A", "C"))  # promoted from AggSel's kept tuples
    assert rows[("A", "A")] == (6, ("A", "C", "A")) and rows[("C", "C")] == (6, ("C", "A", "C"))
    for k in [("A", "B"), ("C", "A"), ("C", "B")]:
        assert rows[k] == want[k] and k not in delta.added and k not in delta.removed
    assert delta.removed[("A", "C")] == (2, ("A", "B", "C")) and delta.added[("A", "C")] == (5, ("A", "C"))
    assert v.stats()["promotions"] >= 1


@pytest.mark.parametrize("order", [0, 1])
def test_o5_aggsel_prunes_non_minimal(order):
    # the cost-5 direct path is pruned if the cost-2 path is already there, kept otherwise
    first = [("A", "B", 1), ("B", "C", 1)] if order == 0 else [("A", "C", 5)]
    second = [("A", "C", 5)] if order == 0 else [("A", "B", 1), ("B", "C", 1)]
    v = ShortestPathView(nodes=2)  # the provenance engine's AggSel (the default keeps no alternatives)
    v.apply(first)
    d = v.apply(second)
    assert v.rows()[("A", "C")] == (2, ("A", "B", "C"))
    if order == 0:
        assert ("A", "C") not in d.added and v.stats()["pruned"] >= 1
    else:
        assert d.removed[("A", "C")] == (5, ("A", "C")) and d.added[("A", "C")] == (2, ("A", "B", "C"))


def test_o5_terminates_on_cycles():
    ring = [(i, (i + 1) % 6, 1 + i % 2) for i in range(6)] + [(i, (i + 2) % 6, 3) for i in range(6)]
    v = ShortestPathView(nodes=3)
    v.apply(ring)
    assert len(v.rows()) == 36


O6 = [("sensor", "s1", (0,)), ("sensor", "s2", (10,)), ("sensor", "s3", (20,)),
      ("sensor", "s4", (45,)), ("seed", "r1", "s1"), ("trigger", "s1"), ("trigger", "s2")]


def test_o6_region_literal_reading():
    v = RegionView(k=20)
    v.apply(O6)
    assert v.rows() == {("r1", "s1"), ("r1", "s2"), ("r1", "s3")}
    S = lambda i: f"sensor(s{i})"  # noqa: E731
    T = lambda i: f"trigger(s{i})"  # noqa: E731
    m = "seed(r1,s1)"
    assert witnesses(v.explain(("r1", "s1"))) == W((S(1), m, T(1)))
    assert witnesses(v.explain(("r1", "s2"))) == W((m, S(1), S(2), T(1)))
    assert witnesses(v.explain(("r1", "s3"))) == W((m, S(1), S(2), S(3), T(1), T(2)))
    assert v.sizes() == {"r1": 3} and v.largest() == (3, {"r1"})
    d = v.apply(deletes=[("trigger", "s2")])
    assert d.removed == {("r1", "s3")} and v.sizes() == {"r1": 2}


def test_o6_region_triggered_reading():
    v = RegionView(k=20, reading="triggered")
    v.apply(O6)
    assert v.sizes() == {"r1": 2}


def test_o7_expiry_is_a_deletion():
    v = ReachabilityView(nodes="vertex")
    v.apply(FIG3[:3] + [("C", "B", None, 10)])
    assert not v.apply(now=9)
    assert table(v) == O1
    assert not v.apply(now=10)  # expires_at <= now: gone, with the same outcome as O3's delete
    want = dict(O1)
    want[("B", "B")] = W((P1, P2, P3))
    want[("C", "B")] = W((P1, P3))
    want[("C", "C")] = W((P1, P2, P3))
    assert table(v) == want
    assert v.stats()["deleted_vars"] == 1


def test_refresh_extends_expiry():
    v = ReachabilityView()
    v.apply([("a", "b", None, 5)])
    v.apply([("a", "b", None, 8)], now=6)
    assert v.rows() == {("a", "b")}
    assert v.apply(now=8).removed == {("a", "b")}


def test_baselines_agree_on_fig3():
    rows = []
    for cls in (ReachabilityView, DRedReachabilityView, RecomputeReachabilityView):
        v = cls(nodes=2)
        v.apply(FIG3)
        v.apply(deletes=[("A", "B")])
        rows.append(v.rows())
        assert table(v)[("B", "B")] == W((P2, P4))
    assert rows[0] == rows[1] == rows[2]


def test_bad_input():
    v = ShortestPathView()
    v.apply([("a", "b", 2)])
    with pytest.raises(IvmError) as e:
        v.apply([("b", "c", 1), ("a", "b", -1)], deletes=[("a", "b")])
    assert e.value.code == "DATA_BAD_EDGE"
    assert v.rows() == {("a", "b"): (2, ("a", "b"))}  # the bad batch left no trace
    assert v.apply([("b", "c", 1)]).added == {("a", "c"): (3, ("a", "b", "c")), ("b", "c"): (1, ("b", "c"))}
    with pytest.raises(IvmError):
        RegionView().apply([("sensor", 1, "here")])
    with pytest.raises(IvmError):
        ReachabilityView().apply([("a",)])
    with pytest.raises(ConfigError):
        ReachabilityView(ship="fast")
    with pytest.raises(ConfigError):
        RegionView(reading="maybe")


def test_stats_and_partitioning():
    one, many = ReachabilityView(nodes=1, ship="eager"), ReachabilityView(nodes=4)
    for v in (one, many):
        v.apply([(i, i + 1) for i in range(12)])
    s1, s4 = one.stats(), many.stats()
    assert s1.get("tuples_shipped", 0) == 0 and s1["local_messages"] > 0  # one node: nothing crosses
    assert s4["tuples_shipped"] > 0 and s4["prov_bytes_shipped"] >= 12 * s4["tuples_shipped"]
    assert s1["derivations"] == s4["derivations"] == 78 - 12  # a chain: one derivation per non-base row
    assert s1["rows"] == s4["rows"] == 78
    many.apply(deletes=[(5, 6)])
    s = many.stats()
    assert s["deleted_vars"] == 1 and s["deletion_broadcasts"] == 3 and s["removed"] == 6 * 7


def _path_engine(with_aggsel: bool):
    from dataclasses import replace

    from bench.recursive_research.engine import Engine
    from operators.recursive.spec import SHORTEST

    # paths with cycles allowed: only AggSel can stop the recursion (digest O5, termination)
    spec = replace(SHORTEST, combine=lambda e, r: (e[0], r[1], e[2] + r[2], (e[0],) + r[3]))
    if not with_aggsel:
        spec = replace(spec, group=None, rank=None)
    prov = Provenance()
    eng = Engine(spec, prov, nodes=2, max_rounds=200)
    for i, (a, b, c) in enumerate([("A", "B", 1), ("B", "A", 1), ("B", "C", 2)]):
        pv = prov.var(prov.fresh(f"{a}→{b}"))
        eng.insert_base((a, b, c, (a, b)), pv)
        eng.insert_edge((a, b, c), pv)
    return eng


def test_o5_without_aggsel_path_does_not_terminate():
    from core.errors import InvariantError

    with pytest.raises(InvariantError):
        _path_engine(with_aggsel=False).run()
    eng = _path_engine(with_aggsel=True)
    eng.run()
    best = {(r[0], r[1]): (r[2], r[3]) for r in eng.view_tuples()}
    assert best[("A", "C")] == (3, ("A", "B", "C")) and best[("A", "A")] == (2, ("A", "B", "A"))
    assert eng.stats["pruned"] > 0


def test_o5_multi_aggsel_keeps_cheapest_and_fewest_hops():
    links = [("A", "B", 1), ("B", "C", 1), ("A", "C", 5), ("C", "A", 1)]
    v = ShortestPathView(nodes="vertex", aggregates=("cost", "hops"))
    v.apply(links)
    hops = v.fewest_hops()
    assert v.rows()[("A", "C")] == (2, ("A", "B", "C")) and hops[("A", "C")] == (1, ("A", "C"))
    # shortestCheapestPath(A,C) = (A.B.C, 2, A.C, 1)
    assert (v.rows()[("A", "C")][1], v.rows()[("A", "C")][0]) + hops[("A", "C")][::-1] == \
        (("A", "B", "C"), 2, ("A", "C"), 1)
    assert hops[("A", "A")] == (2, ("A", "C", "A")) and hops[("C", "C")] == (2, ("C", "A", "C"))
    assert hops[("B", "B")] == (3, ("B", "C", "A", "B"))
    single = ShortestPathView(nodes="vertex")
    single.apply(links)
    assert single.rows() == v.rows()
    d = v.apply(deletes=[("A", "C")])
    assert not d  # the cheapest paths never used A→C
    assert v.fewest_hops()[("A", "C")] == (2, ("A", "B", "C"))
    with pytest.raises(ConfigError):
        single.fewest_hops()
    with pytest.raises(ConfigError):
        ShortestPathView(aggregates=("hops",))
