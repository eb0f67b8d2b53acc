"""From-scratch oracle for provenance sketches: accurate Lineage capture through DuckDB.

``reference_sketch(sql, tables, partitions)`` rewrites the query (sqlglot, Perm style) so every
result row carries the fragment ids of its lineage in the partitioned tables, runs it in DuckDB
and unions them; ``reference_result(sql, tables)`` runs the query itself in DuckDB. Nothing here
imports the engine in ``operators.sketch``: fragments are computed from the boundaries alone.
See ``capture.py`` for the rewrite rules and the tie rule of ORDER BY … LIMIT.
"""

from tests.oracles.sketch_reference.capture import capture_sql, prov_column, reference_result, reference_sketch
from tests.oracles.sketch_reference.fragments import fragment_ids, fragment_of, n_fragments

__all__ = [
    "capture_sql",
    "fragment_ids",
    "fragment_of",
    "n_fragments",
    "prov_column",
    "reference_result",
    "reference_sketch",
]
