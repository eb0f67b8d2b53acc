"""The linear recursions the views maintain: reachability and shortest paths, as ``Spec``s.

A ``Spec`` says where an edge joins a derived tuple (``j``), where the output lives (``o``) and
how they combine; shortest paths add a group and a rank (cost, hops, path), a total order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Spec:
    """A linear recursion: where an edge joins (``j``), where its output lives (``o``), and how."""

    name: str
    j: Callable  # edge -> join vertex (the edge copy lives at node_of(j))
    o: Callable  # edge -> out vertex (home of derived tuples)
    combine: Callable  # (edge, r) -> derived r or None (pruned, e.g. non-simple path)
    group: Optional[Callable] = None  # r -> AggSel group (None: no AggSel)
    rank: Optional[Callable] = None  # r -> sort key, smaller is better (the view's aggregate)
    extra_ranks: tuple = ()  # further aggregates kept by a multi-aggregate AggSel
    one_derivation: bool = False  # every tuple has exactly one derivation (provenance = a cube)
    suffix: Optional[Callable] = None  # (r, base b) -> r without b's link in front (None if not)
    # (derived r) -> (its cost, the vertex it was derived at, the vertex it goes to): the ship
    # clock's key (lazy shortest paths after a deletion; see Engine._due)
    ship_key: Optional[Callable] = None

    def gkey(self, r):
        return self.group(r) if self.group is not None else r


def _vkey(v):
    return (isinstance(v, str), v)


REACH = Spec(
    name="reachable",
    j=lambda e: e[1],
    o=lambda e: e[0],
    combine=lambda e, r: (e[0], r[1]),
)


def _sp_combine(e, r):
    vec = r[3]
    x = e[0]
    if vec[0] == vec[-1] or x in vec[:-1]:
        return None  # never a cheapest path with positive costs: not simple
    return (x, r[1], e[2] + r[2], (x,) + vec)


class _PathOrder:
    """A path vector compared as ``tuple(_vkey(v) for v in vec)``, built only on a tie (rank is hot)."""

    __slots__ = ("vec",)

    def __init__(self, vec) -> None:
        self.vec = vec

    def _key(self):
        return tuple(_vkey(v) for v in self.vec)

    def __lt__(self, other) -> bool:
        # Vertices of one type compare as their keys do; only an int met by a str at the first
        # difference needs the keys (building them was a sixth of a transit-stub deletion).
        try:
            return self.vec < other.vec
        except TypeError:
            return self._key() < other._key()

    def __eq__(self, other) -> bool:
        return self.vec == other.vec


def HOPS_RANK(r):
    return (len(r[3]), r[2], _PathOrder(r[3]))


SHORTEST = Spec(
    name="shortest_paths",
    j=lambda e: e[1],
    o=lambda e: e[0],
    combine=_sp_combine,
    group=lambda r: (r[0], r[1]),
    rank=lambda r: (r[2], len(r[3]), _PathOrder(r[3])),
    one_derivation=True,  # a path tuple names its links, each with one live variable
    suffix=lambda r, b: ((b[1], r[1], r[2] - b[2], r[3][1:])
                         if len(r[3]) > 2 and r[3][0] == b[0] and r[3][1] == b[1] else None),
    ship_key=lambda r: (r[2], r[3][1] if len(r[3]) > 1 else r[0], r[0]),
)
