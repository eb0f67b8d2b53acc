"""One Debezium field value -> the Python value of its declared column type, exactly or not at all.

Two steps. ``from_schema`` / ``from_modes`` read a JSON value as what the source database held, guided by
the field's Connect schema when the record carries one (``name`` first, then ``type``) and
otherwise by the table's ``decimal_mode`` / ``time_mode`` (Debezium's
``decimal.handling.mode`` / ``time.precision.mode``). The result is one of: bool, int,
Decimal (exact, NaN and +-Infinity included), float (only NaN and +-Infinity, which Debezium
sends as strings), str, or a ``Temporal`` (days, nanoseconds of the day, nanoseconds since
the epoch, or PostgreSQL 'infinity'). JSON numbers with a fraction or exponent are parsed
as Decimal, so no digit is lost before the declared type is known.

``fit`` then converts that value into the declared type or raises ``Bad``:
DATA_WRONG_TYPE when the value is not of a kind the type takes (a string for an int, an
unparsable date), DATA_NOT_REPRESENTABLE when it is a valid source value the type cannot
hold (infinity dates and timestamps, decimal NaN, more digits than the precision, a non-zero
digit past the scale, sub-microsecond timestamps, numbers that overflow a double, strings
that are not valid Unicode). Nothing is rounded, except that a value going into a ``double``
column becomes the nearest double (that is what declaring ``double`` asks for).

All decimal arithmetic runs in ``EXACT``, a context with enough digits for any value that
reaches it, so the process-wide 28-digit default never rounds or raises.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal, MAX_EMAX, MAX_PREC, MIN_EMIN, localcontext
from typing import Any

from core import errors as E

PLACEHOLDER = "__debezium_unavailable_value"
PLACEHOLDER_B64 = base64.b64encode(PLACEHOLDER.encode()).decode()  # bytea in binary.handling.mode=bytes
PLACEHOLDER_BYTES = PLACEHOLDER.encode()  # the same in Avro, where bytes are bytes
_PLACEHOLDER_FORMS = (PLACEHOLDER, [PLACEHOLDER], list(PLACEHOLDER.encode()))

EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH_TS = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
EPOCH_ORDINAL = EPOCH_DATE.toordinal()
from_ordinal = dt.date.fromordinal
INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
CONNECT_INT_RANGE = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
_DECIMAL_TYPE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
MAX_DECIMAL_BYTES = 1024  # an unscaled value longer than this cannot fit decimal(38, s)

# Debezium semantic type names
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DATE_NAMES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
# time of day and timestamps: nanoseconds per unit
TIME_UNITS = {"io.debezium.time.Time": 10**6, "org.apache.kafka.connect.data.Time": 10**6,
               "io.debezium.time.MicroTime": 10**3, "io.debezium.time.NanoTime": 1}
TS_UNITS = {"io.debezium.time.Timestamp": 10**6, "org.apache.kafka.connect.data.Timestamp": 10**6,
             "io.debezium.time.MicroTimestamp": 10**3, "io.debezium.time.NanoTimestamp": 1}
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
ZONED_TIME = "io.debezium.time.ZonedTime"
BITS = "io.debezium.data.Bits"  # MySQL BIT(n > 1): bytes, least significant byte first

# PostgreSQL 'infinity' / '-infinity' as Debezium encodes them (debezium.md section 2).
DATE_INFINITY = {-2147472692: 1, -2147472691: -1}  # +infinity is the smaller number
_TS_INFINITY = {10**3: {9223372036825200000: 1, -9223372036832400000: -1},  # MicroTimestamp
                10**6: {9223372036825200: 1, -9223372036832400: -1}}  # Timestamp (ms)

# Schemaless timestamps: nanoseconds per integer unit for each time.precision.mode.
TS_UNIT_BY_MODE = {"adaptive": 10**3, "adaptive_time_microseconds": 10**3, "microseconds": 10**3,
                   "connect": 10**6, "nanoseconds": 1, "isostring": None}

_ASCII = re.ASCII
_DATE_TEXT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", _ASCII)
_TS_TEXT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                      r"(Z|[+-][0-9]{2}:[0-9]{2})?", _ASCII)
_TIME_TEXT = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})?", _ASCII)
# A MySQL TIME as text: a signed duration of up to 838 hours.
_DURATION_TEXT = re.compile(r"(-?)([0-9]{2,3}):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]{1,9}))?", _ASCII)
_PLAIN_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?", _ASCII)
_SPECIAL_DECIMAL = {"NAN": "NaN", "NaN": "NaN", "POSITIVE_INFINITY": "Infinity", "Infinity": "Infinity",
                    "NEGATIVE_INFINITY": "-Infinity", "-Infinity": "-Infinity"}
_SPECIAL_FLOAT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
NS_PER_DAY = 86_400 * 10**9


class Bad(Exception):
    """A record that must be quarantined: a stable DATA_* code and a reason."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


@dataclass(frozen=True, slots=True)
class Temporal:
    """A date (days), a time of day (ns since midnight) or an instant (ns since the epoch, UTC)."""

    kind: str  # "date" | "time" | "timestamp"
    value: int = 0
    inf: int = 0  # +1 / -1: PostgreSQL 'infinity' / '-infinity' (value unused)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """The part of a Connect field schema the decoder uses."""

    type: str
    name: str | None = None
    scale: int | None = None  # parameters.scale of a Decimal


@dataclass(frozen=True, slots=True)
class Modes:
    decimal: str = "precise"
    time: str = "adaptive"


def is_placeholder(raw: Any, spec: FieldSpec | None) -> bool:
    """Whether a JSON value is Debezium's unavailable-value placeholder (an unchanged TOAST value)."""
    if raw == PLACEHOLDER:
        return True
    if isinstance(raw, list):
        return raw in _PLACEHOLDER_FORMS
    return (raw == PLACEHOLDER_B64 or raw == PLACEHOLDER_BYTES) and spec is not None and spec.type == "bytes" \
        and spec.name is None


def field_spec(raw: Any, where: str) -> FieldSpec:
    if not isinstance(raw, dict):
        raise Bad(E.DATA_WRONG_TYPE, f"{where}: schema field is not an object")
    typ, name, params = raw.get("type"), raw.get("name"), raw.get("parameters")
    if not isinstance(typ, str) or not (name is None or isinstance(name, str)):
        raise Bad(E.DATA_WRONG_TYPE, f"{where}: schema field has no valid type/name")
    scale = None
    if name == CONNECT_DECIMAL:
        s = params.get("scale") if isinstance(params, dict) else None
        if isinstance(s, str) and re.fullmatch(r"-?[0-9]{1,4}", s, _ASCII):
            scale = int(s)
        elif isinstance(s, int) and not isinstance(s, bool) and abs(s) < 10**4:
            scale = s
        else:
            raise Bad(E.DATA_WRONG_TYPE, f"{where}: Decimal schema without a valid parameters.scale")
    return FieldSpec(typ, name, scale)


# ---------------------------------------------------------------- source values

def _unscaled_b64(text: Any, scale: int, what: str) -> Decimal:
    """The unscaled big-endian two's-complement integer, base64 text in JSON or bytes in Avro."""
    if text.__class__ is bytes:
        raw = text
    elif not isinstance(text, str) or not text:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(text)} is not a base64 decimal")
    else:
        try:
            raw = base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error):
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(text)} is not valid base64") from None
    if not raw:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: empty base64 decimal")
    if len(raw) > MAX_DECIMAL_BYTES:
        raise Bad(E.DATA_NOT_REPRESENTABLE, f"{what}: a decimal of {len(raw)} bytes has too many digits")
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, context=EXACT)


def _variable_scale(raw: Any, what: str) -> Decimal:
    if not (isinstance(raw, dict) and set(raw) == {"scale", "value"}):
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a VariableScaleDecimal {{scale, value}}")
    scale = raw["scale"]
    if isinstance(scale, bool) or not isinstance(scale, int) or abs(scale) >= 10**4:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: VariableScaleDecimal scale {_short(scale)} is not a small integer")
    return _unscaled_b64(raw["value"], scale, what)


def _decimal_text(raw: str, what: str) -> Decimal:
    """A decimal written as text (decimal.handling.mode=string): plain digits or NaN/infinity words."""
    if raw in _SPECIAL_DECIMAL:
        return Decimal(_SPECIAL_DECIMAL[raw])
    if _PLAIN_DECIMAL.fullmatch(raw):
        return Decimal(raw)
    raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a decimal")


def _number(raw: Any, what: str) -> int | Decimal | float:
    """A JSON number, or one of the strings Debezium uses for float NaN and infinities."""
    if isinstance(raw, bool):
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {raw!r} is not a number")
    if isinstance(raw, (int, Decimal)):
        return raw
    if isinstance(raw, float):  # only if the caller parsed JSON with floats
        return Decimal(repr(raw)) if math.isfinite(raw) else raw
    if isinstance(raw, str) and raw in _SPECIAL_FLOAT:
        return _SPECIAL_FLOAT[raw]
    raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a number")


def float32_decimal(x: float) -> Decimal:
    """A 32-bit float (Avro "float", read as a double) as the shortest decimal that is the same
    float32: what JsonConverter writes for it (Java's Float.toString), so 1.1f is 1.1, not
    1.100000023841858."""
    try:
        f32 = struct.pack("<f", x)
    except OverflowError:  # not a float32 at all (cannot come from an Avro float)
        return Decimal(repr(x))
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        try:
            if struct.pack("<f", float(text)) == f32:
                return Decimal(text)
        except OverflowError:  # rounded up past the largest float32
            continue
    return Decimal(repr(x))


def _integer(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not an integer")
    return raw


def _base64(raw: Any, what: str) -> bytes:
    """Connect bytes: base64 text in JSON, the bytes themselves in Avro."""
    if raw.__class__ is bytes:
        return raw
    if not isinstance(raw, str):
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except (ValueError, binascii.Error):
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not valid base64") from None


def _bits(raw: Any, what: str) -> int:
    """A BIT(n) value (io.debezium.data.Bits, little-endian bytes) as an unsigned integer."""
    return int.from_bytes(_base64(raw, what), "little", signed=False)


def _timestamp_int(v: int, unit_ns: int) -> Temporal:
    inf = _TS_INFINITY.get(unit_ns, {}).get(v)
    return Temporal("timestamp", inf=inf) if inf else Temporal("timestamp", v * unit_ns)


def _date_int(v: int) -> Temporal:
    inf = DATE_INFINITY.get(v)
    return Temporal("date", inf=inf) if inf else Temporal("date", v)


def _fraction_ns(frac: str | None) -> int:
    return int((frac or "").ljust(9, "0"))


def _offset_s(tz: str | None) -> int:
    if tz is None or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    h, m = int(tz[1:3]), int(tz[4:6])
    if h > 23 or m > 59:
        raise ValueError("offset out of range")
    return sign * (h * 3600 + m * 60)


def parse_timestamp_text(raw: str, what: str) -> Temporal:
    """ISO-8601 'YYYY-MM-DD[T ]HH:MM:SS[.f{1,9}][Z|+HH:MM]' exactly (naive text is UTC), or +-infinity."""
    if raw in ("infinity", "-infinity"):
        return Temporal("timestamp", inf=-1 if raw[0] == "-" else 1)
    m = _TS_TEXT.fullmatch(raw)
    if m is None:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not an ISO-8601 timestamp")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    try:
        day = dt.date(int(y), int(mo), int(d))
        if int(h) > 23 or int(mi) > 59 or int(s) > 59:
            raise ValueError("time of day out of range")
        off = _offset_s(tz)
    except ValueError:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a valid timestamp") from None
    secs = (day - EPOCH_DATE).days * 86_400 + int(h) * 3600 + int(mi) * 60 + int(s) - off
    return Temporal("timestamp", secs * 10**9 + _fraction_ns(frac))


def parse_date_text(raw: str, what: str) -> Temporal:
    """'YYYY-MM-DD' exactly, or +-infinity."""
    if raw in ("infinity", "-infinity"):
        return Temporal("date", inf=-1 if raw[0] == "-" else 1)
    m = _DATE_TEXT.fullmatch(raw)
    try:
        if m is None:
            raise ValueError
        day = dt.date(*(int(g) for g in m.groups()))
    except ValueError:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not an ISO-8601 date") from None
    return Temporal("date", (day - EPOCH_DATE).days)


def parse_time_text(raw: str, what: str) -> Temporal:
    """'HH:MM:SS[.f][Z|+HH:MM]' (ZonedTime is UTC): nanoseconds since midnight UTC."""
    m = _TIME_TEXT.fullmatch(raw)
    try:
        if m is None:
            raise ValueError
        h, mi, s, frac, tz = m.groups()
        if int(h) > 23 or int(mi) > 59 or int(s) > 59:
            raise ValueError
        off = _offset_s(tz)
    except ValueError:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a time of day") from None
    secs = (int(h) * 3600 + int(mi) * 60 + int(s) - off) % 86_400
    return Temporal("time", secs * 10**9 + _fraction_ns(frac))


def parse_duration_text(raw: str, what: str) -> Temporal:
    """'[-]HH[H]:MM:SS[.f]' (MySQL TIME, a signed duration): nanoseconds."""
    m = _DURATION_TEXT.fullmatch(raw)
    if m is None:
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a duration [-]HHH:MM:SS[.ffffff]")
    sign, h, mi, s, frac = m.groups()
    ns = (int(h) * 3600 + int(mi) * 60 + int(s)) * 10**9 + _fraction_ns(frac)
    return Temporal("time", -ns if sign else ns)


def from_schema(raw: Any, spec: FieldSpec, typ: str, what: str) -> Any:
    """A non-null JSON value read by its Connect field schema."""
    name = spec.name
    bits = CONNECT_INT_RANGE.get(spec.type)
    if bits is not None and bits < 63 and raw.__class__ is int and not -(2**bits) <= raw < 2**bits:
        # an Avro int that fastavro read past 32 bits; named int32s (Date, Time) included
        raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} does not fit the schema's {spec.type}")
    if name is not None:
        if name == CONNECT_DECIMAL:
            if isinstance(raw, (str, bytes)):
                return _unscaled_b64(raw, spec.scale, what)
            return _number(raw, what)  # JsonConverter decimal.format=NUMERIC
        if name == VARIABLE_DECIMAL:
            return _variable_scale(raw, what)
        if name in DATE_NAMES:
            return _date_int(_integer(raw, what))
        unit = TIME_UNITS.get(name)
        if unit is not None:
            # A signed duration: PostgreSQL sends 00:00:00-24:00:00, MySQL's TIME spans
            # -838:59:59..838:59:59 under the same names (debezium-mysql.md section 4).
            return Temporal("time", _integer(raw, what) * unit)
        unit = TS_UNITS.get(name)
        if unit is not None:
            return _timestamp_int(_integer(raw, what), unit)
        if name == ZONED_TIMESTAMP:
            if not isinstance(raw, str):
                raise Bad(E.DATA_WRONG_TYPE, f"{what}: ZonedTimestamp {_short(raw)} is not a string")
            return raw if typ == "string" else parse_timestamp_text(raw, what)
        if name == BITS and typ in INT_RANGE:
            return _bits(raw, what)
        if name == ZONED_TIME:
            if not isinstance(raw, str):
                raise Bad(E.DATA_WRONG_TYPE, f"{what}: ZonedTime {_short(raw)} is not a string")
            return raw if typ == "string" else parse_time_text(raw, what)
    t = spec.type
    if t == "boolean":
        if not isinstance(raw, bool):
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a boolean")
        return raw
    bits = CONNECT_INT_RANGE.get(t)
    if bits is not None:
        v = _integer(raw, what)
        if not -(2**bits) <= v < 2**bits:
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: {v} does not fit the schema's {t}")
        return v
    if t in ("float", "double"):
        if t == "float" and raw.__class__ is float and math.isfinite(raw):
            return float32_decimal(raw)
        return _number(raw, what)
    if typ == "binary":
        # binary.handling.mode=bytes (the default) sends base64 under type "bytes"; the other
        # modes send text under type "string" that cannot be told apart (hex "00ff" is also
        # base64), so only "bytes" fills a binary column.
        if t != "bytes":
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: a {t} field cannot fill a binary column "
                                         "(capture with binary.handling.mode=bytes)")
        b = _base64(raw, what)
        return b[::-1] if name == BITS else b  # BIT(n): MySQL's byte order is big-endian
    if t in ("string", "bytes"):
        if not isinstance(raw, str):
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a string")
        if t == "string" and typ.startswith("decimal"):  # decimal.handling.mode=string
            return _decimal_text(raw, what)
        if t == "string" and typ == "double" and raw in _SPECIAL_FLOAT:
            return _SPECIAL_FLOAT[raw]
        return raw
    raise Bad(E.DATA_WRONG_TYPE, f"{what}: a {t} field cannot fill a {typ} column")


def from_modes(raw: Any, typ: str, modes: Modes, what: str) -> Any:
    """A non-null JSON value of a record without schema, read by the table's declared encodings."""
    if isinstance(raw, str):
        if typ.startswith("decimal"):
            if modes.decimal == "precise":
                scale = int(_DECIMAL_TYPE.match(typ).group(2))
                return _unscaled_b64(raw, scale, what)
            if modes.decimal == "string":
                return _decimal_text(raw, what)
            if raw in _SPECIAL_FLOAT:  # double mode
                return _SPECIAL_FLOAT[raw]
            raise Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(raw)} is not a number (decimal mode double)")
        if typ == "double" and raw in _SPECIAL_FLOAT:
            return _SPECIAL_FLOAT[raw]
        if typ == "date":
            return parse_date_text(raw, what)
        if typ == "timestamp":
            return parse_timestamp_text(raw, what)
        if typ == "binary":  # binary.handling.mode=bytes: base64
            return _base64(raw, what)
        if typ == "long" and _DURATION_TEXT.fullmatch(raw):
            return parse_duration_text(raw, what)
        return raw
    if isinstance(raw, dict) and typ.startswith("decimal"):
        return _variable_scale(raw, what)
    if isinstance(raw, int) and not isinstance(raw, bool):
        if typ == "date":
            return _date_int(raw)
        if typ == "timestamp":
            unit = TS_UNIT_BY_MODE[modes.time]
            if unit is None:
                raise Bad(E.DATA_WRONG_TYPE, f"{what}: {raw} is a number, but time mode isostring sends text")
            return _timestamp_int(raw, unit)
    if isinstance(raw, float):
        return _number(raw, what)
    return raw


# ---------------------------------------------------------------- into the declared type

def _not_rep(what: str, value: Any, typ: str, why: str = "") -> Bad:
    return Bad(E.DATA_NOT_REPRESENTABLE, f"{what}: {_short(value)} cannot be held by {typ}{why}")


def _wrong(what: str, value: Any, typ: str) -> Bad:
    return Bad(E.DATA_WRONG_TYPE, f"{what}: {_short(value)} is not a valid {typ}")


def fit_decimal(d: Decimal, precision: int, scale: int, what: str, typ: str) -> Decimal:
    """``d`` as a decimal(precision, scale) value, or Bad: never rounds."""
    if not d.is_finite():
        raise _not_rep(what, d, typ)
    sign, digits, exp = d.as_tuple()
    if not any(digits):
        return Decimal((0, (0,), -scale))
    if exp < -scale:
        cut = -scale - exp
        if any(digits[-cut:]):
            raise _not_rep(what, d, typ, ": a non-zero digit past the scale")
        digits = digits[:-cut]
        exp = -scale
    if d.adjusted() >= precision - scale:
        raise _not_rep(what, d, typ, ": more digits than the precision")
    return Decimal((sign, digits + (0,) * (exp + scale), -scale))


def _check_text(s: str, what: str, typ: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise _not_rep(what, s, typ, ": not valid Unicode (a lone surrogate)") from None
    return s


def time_text(ns: int) -> str:
    """'[-]HH:MM:SS[.ffffff]' of a time of day or a signed duration in nanoseconds (whole
    microseconds); hours take a third digit from 100 on, as MySQL prints TIME."""
    sign = "-" if ns < 0 else ""
    s, us = divmod(abs(ns) // 1000, 10**6)
    h, rem = divmod(s, 3600)
    text = f"{sign}{h:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return text + f".{us:06d}" if us else text


def fit(v: Any, typ: str, what: str) -> Any:
    """A source value (see ``from_schema`` / ``from_modes``) as the declared type's Python value, or Bad."""
    if typ in INT_RANGE:
        if isinstance(v, bool):
            raise _wrong(what, v, typ)
        if isinstance(v, Temporal) and v.kind == "time":
            if v.value % 1000:
                raise _not_rep(what, v.value, typ, ": sub-microsecond time of day")
            return v.value // 1000
        if isinstance(v, (Decimal, float)):
            if isinstance(v, float) or not v.is_finite():
                raise _not_rep(what, v, typ)
            if not v:
                return 0
            if v.adjusted() > 20 or v != v.to_integral_value(context=EXACT):
                raise _not_rep(what, v, typ)
            v = int(v)
        if not isinstance(v, int):
            raise _wrong(what, v, typ)
        lo, hi = INT_RANGE[typ]
        if not lo <= v <= hi:
            raise _not_rep(what, v, typ, ": out of range")
        return v
    if typ == "double":
        if isinstance(v, bool) or not isinstance(v, (int, Decimal, float)):
            raise _wrong(what, v, typ)
        if isinstance(v, float):
            return v
        try:
            f = float(v)
        except OverflowError:
            raise _not_rep(what, v, typ, ": overflows a double") from None
        if math.isinf(f) and (isinstance(v, int) or v.is_finite()):
            raise _not_rep(what, v, typ, ": overflows a double")
        return f
    if typ == "string":
        if isinstance(v, str):
            return _check_text(v, what, typ)
        if isinstance(v, Temporal) and v.kind == "time":
            if v.value % 1000:
                raise _not_rep(what, v.value, typ, ": sub-microsecond time of day")
            return time_text(v.value)
        raise _wrong(what, v, typ)
    if typ == "boolean":
        if isinstance(v, bool):
            return v
        if isinstance(v, int):  # MySQL TINYINT(1) / BOOLEAN arrives as int16
            if v in (0, 1):
                return v == 1
            raise Bad(E.DATA_NOT_BOOLEAN, f"{what}: {v} is neither 0 nor 1, so not a boolean")
        raise _wrong(what, v, typ)
    if typ == "binary":
        if not isinstance(v, bytes):
            raise _wrong(what, v, typ)
        return v
    if typ == "date":
        if isinstance(v, str):
            v = parse_date_text(v, what)
        if not (isinstance(v, Temporal) and v.kind == "date"):
            raise _wrong(what, v, typ)
        if v.inf:
            raise _not_rep(what, "infinity" if v.inf > 0 else "-infinity", typ)
        try:
            return EPOCH_DATE + dt.timedelta(days=v.value)
        except OverflowError:
            raise _not_rep(what, v.value, typ, ": days out of the date range") from None
    if typ == "timestamp":
        if isinstance(v, str):
            v = parse_timestamp_text(v, what)
        if not (isinstance(v, Temporal) and v.kind == "timestamp"):
            raise _wrong(what, v, typ)
        if v.inf:
            raise _not_rep(what, "infinity" if v.inf > 0 else "-infinity", typ)
        if v.value % 1000:
            raise _not_rep(what, v.value, typ, ": finer than a microsecond")
        try:
            return EPOCH_TS + dt.timedelta(microseconds=v.value // 1000)
        except OverflowError:
            raise _not_rep(what, v.value, typ, ": out of the timestamp range") from None
    m = _DECIMAL_TYPE.match(typ)
    if m:
        if isinstance(v, bool):
            raise _wrong(what, v, typ)
        if isinstance(v, float):  # only NaN / infinities reach here
            raise _not_rep(what, v, typ)
        if isinstance(v, int):
            v = Decimal(v)
        if not isinstance(v, Decimal):
            raise _wrong(what, v, typ)
        with localcontext(EXACT):
            return fit_decimal(v, int(m.group(1)), int(m.group(2)), what, typ)
    raise Bad(E.DATA_WRONG_TYPE, f"{what}: unsupported column type {typ}")


def convert(raw: Any, spec: FieldSpec | None, typ: str, modes: Modes, what: str) -> Any:
    """A non-null, non-placeholder JSON value of one field into the declared column type."""
    src = from_schema(raw, spec, typ, what) if spec is not None else from_modes(raw, typ, modes, what)
    return fit(src, typ, what)


def _short(v: Any, n: int = 60) -> str:
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 - a reason must never raise
        r = f"<{type(v).__name__}>"
    return r if len(r) <= n else r[: n - 3] + "..."


def column_decoder(typ: str, spec: FieldSpec | None, modes: Modes):
    """``convert`` for one column, specialised once per (type, schema field, modes).

    The common shapes (an in-range integer, ASCII text, a boolean, epoch µs/days) take a
    short path that returns exactly what ``convert`` would; anything else goes through it.
    """
    def general(raw: Any, what: str) -> Any:
        return convert(raw, spec, typ, modes, what)

    name = spec.name if spec is not None else None
    stype = spec.type if spec is not None else None
    if name is None and typ in INT_RANGE and (stype is None or stype in CONNECT_INT_RANGE):
        lo, hi = INT_RANGE[typ]
        if stype is not None:
            bits = CONNECT_INT_RANGE[stype]
            lo, hi = max(lo, -(2**bits)), min(hi, 2**bits - 1)

        def dec_int(raw: Any, what: str) -> Any:
            if raw.__class__ is int and lo <= raw <= hi:
                return raw
            return general(raw, what)
        dec_int.short = ("int", lo, hi)
        return dec_int
    if name is None and typ == "string" and stype in (None, "string"):
        def dec_str(raw: Any, what: str) -> Any:
            if raw.__class__ is str and raw.isascii():
                return raw
            return general(raw, what)
        dec_str.short = ("str",)
        return dec_str
    if name is None and typ == "boolean" and stype in (None, "boolean"):
        def dec_bool(raw: Any, what: str) -> Any:
            return raw if raw.__class__ is bool else general(raw, what)
        dec_bool.short = ("bool",)
        return dec_bool
    if typ == "timestamp":
        unit = TS_UNITS.get(name) if spec is not None else TS_UNIT_BY_MODE[modes.time]
        if unit == 10**3 and (spec is None or stype == "int64"):
            sentinels = _TS_INFINITY[10**3]

            def dec_us(raw: Any, what: str) -> Any:
                if raw.__class__ is int and raw not in sentinels:
                    try:
                        return EPOCH_TS + dt.timedelta(microseconds=raw)
                    except OverflowError:
                        pass
                return general(raw, what)
            dec_us.short = ("us",)
            return dec_us
    m = _DECIMAL_TYPE.match(typ)
    if m:
        fast = _decimal_decoder(int(m.group(1)), int(m.group(2)), spec, modes, general)
        if fast is not None:
            return fast
    if typ == "date" and (spec is None or name in DATE_NAMES):
        def dec_days(raw: Any, what: str) -> Any:
            if raw.__class__ is int and raw not in DATE_INFINITY:
                try:  # EPOCH_DATE + timedelta(days=raw), 4x faster; out of range either way: general says why
                    return from_ordinal(EPOCH_ORDINAL + raw)
                except (OverflowError, ValueError):
                    pass
            return general(raw, what)
        dec_days.short = ("days",)
        return dec_days
    return general


def _decimal_decoder(precision: int, scale: int, spec: FieldSpec | None, modes: Modes, general):
    """The short path of a decimal(precision, scale) column, or None.

    A value that arrives at the column's own scale with room to spare in the precision is the
    value ``fit_decimal`` would return (same digits, same exponent); anything else (another
    scale, zero, whose sign fit_decimal drops, too many digits, NaN words) goes through
    ``general``."""
    top = precision - scale
    name = spec.name if spec is not None else None
    if (spec is None and modes.decimal == "string") or (spec is not None and name is None and spec.type == "string"):
        plain = _PLAIN_DECIMAL.fullmatch

        def dec_text(raw: Any, what: str) -> Any:
            if raw.__class__ is str and plain(raw):
                d = Decimal(raw)
                if d and d.as_tuple().exponent == -scale and d.adjusted() < top:
                    return d
            return general(raw, what)
        return dec_text
    src_scale = scale if spec is None and modes.decimal == "precise" else (
        spec.scale if spec is not None and name == CONNECT_DECIMAL else None)
    if src_scale != scale:
        return None
    b64 = base64.b64decode

    def dec_unscaled(raw: Any, what: str) -> Any:
        n = 0
        if raw.__class__ is str and 0 < len(raw) <= 24:  # <= 18 bytes: at most 43 digits
            try:
                n = int.from_bytes(b64(raw, validate=True), "big", signed=True)
            except (ValueError, binascii.Error):
                return general(raw, what)
        elif raw.__class__ is bytes and len(raw) <= 18:  # Avro: the bytes themselves
            n = int.from_bytes(raw, "big", signed=True)
        if n:
            d = Decimal(n).scaleb(-scale, context=EXACT)
            if d.adjusted() < top:
                return d
        return general(raw, what)
    dec_unscaled.short = ("unscaled", scale, top)
    return dec_unscaled


# ---------------------------------------------------------------- Avro row images

# Connect types whose values (as the Avro reader makes them: int, bool, float, dict) can never
# be the unavailable-value placeholder (a string, an array, or unnamed bytes)
_NEVER_PLACEHOLDER = {"int8", "int16", "int32", "int64", "boolean", "float", "double", "struct", "map"}
_IMAGES: dict[tuple, Any] = {}  # the compiled image makers, by what they are made of


def _short_path(short: tuple, x: str, y: str, d: str, w: str, p: str) -> list[str]:
    """Lines that set ``y`` as the column decoder ``d`` with this ``short`` path sets it for the
    value ``x`` (its short path inline, else ``d(x, w)``): the same tests, in the same order,
    as the decoders in ``column_decoder`` and ``_decimal_decoder`` (``_avro_short``: none)."""
    kind = short[0]
    if kind == "int" and len(short) > 3:  # an Avro long/int of the spec's width: it fits (the reader checked)
        return [f"{p}{y} = {x}"]
    if kind == "int":
        return [f"{p}{y} = {x} if {x}.__class__ is int and {short[1]} <= {x} <= {short[2]} else {d}({x}, {w})"]
    if kind == "str":
        return [f"{p}{y} = {x} if {x}.__class__ is str and {x}.isascii() else {d}({x}, {w})"]
    if kind == "bool":
        return [f"{p}{y} = {x} if {x}.__class__ is bool else {d}({x}, {w})"]
    if kind in ("us", "days"):
        test, make = (f"{x} not in TS_INF", f"EPOCH_TS + TD(microseconds={x})") if kind == "us" else \
            (f"{x} not in DATE_INF", f"FROM_ORDINAL(EPOCH_ORDINAL + {x})")
        return [f"{p}{y} = None", f"{p}if {x}.__class__ is int and {test}:", f"{p}    try:",
                f"{p}        {y} = {make}", f"{p}    except (OverflowError, ValueError):", f"{p}        pass",
                f"{p}if {y} is None:", f"{p}    {y} = {d}({x}, {w})"]
    if kind == "unscaled":  # the Avro branch of dec_unscaled (JSON's base64 text goes to the decoder)
        return [f"{p}{y} = None", f"{p}if {x}.__class__ is bytes and len({x}) <= 18:",
                f"{p}    n = FROM_BYTES({x}, 'big', signed=True)", f"{p}    if n:",
                f"{p}        {y} = DEC(n).scaleb({-short[1]}, context=EXACT)",
                f"{p}        if {y}.adjusted() >= {short[2]}:", f"{p}            {y} = None",
                f"{p}if {y} is None:", f"{p}    {y} = {d}({x}, {w})"]
    raise ValueError(kind)


def _avro_short(dec: Any, spec: FieldSpec | None) -> tuple | None:
    """The short path of a column decoder for a value the strict Avro reader made: an int
    field (int32, int64: the reader refuses a number past the width) whose every value the
    column takes needs no test at all."""
    short = getattr(dec, "short", None)
    if short is not None and short[0] == "int" and spec is not None and spec.type in ("int32", "int64"):
        bits = CONNECT_INT_RANGE[spec.type]
        if short[1] <= -(2**bits) and short[2] >= 2**bits - 1:
            return short + ("fits",)
    return short


def image_maker(plan: list, types: tuple[str, ...], modes: Modes, names: tuple[str, ...], which: str,
                lenient: bool, make: Any):
    """A function from a row tuple (the Avro reader's values of a row record's fields, in the
    order ``names``) to ``make(row, unavailable, missing, ignored)``: the declared columns
    decoded as connectors.debezium's ``_image`` decodes the same values from a dict, with each
    column decoder's short path inline (``plan``: (column, field spec, decoder) per declared
    column, in order, made by ``column_decoder`` of the column's type in ``types`` and ``modes``,
    which decide them: the maker is kept for later batches by those). ``lenient``: a value that
    does not decode is None and counted."""
    key = (tuple((c, spec) for c, spec, _ in plan), types, modes, names, which, lenient, id(make))
    hit = _IMAGES.get(key)
    if hit is not None:
        return hit
    pos = {n: k for k, n in enumerate(names)}
    scope: dict[str, Any] = {"PH": PLACEHOLDER, "PH64": PLACEHOLDER_B64, "PHB": PLACEHOLDER_BYTES,
                             "is_placeholder": is_placeholder, "Bad": Bad, "make": make, "TD": dt.timedelta,
                             "EPOCH_TS": EPOCH_TS, "EPOCH_DATE": EPOCH_DATE, "TS_INF": _TS_INFINITY[10**3],
                             "DATE_INF": DATE_INFINITY, "DEC": Decimal, "EXACT": EXACT,
                             "FROM_BYTES": int.from_bytes, "FROM_ORDINAL": from_ordinal, "EPOCH_ORDINAL": EPOCH_ORDINAL}
    lines = ["def image(t):", "    (" + "".join(f"x{k}, " for k in range(len(names))) + ") = t",
             "    unavailable = []", "    ignored = 0"]
    missing, out = [], []
    for j, (c, spec, dec) in enumerate(plan):
        y = f"y{j}"
        out.append(f"{c!r}: {y}")
        if c not in pos:
            missing.append(c)
            lines.append(f"    {y} = None")
            continue
        x = f"x{pos[c]}"
        scope[f"D{j}"], scope[f"S{j}"], scope[f"W{j}"] = dec, spec, f"'{which}' column {c!r}"
        short = _avro_short(dec, spec)
        p = "            " if lenient else "        "
        body = _short_path(short, x, y, f"D{j}", f"W{j}", p) if short else [f"{p}{y} = D{j}({x}, W{j})"]
        lines += [f"    if {x} is None:", f"        {y} = None"]
        maybe_ph = spec is None or not (spec.type in _NEVER_PLACEHOLDER or spec.type == "bytes" and spec.name)
        ph = f"(({x}.__class__ is str and ({x} == PH or {x} == PH64)) or {x}.__class__ is list" \
             f" or ({x}.__class__ is bytes and {x} == PHB)) and is_placeholder({x}, S{j})"  # the test of _image
        if lenient:
            if maybe_ph:  # is_placeholder alone in _image: the same for every value, the test first only quicker
                lines += [f"    elif {ph}:", f"        {y} = None"]
            lines += ["    else:", "        try:"] + body + \
                     ["        except Bad:", f"            {y} = None", "            ignored += 1"]
        else:
            if maybe_ph:
                lines += [f"    elif {ph}:", f"        unavailable.append({c!r})", f"        {y} = None"]
            lines += ["    else:"] + body
    lines.append("    return make({" + ", ".join(out) + f"}}, unavailable, {missing!r}, ignored)")
    exec(compile("\n".join(lines), "<avro image>", "exec"), scope)  # noqa: S102 - source generated above
    if len(_IMAGES) >= 1024:
        _IMAGES.clear()
    _IMAGES[key] = scope["image"]
    return scope["image"]


def key_maker(plan: list, types: tuple[str, ...], modes: Modes, names: tuple[str, ...], what: str):
    """A function from a key tuple (the Avro reader's values of a key record's fields, in the
    order ``names``) to the primary key: what connectors.debezium's ``_key_from`` makes of the
    same values in a dict, and the same Bad where it raises one (``plan``: (column, field
    spec, decoder) per primary-key column, as for ``image_maker``)."""
    key = (tuple((c, spec) for c, spec, _ in plan), types, modes, names, what, "key")
    hit = _IMAGES.get(key)
    if hit is not None:
        return hit
    pos = {n: k for k, n in enumerate(names)}
    scope: dict[str, Any] = {"is_placeholder": is_placeholder, "Bad": Bad, "MISSING": E.DATA_MISSING_KEY,
                             "TD": dt.timedelta, "EPOCH_TS": EPOCH_TS, "EPOCH_DATE": EPOCH_DATE,
                             "TS_INF": _TS_INFINITY[10**3], "DATE_INF": DATE_INFINITY, "DEC": Decimal,
                             "EXACT": EXACT, "FROM_BYTES": int.from_bytes, "FROM_ORDINAL": from_ordinal,
                             "EPOCH_ORDINAL": EPOCH_ORDINAL}
    lines = ["def key(t):", "    (" + "".join(f"x{k}, " for k in range(len(names))) + ") = t"]
    out = []
    for j, (c, spec, dec) in enumerate(plan):
        y = f"y{j}"
        out.append(y)
        if c not in pos:
            lines.append(f"    raise Bad(MISSING, {f'{what} has no value for primary-key column {c!r}'!r})")
            break
        x = f"x{pos[c]}"
        scope[f"D{j}"], scope[f"S{j}"], scope[f"W{j}"] = dec, spec, f"{what} column {c!r}"
        lines += [f"    if {x} is None:", f"        raise Bad(MISSING, {f'{what} has no value for primary-key column {c!r}'!r})"]
        if spec is None or not (spec.type in _NEVER_PLACEHOLDER or spec.type == "bytes" and spec.name):
            lines += [f"    if is_placeholder({x}, S{j}):",
                      f"        raise Bad(MISSING, {f'{what}: primary-key column {c!r} is unavailable'!r})"]
        short = _avro_short(dec, spec)
        lines += _short_path(short, x, y, f"D{j}", f"W{j}", "    ") if short else [f"    {y} = D{j}({x}, W{j})"]
    else:
        lines.append("    return (" + "".join(f"{y}, " for y in out) + ")")
    exec(compile("\n".join(lines), "<avro key>", "exec"), scope)  # noqa: S102 - source generated above
    if len(_IMAGES) >= 1024:
        _IMAGES.clear()
    _IMAGES[key] = scope["key"]
    return scope["key"]
