"""Debezium's ExtractNewRecordState ("unwrap") transform: the properties we give it, and the check
that a config's declared format can apply every delete.

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

from operators.errors import ConfigError

SMT_CLASS = "io.debezium.transforms.ExtractNewRecordState"
SMT_NAME = "unwrap"
# What `connect register` sets for unwrapped tables; [debezium] properties win over it.
DEFAULTS = {"delete.tombstone.handling.mode": "rewrite", "add.fields": "op,table,source.ts_ms"}
DELETE_MODES = ("rewrite", "rewrite-with-tombstone", "tombstone", "delete-to-tombstone")
DELETED = "__deleted"
OP = "__op"
TABLE = "__table"
TS_FIELDS = ("__source_ts_ms", "__ts_ms")


def unwrap_properties(cfg) -> dict:
    """The transform's connector properties when the config's tables are unwrapped, else {}."""
    if not cfg.tables or any(t.format != "unwrapped" for t in cfg.tables):
        return {}
    props = {"transforms": SMT_NAME, f"transforms.{SMT_NAME}.type": SMT_CLASS}
    props.update({f"transforms.{SMT_NAME}.{k}": v for k, v in DEFAULTS.items()})
    return props


def unwrap_transforms(props: dict) -> list[tuple[str, dict]]:
    """(name, options) of each ExtractNewRecordState in a connector's ``transforms`` list."""
    out = []
    for name in (n.strip() for n in str(props.get("transforms", "")).split(",")):
        if name and str(props.get(f"transforms.{name}.type", "")).strip() == SMT_CLASS:
            prefix = f"transforms.{name}."
            out.append((name, {k[len(prefix):]: str(v) for k, v in props.items() if k.startswith(prefix)}))
    return out


def check_formats(cfg) -> None:
    """ConfigError unless the connector that ``[debezium]`` describes writes what the tables
    declare (envelopes or unwrapped rows) and every delete reaches the job."""
    d = cfg.debezium
    if d is None:
        return  # a connector of the user's own: the declared format is taken as given
    where = f"{cfg.source_file or 'config'}: [debezium]"
    formats = {t.format for t in cfg.tables}
    if len(formats) > 1:
        unwrapped = [t.name for t in cfg.tables if t.format == "unwrapped"]
        raise ConfigError(f"{where}: one connector writes every table, but {unwrapped} are format = \"unwrapped\" "
                          "and the others \"envelope\"; declare one format (or use two configs)")
    smts = unwrap_transforms({**unwrap_properties(cfg), **dict(d.extra)})
    if smts and formats != {"unwrapped"}:
        raise ConfigError(f"{where}: properties apply ExtractNewRecordState (transforms.{smts[0][0]}), so records "
                          "arrive unwrapped; declare format = \"unwrapped\" on every [[tables]] entry")
    if not smts and formats == {"unwrapped"}:
        raise ConfigError(f"{where}: the tables are format = \"unwrapped\" but properties.transforms names no "
                          f"ExtractNewRecordState; keep {SMT_NAME!r} in transforms")
    for name, opts in smts:
        for gone in ("delete.handling.mode", "drop.tombstones"):
            if gone in opts:
                raise ConfigError(f"{where}: transforms.{name}.{gone} is no longer read by Debezium 3.3; "
                                  "set delete.tombstone.handling.mode (rewrite keeps every delete)")
        mode = opts.get("delete.tombstone.handling.mode", "tombstone")
        if mode not in DELETE_MODES:
            raise ConfigError(f"{where}: transforms.{name}.delete.tombstone.handling.mode = {mode!r} cannot apply "
                              f"deletes (the mirrors would keep deleted rows); use one of {', '.join(DELETE_MODES)}")
