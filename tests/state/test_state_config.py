"""``[state]``: snapshot_every, backend and cdc_buckets are read with their defaults; a bad value
is a one-line error; so are bad ``[[sketches]] boundaries``."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from streaming_app.settings import parse_config
from streaming_app.maintainers import maintainers_for

BASE = {"tables": [{"name": "edges", "topic": "t.edges", "primary_key": ["src", "dst"],
                    "columns": {"src": "long", "dst": "long"}}],
        "graphs": [{"name": "g", "table": "edges"}], "views": [{"name": "r", "table": "edges"}]}


def test_default_and_value_reach_the_graph_maintainers():
    assert parse_config(BASE).state.snapshot_every == 10
    cfg = parse_config({**BASE, "state": {"snapshot_every": 3}})
    assert cfg.state.snapshot_every == 3
    graph = [m for m in maintainers_for(cfg) if m.name in ("triangles.g", "view.r")]
    assert [m.recovery.every for m in graph] == [3, 3]


@pytest.mark.parametrize("state, needle", [
    ({"snapshot_every": 0}, "[state]: snapshot_every must be an integer in 1..1,000,000, got the integer 0"),
    ({"snapshot_every": "5"}, "snapshot_every must be an integer in 1..1,000,000, got the string '5'"),
    ({"snapshot_every": True}, "got the boolean true"),
    ({"snapshot_evry": 5}, "[state]: unknown key(s) ['snapshot_evry']; allowed: ['backend', 'cdc_buckets', "
                           "'snapshot_every']"),
    ({"backend": "rocksdb"}, "[state]: backend must be \"memory\" or \"statestore\", got the string 'rocksdb'"),
    ({"cdc_buckets": 0}, "[state]: cdc_buckets must be an integer in 1..1,000,000"),
    (5, "[state]: must be a TOML table"),
])
def test_bad_values_are_one_line_errors(state, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "state": state})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_backend_and_buckets_and_the_sketch_maintainer():
    cfg = parse_config(BASE)
    assert (cfg.state.backend, cfg.state.cdc_buckets) == ("memory", 64)
    assert "sketches" in [m.name for m in maintainers_for(cfg)]
    cfg = parse_config({**BASE, "state": {"backend": "statestore", "cdc_buckets": 16}})
    assert (cfg.state.backend, cfg.state.cdc_buckets) == ("statestore", 16)
    # the sketch operators run inside the streaming query: no driver-side sketch maintainer
    assert "sketches" not in [m.name for m in maintainers_for(cfg)]


SKETCH = {"name": "s", "sql": "SELECT src, COUNT(*) AS n FROM edges GROUP BY src", "partition": "edges.src"}


def test_fixed_boundaries_set_the_fragment_count():
    cfg = parse_config({**BASE, "sketches": [{**SKETCH, "boundaries": [0, 10, 20]}]})
    assert cfg.sketches[0].boundaries == (0, 10, 20) and cfg.sketches[0].fragments == 2


@pytest.mark.parametrize("bounds", [[5], [3, 1], [1, "b"], [True, 2], "0,1"])
def test_bad_boundaries_are_one_line_errors(bounds):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "sketches": [{**SKETCH, "boundaries": bounds}]})
    assert "boundaries must be a strictly increasing array" in str(e.value) and "\n" not in str(e.value)
