"""The paper's region query (Query 3): sensors reachable from a region's seed through triggered sensors.

Rules (literal reading, digest §3 / oracle O6, the one implemented by default):
``activeRegion(rid,x) :- sensor(x), mainSensorInRegion(rid,x), isTriggered(x).``
``activeRegion(rid,y) :- sensor(x), sensor(y), isTriggered(x), activeRegion(rid,x), dist(x,y) < k.``
The trigger is tested on the *expanding* sensor x, so an untriggered neighbour joins the region
but does not expand it. ``reading="triggered"`` also requires ``isTriggered(y)`` (only triggered
sensors belong to a region).

Incremental rule: the non-recursive part (sensor ⋈ sensor ⋈ isTriggered with the distance
predicate, and the seed rule) is maintained here as facts with a conjunction of base variables:
seed facts ``(x, rid)`` with S_x ∧ M ∧ T_x and edge facts ``(x, y)`` with S_x ∧ S_y ∧ T_x; the
recursion ``active(y, rid) :- edge(x, y), active(x, rid)`` runs on the shared engine, with
``activeRegion`` stored at the node of the sensor. State kept: live ``sensor``/``isTriggered``/
``mainSensorInRegion`` tuples and the derived facts with an index variable -> facts.
Deletions: a deleted or expired base tuple kills its variable; the facts that mention it are
reported removed (for the baselines); the engine only needs the dead variable.
Downstream views ``regionSizes``, ``largestRegion``/``largestRegions`` are kept from the deltas.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from core.errors import ConfigError
from operators.recursive.spec import Spec
from operators.recursive.fronts import Events, _Front, _Store, _vertex, bad, drop_dead_additions
from bench.recursive_research.views import ProvImpl, _ResearchView
from operators.recursive.views import ViewDelta, _View, tup

REGION = Spec(
    name="active_region",
    j=lambda e: e[0],
    o=lambda e: e[1],
    combine=lambda e, r: (e[1], r[1]),
)

READINGS = ("literal", "triggered")


class RegionFront(_Front):
    """Items: ``("sensor", sid, (x, y)[, expires_at])``, ``("trigger", sid[, expires_at])``,
    ``("seed", rid, sid[, expires_at])``; deletes name the same keys without values."""

    def __init__(self, k: float, reading: str) -> None:
        super().__init__()
        self.k, self.reading = k, reading
        self.stores = {"sensor": _Store(self), "trigger": _Store(self), "seed": _Store(self)}
        self.seeds_of: dict = defaultdict(set)  # sid -> rids with a live seed tuple
        self.facts: dict = {}  # ("b", (x, rid)) | ("e", (x, y)) -> variable names
        self.by_var: dict = defaultdict(set)

    # -- parsing -------------------------------------------------------------------------------
    def _key(self, item):
        if not isinstance(item, (tuple, list)) or not item or item[0] not in self.stores:
            raise bad(f"region input must start with 'sensor', 'trigger' or 'seed', got {item!r}")
        tag = item[0]
        if tag == "seed":
            if len(item) < 3:
                raise bad(f"seed must be ('seed', rid, sid[, expires_at]), got {item!r}")
            return tag, (_vertex(item[1], "seed"), _vertex(item[2], "seed")), item[3:]
        if len(item) < 2:
            raise bad(f"{tag} needs a sensor id, got {item!r}")
        return tag, _vertex(item[1], tag), item[2:]

    def _value(self, tag, key, rest, item):
        if tag != "sensor":
            return True, rest
        if not rest or not isinstance(rest[0], (tuple, list)) or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) for c in rest[0]):
            raise bad(f"sensor {key!r}: position must be a tuple of numbers, got {item!r}")
        return tuple(rest[0]), rest[1:]

    def check(self, inserts, deletes) -> None:
        for item in inserts:
            tag, key, rest = self._key(item)
            self._value(tag, key, rest, item)
        for item in deletes:
            self._key(item)

    # -- facts ---------------------------------------------------------------------------------
    def _var(self, tag, key):
        cur = self.stores[tag].live.get(key)
        return None if cur is None else cur[0]

    def _add_fact(self, ev: Events, kind, t, names) -> None:
        if None in names or (kind, t) in self.facts:
            return
        self.facts[(kind, t)] = names
        for v in names:
            self.by_var[v].add((kind, t))
        (ev.bases if kind == "b" else ev.edges).append((t, names))

    def _edge(self, ev, x, y) -> None:
        names = (self._var("sensor", x), self._var("sensor", y), self._var("trigger", x))
        if self.reading == "triggered":
            names += (self._var("trigger", y),)
        self._add_fact(ev, "e", (x, y), names)

    def _around(self, ev: Events, sid) -> None:
        """Add every fact involving sensor ``sid`` that its live base tuples now support."""
        for rid in self.seeds_of.get(sid, ()):
            names = (self._var("sensor", sid), self._var("seed", (rid, sid)), self._var("trigger", sid))
            self._add_fact(ev, "b", (sid, rid), names)
        me = self.stores["sensor"].live.get(sid)
        if me is None:
            return
        for y, (_, pos, _) in self.stores["sensor"].live.items():
            if y != sid and math.dist(me[1], pos) < self.k:
                self._edge(ev, sid, y)
                self._edge(ev, y, sid)

    def _kill(self, ev: Events, var) -> None:
        ev.dead.add(var)
        self.labels.pop(var, None)
        for fact in self.by_var.pop(var, ()):
            if self.facts.pop(fact, None) is not None:
                (ev.removed_bases if fact[0] == "b" else ev.removed_edges).append(fact[1])

    # -- front interface -----------------------------------------------------------------------
    def insert(self, items) -> Events:
        ev = Events()
        for item in items:
            tag, key, rest = self._key(item)
            value, rest = self._value(tag, key, rest, item)
            exp = rest[0] if rest else None
            label = f"{tag}({key[0]},{key[1]})" if tag == "seed" else f"{tag}({key})"
            var, killed = self.stores[tag].put(key, value, exp, label)
            if killed is not None:
                self._kill(ev, killed)
            if var is not None:
                sid = key[1] if tag == "seed" else key
                if tag == "seed":
                    self.seeds_of[sid].add(key[0])
                self._around(ev, sid)
        return drop_dead_additions(ev)

    def _drop(self, ev, tag, key, var) -> None:
        if tag == "seed":
            self.seeds_of[key[1]].discard(key[0])
        self._kill(ev, var)

    def delete(self, items) -> Events:
        ev = Events()
        for item in items:
            tag, key, _ = self._key(item)
            var = self.stores[tag].remove(key)
            if var is not None:
                self._drop(ev, tag, key, var)
        return ev

    def expire(self, now) -> Events:
        ev = Events()
        for tag, store in self.stores.items():
            for key, var, _ in store.expired(now):
                self._drop(ev, tag, key, var)
        return ev

    def live_bases(self):
        return [(t, names) for (kind, t), names in self.facts.items() if kind == "b"]

    def live_edges(self):
        return [(t, names) for (kind, t), names in self.facts.items() if kind == "e"]

    def dump(self) -> dict:
        return {"next_var": self.next_var, "labels": self.labels,
                "stores": {tag: [[k, v[0], v[1], v[2]] for k, v in st.live.items()]
                           for tag, st in self.stores.items()}}

    def load(self, d: dict) -> None:
        self.next_var = d["next_var"]
        self.labels = dict(d["labels"])
        for tag, rows in d["stores"].items():
            for key, var, value, exp in rows:
                key, value = tup(key), tup(value)
                self.stores[tag].live[key] = [var, value, exp]
                if exp is not None:
                    self.stores[tag]._push(exp, key, var)
                if tag == "seed":
                    self.seeds_of[key[1]].add(key[0])
        ev = Events()
        for sid in list(self.stores["sensor"].live):
            self._around(ev, sid)


class RegionView(_ResearchView, _View):
    """``activeRegion``: rows() is a set of (region id, sensor id); see the module docstring.

    ``k``: distance threshold (strict ``<``, Euclidean over the position tuples);
    ``reading``: ``"literal"`` (default) or ``"triggered"``; ``nodes``/``ship``/``flush_every``
    as for ``ReachabilityView``. ``sizes()`` = regionSizes, ``largest()`` = (largestRegion,
    largestRegions).
    """

    spec = REGION

    def __init__(self, k: float = 20.0, reading: str = "literal", nodes=1, ship: str = "lazy",
                 flush_every=None) -> None:
        if reading not in READINGS:
            raise ConfigError(f"RegionView: reading must be one of {READINGS}, got {reading!r}")
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0:
            raise ConfigError(f"RegionView: k must be a number > 0, got {k!r}")
        self._k, self._reading = k, reading
        self._params = (nodes, ship, flush_every)
        self._sizes: Counter = Counter()
        super().__init__(*self._fresh())

    def _new_front(self):
        return RegionFront(self._k, self._reading)

    def _config(self) -> dict:
        return {"params": list(self._params), "k": self._k, "reading": self._reading}

    def _fresh(self):
        front = self._new_front()
        return front, ProvImpl(self.spec, front, *self._params)

    def _row(self, r):
        return (r[1], r[0])

    def _lookup(self, row):
        return (row[1], row[0])

    def _after(self, delta: ViewDelta) -> None:
        for rid, _ in delta.added:
            self._sizes[rid] += 1
        for rid, _ in delta.removed:
            self._sizes[rid] -= 1
            if self._sizes[rid] <= 0:
                del self._sizes[rid]

    def restore(self, data: bytes) -> None:
        super().restore(data)
        self._sizes = Counter(rid for rid, _ in self.rows())

    def sizes(self) -> dict:
        """regionSizes: region id -> number of sensors in the region."""
        return dict(self._sizes)

    def largest(self):
        """(largestRegion size, set of largestRegions ids); (0, set()) when no region is active."""
        if not self._sizes:
            return 0, set()
        m = max(self._sizes.values())
        return m, {rid for rid, n in self._sizes.items() if n == m}
