"""Join inputs that stay in their Delta mirror instead of driver memory.

``DeltaSide`` implements ``operators.sketch.side_store.SideStore`` for a join input that is a plain scan of
one mirror (under selections and column projections).  It keeps no rows: a probe reads the
mirror *at the version the sketch state reflects* (Delta time travel), restricted to the probing
keys (``IN`` list, or a broadcast semi-join for many keys) and to the pushed-down selection
(``pushdown.pushdown_for_scan``), runs the scan's operators over what came back and matches key
hashes.  That is exactly the old state the delta rule ΔL ⋈ R + L ⋈ ΔR + ΔL ⋈ ΔR needs.
It keeps the net weight per key hash (a few bytes per distinct key) so the join's counting
bloom filter can be rebuilt; a batch whose delta keys the bloom filter rejects runs no Spark
job at all.  The maintainer chooses it for tables with at least ``[sketch] spark_join_rows``
rows at capture; smaller tables keep the in-memory index.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal

import numpy as np
import pyarrow as pa

from operators.sketch import plan as P
from operators.sketch.delta import Delta
from operators.sketch.expr import Col
from operators.sketch.joinstore import expand_matches, key_hash
from operators.sketch.memory_side import MemoryIndex
from operators.sketch.side_store import SideStore
from streaming_app.sketches.pushdown import column_kind, pushdown_for_scan, sql_literal

ENCODING = "join.side.delta.v1"
_IN_LIST_MAX = 2000  # distinct probe keys up to which the probe is an IN list (file skipping)

# -- join inputs in the Delta mirror ---------------------------------------------------------------

def plain_input(node):
    """The scan under ``node`` when ``node`` is selections/projections over one scan (an
    input DeltaSide can serve); else None."""
    cur = node
    while isinstance(cur, (P.FilterNode, P.ProjectNode)):
        cur = cur.children[0]
    return cur if isinstance(cur, P.ScanNode) else None

def base_column(node, cid: str) -> str | None:
    """The scanned column behind output id ``cid`` of a plain input, or None if computed."""
    cur = node
    while True:
        if isinstance(cur, P.ScanNode):
            for name, c in cur.cols:
                if c == cid:
                    return name
            return None
        if isinstance(cur, P.FilterNode):
            cur = cur.children[0]
        elif isinstance(cur, P.ProjectNode):
            e = dict(cur.exprs).get(cid)
            if not isinstance(e, Col):
                return None
            cid, cur = e.id, cur.children[0]
        else:
            return None

class Binding:
    """What a DeltaSide needs at run time: Spark, the lake, the version per table that the
    sketch state currently reflects (the QueryState's ``versions``), and optionally a probe
    cache shared by the queries of one batch (``ProbeCache``)."""

    def __init__(self, spark, lake, versions_of, column_types: dict, cache: "ProbeCache | None" = None):
        self.spark, self.lake, self.versions_of, self.column_types = spark, lake, versions_of, column_types
        self.cache = cache

class ProbeCache:
    """Rows fetched by DeltaSide probes in the current batch, keyed by what determines them
    (mirror, version, key columns and key set, pushed-down condition, columns): queries that
    join the same Delta-backed table with the same probe keys share one Spark read. The job
    clears it at every batch, so it holds one batch's probe results at most."""

    def __init__(self):
        self.rows: dict = {}
        self.hits = self.misses = 0

    def clear(self) -> None:
        self.rows.clear()

    @staticmethod
    def key(path: str, version: int, key_cols, keys: pa.Table, cond, cols) -> tuple:

        srt = keys.sort_by([(c, "ascending") for c in keys.column_names]) if keys.num_rows else keys
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, srt.schema) as w:
            w.write_table(srt)
        digest = hashlib.sha1(sink.getvalue().to_pybytes()).hexdigest()
        return (path, int(version), tuple(key_cols), digest, cond, tuple(cols))

class DeltaSide(SideStore):
    """A ``SideStore`` whose rows stay in the Delta mirror: net weights per key hash here, rows
    read back by a Spark probe at the version the state reflects (``bind`` attaches Spark)."""

    def __init__(self, nbits: int, key_ids: tuple, table: str):
        self.nbits, self.key_ids, self.table = nbits, tuple(key_ids), table
        self.kh = np.zeros(0, np.uint64)  # sorted distinct key hashes
        self.kw = np.zeros(0, np.int64)  # net weight per hash
        self.pending: list = []  # (hashes, weights) not yet folded in
        self.rows_net = 0
        self.encoding = ENCODING
        self.node = self.ctx = self.binding = None
        self.key_cols: list = []
        self.probes = 0  # Spark probes run (observability)
        self.rows_fetched = 0

    def __getstate__(self):
        self._fold()
        return {"nbits": self.nbits, "key_ids": self.key_ids, "table": self.table, "kh": self.kh,
                "kw": self.kw, "rows_net": self.rows_net, "encoding": self.encoding}

    def __setstate__(self, st):
        self.__init__(st["nbits"], st["key_ids"], st["table"])
        self.kh, self.kw, self.rows_net = st["kh"], st["kw"], st["rows_net"]

    def __len__(self):
        return self.rows_net

    def bind(self, node, ctx, resources: Binding) -> None:
        self.node, self.ctx, self.binding = node, ctx, resources
        self.key_cols = [base_column(node, k) for k in self.key_ids]

    # -- SideStore -----------------------------------------------------------------------------
    def add(self, d: Delta, hashes: np.ndarray, order=None) -> None:
        if d is None or len(d) == 0:
            return
        self.pending.append((np.asarray(hashes, np.uint64), np.asarray(d.weight, np.int64)))
        self.rows_net += int(d.weight.sum())
        if sum(len(h) for h, _ in self.pending) > max(65536, len(self.kh) // 4):
            self._fold()

    def _fold(self) -> None:
        if not self.pending:
            return
        h = np.concatenate([self.kh] + [p[0] for p in self.pending])
        w = np.concatenate([self.kw] + [p[1] for p in self.pending])
        self.pending = []
        u, inv = np.unique(h, return_inverse=True)
        s = np.bincount(inv.reshape(-1), weights=w, minlength=len(u)).astype(np.int64)
        keep = s != 0
        self.kh, self.kw = u[keep], s[keep]

    def key_weights(self):
        self._fold()
        return self.kh.copy(), self.kw.copy()

    def probe(self, hashes: np.ndarray, keys: pa.Table) -> tuple:
        if len(hashes) == 0 or self.rows_net == 0:
            return np.zeros(0, np.int64), None  # nothing stored yet (capture): no Spark job
        if self.binding is None or self.node is None:
            raise RuntimeError(f"DeltaSide of {self.table!r} probed before bind()")
        if keys is None or any(c is None for c in self.key_cols):
            raise RuntimeError(f"DeltaSide of {self.table!r} needs plain key columns and probe keys")
        rows = self._fetch(keys)
        if rows is None or len(rows) == 0:
            return np.zeros(0, np.int64), None
        rh = key_hash(rows.table, self.key_ids)
        order = np.argsort(rh)
        srt = rh[order]
        lo = np.searchsorted(srt, hashes, "left")
        hi = np.searchsorted(srt, hashes, "right")
        p, idx = expand_matches(lo, hi)
        if len(p) == 0:
            return np.zeros(0, np.int64), None
        return p, rows.take(order[idx])

    # -- the Spark read ------------------------------------------------------------------------
    def _fetch(self, keys: pa.Table) -> Delta | None:
        b = self.binding
        scan = plain_input(self.node)
        version = b.versions_of(self.table)
        cond, cols = pushdown_for_scan(scan, b.column_types.get(self.table, {}), self.ctx.partitions)
        distinct = keys.group_by(keys.column_names).aggregate([]) if keys.num_rows else keys
        ck = None
        if b.cache is not None:
            ck = ProbeCache.key(b.lake.mirror(self.table), version, self.key_cols, distinct, cond, cols)
            if ck in b.cache.rows:
                b.cache.hits += 1
                raw = b.cache.rows[ck]
                return self._rows(raw)
            b.cache.misses += 1
        raw = self._read(distinct, version, cond, cols)
        self.probes += 1
        self.rows_fetched += 0 if raw is None else raw.num_rows
        if ck is not None:
            b.cache.rows[ck] = raw
        return self._rows(raw)

    def _rows(self, raw: pa.Table | None) -> Delta | None:
        if raw is None or raw.num_rows == 0:
            return None
        return self.node.run(self.ctx, {self.table: (raw, np.ones(raw.num_rows, np.int64))}, False)

    def _read(self, distinct: pa.Table, version: int, cond, cols) -> pa.Table | None:
        from pyspark.sql import functions as F

        b = self.binding
        spark = b.spark
        df = spark.read.format("delta").option("versionAsOf", int(version)).load(b.lake.mirror(self.table))
        kinds = {c: column_kind(t) for c, t in b.column_types.get(self.table, {}).items()}
        if len(self.key_cols) == 1 and distinct.num_rows <= _IN_LIST_MAX:
            col = self.key_cols[0]
            vals = [v for v in distinct.column(0).to_pylist() if v is not None]
            lits = [_key_literal(v, kinds.get(col, "other")) for v in vals]
            if not lits:
                return None
            df = df.where(f"`{col}` IN ({', '.join(lits)})")
        else:
            kdf = spark.createDataFrame(distinct.rename_columns([f"__k{i}" for i in range(len(self.key_cols))]))
            conds = [F.col(f"`{c}`") == F.col(f"__k{i}") for i, c in enumerate(self.key_cols)]
            cond_all = conds[0]
            for c in conds[1:]:
                cond_all = cond_all & c
            df = df.join(F.broadcast(kdf), cond_all, "left_semi")
        if cond is not None:
            df = df.where(cond)
        return df.select(*[F.col(f"`{c}`") for c in cols]).toArrow()

def _key_literal(v, kind: str) -> str:
    if isinstance(v, float) and v.is_integer() and kind in ("int", "float", "other"):
        v = int(v)  # the engine widens numeric keys to float64; the mirror holds the integers
    lit = sql_literal(v, kind)
    if lit is not None:
        return lit
    if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"

def delta_side_factory(large_tables: set):
    """A ``store_factory`` for SketchMaintainer: DeltaSide for plain inputs over a table in
    ``large_tables`` whose join keys are plain columns, the in-memory index otherwise."""
    def make(nbits, keys, side, tables, node=None, ctx=None):
        if node is not None and len(tables) == 1 and tables[0] in large_tables and keys:
            if plain_input(node) is not None and all(base_column(node, k) is not None for k in keys):
                return DeltaSide(nbits, keys, tables[0])
        return MemoryIndex(nbits, keys)

    return make

def delta_sides(engine):
    """[(DeltaSide, its input node)] of an engine's joins."""
    out = []
    for node in engine.query.root.walk():
        if isinstance(node, P.JoinNode) and node.state is not None:
            for store, child in ((node.state.left, node.children[0]), (node.state.right, node.children[1])):
                if isinstance(store, DeltaSide):
                    out.append((store, child))
    return out

def bind_sides(engine, binding: Binding) -> int:
    """Attach Spark and the version source to every DeltaSide (after capture or restore)."""
    sides = delta_sides(engine)
    for store, child in sides:
        store.bind(child, engine.ctx, binding)
    return len(sides)
