"""Seeded fuzz of decode_batch: >= 10,000 mutated Debezium records, judged by an independent oracle.

The generator picks the true row first (Python values), encodes it itself the way Debezium
would (its own base64, day and epoch arithmetic, its own JSON writer; nothing from
connectors/), then applies at most one mutation whose effect it knows: the value it must
decode to, or that the record must be rejected (with the codes that fit). The oracle only
compares: 0 escapes (decode_batch raising), 0 changed values (an accepted record whose
values differ from the truth, or a record accepted that should have been rejected), 0 good
records rejected, and every accepted image goes through delta_sink.mirror_changes_frame.

Categories (issue 15): valid records, truncated JSON, wrong types, huge numbers,
NaN/Infinity, deep nesting, long strings, invalid UTF-8 and lone surrogates, odd keys and
ops, precision and range edges, hostile structures, TOAST placeholders, dropped columns,
truncates, headers; each with and without the schema wrapper, over four tables covering
the decimal modes precise/string/double and time modes adaptive/connect/nanoseconds/isostring.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import json
import math
import random
import re
import time
from decimal import Decimal

from connectors.debezium import decode_batch
from connectors.delta_sink import mirror_changes_frame
from streaming_app.settings import parse_config

SEED = 20261125
N_RECORDS = 12_000
BATCH = 400
PLACEHOLDER = "__debezium_unavailable_value"

COLUMNS = {"id": "long", "k": "string", "i": "int", "l": "long", "d": "double", "m": "decimal(38,4)",
           "p": "decimal(15,2)", "s": "string", "dt": "date", "ts": "timestamp", "b": "boolean"}
MODES = {"pa": ("precise", "adaptive"), "sc": ("string", "connect"), "dn": ("double", "nanoseconds"),
         "pi": ("precise", "isostring")}
CFG = parse_config({"tables": [
    {"name": n, "topic": f"fz.{n}", "primary_key": ["id", "k"], "columns": COLUMNS, "not_null": ["p"],
     "ranges": {"i": [-1000, 1000], "p": [0, 1000]}, "decimal_handling_mode": dm, "time_precision_mode": tm}
    for n, (dm, tm) in MODES.items()]})

REJECT = "reject"
ACCEPT = "accept"
TOMBSTONE = "tombstone"
NOT_REP, WRONG, INVALID = "DATA_NOT_REPRESENTABLE", "DATA_WRONG_TYPE", "DATA_INVALID_JSON"

# ---------------------------------------------------------------- the generator's own JSON writer


_SURROGATE = re.compile("[\ud800-\udfff]")


class Raw:
    """JSON text written as is (numbers Python cannot hold as floats, bare NaN, deep nesting)."""

    def __init__(self, text: str):
        self.text = text


def dumps(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, Decimal):
        return format(v, "f") if v == v.to_integral_value() or abs(v.adjusted()) < 50 else str(v)
    if isinstance(v, str):
        if not _SURROGATE.search(v):
            return json.dumps(v, ensure_ascii=False)  # stdlib writes valid strings; only surrogates need us
        out = ['"']
        for ch in v:
            o = ord(ch)
            if ch == '"' or ch == "\\":
                out.append("\\" + ch)
            elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
                out.append(f"\\u{o:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(dumps(k) + ":" + dumps(x) for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8")


# ---------------------------------------------------------------- truth and its encodings

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MIN_TS_US = (dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)
MAX_TS_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)
MIN_DAYS, MAX_DAYS = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days, (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
STRINGS = ["", "a", "plain text", 'quote " and \\ backslash', "tab\tnewline\n", "é ü ß", "日本語", "emoji 🎉🚀",
           "\u0000nul", "x" * 300, "2024", "BNI=", "NaN", "null", "{\"json\": 1}", "\u2028\u2029"]


def b64_unscaled(n: int) -> str:
    length = (n.bit_length() + 8) // 8  # always room for the sign bit
    return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode()


def unscaled(d: Decimal, scale: int) -> int:
    sign, digits, exp = d.as_tuple()
    n, shift = int("".join(map(str, digits)) or "0"), exp + scale
    if shift >= 0:
        n *= 10**shift
    else:
        n, rest = divmod(n, 10**-shift)
        assert rest == 0, (d, scale)
    return -n if sign else n


def ts_us(t: dt.datetime) -> int:
    return (t - EPOCH) // dt.timedelta(microseconds=1)


def iso_ts(t: dt.datetime) -> str:
    u = t.astimezone(dt.timezone.utc)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}.{u.microsecond:06d}Z"


def rand_decimal(rng, int_digits: int, scale: int) -> Decimal:
    n = rng.choice([0, 1, rng.randrange(10 ** (int_digits + scale)), 10 ** (int_digits + scale) - 1,
                    rng.randrange(10 ** rng.randrange(1, int_digits + scale + 1))])
    sign = rng.random() < 0.3
    return Decimal((1 if sign and n else 0, tuple(int(c) for c in str(n)), -scale))


def truth_row(rng, n: int, table: str) -> dict:
    connect = MODES[table][1] == "connect"
    us = rng.choice([0, -1, MIN_TS_US, MAX_TS_US, rng.randrange(MIN_TS_US, MAX_TS_US),
                     rng.randrange(-10**15, 10**15), -14182940000000])
    if connect:
        us -= us % 1000  # milliseconds carry no microseconds
    r = {
        "id": rng.choice([n, n, n, 2**63 - 1 - n, -(2**63) + n]),
        "k": rng.choice(STRINGS[:9]),
        "i": rng.choice([rng.randrange(-1000, 1001), -1000, 1000, 0]),
        "l": rng.choice([rng.randrange(-(2**63), 2**63), 2**63 - 1, -(2**63), 0, 2**53 + 1]),
        "d": rng.choice([0.0, -0.0, 1.5, 1e308, 5e-324, -2.5e-300, rng.uniform(-1e6, 1e6), rng.gauss(0, 1) * 10.0 ** rng.randrange(-20, 20),
                         math.nan, math.inf, -math.inf]),
        "m": rand_decimal(rng, 34, 4),
        "p": abs(rand_decimal(rng, 3, 2)),
        "s": rng.choice(STRINGS + ["long " * rng.randrange(2000, 20000)]),
        "dt": dt.date(1970, 1, 1) + dt.timedelta(days=rng.choice([0, -1, MIN_DAYS, MAX_DAYS, rng.randrange(MIN_DAYS, MAX_DAYS + 1)])),
        "ts": EPOCH + dt.timedelta(microseconds=us),
        "b": rng.choice([True, False]),
    }
    for c in ("i", "l", "d", "m", "s", "dt", "ts", "b"):
        if rng.random() < 0.08:
            r[c] = None
    return r


def encode_double(f: float):
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def encode_plain(table: str, col: str, v):
    """Schemaless: the value as Debezium writes it under the table's modes."""
    if v is None:
        return None
    dm, tm = MODES[table]
    typ = COLUMNS[col]
    if typ.startswith("decimal"):
        scale = int(typ.split(",")[1].rstrip(")"))
        if dm == "precise":
            return b64_unscaled(unscaled(v, scale))
        if dm == "string":
            return format(v, "f")
        return Raw(format(v, "f"))  # double mode: a JSON number (written exactly)
    if typ == "date":
        return v.isoformat() if tm == "isostring" else (v - dt.date(1970, 1, 1)).days
    if typ == "timestamp":
        us = ts_us(v)
        return {"adaptive": us, "connect": us // 1000, "nanoseconds": us * 1000, "isostring": iso_ts(v)}[tm]
    if typ == "double":
        return encode_double(v)
    return v


def encode_with_schema(rng, table: str, col: str, v):
    """Schema-wrapped: (field schema, value) in one of the encodings Debezium may choose."""
    typ = COLUMNS[col]
    dm = MODES[table][0]
    if typ.startswith("decimal"):
        p, s = (int(x) for x in typ[8:-1].split(","))
        if dm == "string":
            return {"type": "string"}, None if v is None else format(v, "f")
        if dm == "double":
            return {"type": "double"}, None if v is None else Raw(format(v, "f"))
        if rng.random() < 0.3:  # numeric without typmod
            if v is None:
                return {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}, None
            _, digits, exp = v.as_tuple()  # (not normalize(): it rounds to the 28-digit context)
            zeros = len(digits) - len("".join(map(str, digits)).rstrip("0")) if any(digits) else -exp
            sc = max(0, -(exp + zeros))
            return ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
                    {"scale": sc, "value": b64_unscaled(unscaled(v, sc))})
        sc = s + rng.choice([0, 0, 1, 3])  # a wider source scale holds the same value
        return ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                 "parameters": {"scale": str(sc), "connect.decimal.precision": str(p)}},
                None if v is None else b64_unscaled(unscaled(v, sc)))
    if typ == "date":
        name = rng.choice(["io.debezium.time.Date", "org.apache.kafka.connect.data.Date"])
        return {"type": "int32", "name": name}, None if v is None else (v - dt.date(1970, 1, 1)).days
    if typ == "timestamp":
        if v is None:
            return {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, None
        us = ts_us(v)
        options = [("io.debezium.time.MicroTimestamp", us), ("io.debezium.time.NanoTimestamp", us * 1000),
                   ("io.debezium.time.ZonedTimestamp", iso_ts(v))]
        if us % 1000 == 0:
            options += [("io.debezium.time.Timestamp", us // 1000), ("org.apache.kafka.connect.data.Timestamp", us // 1000)]
        name, raw = rng.choice(options)
        return {"type": "string" if name.endswith("Zoned" + "Timestamp") else "int64", "name": name}, raw
    t = {"int": "int32", "long": "int64", "double": "double", "string": "string", "boolean": "boolean"}[typ]
    return {"type": t}, None if v is None else (encode_double(v) if typ == "double" else v)


# ---------------------------------------------------------------- one record: spec, mutation, expectation

class Rec:
    def __init__(self, table: str, op: str, truth: dict, wrap: bool):
        self.table, self.op, self.truth, self.wrap = table, op, truth, wrap
        self.expect = ACCEPT
        self.codes: set[str] | None = None
        self.expected_after = dict(truth) if op in "cru" else None
        self.expected_key = (truth["id"], truth["k"])
        self.unavailable: set[str] = set()
        self.old_key = None
        self.headers = None
        self.category = "valid"
        self.fields: dict[str, dict] = {}
        self.image: dict = {}
        self.key_doc = {"id": truth["id"], "k": truth["k"]}
        self.key_bytes: bytes | None = None  # set to override the key
        self.key_absent = False
        self.payload_extra: dict = {}
        self.value_override: bytes | None | str = "unset"
        self.envelope_override = None

    def reject(self, category: str, *codes: str) -> None:
        self.category, self.expect, self.codes = category, REJECT, set(codes) or None


def build_image(rng, rec: Rec) -> None:
    for c in COLUMNS:
        if rec.wrap:
            f, raw = encode_with_schema(rng, rec.table, c, rec.truth[c])
            rec.fields[c] = f
        else:
            raw = encode_plain(rec.table, c, rec.truth[c])
        rec.image[c] = raw


def mutate(rng, rec: Rec) -> None:
    """At most one mutation, chosen by category; sets the expectation it implies."""
    table, dm, tm = rec.table, *MODES[rec.table]
    kind = rng.choices(
        ["valid", "wrong_type", "huge", "nan", "nesting", "long_string", "surrogate", "key", "op", "precision",
         "range", "date_edge", "hostile", "toast", "dropped", "extra", "headers"],
        weights=[12, 10, 8, 6, 3, 2, 4, 10, 6, 10, 5, 8, 7, 4, 4, 2, 3])[0]
    img = rec.image

    def setcol(c, raw, field=None):
        img[c] = raw
        if rec.wrap and field is not None:
            rec.fields[c] = field

    if kind == "valid" or rec.op == "d":
        return
    if kind == "wrong_type":
        c = rng.choice([c for c in COLUMNS if c not in ("id", "k")])
        typ = COLUMNS[c]
        bad = {"int": ["12", True, [1], {"a": 1}], "long": ["12", False, [], {"x": None}],
               "double": ["abc", True, [1.5], {}, "nan", "inf"], "string": [5, True, [], {}, Raw("1.5")],
               "boolean": [2, "true", -1, [], "false"], "date": [True, "2024-13-01", "x", Raw("1.5"), [], "2024-01-02junk"],
               "timestamp": [True, "2024-01-01T25:00:00", [], Raw("1.5"), "2024-01-02T99:99:99", "2024-01-02"]}
        # (not 0 and 1 for a boolean: schemaless, they are MySQL's TINYINT(1) false and true)
        if typ.startswith("decimal"):
            opts = [True, [], {"scale": "x", "value": "AA=="}, "abc!"]
        else:
            opts = bad[typ]
        raw = rng.choice(opts)
        if rec.wrap and typ == "date" and isinstance(raw, str):
            raw = "abc"  # a string where the schema says int32 days
        setcol(c, raw)
        rec.reject("wrong_type", WRONG, NOT_REP, *(["DATA_NOT_BOOLEAN"] if typ == "boolean" else []))
        return
    if kind == "huge":
        c, raw, exp = rng.choice([
            ("i", 2**31, REJECT), ("i", -(2**31) - 1, REJECT), ("l", 2**63, REJECT), ("l", -(2**63) - 1, REJECT),
            ("l", 2**63 - 1, 2**63 - 1), ("d", Raw("1e400"), REJECT), ("d", Raw("-1e400"), REJECT),
            ("d", Raw("1" + "0" * 400), REJECT), ("d", Raw("1e308"), 1e308), ("d", Raw("1" + "0" * 300), 1e300),
            ("d", Raw("1e-400"), 0.0), ("m", Raw("1e400"), REJECT), ("m", Raw("9" * 5000), INVALID),
            ("p", Raw("1" + "0" * 50), REJECT), ("d", Raw("9" * 5000), INVALID)])
        if rec.wrap:
            rec.fields[c] = {"type": "int64" if c == "l" else "double" if c == "d" else "double"}
            if c == "i":
                rec.fields[c] = {"type": "int64"}  # the schema admits it, the declared int does not
        setcol(c, raw)
        if exp == REJECT:
            rec.reject("huge", NOT_REP, WRONG)
        elif exp == INVALID:
            rec.reject("huge", INVALID)
        else:
            rec.category = "huge"
            rec.expected_after[c] = exp
        return
    if kind == "nan":
        c, raw, exp = rng.choice([("d", "NaN", math.nan), ("d", "Infinity", math.inf), ("d", "-Infinity", -math.inf),
                                  ("d", Raw("NaN"), INVALID), ("d", Raw("Infinity"), INVALID),
                                  ("m", "NaN", REJECT), ("p", "Infinity", REJECT), ("m", "NAN", REJECT),
                                  ("p", "POSITIVE_INFINITY", REJECT)])
        if c in ("m", "p") and not rec.wrap and dm == "precise":
            # precise mode reads strings as base64: "Infinity" is valid base64 (a number), "NaN" is not
            raw = rng.choice(["NaN", "NAN", "POSITIVE_INFINITY"])
        if c == "d" and rec.wrap:
            rec.fields[c] = {"type": "double"}
        if c in ("m", "p") and rec.wrap:
            rec.fields[c] = {"type": "string" if raw in ("NAN", "POSITIVE_INFINITY") else "double"}
        setcol(c, raw)
        if exp == REJECT:
            rec.reject("nan", NOT_REP, WRONG)
        elif exp == INVALID:
            rec.reject("nan", INVALID)
        else:
            rec.category = "nan"
            rec.expected_after[c] = exp
        return
    if kind == "nesting":
        depth = rng.choice([30, 5000, 100_000])
        where = rng.choice(["value", "key"])
        nest = Raw("[" * depth + "]" * depth)
        if where == "value":
            setcol(rng.choice(["s", "i", "m"]), nest)
            rec.reject("nesting", INVALID, WRONG) if depth > 30 else rec.reject("nesting", WRONG, NOT_REP)
        else:
            rec.key_bytes = to_bytes("[" * depth + "]" * depth)
            rec.reject("nesting", "DATA_MISSING_KEY")
        return
    if kind == "long_string":
        s = "".join(rng.choices("abcé🎉\"\\\n", k=rng.randrange(50_000, 200_000)))
        setcol("s", s, {"type": "string"})
        rec.category = "long_string"
        rec.expected_after["s"] = s
        return
    if kind == "surrogate":
        c = rng.choice(["s", "k"])
        s = rng.choice(["\ud800", "a\udfffb", "\udc00\ud800"])
        setcol(c, s, {"type": "string"})
        if c == "k":
            rec.key_doc["k"] = s
        rec.reject("surrogate", NOT_REP)
        return
    if kind == "key":
        variant = rng.randrange(9)
        if variant == 0:
            rec.key_absent = True
            rec.category = "key_absent"
        elif variant == 1:
            rec.key_doc = {"id": rec.truth["id"] ^ 1, "k": rec.truth["k"]}
            rec.reject("key", "DATA_KEY_MISMATCH")
        elif variant == 2:
            rec.key_doc = {"id": rec.truth["id"]}
            rec.reject("key", "DATA_MISSING_KEY")
        elif variant == 3:
            rec.key_bytes = rng.choice([b"not json", b"[1,2]", b"\xff\xfe{", b'{"id":', b"5"])
            rec.reject("key", "DATA_MISSING_KEY")
        elif variant == 4:
            rec.key_doc = {**rec.key_doc, "extra": [1, {"x": None}]}
            rec.category = "key_extra"
        elif variant == 5:
            rec.key_bytes = to_bytes(dumps({"schema": {"type": "struct", "fields": [
                {"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": False, "field": "k"}]},
                "payload": rec.key_doc}))
            rec.category = "key_wrapped"
        elif variant == 6:
            rec.key_doc = {"id": str(rec.truth["id"]), "k": rec.truth["k"]}
            rec.reject("key", WRONG)
        elif variant == 7:
            rec.key_doc = {"id": rec.truth["id"], "k": None}
            rec.reject("key", "DATA_MISSING_KEY")
        else:
            rec.key_doc = {"id": rec.truth["id"], "k": rec.truth["k"] + "x"}
            rec.reject("key", "DATA_KEY_MISMATCH")
        return
    if kind == "op":
        rec.payload_extra["op"] = rng.choice(["x", ["c"], {"c": 1}, 1, None, "m", "C", "", "cc", True])
        rec.reject("op", "DATA_UNKNOWN_OP")
        return
    if kind == "precision":
        col = rng.choice(["m", "p"])
        scale = 4 if col == "m" else 2
        prec = 38 if col == "m" else 15
        ints = prec - scale
        cases = [  # (digits before point, digits after, last digit non-zero?) -> fits?
            (ints, scale, True), (ints + 1, 0, True), (1, scale + 1, True), (1, scale + 2, False), (ints, scale + 3, False)]
        a, b, nonzero_tail = rng.choice(cases)
        int_part = "9" * a if a else "0"
        frac = "".join(rng.choice("0123456789") for _ in range(b))
        if b > scale:
            frac = frac[:scale] + ("0" * (b - scale - 1)) + ("7" if nonzero_tail else "0")
        text = int_part + ("." + frac if b else "")
        fits = a <= ints and (b <= scale or not nonzero_tail)
        d = Decimal(text)
        if fits and col == "p" and d > 1000:
            fits = None  # fits the type, outside the declared range
        if dm == "precise" and not rec.wrap:
            # base64 at the declared scale cannot carry extra digits: use a JSON number
            raw = Raw(text)
        elif rec.wrap and dm == "precise":
            sc = max(b, scale)
            rec.fields[col] = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                               "parameters": {"scale": str(sc)}}
            raw = b64_unscaled(int(text.replace(".", "")) * 10 ** (sc - b))
        elif dm == "string":
            raw = text
        else:
            raw = Raw(text)
        setcol(col, raw)
        if fits is None:
            rec.reject("precision", "DATA_OUT_OF_RANGE")
        elif fits:
            rec.category = "precision"
            rec.expected_after[col] = d
            if col == "p" and d < 0:
                rec.reject("precision", "DATA_OUT_OF_RANGE")
        else:
            rec.reject("precision", NOT_REP)
        return
    if kind == "range":
        c, v, ok = rng.choice([("i", 1000, True), ("i", -1000, True), ("i", 1001, False), ("i", -1001, False),
                               ("p", Decimal("1000.00"), True), ("p", Decimal("1000.01"), False),
                               ("p", Decimal("0.00"), True)])
        if c == "p":
            raw = encode_plain(table, "p", v) if not rec.wrap else None
            if rec.wrap:
                f, raw = encode_with_schema(rng, table, "p", v)
                rec.fields["p"] = f
        else:
            raw = v
        setcol(c, raw)
        if ok:
            rec.category = "range"
            rec.expected_after[c] = v
        else:
            rec.reject("range", "DATA_OUT_OF_RANGE")
        return
    if kind == "date_edge":
        c = rng.choice(["dt", "ts"])
        if c == "dt":
            days, ok = rng.choice([(MAX_DAYS, True), (MIN_DAYS, True), (MAX_DAYS + 1, False), (MIN_DAYS - 1, False),
                                   (-2147472692, False), (-2147472691, False), (2**31 - 1, False)])
            if tm == "isostring" and not rec.wrap:
                raw = rng.choice(["infinity", "-infinity", "10000-01-01", "2024-02-30"])
                ok = False
            else:
                raw = days
                if rec.wrap:
                    rec.fields["dt"] = {"type": "int32", "name": "io.debezium.time.Date"}
            setcol("dt", raw)
            if ok:
                rec.category = "date_edge"
                rec.expected_after["dt"] = dt.date(1970, 1, 1) + dt.timedelta(days=days)
            else:
                rec.reject("date_edge", NOT_REP, WRONG)
            return
        us, ok = rng.choice([(MAX_TS_US, True), (MIN_TS_US, True), (MAX_TS_US + 1, False), (MIN_TS_US - 1, False)])
        unit, name = {"adaptive": (1, "io.debezium.time.MicroTimestamp"), "connect": (None, None),
                      "nanoseconds": (1000, "io.debezium.time.NanoTimestamp"), "isostring": (None, None)}[tm]
        if rec.wrap or unit is None:
            unit, name = rng.choice([(1, "io.debezium.time.MicroTimestamp"), (1000, "io.debezium.time.NanoTimestamp")])
            rec.fields["ts"] = {"type": "int64", "name": name}
            if not rec.wrap:  # schemaless connect / isostring: use the sentinels or text instead
                raw, ok = rng.choice([(9223372036825200, False), (-9223372036832400, False), ("infinity", False),
                                      ("-infinity", False), ("1970-01-01T00:00:00.0000001Z", False)]) \
                    if tm == "connect" else rng.choice([("infinity", False), ("-infinity", False),
                                                         ("1970-01-01T00:00:00.0000001Z", False),
                                                         ("9999-12-31T23:59:59.999999Z", True)])
                if tm == "connect" and isinstance(raw, str):
                    ok = False
                setcol("ts", raw)
                if ok:
                    rec.category = "date_edge"
                    rec.expected_after["ts"] = EPOCH + dt.timedelta(microseconds=MAX_TS_US)
                else:
                    rec.reject("date_edge", NOT_REP, WRONG)
                return
        raw = us * unit
        if unit == 1000 and rng.random() < 0.3:
            raw += 1  # a nanosecond the type cannot hold
            ok = False
        setcol("ts", raw)
        if ok:
            rec.category = "date_edge"
            rec.expected_after["ts"] = EPOCH + dt.timedelta(microseconds=us)
        else:
            rec.reject("date_edge", NOT_REP)
        return
    if kind == "hostile":
        v = rng.randrange(13)
        if v == 0:
            rec.envelope_override = {"op": rec.op, "after": [1, 2, 3]}
            rec.reject("hostile", WRONG)
        elif v == 1:
            rec.envelope_override = {"op": rec.op, "after": "row"}
            rec.reject("hostile", WRONG)
        elif v == 2:
            rec.payload_extra["before"] = 5
            rec.reject("hostile", WRONG)
        elif v == 3:
            rec.value_override = to_bytes(dumps([rec.op, rec.image]))
            rec.reject("hostile", INVALID)
        elif v == 4:
            rec.value_override = rng.choice([b"null", b'{"schema":null,"payload":null}', None])
            rec.expect, rec.category = TOMBSTONE, "hostile"
        elif v == 5:
            rec.payload_extra["source"] = rng.choice(["x", 5, None, {"table": [1]}, {"table": None}])
            rec.category = "hostile_source"
        elif v == 6:
            rec.value_override = to_bytes(dumps({"schema": {"type": "struct", "fields": "nope"},
                                                 "payload": {"op": rec.op, "after": rec.image}}))
            rec.reject("hostile", WRONG)
        elif v == 7:
            rec.value_override = to_bytes(dumps({"schema": {"type": "struct", "fields": [
                {"field": "after", "type": "struct", "fields": [
                    {"field": "m", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                     "parameters": {"scale": rng.choice(["abc", "", "1e3", "99999"])}}]}]},
                "payload": {"op": rec.op, "after": rec.image}}))
            rec.reject("hostile", WRONG)
        elif v == 8:
            rec.value_override = to_bytes(dumps({"op": rec.op, "after": rec.image, "schema": 1}))
            rec.category = "hostile_schema_key"  # not a wrapper: an unknown top-level key, ignored
            rec.wrap = False
            rec.image = {c: encode_plain(table, c, rec.truth[c]) for c in COLUMNS}
            rec.value_override = to_bytes(dumps({"op": rec.op, "after": rec.image, "schema": 1}))
        elif v == 9:
            rec.payload_extra["after"] = None
            rec.reject("hostile", "DATA_MISSING_IMAGE")
        elif v == 10:
            rec.value_override = rng.choice([b"", b"   ", b"\x00", b"{}", b"[]", b'"x"', b"1", b"true"])
            rec.reject("hostile", INVALID, "DATA_UNKNOWN_OP")
        elif v == 11:
            rec.value_override = "truncate"
            rec.reject("truncated", INVALID)
        else:
            rec.value_override = "bad_utf8"
            rec.reject("invalid_utf8", INVALID)
        return
    if kind == "toast":
        c = rng.choice(["s", "s", "m", "i", "dt"])
        setcol(c, PLACEHOLDER, {"type": "string"})
        rec.category = "toast"
        rec.expected_after[c] = None
        rec.unavailable = {c}
        return
    if kind == "dropped":
        c = rng.choice(["s", "b", "dt", "p", "id"])
        del img[c]
        rec.fields.pop(c, None)
        if c in ("p", "id"):
            rec.reject("dropped", "DATA_COLUMN_DROPPED")
        else:
            rec.category = "dropped"
            rec.expected_after[c] = None
        return
    if kind == "extra":
        img["zz_added"] = rng.choice([1, "x", None, [1], {"a": 1}])
        rec.fields["zz_added"] = {"type": "int32"}
        rec.category = "extra_column"
        return
    if kind == "headers":
        if rec.op == "c" and rng.random() < 0.5:
            rec.old_key = (rec.truth["id"] - 1, "old")
            rec.headers = [("__debezium.oldkey", to_bytes(dumps({"id": rec.old_key[0], "k": "old"})))]
            rec.category = "headers_oldkey"
        else:
            rec.headers = rng.choice([[(b"\xff", b"\xff")], "junk", [None], [("a",)], [("__debezium.newkey", b"{")]])
            rec.category = "headers_junk"
        return


def serialize(rng, rec: Rec) -> tuple[bytes | None, bytes | None]:
    payload = rec.envelope_override or {"before": None, "after": rec.image, "source": {"table": rec.table},
                                        "op": rec.op, "ts_ms": 1_700_000_000_000}
    if rec.op == "d" and rec.envelope_override is None:
        payload["before"], payload["after"] = rec.image, None
    payload.update(rec.payload_extra)
    if rec.wrap and rec.envelope_override is None:
        value_fields = [{"field": c, "optional": c not in ("id", "k", "p"), **f} for c, f in rec.fields.items()]
        schema = {"type": "struct", "name": f"fz.public.{rec.table}.Envelope", "version": 2, "fields": [
            {"type": "struct", "fields": value_fields, "optional": True, "name": "V", "field": "before"},
            {"type": "struct", "fields": value_fields, "optional": True, "name": "V", "field": "after"},
            {"type": "string", "optional": False, "field": "op"}]}
        text = dumps({"schema": schema, "payload": payload})
    else:
        text = dumps(payload)
    value: bytes | None
    if rec.value_override == "truncate":
        value = to_bytes(text)[: rng.randrange(len(to_bytes(text)))]
    elif rec.value_override == "bad_utf8":
        b = to_bytes(text)
        at = rng.randrange(len(b) + 1)
        value = b[:at] + rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82"]) + b[at:]
    elif rec.value_override != "unset":
        value = rec.value_override
    else:
        value = to_bytes(text)
    if rec.key_absent:
        key = None
    elif rec.key_bytes is not None:
        key = rec.key_bytes
    else:
        key = to_bytes(dumps(rec.key_doc))
    return key, value


def generate(rng, n: int):
    records, recs = [], {}
    tables = list(MODES)
    for i in range(n):
        table = tables[i % len(tables)]
        if rng.random() < 0.02:  # truncate
            rec = Rec(table, "t", truth_row(rng, i, table), False)
            rec.category, rec.expected_after = "truncate", None
            value = to_bytes(dumps({"before": None, "after": None, "source": {"table": table}, "op": "t"}))
            records.append((f"fz.{table}", 0, i, None, value))
            recs[(f"fz.{table}", i)] = rec
            continue
        op = rng.choices("crud", weights=[4, 2, 3, 1])[0]
        rec = Rec(table, op, truth_row(rng, i, table), rng.random() < 0.4)
        build_image(rng, rec)
        if op == "d" and rng.random() < 0.5:  # REPLICA IDENTITY DEFAULT: key columns only, other fields null
            for c in COLUMNS:
                if c not in ("id", "k"):
                    rec.image[c] = None
        mutate(rng, rec)
        key, value = serialize(rng, rec)
        records.append((f"fz.{table}", 0, i, key, value, rec.headers))
        recs[(f"fz.{table}", i)] = rec
    return records, recs


# ---------------------------------------------------------------- the oracle

def same(a, b) -> bool:
    if isinstance(b, float):
        return isinstance(a, float) and (a == b or (math.isnan(a) and math.isnan(b)))
    return type(a) is type(b) and a == b


def judge(records, recs, counts: collections.Counter, problems: list) -> None:
    try:
        out = decode_batch(CFG, records)
    except BaseException as e:  # noqa: BLE001 - what the test counts
        counts["escapes"] += len(records)
        problems.append(f"escape: {type(e).__name__}: {e}")
        return
    seen = set()
    for r in out.rejected:
        rec = recs[(r.topic, r.offset)]
        seen.add((r.topic, r.offset))
        counts[f"rejected {r.code}"] += 1
        if rec.expect != REJECT:
            counts["good records rejected"] += 1
            problems.append(f"{rec.category} offset {r.offset} rejected {r.code}: {r.reason}")
        elif rec.codes and r.code not in rec.codes:
            counts["wrong code"] += 1
            problems.append(f"{rec.category} offset {r.offset}: {r.code} not in {rec.codes}: {r.reason}")
        for text in (r.key, r.value, r.reason):
            if text is not None:
                text.encode("utf-8")
    final: dict[str, dict] = collections.defaultdict(dict)
    for table, events in out.events.items():
        for ev in events:
            rec = recs[(f"fz.{table}", ev.offset)]
            seen.add((f"fz.{table}", ev.offset))
            counts["accepted"] += 1
            if rec.expect != ACCEPT:
                counts["changed values"] += 1
                problems.append(f"{rec.category} offset {ev.offset} accepted, expected {rec.expect} {rec.codes}")
                continue
            ok = ev.op == rec.op and (ev.key == (() if rec.op == "t" else rec.expected_key))
            if rec.op == "t":
                ok = ok and ev.after is None and ev.before is None
            elif rec.op == "d":
                ok = ok and ev.after is None
            else:
                ok = ok and set(ev.after) == set(COLUMNS) and all(same(ev.after[c], rec.expected_after[c]) for c in COLUMNS)
                ok = ok and ev.unavailable == rec.unavailable and ev.old_key == rec.old_key
            if not ok:
                counts["changed values"] += 1
                diff = {c: (ev.after.get(c), rec.expected_after.get(c)) for c in COLUMNS
                        if ev.after and rec.expected_after and not same(ev.after.get(c), rec.expected_after.get(c))}
                problems.append(f"{rec.category} offset {ev.offset} op {ev.op} changed: {diff!r:.300}")
            if rec.op != "t":
                final[table][ev.key] = ev.after
    for (topic, off), rec in recs.items():
        if (topic, off) in seen:
            continue
        if rec.expect == TOMBSTONE:
            counts["tombstones"] += 1
        else:
            counts["lost"] += 1
            problems.append(f"{rec.category} offset {off}: neither event nor rejection (expected {rec.expect})")
    for table, rows in final.items():
        try:
            mirror_changes_frame(CFG.table(table), rows)
        except Exception as e:  # noqa: BLE001 - what the test counts
            counts["frame errors"] += 1
            problems.append(f"mirror_changes_frame({table}): {type(e).__name__}: {e}")


def test_fuzz_decoder_is_total_and_exact():
    t0 = time.perf_counter()
    rng = random.Random(SEED)
    records, recs = generate(rng, N_RECORDS)
    t_gen = time.perf_counter() - t0
    counts: collections.Counter = collections.Counter()
    problems: list[str] = []
    for i in range(0, len(records), BATCH):
        chunk = records[i:i + BATCH]
        judge(chunk, {(r[0], r[2]): recs[(r[0], r[2])] for r in chunk}, counts, problems)
    categories = collections.Counter(r.category for r in recs.values())
    seconds = time.perf_counter() - t0
    print(f"\nfuzz: {len(records)} records (seed {SEED}) in {seconds:.1f} s ({t_gen:.1f} s generating)")
    for k in sorted(counts):
        print(f"  {k:40s} {counts[k]:6d}")
    print("  by category: " + ", ".join(f"{k} {v}" for k, v in sorted(categories.items())))
    for p in problems[:20]:
        print("  PROBLEM", p)
    assert len(records) >= 10_000
    assert counts["escapes"] == 0
    assert counts["changed values"] == 0
    assert counts["good records rejected"] == 0 and counts["wrong code"] == 0 and counts["lost"] == 0
    assert counts["frame errors"] == 0
    assert counts["accepted"] > 3000 and sum(v for k, v in counts.items() if k.startswith("rejected")) > 3000
