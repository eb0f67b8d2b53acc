"""Tables by name (``[catalog] database``): every table the job writes, registered in Spark's
catalog as ``<database>.<name>`` over its lake location, so that ``SELECT … FROM ivm.orders_mirror``
works in any Spark session on the same metastore.

Names: a mirror is ``<table>_mirror``, every other table its folder's name (``batches``,
``quarantine``, ``sketches``, ``triangle_counts``, ``reachability``, ...). Registration is
``CREATE TABLE IF NOT EXISTS <db>.<name> USING delta LOCATION '<path>'``: an external table, so
dropping it drops the name, never the data, and the schema stays the Delta log's. The job
registers the tables it has opened (``delta_sink.tables_ensured``) at start and after each batch
that opened a new one; a name already registered over another location is left alone and said.

Which catalog: Spark's session catalog (with Delta's catalog over it). Names outlive the job only
in a persistent metastore: Hive's (``spark.sql.catalogImplementation = "hive"`` with a metastore
in ``[spark] conf``: an embedded Derby folder, or ``spark.hadoop.hive.metastore.uris``); with
Spark's default in-memory catalog they last as long as the job's session, and a line says so.
"""

from __future__ import annotations

from typing import Callable

from connectors import delta_sink as sink
from connectors import object_store
from core.config import JobConfig


def table_name(lake_root, path: str) -> str | None:
    """The catalog name of the lake table at ``path``; None if it is not under ``lake_root``."""
    root = object_store.join(lake_root).rstrip("/") + "/"
    p = str(path)
    if not p.startswith(root):
        return None
    rel = p[len(root):].strip("/").split("/")
    if len(rel) == 2 and rel[0] == "mirrors":
        return f"{rel[1]}_mirror"
    return rel[0] if len(rel) == 1 else None


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _same_place(a: str, b: str) -> bool:
    norm = lambda p: str(p).removeprefix("file:").rstrip("/")  # noqa: E731
    return norm(a) == norm(b)


class CatalogRegistrar:
    """Registers the job's tables in ``<database>``; ``register_new`` is cheap when nothing is new."""

    def __init__(self, cfg: JobConfig, spark, say: Callable[[str], None]):
        self.cfg, self.say, self.db = cfg, say, cfg.catalog.database
        self.done: set[str] = set()
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {_quote(self.db)}")
        impl = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
        if impl != "hive":
            say(f"catalog: database {self.db} is in Spark's in-memory catalog: its names last as long as this "
                "job's session (README: Tables by name, for a metastore)")

    def register_new(self, spark) -> list[str]:
        """Register every table the job has opened since the last call; the names registered."""
        added = []
        for path in sorted(sink.tables_ensured() - self.done):
            self.done.add(path)
            name = table_name(self.cfg.lake_root, path)
            if name is None:
                continue
            full = f"{_quote(self.db)}.{_quote(name)}"
            location = path.replace("'", "\\'")
            spark.sql(f"CREATE TABLE IF NOT EXISTS {full} USING delta LOCATION '{location}'")
            where = spark.sql(f"DESCRIBE DETAIL {full}").first()["location"]
            if not _same_place(where, path):
                self.say(f"catalog: {self.db}.{name} is registered over {where}, not this job's {path}; left as it is")
                continue
            added.append(name)
        return added
