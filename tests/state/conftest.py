"""A local Delta edge mirror written the way the job writes it (delta-rs MERGE, change data
feed on), for the state tests: no Spark."""

from __future__ import annotations

import random
import types

import deltalake
import pyarrow as pa
import pytest

from connectors import delta_sink as sink

SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("cost", pa.float64())])


class EdgeMirror:
    """``mirrors/edges`` under ``root``; ``batch()`` commits random inserts, cost updates and
    deletes in one MERGE, as one job batch does; ``live`` is what the mirror holds."""

    def __init__(self, root, seed: int = 1, vertices: int = 14):
        self.root = root
        self.path = sink.Lake(root).mirror("edges")
        deltalake.DeltaTable.create(self.path, schema=SCHEMA, configuration={"delta.enableChangeDataFeed": "true"})
        self.rng = random.Random(seed)
        self.vertices = vertices
        self.live: dict = {}

    def batch(self, n: int = 30) -> int:
        final: dict = {}
        for _ in range(n):
            u, v = self.rng.randrange(self.vertices), self.rng.randrange(self.vertices)
            if u == v:
                continue
            if (u, v) in self.live and self.rng.random() < 0.35:
                final[(u, v)] = (self.live.pop((u, v)), True)
            else:
                self.live[(u, v)] = float(self.rng.randrange(1, 9))
                final[(u, v)] = (self.live[(u, v)], False)
        t = pa.table({"src": [k[0] for k in final], "dst": [k[1] for k in final],
                      "cost": [c for c, _ in final.values()], "__deleted": [d for _, d in final.values()]})
        cols = {f'"{c}"': f's."{c}"' for c in ("src", "dst", "cost")}
        (deltalake.DeltaTable(self.path).merge(t, 't."src" = s."src" AND t."dst" = s."dst"', source_alias="s",
                                               target_alias="t")
         .when_matched_delete(predicate='s."__deleted"')
         .when_matched_update(updates=cols, predicate='NOT s."__deleted"')
         .when_not_matched_insert(updates=cols, predicate='NOT s."__deleted"').execute())
        return self.version

    @property
    def version(self) -> int:
        return int(deltalake.DeltaTable(self.path).version())

    def job(self):
        """What a maintainer reads of the job: lake, committed versions, config name."""
        return types.SimpleNamespace(lake=sink.Lake(self.root), versions={"edges": self.version},
                                     cfg=types.SimpleNamespace(name="t"))


@pytest.fixture
def mirror(tmp_path):
    return EdgeMirror(tmp_path / "lake")


def ctx(batch_id: int):
    return types.SimpleNamespace(batch_id=batch_id, app_id="job:q1", metrics={})
