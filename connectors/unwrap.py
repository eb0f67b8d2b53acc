"""Debezium's ExtractNewRecordState ("unwrap") transform: the fields of the rows it writes.

Its connector properties and the start-up check that a config's declared format can apply every
delete live with the ``[debezium]`` section (core.config.debezium), re-exported here.

The transform replaces the change envelope by the row itself (``after``, or ``before`` for a
rewritten delete) and copies envelope fields into it as ``__<name>`` (``add.fields``). What
a delete becomes is ``delete.tombstone.handling.mode`` (debezium-mysql.md section 6):

| mode | a delete arrives as | the job |
|---|---|---|
| ``rewrite`` | the old row with ``"__deleted": "true"`` | deletes its key |
| ``rewrite-with-tombstone`` | that, then a tombstone | deletes its key (twice, harmless) |
| ``tombstone`` (Debezium's default) | a null value (``{"schema":…,"payload":null}``) | deletes the message key |
| ``delete-to-tombstone`` | a plain tombstone | deletes the message key |
| ``drop`` | nothing | cannot: refused at start-up |

Every mode drops truncates and the update's before image, and without ``add.fields=op`` a
create, a snapshot read and an update look alike.
"""

from __future__ import annotations

from core.config.debezium import DELETE_MODES, SMT_CLASS, SMT_NAME, check_formats, unwrap_properties  # noqa: F401

DELETED = "__deleted"
OP = "__op"
TABLE = "__table"
TS_FIELDS = ("__source_ts_ms", "__ts_ms")
