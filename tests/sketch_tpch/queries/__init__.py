"""The IMP benchmark queries as SQL text: 12 TPC-H queries, 2 Crimes queries, synthetic shapes.

SQL is kept verbatim from the IMP artifact (Postgres dialect: ``::float``, ``to_date``);
the oracle transpiles it to DuckDB with sqlglot. Adaptations are listed in ``ADAPTATIONS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Where our copy differs from the artifact, and why.
ADAPTATIONS = {
    "crimes_q02": "HAVING threshold scaled from 1000 to the size of the synthetic crimes table",
    "synthetic": "tables are small in-memory versions of syncGen.py's (same column laws, fewer rows)",
}

#: TPC-H queries that read lineitem only; the others join it with other tables.
SINGLE_TABLE_TPCH = ("q01", "q06")


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    table: str  # the partitioned (and updated) table
    attribute: str

    @property
    def single_table(self) -> bool:
        return self.name.startswith("crimes") or self.name.split("_")[-1] in SINGLE_TABLE_TPCH or (
            self.name.startswith("syn") and " join " not in self.sql
        )


def _sql(path: Path) -> str:
    return " ".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("--")).strip()


def tpch_queries() -> dict[str, Query]:
    out = {}
    for p in sorted((HERE / "tpch").glob("q*.sql")):
        name = f"tpch_{p.stem}"
        out[name] = Query(name, _sql(p), "lineitem", "l_orderkey")
    return out


def crimes_queries(threshold: int = 1000) -> dict[str, Query]:
    q1 = _sql(HERE / "crimes" / "q01.sql")
    q2 = _sql(HERE / "crimes" / "q02.sql").replace("{threshold}", str(int(threshold)))
    return {
        "crimes_q01": Query("crimes_q01", q1, "crimes", "beat"),
        "crimes_q02": Query("crimes_q02", q2, "crimes", "beat"),
    }


def synthetic_queries() -> dict[str, Query]:
    out = {}
    for line in (HERE / "synthetic" / "queries.sql").read_text().splitlines():
        if not line.strip() or line.startswith("--"):
            continue
        name, sql = line.split(":", 1)
        table = sql.split(" from ", 1)[1].split()[0]
        if table.startswith("("):
            table = sql.split(" from ", 2)[2].split()[0]
        out[f"syn_{name.strip()}"] = Query(f"syn_{name.strip()}", sql.strip(), table, "a")
    return out
