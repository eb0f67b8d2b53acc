"""A seeded change history run in a real MariaDB database: `demo --source mariadb` and tests.

Three tables: ``items`` holds the types a MySQL user declares (TINYINT(1), BOOLEAN, TIME(6) as
a duration, DATETIME(6), TIMESTAMP(6), DATE, BIGINT UNSIGNED, DECIMAL, DOUBLE, ENUM, SET,
JSON, YEAR, BIT(12), VARBINARY, BLOB, TEXT, and a column dropped mid-stream), ``order_lines`` a
composite primary key (truncated mid-stream), ``edges`` a graph for the triangle count. The
history holds inserts, updates, primary-key changes (single and composite), deletes, TRUNCATE,
ADD COLUMN, DROP COLUMN, edge values (TIME ±838:59:59, dates 1000-01-01 and 9999-12-31, BIGINT
UNSIGNED 2^64-1, zero dates) and one TINYINT(1) set to 2 and back.

MariaDB is the oracle: ``mirror_mismatches`` compares a mirror with the table value for value
and sorts every difference into a named cause that Debezium itself introduces (zero dates,
``time.precision.mode=connect``, ``bigint.unsigned.handling.mode=long``, the unwrap transform
dropping TRUNCATE) or ``unexplained``, which is the job's fault.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from decimal import Decimal

DDL = [
    """CREATE TABLE items (
        id BIGINT PRIMARY KEY, flag TINYINT(1), active BOOLEAN, dur TIME(6), dur_s TIME(6),
        dt DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL, d DATE, big BIGINT UNSIGNED,
        amount DECIMAL(15,2) NOT NULL, wide DECIMAL(38,10), score DOUBLE,
        status ENUM('new','paid','shipped'), tags SET('a','b','c'), doc JSON, y YEAR, bits BIT(12),
        bin VARBINARY(16), data BLOB, note TEXT, legacy VARCHAR(16))""",
    """CREATE TABLE order_lines (order_id INT, line_no INT, qty INT NOT NULL, price DECIMAL(15,2),
        shipped TINYINT(1), PRIMARY KEY (order_id, line_no))""",
    "CREATE TABLE edges (src BIGINT, dst BIGINT, PRIMARY KEY (src, dst))",
]

ITEM_COLUMNS = {"id": "long", "flag": "boolean", "active": "boolean", "dur": "long", "dur_s": "string",
                "dt": "timestamp", "ts": "timestamp", "d": "date", "big": "decimal(20,0)",
                "amount": "decimal(15,2)", "wide": "decimal(38,10)", "score": "double", "status": "string",
                "tags": "string", "doc": "string", "y": "int", "bits": "long", "bin": "binary", "data": "binary",
                "note": "string", "legacy": "string"}
TABLES = {
    "items": (["id"], ITEM_COLUMNS),
    "order_lines": (["order_id", "line_no"], {"order_id": "int", "line_no": "int", "qty": "int",
                                        "price": "decimal(15,2)", "shipped": "boolean"}),
    "edges": (["src", "dst"], {"src": "long", "dst": "long"}),
}
NOT_NULL = {"items": ["amount"], "order_lines": ["qty"]}
SKETCH_SQL = "SELECT order_id, SUM(qty) AS q FROM order_lines GROUP BY order_id HAVING SUM(qty) > 30"

# Connector settings per variant of the acceptance test and the demo ("def" is the demo's).
VARIANTS = {
    "def": {"decimal_handling_mode": "precise", "time_precision_mode": "adaptive_time_microseconds",
            "format": "envelope", "properties": {}},
    "str": {"decimal_handling_mode": "string", "time_precision_mode": "connect", "format": "envelope",
            "properties": {"bigint.unsigned.handling.mode": "long"}},
    "unw": {"decimal_handling_mode": "precise", "time_precision_mode": "adaptive_time_microseconds",
            "format": "unwrapped", "properties": {"transforms.unwrap.delete.tombstone.handling.mode": "rewrite"}},
}
US = dt.timedelta(microseconds=1)


def column_types(table: str, variant: str = "def") -> dict[str, str]:
    cols = dict(TABLES[table][1])
    if variant == "str" and table == "items":
        cols["big"] = "long"  # bigint.unsigned.handling.mode=long: what Debezium then sends
    return cols


def job_tables(prefix: str, database: str, variant: str = "def") -> list[dict]:
    return [{"name": t, "topic": f"{prefix}.{database}.{t}", "primary_key": pk, "columns": column_types(t, variant),
             "format": VARIANTS[variant]["format"], **({"not_null": NOT_NULL[t]} if t in NOT_NULL else {})}
            for t, (pk, _) in TABLES.items()]


class Workload:
    def __init__(self, db, database: str, seed: int = 7, pace_s: float = 0.0):
        self.db, self.database, self.rng = db, database, random.Random(seed)
        self.pace_s = pace_s
        self.next_id = 1
        self.steps: dict[str, int] = {}
        self.has_legacy = True
        self.truncated = False
        self.lines_before_truncate: dict[tuple, tuple] = {}
        self.lines_touched: set[tuple] = set()  # keys written after the truncate
        self._conn = None  # one connection for the whole history

    def _cursor(self):
        if self._conn is None:
            self._conn = self.db.connect(self.database)
        return self._conn.cursor()

    def sql(self, text: str, params=None) -> None:
        with self._cursor() as cur:
            cur.execute(text, params if params is not None else ())
        if self.pace_s:
            time.sleep(self.pace_s)

    def query(self, text: str, params=None) -> list[tuple]:
        with self._cursor() as cur:
            cur.execute(text, params)
            return list(cur.fetchall())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _count(self, what: str, n: int = 1) -> None:
        self.steps[what] = self.steps.get(what, 0) + n

    def _line_keys(self, *keys: tuple) -> None:
        if self.truncated:
            self.lines_touched.update(keys)

    # -- values -----------------------------------------------------------------------------
    def _item(self, i: int) -> dict:
        r = self.rng
        us = r.randrange(-838 * 3600 * 10**6, 839 * 3600 * 10**6)
        return {
            "id": i, "flag": r.choice([0, 1, None]), "active": r.choice([0, 1]),
            "dur": dt.timedelta(microseconds=us), "dur_s": dt.timedelta(microseconds=r.randrange(0, 86400 * 10**6)),
            "dt": dt.datetime(1000, 1, 1) + dt.timedelta(microseconds=r.randrange(0, 9000 * 365 * 86400 * 10**6)),
            "ts": dt.datetime(1970, 1, 2) + dt.timedelta(microseconds=r.randrange(0, 2 * 10**15)),
            "d": dt.date(1000, 1, 1) + dt.timedelta(days=r.randrange(0, 9000 * 365)),
            "big": r.choice([r.randrange(2**64), r.randrange(2**32), None]),
            "amount": Decimal(r.randrange(-10**13, 10**13)) / 100,
            "wide": Decimal(r.randrange(-10**37, 10**37)) / Decimal(10**10) if r.random() < 0.9 else None,
            "score": r.choice([r.uniform(-1e9, 1e9), 0.0, -1.5e-7, None]),
            "status": r.choice(["new", "paid", "shipped", None]),
            "tags": r.choice(["", "a", "a,c", "a,b,c", None]),
            "doc": r.choice(['{"k": 1}', '{"x": 1e400, "s": "\\u017c"}', "[1, 2, 3]", None]),
            "y": r.choice([1901, 2024, 2155, None]),
            "bits": r.randrange(4096), "bin": r.randbytes(r.randrange(17)),
            "data": r.randbytes(r.randrange(300)) if r.random() < 0.8 else None,
            "note": "".join(r.choice("abcdefghij ąż") for _ in range(r.randrange(0, 60))),
            "legacy": r.choice([None, "old"]),
        }

    def _insert_item(self, row: dict | None = None) -> None:
        row = row or self._item(self.next_id)
        if not self.has_legacy:
            row.pop("legacy", None)
        cols = list(row)
        self.sql(f"INSERT INTO items ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                 tuple(row[c] for c in cols))
        self.next_id = max(self.next_id, row["id"] + 1)

    def _ids(self) -> list[int]:
        # the edge-value rows (100-103) stay as written, so the end compares them
        return [r[0] for r in self.query("SELECT id FROM items WHERE id > 0 AND id NOT BETWEEN 100 AND 103 "
                                            "ORDER BY id")]

    # -- the history ------------------------------------------------------------------------
    def setup(self) -> None:
        for stmt in DDL:
            self.sql(stmt)

    def initial(self, items: int = 25, orders: int = 12, nodes: int = 12) -> None:
        for _ in range(items):
            self._insert_item()
        for o in range(orders):
            for line in range(self.rng.randrange(1, 4)):
                self.sql("INSERT INTO order_lines VALUES (%s,%s,%s,%s,%s)", (o, line, self.rng.randrange(1, 20),
                                                                      Decimal(self.rng.randrange(100, 99999)) / 100,
                                                                      self.rng.choice([0, 1])))
        pairs = {(u, v) for u in range(nodes) for v in range(u + 1, nodes) if self.rng.random() < 0.35}
        for u, v in sorted(pairs):
            self.sql("INSERT INTO edges VALUES (%s,%s)", (u, v))
        self._count("insert", items + len(pairs))

    def edge_values(self) -> None:
        """Range ends of every type, zero dates, and a TINYINT(1) that is not 0 or 1 for a while."""
        base = self._item(0)
        for i, over in enumerate([
            {"dur": dt.timedelta(hours=-838, minutes=-59, seconds=-59), "dur_s": dt.timedelta(hours=838, minutes=59, seconds=59),
             "dt": dt.datetime(1000, 1, 1), "d": dt.date(1000, 1, 1), "ts": dt.datetime(1970, 1, 1, 0, 0, 1),
             "big": 2**64 - 1, "wide": Decimal("9" * 28 + "." + "9" * 10), "score": 4.9e-324, "y": 1901},
            {"dur": dt.timedelta(microseconds=-1), "dur_s": dt.timedelta(hours=24),
             "dt": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "d": dt.date(9999, 12, 31),
             "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999), "big": 2**63, "amount": Decimal("-9999999999999.99"),
             "score": 1.7976931348623157e308, "y": 2155, "bits": 4095, "bin": b"\x00\xff" * 8},
            {"dur": dt.timedelta(hours=100, microseconds=500000), "dur_s": dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
             "dt": dt.datetime(1900, 1, 1, 0, 0, 0, 1), "d": dt.date(1582, 10, 10), "big": 0, "bits": 0, "bin": b"",
             "data": b"", "note": "", "tags": "", "doc": '{"spaces" :  [ 1 ]}'},
        ]):
            self._insert_item({**base, "id": 100 + i, **over})
        # zero dates (MariaDB's default sql_mode accepts them): Debezium sends NULL, or 1970 for TIMESTAMP
        self.sql("INSERT INTO items (id, amount, dt, ts, d) VALUES (%s, 0, '0000-00-00 00:00:00', "
                 "'0000-00-00 00:00:00', '0000-00-00')", (103,))
        self.next_id = max(self.next_id, 104)
        # a TINYINT(1) holding 2 (quarantined as DATA_NOT_BOOLEAN), then 1 again: that update's
        # before image holds the 2 (ignored and counted)
        self.sql("UPDATE items SET flag = 2 WHERE id = 100")
        self.sql("UPDATE items SET flag = 1 WHERE id = 100")
        self._count("edge_values", 6)

    def churn(self, n: int = 60) -> None:
        r = self.rng
        for _ in range(n):
            ids = self._ids()
            x = r.random()
            if x < 0.15 or len(ids) < 5:
                self._insert_item()
                self._count("insert")
            elif x < 0.4:
                new = self._item(0)
                self.sql("UPDATE items SET flag = %s, dur = %s, dt = %s, big = %s, amount = %s, status = %s, "
                         "tags = %s, bits = %s WHERE id = %s",
                         (new["flag"], new["dur"], new["dt"], new["big"], new["amount"], new["status"], new["tags"],
                          new["bits"], r.choice(ids)))
                self._count("update")
            elif x < 0.5:  # primary-key change: delete of the old key, create of the new one
                self.sql("UPDATE items SET id = %s WHERE id = %s", (self.next_id, r.choice(ids)))
                self.next_id += 1
                self._count("pk_change")
            elif x < 0.6:
                self.sql("DELETE FROM items WHERE id = %s", (r.choice(ids),))
                self._count("delete")
            elif x < 0.75:
                k = (r.randrange(15), r.randrange(4))
                self._line_keys(k)
                self.sql("INSERT INTO order_lines VALUES (%s,%s,%s,%s,%s) ON DUPLICATE KEY UPDATE qty = VALUES(qty), "
                         "shipped = VALUES(shipped)", (*k, r.randrange(1, 20), Decimal(r.randrange(100, 9999)) / 100,
                                                       r.choice([0, 1, None])))
                self._count("upsert_lines")
            elif x < 0.82:  # composite-key change
                rows = self.query("SELECT order_id, line_no FROM order_lines")
                if rows:
                    o, ln = r.choice(rows)
                    if not self.query("SELECT 1 FROM order_lines WHERE order_id = %s AND line_no = %s",
                                         (o, ln + 10)):
                        self._line_keys((o, ln), (o, ln + 10))
                        self.sql("UPDATE order_lines SET line_no = %s WHERE order_id = %s AND line_no = %s", (ln + 10, o, ln))
                        self._count("pk_change_lines")
            elif x < 0.88:
                rows = self.query("SELECT order_id, line_no FROM order_lines")
                if rows:
                    k = tuple(r.choice(rows))
                    self._line_keys(k)
                    self.sql("DELETE FROM order_lines WHERE order_id = %s AND line_no = %s", k)
                    self._count("delete_lines")
            else:
                u, v = sorted(r.sample(range(14), 2))
                if r.random() < 0.5:
                    self.sql("INSERT IGNORE INTO edges VALUES (%s,%s)", (u, v))
                else:
                    self.sql("DELETE FROM edges WHERE src = %s AND dst = %s", (u, v))
                self._count("edge_change")

    def truncate_lines(self) -> None:
        self.lines_before_truncate = {tuple(r[:2]): tuple(r) for r in self.query(
            "SELECT order_id, line_no, qty, price, shipped FROM order_lines")}
        self.sql("TRUNCATE order_lines")
        self.truncated = True
        for o in range(6):
            self._line_keys((o, 0))
            self.sql("INSERT INTO order_lines VALUES (%s,%s,%s,%s,%s)", (o, 0, self.rng.randrange(1, 40), Decimal("9.99"), 1))
        self._count("truncate")

    def add_column(self) -> None:
        self.sql("ALTER TABLE items ADD COLUMN color VARCHAR(16), ADD COLUMN weight INT NOT NULL DEFAULT 7")
        self._count("add_column")

    def drop_column(self) -> None:
        self.sql("ALTER TABLE items DROP COLUMN legacy")
        self.has_legacy = False
        self._count("drop_column")

    def markers(self) -> None:
        """One last row per table: when the job has it, it has everything before it."""
        self.sql("INSERT INTO items (id, amount) VALUES (-1, 0)")
        self._line_keys((-1, -1))
        self.sql("INSERT INTO order_lines VALUES (-1, -1, 1, 0, 0)")
        self.sql("INSERT INTO edges VALUES (-1, -2)")

    def run(self) -> dict[str, int]:
        """The history; ``initial()`` first unless it ran already (before a connector's snapshot)."""
        if not self.steps:
            self.initial()
        self.edge_values()
        self.churn(50)
        self.truncate_lines()
        self.churn(30)
        self.add_column()
        self.churn(20)
        self.drop_column()
        self.churn(30)
        self.markers()
        self.close()
        return dict(self.steps)


# -- comparing a mirror with its MariaDB table ----------------------------------------------
ZERO_DATE = "zero date: Debezium sends NULL"
ZERO_TIMESTAMP = "zero TIMESTAMP: Debezium sends 1970-01-01 00:00:00"
CONNECT_MS = "time.precision.mode=connect: digits past the millisecond cut"
CONNECT_TIME_NULL = "time.precision.mode=connect: TIME outside 00:00:00..24:00:00 sent as NULL"
UNSIGNED_WRAP = "bigint.unsigned.handling.mode=long: BIGINT UNSIGNED above 2^63-1 wrapped modulo 2^64"
UNWRAP_TRUNCATE = "ExtractNewRecordState drops TRUNCATE: rows deleted by it stay in the mirror"


def db_rows(db, database: str, table: str) -> tuple[list[str], list[dict]]:
    """The declared columns the table still has, and its rows."""
    present = {r[0] for r in db.query("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_schema = %s AND table_name = %s", (database, table))}
    cols = [c for c in TABLES[table][1] if c in present]
    return cols, [dict(zip(cols, r)) for r in db.query(f"SELECT {', '.join(cols)} FROM {table}", database=database)]


def _duration_text(us: int) -> str:
    sign = "-" if us < 0 else ""
    s, frac = divmod(abs(us), 10**6)
    h, rem = divmod(s, 3600)
    text = f"{sign}{h:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return text + f".{frac:06d}" if frac else text


def expected(variant: str, typ: str, col: str, want):
    """What the mirror should hold for MariaDB's value ``want`` (as PyMySQL reads it) in a
    column declared ``typ``: (value, cause) with cause None when Debezium sends it unchanged."""
    connect = VARIANTS[variant]["time_precision_mode"] == "connect"
    if isinstance(want, str) and want.startswith("0000-00-00"):
        if col == "ts":
            return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), ZERO_TIMESTAMP
        return None, ZERO_DATE
    if isinstance(want, dt.timedelta):
        us = want // US
        value, cause = us, None
        if connect:
            if not 0 <= us <= 86_400 * 10**6:
                return None, CONNECT_TIME_NULL
            value = us // 1000 * 1000
            cause = CONNECT_MS if value != us else None
        return (value if typ == "long" else _duration_text(value)), cause
    if isinstance(want, dt.datetime):
        got = want.replace(tzinfo=dt.timezone.utc)
        if connect and col == "dt":  # DATETIME -> Kafka Timestamp (ms); TIMESTAMP stays ZonedTimestamp
            cut = got - dt.timedelta(microseconds=got.microsecond % 1000)
            return cut, (CONNECT_MS if cut != got else None)
        return got, None
    if typ == "long" and isinstance(want, bytes):  # BIT(n)
        return int.from_bytes(want, "big"), None
    if typ == "long" and isinstance(want, int) and want >= 2**63:
        return want - 2**64, UNSIGNED_WRAP
    if typ.startswith("decimal") and isinstance(want, int):
        return Decimal(want), None
    if typ == "boolean" and isinstance(want, int):
        return bool(want), None
    if typ == "string" and isinstance(want, set):
        return want, None
    return want, None


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, set):
        return isinstance(b, str) and a == (set(b.split(",")) if b else set())
    return a == b


def mirror_mismatches(db, database: str, table: str, mirror: list[dict], variant: str = "def",
                      lines_before_truncate: dict | None = None, lines_touched: set | None = None):
    """(rows compared, values compared, {cause: count}, unexplained differences).

    ``lines_before_truncate`` / ``lines_touched``: the unwrap variant's TRUNCATE of ``order_lines``
    never reaches the job, so rows it deleted that nothing wrote afterwards stay in the mirror."""
    cols, want = db_rows(db, database, table)
    pk, types = TABLES[table][0], column_types(table, variant)
    got_by = {tuple(r[k] for k in pk): r for r in mirror}
    want_by = {tuple(r[k] for k in pk): r for r in want}
    causes: dict[str, int] = {}
    bad: list = []
    if len(got_by) != len(mirror):
        bad.append(("duplicate keys in the mirror", len(mirror) - len(got_by)))
    for k in sorted(set(got_by) - set(want_by), key=repr):
        if (VARIANTS[variant]["format"] == "unwrapped" and table == "order_lines" and lines_before_truncate
                and k in lines_before_truncate and k not in (lines_touched or set())):
            old = dict(zip(["order_id", "line_no", "qty", "price", "shipped"], lines_before_truncate[k]))
            if all(_same(expected(variant, types[c], c, old[c])[0], got_by[k][c]) for c in cols):
                causes[UNWRAP_TRUNCATE] = causes.get(UNWRAP_TRUNCATE, 0) + 1
                continue
        bad.append(("only in the mirror", k))
    bad += [("only in MariaDB", k) for k in sorted(set(want_by) - set(got_by), key=repr)]
    for k in want_by:
        if k not in got_by:
            continue
        for c in cols:
            value, cause = expected(variant, types[c], c, want_by[k][c])
            got = got_by[k][c]
            if not _same(value, got):
                bad.append((k, c, want_by[k][c], got))
            elif cause:
                causes[cause] = causes.get(cause, 0) + 1
    return len(want), len(want) * len(cols), causes, bad
