"""Absorption provenance: monotone Boolean formulas over base-tuple variables, kept as ROBDDs.

Incremental rule: a base insertion gets a fresh variable; joins AND formulas, unions and new
derivations OR them; the BDD is canonical, so absorption (``a ∨ (a ∧ b) = a``) is automatic and
"did this derivation change P(t)?" is a pointer comparison.
State kept: one BDD manager per view (CUDD through ``dd.cudd`` when the compiled extension is
there, else ``dd.autoref``; shortest paths keep ``Cube``s instead, see ``CubeProvenance``), a label per variable (``a→b``), and
``ProvTable``s (key -> formula, with an inverted index variable -> keys so that a deletion only
touches the formulas that mention it).
Deletions: a dead variable is substituted by ``false`` (``let``) in every table; entries whose
formula becomes ``false`` are dropped and reported to the caller. Every formula built here uses
only AND, OR and restriction to false, so every stored formula is monotone and its minimal DNF
(the set of minimal derivation witnesses) is its canonical readable and serialisable form.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Hashable, Iterable

import dd.autoref
import dd.bdd

from core.errors import ConfigError, InvariantError

try:  # CUDD (C) ships in the PyPI wheel of dd >= 0.6 on Linux x86-64; else dd's pure Python
    import dd.cudd as _cudd
except ImportError:  # pragma: no cover - platform without the compiled extension
    _cudd = None

BACKENDS = ("auto", "cudd", "autoref")

# dd's pure-Python BDD recurses once per variable level; a path of n edges is an n-deep BDD.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))



class _QuietManager(dd.bdd.BDD):
    """dd's node manager without the leak assertion in ``__del__``.

    When a view sits in a garbage cycle (e.g. held by a traceback), Python may finalise the
    manager before the formulas that still point into it; dd then raises "nodes still
    referenced upon shutdown". That is not a leak here: everything is being freed together.
    """

    def __del__(self) -> None:
        pass

BYTES_PER_NODE = 12  # serialised BDD node = (variable id, low id, high id) as 32-bit ints


class Provenance:
    """A BDD manager plus variable bookkeeping (fresh names, labels, garbage collection)."""

    def __init__(self, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ConfigError(f"Provenance: backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "cudd" and _cudd is None:
            raise ConfigError("Provenance: backend 'cudd' needs dd.cudd (dd's compiled wheel)")
        self.backend = "cudd" if backend != "autoref" and _cudd is not None else "autoref"
        if self.backend == "cudd":
            self.bdd = _cudd.BDD()
            # Sifting on thousands of fresh variables costs more than it saves here: formulas are
            # path conjunctions over variables declared in arrival order.
            self.bdd.configure(reordering=False)
        else:
            self.bdd = dd.autoref.BDD()
            self.bdd._bdd.__class__ = _QuietManager
        self.true = self.bdd.true
        self.false = self.bdd.false
        self.labels: dict[str, str] = {}
        self.next_var = 0
        self._gc_at = 200_000
        self._support: dict = {}  # BDD node -> its variables; node ids are stable until a GC
        self._declared: set = set()
        self.restricted = 0  # table entries visited by deletions (stats)

    # -- variables -------------------------------------------------------------------------
    def fresh(self, label: str) -> str:
        """Declare a new variable for one base insertion; variables are never reused (errata 9)."""
        name = f"p{self.next_var}"
        self.next_var += 1
        self.declare(name, label)
        return name

    def declare(self, name: str, label: str) -> None:
        self.bdd.declare(name)
        self._declared.add(name)
        self.labels[name] = label

    def var(self, name: str):
        return self.bdd.var(name)

    def conj(self, names: Iterable[str]):
        f = self.true
        for n in names:
            f = f & self.bdd.var(n)
        return f

    # -- operations ------------------------------------------------------------------------
    def kill(self, f, names: Iterable[str]):
        """Restrict the given variables to false (deletion of base tuples)."""
        d = {n: False for n in names}
        if not d:
            return f
        if self.backend == "cudd":
            return self._restrict_false_cudd(f, d)
        return self.bdd.let(d, f)

    # dd.cudd's let/cube/support/quantify build an array over *every* declared variable per call
    # (~1 ms at 2*10^4 variables: 80% of a 10^4-arc road load); these cost only the formula.
    def _restrict_false_cudd(self, f, dead):
        """``f`` with the dead variables set to false, as ``∀dead. f`` (one CUDD call).

        For a monotone ``f`` (every formula here is), ``f[v:=0] ≤ f[v:=1]``, so
        ``∀v. f = f[v:=0] ∧ f[v:=1] = f[v:=0]``.
        """
        dead = [v for v in dead if v in self._declared]  # a front may kill a never-declared one
        return self.bdd.apply("\\A", self.conj(dead), f) if dead else f

    def _support_cudd(self, f) -> frozenset:
        seen, out, stack = set(), set(), [f]
        true, false = self.true, self.false
        while stack:
            u = stack.pop()
            if u == true or u == false:
                continue
            k = int(u) & ~1  # a node and its complement have the same support
            if k in seen:
                continue
            seen.add(k)
            out.add(u.var)
            stack.append(u.low)
            stack.append(u.high)
        return frozenset(out)

    def witness(self, f):
        """One witness of a non-false monotone ``f``, as a conjunction (a cube of positive variables).

        Walks one path of the BDD to ``true``, taking the low branch whenever it is not ``false``;
        the variables left through their high branch form the cube. Since ``f`` is monotone,
        every assignment that sets those variables true satisfies ``f``, so the cube implies ``f``.
        Cost: one step per BDD level, no new nodes but the cube's.
        """
        if self.backend == "cudd":
            return self._witness_cudd(f)
        m = self.bdd._bdd
        u = f.node
        names = []
        while abs(u) != 1:
            level, lo, hi = m._succ[abs(u)]
            if u < 0:  # complemented edge: both cofactors are complemented too
                lo, hi = -lo, -hi
            if lo != -1:
                u = lo
            else:
                names.append(m.var_at_level(level))
                u = hi
        if u != 1:
            raise InvariantError("Provenance.witness: formula is false")
        return self.bdd.cube({n: True for n in names}) if names else self.true

    def _witness_cudd(self, f):
        """``witness`` on CUDD: a complemented edge complements both children it points to."""
        true, false = self.true, self.false
        if f == false:
            raise InvariantError("Provenance.witness: formula is false")
        names = []
        u = f
        while u != true:
            lo = ~u.low if u.negated else u.low
            if lo != false:
                u = lo
            else:
                names.append(u.var)
                u = ~u.high if u.negated else u.high
        w = self.conj(names)
        if len(self._support) < 400_000:
            self._support[w] = frozenset(names)  # the cube is indexed next (B_sent): no walk
        return w

    def support(self, f) -> frozenset:
        # autoref: keyed by node id (stable until our own GC); cudd: by the Function, which
        # keeps its node referenced while cached (CUDD frees unreferenced nodes on its own).
        key = f.node if self.backend == "autoref" else f
        s = self._support.get(key)
        if s is None:
            if len(self._support) > 400_000:
                self._support.clear()
            s = self._support[key] = (self._support_cudd(f) if self.backend == "cudd"
                                      else frozenset(self.bdd.support(f)))
        return s

    def nbytes(self, f) -> int:
        """Size of ``f`` serialised as a node list (what shipping it would cost)."""
        return max(f.dag_size - 1, 1) * BYTES_PER_NODE

    def node_count(self) -> int:
        """Live and garbage nodes of the manager (0 when formulas are not BDDs)."""
        return len(self.bdd)

    def maybe_gc(self) -> None:
        if self.backend == "cudd":
            return  # CUDD collects dead nodes itself
        if len(self.bdd) > self._gc_at:
            self._support.clear()
            self.bdd.collect_garbage()
            self._gc_at = max(200_000, 2 * len(self.bdd))

    # -- readable / serialisable forms -----------------------------------------------------
    def cubes(self, f) -> list[frozenset[str]]:
        """Minimal DNF of a monotone formula: its minimal derivation witnesses."""
        memo: dict = {}
        return _sort_cubes(self._cubes(f, memo), self._order)

    def _order(self, name: str) -> int:
        return int(name[1:]) if name[1:].isdigit() else 0

    def _cubes(self, f, memo) -> frozenset[frozenset[str]]:
        if f == self.false:
            return frozenset()
        if f == self.true:
            return frozenset({frozenset()})
        key = f  # autoref Functions hash by node
        if key in memo:
            return memo[key]
        v = f.var
        low = self.bdd.let({v: False}, f)
        high = self.bdd.let({v: True}, f)
        lo = self._cubes(low, memo)
        hi = self._cubes(high, memo)
        out = set(lo)
        for c in hi:
            # v ∧ c is absorbed iff some witness of the low cofactor is contained in c
            if not any(w <= c for w in lo):
                out.add(c | {v})
        res = frozenset(out)
        memo[key] = res
        return res

    def from_cubes(self, cubes: Iterable[Iterable[str]]):
        f = self.false
        for c in cubes:
            f = f | self.conj(c)
        return f

    def render(self, f) -> str:
        """``(a→b ∧ b→c) ∨ (a→c)``; ``true``/``false`` for constants."""
        cs = self.cubes(f)
        if not cs:
            return "false"
        terms = []
        for c in cs:
            lits = sorted((self.labels.get(v, v) for v in c))
            terms.append(" ∧ ".join(lits) if lits else "true")
        if len(terms) == 1:
            return terms[0]
        return " ∨ ".join(f"({t})" for t in sorted(terms, key=lambda t: (t.count("∧"), t)))


class Cube(tuple):
    """A conjunction of positive variables (distinct names in a tuple); ``&`` is AND, ``|`` is OR.

    The formula of a tuple with exactly one derivation. Its ROBDD is the cube itself, so this is
    the same formula without the node table: AND is a union, restriction to false of a variable
    in it gives ``false``, and OR is absorption (``c ∨ (c ∧ d) = c``). OR of two cubes neither of
    which absorbs the other is not a cube: it raises (the one-derivation invariant of the view is
    broken). Equality, hashing and ``<=`` are those of the set of names. A tuple, not a frozenset:
    a path of 5-16 links took 728 bytes as a frozenset and takes 80-168 as a tuple, and a road
    graph of 10^5 arcs keeps millions of them.
    """

    __slots__ = ()

    def __new__(cls, names=()):
        t = tuple(names)
        if len(t) > 1 and len(set(t)) != len(t):
            t = tuple(dict.fromkeys(t))
        return tuple.__new__(cls, t)

    def __and__(self, other):
        if self is CUBE_FALSE or other is CUBE_FALSE:
            return CUBE_FALSE
        big, small = (self, other) if len(self) >= len(other) else (other, self)
        extra = tuple(v for v in small if v not in big)
        return tuple.__new__(Cube, extra + big) if extra else big

    def __or__(self, other):
        if self is CUBE_FALSE:
            return other
        if other is CUBE_FALSE or self <= other:  # self absorbs other
            return self
        if other <= self:
            return other
        raise InvariantError(f"Cube: two derivations {sorted(self)} and {sorted(other)} of a tuple "
                             "whose provenance must be one conjunction")

    def __eq__(self, other):
        if tuple.__eq__(self, other) is True:
            return True
        if isinstance(other, (tuple, set, frozenset)) and len(self) == len(other):
            return set(self) == set(other)
        return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(frozenset(self))

    def __le__(self, other):
        return set(self).issubset(other)

    def __ge__(self, other):
        return set(self).issuperset(other)

    def __lt__(self, other):
        return len(self) < len(other) and self <= other

    def __gt__(self, other):
        return len(self) > len(other) and self >= other

    def isdisjoint(self, other) -> bool:
        if isinstance(other, (set, frozenset)):
            return other.isdisjoint(self)
        return set(self).isdisjoint(other)

    @property
    def dag_size(self) -> int:  # nodes of the equivalent BDD (one per variable, plus a terminal)
        return len(self) + 1


CUBE_FALSE = Cube(("\u22a5",))  # compared by identity in ``&``/``|``; never a variable name


class CubeProvenance(Provenance):
    """``Provenance`` for views whose every tuple has exactly one derivation (shortest paths).

    A path tuple names its derivation (its vertex vector: each link on it has one live
    variable), so its absorption provenance is the conjunction of those variables. Keeping it
    as a ``Cube`` instead of a BDD is exact (same formula, same removal: the tuple goes when one
    of its variables dies) and costs a set union per join instead of BDD ``ite``, ``support``
    and ``let`` calls, which were 60% of a dense 60-vertex batch (issue 17).
    """

    backend = "cube"

    def __init__(self) -> None:
        self.true = Cube()
        self.false = CUBE_FALSE
        self.labels: dict[str, str] = {}
        self.next_var = 0
        self.restricted = 0

    def declare(self, name: str, label: str) -> None:
        self.labels[name] = label

    def var(self, name: str):
        return Cube((name,))

    def conj(self, names: Iterable[str]):
        return Cube(names)

    def kill(self, f, names: Iterable[str]):
        return f if f is CUBE_FALSE or f.isdisjoint(names) else CUBE_FALSE

    def witness(self, f):
        if f is CUBE_FALSE:
            raise InvariantError("Provenance.witness: formula is false")
        return f

    def support(self, f) -> frozenset:
        return frozenset() if f is CUBE_FALSE else f

    def nbytes(self, f) -> int:
        return max(len(f), 1) * BYTES_PER_NODE

    def maybe_gc(self) -> None:
        pass

    def node_count(self) -> int:
        return 0

    def cubes(self, f) -> list[frozenset[str]]:
        return [] if f is CUBE_FALSE else [frozenset(f)]


def _sort_cubes(cubes, order) -> list[frozenset[str]]:
    return sorted(cubes, key=lambda c: (len(c), sorted(order(v) for v in c)))


class ProvTable:
    """key -> non-false formula, with an inverted index variable -> keys for deletions.

    ``indexed=False``: no index and no ``kill``; the owner restricts lazily (cubes only): an entry
    may hold a dead variable until ``sweep`` drops it, and lookups must check liveness.
    """

    __slots__ = ("prov", "f", "by_var", "indexed")

    def __init__(self, prov: Provenance, indexed: bool = True) -> None:
        self.prov = prov
        self.f: dict[Hashable, object] = {}
        self.by_var: dict[str, set] = defaultdict(set)
        self.indexed = indexed

    def __contains__(self, key) -> bool:
        return key in self.f

    def __len__(self) -> int:
        return len(self.f)

    def get(self, key):
        return self.f.get(key)

    def items(self):
        return self.f.items()

    def keys(self):
        return self.f.keys()

    def _index(self, key, pv) -> None:
        if not self.indexed:
            return
        for v in self.prov.support(pv):
            self.by_var[v].add(key)

    def merge(self, key, pv) -> bool:
        """P[key] := P[key] ∨ pv; True iff the formula changed (i.e. pv was not absorbed)."""
        old = self.f.get(key)
        if old is None:
            if pv == self.prov.false:
                return False
            self.f[key] = pv
            self._index(key, pv)
            return True
        new = old | pv
        if new == old:
            return False
        self.f[key] = new
        self._index(key, pv)
        return True

    def put(self, key, pv) -> None:
        if pv == self.prov.false:
            raise InvariantError(f"ProvTable.put: false formula for key {key!r}")
        self.f[key] = pv
        self._index(key, pv)

    def pop(self, key):
        return self.f.pop(key, None)

    def kill(self, dead: set[str]) -> tuple[list, list]:
        """Restrict dead variables to false. Returns (changed keys still live, removed keys)."""
        if not self.indexed:
            raise InvariantError("ProvTable.kill on a table without an index (use sweep)")
        keys = set()
        for v in dead:
            ks = self.by_var.pop(v, None)
            if ks:
                keys |= ks
        changed, removed = [], []
        f = self.f
        self.prov.restricted += len(keys)  # entries a deletion touches (the cost of a deletion)
        if self.prov.backend == "cube":  # a cube with a dead variable is false: no restriction
            for k in keys:
                old = f.get(k)
                if old is not None and not old.isdisjoint(dead):
                    del f[k]
                    removed.append(k)
            return changed, removed
        cudd = self.prov.backend == "cudd"  # ∀ of a variable not in the formula is a no-op
        for k in keys:
            old = f.get(k)
            if old is None:
                continue
            new = self.prov.kill(old, dead if cudd else dead & self.prov.support(old))
            if new == old:
                continue
            if new == self.prov.false:
                del self.f[k]
                removed.append(k)
            else:
                self.f[k] = new
                changed.append(k)
        return changed, removed

    def sweep(self, dead) -> list:
        """Drop every cube entry that mentions a dead variable; returns the dropped keys."""
        gone = [k for k, pv in self.f.items() if not pv.isdisjoint(dead)]
        for k in gone:
            del self.f[k]
        self.prov.restricted += len(self.f) + len(gone)
        return gone

    # -- snapshot ----------------------------------------------------------------------------
    def dump(self) -> list:
        return [[k, [sorted(c) for c in self.prov.cubes(pv)]] for k, pv in self.f.items()]

    def load(self, rows: list, key_of) -> None:
        for k, cubes in rows:
            self.put(key_of(k), self.prov.from_cubes(cubes))
