"""One root error for ivmstream, with stable codes that tests, logs and the quarantine use.

Bad *data* never raises: it becomes a quarantine row carrying one of the ``DATA_*`` codes.
Bad *config, SQL or CLI input* raises an ``IvmError`` subclass whose message names what was
wrong and where. A broken internal invariant raises ``InvariantError`` and stops the query.
"""

from __future__ import annotations


class IvmError(Exception):
    """Root of every error ivmstream raises on purpose; ``code`` is stable across versions."""

    code = "IVM000"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"[{self.code}] {super().__str__()}"


class ConfigError(IvmError):
    """The TOML config or a CLI flag is invalid."""

    code = "IVM100"


class SqlError(IvmError):
    """A registered query uses SQL that the sketch engine does not support or cannot parse."""

    code = "IVM200"


class UnsupportedSqlError(SqlError):
    """A construct outside the supported fragment (outer join, window function, ...)."""

    code = "IVM201"


class UnsafeSketchError(IvmError):
    """A sketch was requested on an attribute the safety check cannot prove safe."""

    code = "IVM300"


class StateError(IvmError):
    """Operator state could not be restored (unknown encoding version, corrupt snapshot)."""

    code = "IVM400"


class InvariantError(IvmError):
    """An internal invariant broke; the streaming query must stop rather than go on wrong."""

    code = "IVM900"


# Codes for quarantine rows (bad data: the job goes on).
DATA_INVALID_JSON = "DATA_INVALID_JSON"
DATA_UNKNOWN_OP = "DATA_UNKNOWN_OP"
DATA_WRONG_TYPE = "DATA_WRONG_TYPE"
DATA_UNKNOWN_TABLE = "DATA_UNKNOWN_TABLE"
DATA_MISSING_KEY = "DATA_MISSING_KEY"
DATA_MISSING_IMAGE = "DATA_MISSING_IMAGE"
DATA_NULL = "DATA_NULL"  # NULL in a column the table declares not_null
DATA_OUT_OF_RANGE = "DATA_OUT_OF_RANGE"  # a value outside the table's declared ranges
DATA_BAD_EDGE = "DATA_BAD_EDGE"
# a valid source value the declared type cannot hold: PostgreSQL infinity dates/timestamps,
# decimal NaN/infinity, more digits than the precision, a non-zero digit past the scale,
# sub-microsecond times, numbers overflowing a double, text that is not valid Unicode
DATA_NOT_REPRESENTABLE = "DATA_NOT_REPRESENTABLE"
DATA_COLUMN_DROPPED = "DATA_COLUMN_DROPPED"  # a declared not_null column is missing from the after image
DATA_DECODER_ERROR = "DATA_DECODER_ERROR"  # an unexpected exception while decoding one record
DATA_TOAST_UNKNOWN = "DATA_TOAST_UNKNOWN"  # an unavailable (TOAST) value whose current value is not known
# an integer other than 0 or 1 for a boolean column (MySQL TINYINT(1)/BOOLEAN is an int16)
DATA_NOT_BOOLEAN = "DATA_NOT_BOOLEAN"
DATA_KEY_MISMATCH = "DATA_KEY_MISMATCH"  # the message key disagrees with the row image's key
# Avro in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro body):
DATA_AVRO_MAGIC = "DATA_AVRO_MAGIC"  # not that prefix: another first byte, or fewer than 5 bytes
DATA_AVRO_UNKNOWN_SCHEMA = "DATA_AVRO_UNKNOWN_SCHEMA"  # the registry answers that it has no schema with that id
DATA_AVRO_BAD_SCHEMA = "DATA_AVRO_BAD_SCHEMA"  # the registry's schema for the id is not an Avro record schema
DATA_AVRO_CORRUPT = "DATA_AVRO_CORRUPT"  # the body does not read by its schema: truncated, bad bytes, bytes left over
# the writer schema gives a declared column a type no value of which the column can hold
DATA_AVRO_SCHEMA_MISMATCH = "DATA_AVRO_SCHEMA_MISMATCH"


class RegistryUnavailable(IvmError):
    """The schema registry did not answer (refused, timed out, 5xx): records wait, none is quarantined."""

    code = "IVM530"


class RegistryRefused(IvmError):
    """The schema registry refuses the job's credentials (HTTP 401/403): the job stops with one
    line, no record quarantined, no offset committed; waiting would not make them right."""

    code = "IVM531"
