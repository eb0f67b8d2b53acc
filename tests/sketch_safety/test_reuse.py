"""PBDS §7 reuse (Ex. 8 and the interval form of §9.5), the SketchStore and self-tuning."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from operators.sketch import RangePartition
from tests.oracles.sketch_reference import reference_result, reference_sketch
from bench.sketch_reuse import SelfTuner, SketchStore, reusable, template_of

SCHEMA = {"cities": ["popden", "city", "state"]}
EX8 = "SELECT state, count(*) AS cnt FROM cities WHERE popden > {} GROUP BY state HAVING count(*) > {}"


def _reuse(a, b, sql=EX8, schema=SCHEMA, stats=None):
    return reusable(template_of(sql.format(*a)), template_of(sql.format(*b)), schema, stats)[0]


def test_template_binding():
    inst = template_of(EX8.format(100, 10))
    assert inst.binding == (100, 10)
    assert inst.template == template_of(EX8.format(3, 4)).template
    assert "100" not in inst.template and not inst.topk


def test_ex8_reuse_direction():
    assert _reuse((100, 10), (100, 15))
    assert not _reuse((100, 15), (100, 10))


def test_selection_constants_contain():
    assert _reuse((100, 10), (200, 10))  # fewer rows per group, fewer groups: contained
    assert not _reuse((200, 10), (100, 10))  # bigger groups: not contained
    assert not _reuse((100, 10), (200, 5))  # lower HAVING threshold: not contained
    # with statistics popden >= 1500 both selections are vacuous, so the reverse is fine too
    stats = {"cities": {"popden": (1500, 7000)}}
    assert _reuse((200, 10), (100, 10), stats=stats)


def test_interval_template():
    q = ("SELECT u, count(*) AS n FROM c WHERE d >= {} AND d < {} GROUP BY u HAVING count(*) >= {}")
    schema = {"c": ["u", "d"]}
    assert _reuse((1, 10, 5), (2, 8, 6), q, schema)  # [2,8) ⊆ [1,10), [6,∞) ⊆ [5,∞)
    assert not _reuse((1, 10, 5), (0, 8, 6), q, schema)
    assert not _reuse((1, 10, 5), (2, 8, 4), q, schema)


def test_sum_over_negative_values_reverses():
    q = "SELECT state, sum(popden) AS s FROM cities WHERE popden < {} GROUP BY state HAVING sum(popden) < {}"
    # popden < 0: a smaller group has a larger (less negative) sum
    assert _reuse((0, -10), (-5, -20), q)
    assert not _reuse((0, -20), (0, -10), q)


def test_topk_only_identical_bindings():
    q = "SELECT state, sum(popden) AS s FROM cities WHERE popden > {} GROUP BY state ORDER BY s DESC LIMIT {}"
    assert template_of(q.format(1, 2)).topk
    assert _reuse((1, 2), (1, 2), q)
    assert not _reuse((1, 2), (1, 1), q)
    assert not _reuse((1, 2), (5, 2), q)


def test_reuse_is_sound_on_data(cities):
    """The (100, 1) sketch answers the (4000, 1) instance exactly."""
    q = EX8.replace("count(*) > {}", "count(*) >= {}")
    part = RangePartition("popden", [1000, 3000, 5000, 6500, 9001])
    ids = reference_sketch(q.format(100, 1), cities, {"cities": part})["cities"]
    assert _reuse((100, 1), (4000, 1), q)
    import pyarrow as pa
    import pyarrow.compute as pc
    frag = pa.array(part.fragment_of(cities["cities"].column("popden")))
    sub = cities["cities"].filter(pc.is_in(frag, pa.array(ids, type=frag.type)))
    q2 = q.format(4000, 1)
    key = lambda t: sorted(t.to_pylist(), key=repr)
    assert key(reference_result(q2, {"cities": sub})) == key(reference_result(q2, cities))


def _store():
    store = SketchStore(SCHEMA)
    part = {"cities": RangePartition("popden", [0, 10, 20, 30])}
    store.add(EX8.format(100, 10), {"cities": [0, 1, 2]}, part, size=30)
    store.add(EX8.format(100, 12), {"cities": [1]}, part, size=10)
    return store, part


def test_store_lookup_smallest_reusable():
    store, _ = _store()
    assert len(store) == 2
    hit = store.lookup(EX8.format(100, 15))
    assert hit is not None and hit.instance.binding == (100, 12) and hit.uses == 1
    assert store.lookup(EX8.format(100, 11)).instance.binding == (100, 10)
    assert store.lookup(EX8.format(100, 5)) is None
    assert store.lookup("SELECT state FROM cities WHERE popden > 3") is None


def _tuner(strategy, t=3):
    captured = []
    part = {"cities": RangePartition("popden", [0, 10, 20, 30])}

    def choose(sql):
        return None if "avg(" in sql else part

    def capture(sql, parts):
        captured.append(sql)
        return {"cities": [1]}, 10

    return SelfTuner(SketchStore(SCHEMA), strategy, t, choose, capture), captured


def test_eager_captures_on_every_miss():
    tuner, captured = _tuner("eager")
    actions = [tuner.observe(EX8.format(100, c)).action for c in (10, 15, 5, 12, 5)]
    assert actions == ["capture", "use", "capture", "use", "use"]
    assert captured == [EX8.format(100, 10), EX8.format(100, 5)]


def test_adaptive_waits_for_t_would_have_helped():
    tuner, captured = _tuner("adaptive", t=3)
    seq = [(100, 10), (100, 20), (100, 30), (100, 40), (100, 11)]
    decisions = [tuner.observe(EX8.format(*b)) for b in seq]
    # (100,10)'s sketch could have served every later instance: at the third sighting it is
    # captured, and it serves (100,40) and (100,11) afterwards
    assert [d.action for d in decisions] == ["none", "none", "capture", "use", "use"]
    assert tuner.observe(EX8.format(100, 5)).action == "none"  # not contained: a new candidate
    assert captured == [EX8.format(100, 10)]
    assert decisions[2].sketch is not None and decisions[3].sketch.instance.binding == (100, 10)


def test_tuner_without_safe_attribute_and_config():
    tuner, captured = _tuner("eager")
    q = "SELECT state, avg(popden) AS a FROM cities WHERE popden > 1 GROUP BY state ORDER BY a DESC LIMIT 1"
    assert tuner.observe(q).action == "none" and not captured
    with pytest.raises(ConfigError):
        SelfTuner(SketchStore(SCHEMA), "lazy")
    with pytest.raises(ConfigError):
        SelfTuner(SketchStore(SCHEMA), "adaptive", t=0)


# -- randomized: a reuse verdict never changes the new instance's result ---------------------

REUSE_TEMPLATES = [
    "SELECT a, count(*) AS n FROM r WHERE b > {} GROUP BY a HAVING count(*) > {}",
    "SELECT a, sum(c) AS s FROM r WHERE b >= {} AND b < {} GROUP BY a HAVING sum(c) >= {}",
    "SELECT a, max(c) AS m FROM r WHERE b < {} GROUP BY a HAVING max(c) > {}",
    "SELECT a, min(c) AS m FROM r WHERE b > {} GROUP BY a HAVING min(c) < {}",
    "SELECT b, c FROM r WHERE b > {} AND c < {}",
    "SELECT DISTINCT a FROM r WHERE c >= {}",
]


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_reuse_is_sound_on_random_data(data):
    import pyarrow as pa
    import pyarrow.compute as pc

    draw = data.draw
    n = draw(st.integers(1, 14))
    ints = lambda lo, hi: st.lists(st.integers(lo, hi), min_size=n, max_size=n)  # noqa: E731
    c_lo = draw(st.sampled_from([0, -4]))
    r = pa.table({"a": draw(ints(0, 3)), "b": draw(ints(0, 9)), "c": draw(ints(c_lo, 9))})
    tables = {"r": r}
    template = draw(st.sampled_from(REUSE_TEMPLATES))
    k = template.count("{}")
    q = template.format(*draw(st.lists(st.integers(-2, 10), min_size=k, max_size=k)))
    q2 = template.format(*draw(st.lists(st.integers(-2, 10), min_size=k, max_size=k)))
    attr = draw(st.sampled_from(["a", "b", "c"]))
    bounds = sorted(set(draw(st.lists(st.integers(-4, 10), min_size=2, max_size=6))) | {-4, 11})
    part = RangePartition(attr, bounds)
    schema = {"r": ["a", "b", "c"]}
    from operators.sketch_safety import check_safety, stats_of

    if not check_safety(q, "r", attr, tables=tables).safe:
        event("attribute not safe for Q")
        return
    if not reusable(template_of(q), template_of(q2), schema, stats_of(tables))[0]:
        event("not reusable")
        return
    event("reused: result compared")
    ids = reference_sketch(q, tables, {"r": part})["r"]
    frag = pa.array(part.fragment_of(r.column(attr)))
    sub = r.filter(pc.is_in(frag, pa.array(ids, type=frag.type)))
    key = lambda t: sorted(map(repr, t.to_pylist()))  # noqa: E731
    assert key(reference_result(q2, {"r": sub})) == key(reference_result(q2, tables)), (q, q2, attr, bounds, r.to_pylist())
