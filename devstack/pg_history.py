"""A seeded change history run in a real PostgreSQL database: `demo --source postgres` and tests.

Three tables cover what Debezium encodes differently: ``accounts`` (numeric(15,2) and
numeric(38,10), integer, double precision, text stored out of line (TOAST), date, timestamp,
timestamptz, boolean, and a nullable column dropped mid-stream), ``lines`` (composite primary
key, truncated mid-stream), and ``edges`` (a graph for the triangle count). The history
holds inserts, updates, updates that leave the TOASTed text alone, primary-key changes
(some of rows with TOASTed text), deletes, TRUNCATE, ADD COLUMN, DROP COLUMN, and a row set
to infinity / NaN and later back to finite values. The database is the oracle: the demo and
the tests read its final tables and compare them with the mirrors (``mirror_mismatches``).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from decimal import Decimal

DDL = [
    """CREATE TABLE accounts (
        id bigint PRIMARY KEY, balance numeric(15,2) NOT NULL, big numeric(38,10), n integer,
        score double precision, note text, day date, ts timestamp, tstz timestamptz, flag boolean,
        legacy text)""",
    # out of line and uncompressed past ~2 kB, so an update that leaves it alone sends Debezium's
    # unavailable-value placeholder (REPLICA IDENTITY DEFAULT)
    "ALTER TABLE accounts ALTER COLUMN note SET STORAGE EXTERNAL",
    """CREATE TABLE lines (order_id integer, line_no integer, qty integer NOT NULL, price numeric(15,2),
        PRIMARY KEY (order_id, line_no))""",
    "CREATE TABLE edges (src bigint, dst bigint, PRIMARY KEY (src, dst))",
]

TABLES = {
    "accounts": (["id"], {"id": "long", "balance": "decimal(15,2)", "big": "decimal(38,10)", "n": "int",
                          "score": "double", "note": "string", "day": "date", "ts": "timestamp",
                          "tstz": "timestamp", "flag": "boolean", "legacy": "string"}),
    "lines": (["order_id", "line_no"], {"order_id": "int", "line_no": "int", "qty": "int",
                                        "price": "decimal(15,2)"}),
    "edges": (["src", "dst"], {"src": "long", "dst": "long"}),
}
NOT_NULL = {"accounts": ["balance"], "lines": ["qty"]}

SKETCH_SQL = "SELECT order_id, SUM(qty) AS q FROM lines GROUP BY order_id HAVING SUM(qty) > 30"


def job_tables(prefix: str) -> list[dict]:
    return [{"name": t, "topic": f"{prefix}.public.{t}", "primary_key": pk, "columns": cols,
             **({"not_null": NOT_NULL[t]} if t in NOT_NULL else {})}
            for t, (pk, cols) in TABLES.items()]


class Workload:
    def __init__(self, pg, database: str, seed: int = 7, pace_s: float = 0.0):
        self.pg, self.db, self.rng = pg, database, random.Random(seed)
        self.pace_s = pace_s  # pause after each statement (the demo trickles; tests do not)
        self.next_id = 1
        self.steps: dict[str, int] = {}
        self.has_legacy = True

    def sql(self, text: str, params=None) -> None:
        self.pg.execute(text, params, database=self.db)
        if self.pace_s:
            time.sleep(self.pace_s)

    def _count(self, what: str, n: int = 1) -> None:
        self.steps[what] = self.steps.get(what, 0) + n

    # -- values -----------------------------------------------------------------------------
    def _note(self, big: bool) -> str:
        n = self.rng.randrange(2500, 6000) if big else self.rng.randrange(0, 40)
        return "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))

    def _account(self, i: int) -> tuple:
        r = self.rng
        # whole milliseconds: time.precision.mode=connect carries milliseconds only
        ts = dt.datetime(1969, 7, 20, 20, 17, 40) + dt.timedelta(milliseconds=r.randrange(-10**12, 10**12))
        tstz = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=r.randrange(10**14))
        big = Decimal(r.randrange(-10**27, 10**27)) / Decimal(10**10) if r.random() < 0.9 else None
        return (i, Decimal(r.randrange(-10**9, 10**9)) / 100, big, r.randrange(-2**31, 2**31),
                r.uniform(-1e6, 1e6), self._note(r.random() < 0.5),
                dt.date(1900, 1, 1) + dt.timedelta(days=r.randrange(80000)), ts, tstz, r.random() < 0.5,
                r.choice([None, "old", "legacy value"]))

    def _insert_account(self) -> None:
        row = self._account(self.next_id)
        cols = "id, balance, big, n, score, note, day, ts, tstz, flag" + (", legacy" if self.has_legacy else "")
        row = row if self.has_legacy else row[:-1]
        self.sql(f"INSERT INTO accounts ({cols}) VALUES ({', '.join(['%s'] * len(row))})", row)
        self.next_id += 1

    def _ids(self) -> list[int]:
        return [r[0] for r in self.pg.query("SELECT id FROM accounts ORDER BY id", database=self.db)]

    # -- the history ------------------------------------------------------------------------
    def setup(self) -> None:
        for stmt in DDL:
            self.sql(stmt)

    def initial(self, accounts: int = 60, orders: int = 25, nodes: int = 14) -> None:
        for _ in range(accounts):
            self._insert_account()
        for o in range(orders):
            for line in range(self.rng.randrange(1, 5)):
                self.sql("INSERT INTO lines VALUES (%s,%s,%s,%s)",
                         (o, line, self.rng.randrange(1, 20), Decimal(self.rng.randrange(100, 99999)) / 100))
        pairs = {(u, v) for u in range(nodes) for v in range(u + 1, nodes) if self.rng.random() < 0.35}
        for u, v in sorted(pairs):
            self.sql("INSERT INTO edges VALUES (%s,%s)", (u, v))
        self._count("insert", accounts + len(pairs))

    def churn(self, n: int = 120) -> None:
        r = self.rng
        for _ in range(n):
            ids = self._ids()
            x = r.random()
            if x < 0.15 or len(ids) < 5:
                self._insert_account()
                self._count("insert")
            elif x < 0.45:  # the TOASTed note is left alone: Debezium sends the placeholder
                self.sql("UPDATE accounts SET balance = %s, n = %s WHERE id = %s",
                         (Decimal(r.randrange(-10**9, 10**9)) / 100, r.randrange(1000), r.choice(ids)))
                self._count("update_toast_untouched")
            elif x < 0.6:
                self.sql("UPDATE accounts SET note = %s, flag = NOT coalesce(flag, false) WHERE id = %s",
                         (self._note(r.random() < 0.5), r.choice(ids)))
                self._count("update_note")
            elif x < 0.7:  # a primary-key change: delete of the old key, create of the new one
                self.sql("UPDATE accounts SET id = %s, n = 7 WHERE id = %s", (self.next_id, r.choice(ids)))
                self.next_id += 1
                self._count("pk_change")
            elif x < 0.8:
                self.sql("DELETE FROM accounts WHERE id = %s", (r.choice(ids),))
                self._count("delete")
            elif x < 0.9:
                o = r.randrange(30)
                self.sql("INSERT INTO lines VALUES (%s,%s,%s,%s) ON CONFLICT (order_id, line_no) DO UPDATE "
                         "SET qty = EXCLUDED.qty", (o, r.randrange(5), r.randrange(1, 20), Decimal(r.randrange(100, 9999)) / 100))
                self._count("upsert_lines")
            else:
                u, v = sorted(r.sample(range(16), 2))
                if r.random() < 0.5:
                    self.sql("INSERT INTO edges VALUES (%s,%s) ON CONFLICT DO NOTHING", (u, v))
                else:
                    self.sql("DELETE FROM edges WHERE src = %s AND dst = %s", (u, v))
                self._count("edge_change")

    def special_values(self) -> int:
        """A row goes to ±infinity and NaN, then back; double NaN/±Infinity stay (a double holds them)."""
        ids = self._ids()
        a, b, c = ids[0], ids[1], ids[2]
        self.sql("UPDATE accounts SET day = 'infinity', ts = '-infinity', tstz = 'infinity', big = 'NaN' "
                 "WHERE id = %s", (a,))
        self.sql("UPDATE accounts SET score = 'NaN' WHERE id = %s", (b,))
        self.sql("UPDATE accounts SET score = '-Infinity' WHERE id = %s", (c,))
        self.sql("UPDATE accounts SET day = '2020-02-29', ts = '2020-02-29 12:00:00.123', "
                 "tstz = '2020-02-29 12:00:00.123456+00', big = 1.5 WHERE id = %s", (a,))
        self._count("special", 4)
        return a

    def truncate_lines(self) -> None:
        self.sql("TRUNCATE lines")
        for o in range(10):
            self.sql("INSERT INTO lines VALUES (%s,%s,%s,%s)", (o, 0, self.rng.randrange(1, 40), Decimal("9.99")))
        self._count("truncate")

    def add_column(self) -> None:
        self.sql("ALTER TABLE accounts ADD COLUMN extra integer DEFAULT 1")
        self._count("add_column")

    def drop_column(self) -> None:
        self.sql("ALTER TABLE accounts DROP COLUMN legacy")
        self.has_legacy = False
        self._count("drop_column")

    def markers(self) -> None:
        """One last row per table: when the job has it, it has everything before it."""
        self.sql("INSERT INTO accounts (id, balance) VALUES (-1, 0)")
        self.sql("INSERT INTO lines VALUES (-1, -1, 1, 0)")
        self.sql("INSERT INTO edges VALUES (-1, -2)")

    def run(self) -> dict[str, int]:
        self.initial()
        self.churn(80)
        self.special_values()
        self.truncate_lines()
        self.churn(40)
        self.add_column()
        self.churn(30)
        self.drop_column()
        self.churn(40)
        self.markers()
        return dict(self.steps)


# -- comparing a mirror with its PostgreSQL table -------------------------------------------
def pg_rows(pg, database: str, table: str) -> tuple[list[str], list[dict]]:
    """The declared columns the table still has, and its rows."""
    present = {r[0] for r in pg.query("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_schema = 'public' AND table_name = %s", (table,),
                                      database=database)}
    cols = [c for c in TABLES[table][1] if c in present]
    return cols, [dict(zip(cols, r)) for r in pg.query(f"SELECT {', '.join(cols)} FROM {table}", database=database)]


def same_value(want, got) -> bool:
    """PostgreSQL's value equals the mirror's: NaN equals NaN; a timestamp without zone is kept
    as the same wall clock read as UTC."""
    if isinstance(want, float) and isinstance(got, float):
        return (math.isnan(want) and math.isnan(got)) or want == got
    if isinstance(want, dt.datetime) and isinstance(got, dt.datetime):
        if want.tzinfo is None and got.tzinfo is not None:
            got = got.astimezone(dt.timezone.utc).replace(tzinfo=None)
        elif want.tzinfo is not None and got.tzinfo is None:
            got = got.replace(tzinfo=dt.timezone.utc)
    return want == got


def mirror_mismatches(pg, database: str, table: str, mirror: list[dict]) -> tuple[int, int, list]:
    """(rows compared, values compared, mismatches) of a mirror's rows against the table."""
    cols, want = pg_rows(pg, database, table)
    pk = TABLES[table][0]
    got_by = {tuple(r[k] for k in pk): r for r in mirror}
    want_by = {tuple(r[k] for k in pk): r for r in want}
    bad: list = []
    if len(got_by) != len(mirror):
        bad.append(("duplicate keys in the mirror", len(mirror) - len(got_by)))
    bad += [("only in the mirror", k) for k in sorted(set(got_by) - set(want_by), key=repr)]
    bad += [("only in PostgreSQL", k) for k in sorted(set(want_by) - set(got_by), key=repr)]
    bad += [(k, c, want_by[k][c], got_by[k][c]) for k in want_by if k in got_by for c in cols
            if not same_value(want_by[k][c], got_by[k][c])]
    return len(want), len(want) * len(cols), bad
