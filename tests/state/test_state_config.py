"""``[state]``: snapshot_every is read, defaults to 10, and a bad value is a one-line error."""

from __future__ import annotations

import pytest

from operators.errors import ConfigError
from streaming_app.config import parse_config
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
    ({"snapshot_evry": 5}, "[state]: unknown key(s) ['snapshot_evry']; allowed: ['snapshot_every']"),
    (5, "[state]: must be a TOML table"),
])
def test_bad_values_are_one_line_errors(state, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "state": state})
    assert needle in str(e.value) and "\n" not in str(e.value)
