"""A strict Avro binary reader compiled per writer schema: Python source generated once per schema.

``compile_reader(parsed)`` turns a schema (fastavro's parsed form: names fully qualified, logical
types removed) into a function ``read(data, start) -> value`` that reads one Avro body from
``data[start:]`` and returns what fastavro's ``schemaless_reader`` returns for it (records as
dicts in field order, enums as their symbol, fixed and bytes as bytes, floats as Python floats),
or raises ``Corrupt``, ``IndexError`` (the body ends early), ``struct.error`` (a float cut short)
or ``UnicodeDecodeError`` (a string that is not UTF-8).

Strict means it accepts exactly the bytes a correct Avro encoder writes, each value one way:
numbers as minimal zig-zag varints of at most 10 bytes and 64 bits (an ``int`` within 32), booleans
as the byte 0 or 1, union and enum indexes within range, lengths and counts not negative, strings
UTF-8, and every byte of the body read. fastavro reads some other bytes as values (a boolean byte
2 as True, a negative union index as a branch counted from the end, an over-long number as its
value), which is why the bytes were once encoded again and compared; this reader refuses them
while reading, at no extra cost. Arrays and maps may come in several blocks, a negative block
count followed by the block's byte size (the Avro spec allows both; the size must match).

Each record type becomes one generated function (so a recursive schema works); its fields are
read by straight-line code with the position in a local variable: ~3x fastavro's speed on
Debezium envelopes. A schema the generator cannot turn into code (nesting Python cannot compile)
gives ``None``: the caller then reads with fastavro and checks by encoding again.

What makes it quick on Debezium's records, each accepting exactly what the field-by-field code
accepts: the top record read in ``read`` itself and a row record made as a tuple read inline
(``AS_TUPLE``: no dict, one call less); numbers of two and three bytes read inline; fields
checked but not made (``skip``) in one regular-expression match per run of numbers; text runs
remembered by their bytes; and a record of text and numbers checked only, its made values some
of the text (Debezium's source, of which only the table is made), read by one match of a
template built from the last record (``_Gen.template``, ``retemplate``).
"""

from __future__ import annotations

import re
import struct
from typing import Any, Callable

_FLOAT = struct.Struct("<f").unpack_from
_DOUBLE = struct.Struct("<d").unpack_from


class Corrupt(Exception):
    """The bytes are no valid Avro encoding of the schema (the reason says which part)."""


def varint_tail(b: bytes, i: int, c: int) -> tuple[int, int]:
    """The rest of a zig-zag varint whose first byte ``c`` (read at ``i - 1``) has its high bit set."""
    n = c & 0x7F
    for shift in _SHIFTS:  # 7, 14, ..., 63: at most 10 bytes in all
        c = b[i]
        i += 1
        if c < 0x80:
            if c == 0:
                raise Corrupt("an over-long number (a varint ending in a zero byte)")
            if shift == 63 and c > 1:
                raise Corrupt("a number past 64 bits")
            n |= c << shift
            return (n >> 1) ^ -(n & 1), i
        n |= (c & 0x7F) << shift
    raise Corrupt("a number of more than 10 bytes")


_SHIFTS = tuple(range(7, 64, 7))
_PRIMS = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_COMPLEX = {"record", "error", "enum", "fixed", "array", "map"}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def bad_number(b: bytes, i: int, bits: int) -> None:
    """Raise what is wrong with the varint at ``i`` (one the quick check refused)."""
    c = b[i]
    v = (c >> 1) ^ -(c & 1) if c < 0x80 else varint_tail(b, i + 1, c)[0]
    if bits == 32 and not _INT_MIN <= v <= _INT_MAX:
        raise Corrupt("an int past 32 bits")
    raise Corrupt("a number that is no canonical varint")  # not reached: the checks above raise


# Canonical zig-zag varints, one to 10 bytes (the 10th 0x01: 64 bits), or 5 for an int (its 5th
# byte holds 4 bits): no over-long form (a last byte 0x00 after others), nothing past the width.
_LONG_OK = re.compile(b"\\x00|[\\x80-\\xff]{0,8}[\\x01-\\x7f]|[\\x80-\\xff]{9}\\x01").match
_INT_OK = re.compile(b"\\x00|[\\x80-\\xff]{0,3}[\\x01-\\x7f]|[\\x80-\\xff]{4}[\\x01-\\x0f]").match


AS_TUPLE = "tuple"  # in ``skip``: the field's record made as a tuple of all its fields, in order


def _wanted(keep: Any, name: str) -> bool:
    """Whether a record's field is made: ``keep`` None or AS_TUPLE (all), a frozenset (those),
    or a dict (the top record's: False for a field checked only, a frozenset for the fields to
    make of a field's own record, AS_TUPLE for that record as a tuple; any other field made)."""
    if keep is None or keep is AS_TUPLE:
        return True
    if isinstance(keep, frozenset):
        return name in keep
    return keep.get(name, True) is not False


def _sub(keep: Any, name: str) -> Any:
    sub = keep.get(name) if isinstance(keep, dict) else None
    return sub if isinstance(sub, frozenset) or sub is AS_TUPLE else None


_TEMPLATE_BUILDS = 16  # templates built freely for a record; after these, a new one must be earned:
_TEMPLATE_EARN = 256  # by this many matches of the one it replaces,
_TEMPLATE_STALE = 256  # or by this many records it did not match since it was built, more than it matched


def retemplate(state: list, pieces: tuple, values: tuple, cuts: tuple = (), runs: tuple = ()) -> None:
    """Build the template of a record just read field by field (``_Gen.template``): ``pieces``
    per field, a pattern (bytes) or (index of its value in ``values``, its union index bytes
    or None); ``values`` the values the record made. ``state``: [(match, values) or None,
    matches since built, builds, matches before, misses since built]. A regular expression
    costs tens of microseconds to build: past _TEMPLATE_BUILDS, one is built only when the
    last one earned it, and a record whose templates never matched stops being tried at all.
    ``cuts``: the remembered runs as (first piece, end piece), ``runs`` their bytes in the
    record just read: a second template with those bytes as they are, tried first (state[0]
    is (literal match, values, general match))."""
    if state[0] is None and state[2] >= _TEMPLATE_BUILDS:
        return  # given up on this record's templates
    state[4] += 1
    if state[2] >= _TEMPLATE_BUILDS and state[1] < _TEMPLATE_EARN and not (
            state[4] >= _TEMPLATE_STALE and state[4] > state[1]):
        if state[1] == 0 and state[3] == 0:
            state[0] = None  # no template ever matched: records of this kind change their text, stop trying
        return
    try:
        one = [x if x.__class__ is bytes else re.escape(_text_bytes(values[x[0]], x[1])) for x in pieces]
        rx = re.compile(b"".join(one))
        for (a, z), run in sorted(zip(cuts, runs), reverse=True):  # from the end: the indexes stay right
            one[a:z] = [re.escape(run)]
        lit = re.compile(b"".join(one))
    except (re.error, TypeError, OverflowError, RecursionError):
        state[0], state[2] = None, _TEMPLATE_BUILDS  # given up
        return
    state[0], state[1], state[2], state[3], state[4] = (lit.match, values, rx.match), 0, state[2] + 1, \
        state[3] + state[1], 0


# a text of up to 63 ASCII bytes: its one-byte length prefix (2n) and n bytes below 0x80
_ASCII_TEXT = b"(?:" + b"|".join(b"\\x%02x[\\x00-\\x7f]{%d}" % (2 * n, n) for n in range(64)) + b")"


def _text_bytes(v: str | None, branches: dict | None) -> bytes:
    """The Avro encoding of a text value (a string, or a union of null and string)."""
    if v is None:
        return bytes([branches["null"]])
    raw = v.encode()
    n, size = 2 * len(raw), bytearray()
    while n >= 0x80:
        size.append(n & 0x7F | 0x80)
        n >>= 7
    size.append(n)
    return (bytes([branches["string"]]) if branches is not None else b"") + bytes(size) + raw


class _Gen:
    def __init__(self, named: dict) -> None:
        self.named = named
        self.funcs: dict[str, str] = {}  # record full name -> function name
        self.templates: dict[str, tuple[str, str]] = {}  # function name -> (template state, value from tv)
        self.sources: list[str] = []
        self.consts: dict[str, Any] = {}
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def const(self, value: Any) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    def resolve(self, t: Any) -> Any:
        """A type name -> its definition; a primitive with attributes -> its name."""
        while True:
            if isinstance(t, str) and t not in _PRIMS:
                if t not in self.named:
                    raise ValueError(f"unknown type name {t!r}")
                t = self.named[t]
            elif isinstance(t, dict) and t.get("type") not in _COMPLEX:  # {"type": "int", ...}, {"type": {...}}
                t = t["type"]
            else:
                return t

    def record_func(self, rec: dict, build: bool = True, keep: Any = None, top: bool = False) -> str:
        """The function reading a record: building every field, the fields in ``keep`` (the
        others validated only), or none (``build`` False: validated only, returns None).
        ``top``: the body's own record, as ``read(b, i)`` (one call less a record), which
        checks that the body ends with it."""
        k = (rec["name"], build, tuple(sorted(keep.items())) if isinstance(keep, dict) else keep, top)
        fn = self.funcs.get(k)
        if fn is not None:
            return fn
        fn = self.funcs[k] = "read" if top else f"r{len(self.funcs)}"
        lines: list[str] = []
        out = []
        fields = rec["fields"]
        parts: list | None = []  # the record as text and numbers checked only, or text made: see ``template``
        spans: list = []  # the remembered runs: (first part, end part, their bytes in the record just read)
        k = 0
        while k < len(fields):
            run = 0
            while k + run < len(fields) and self.textual(fields[k + run]["type"]):
                run += 1
            if run >= 2:  # text fields that repeat record after record (Debezium's source): remembered
                lines.append(f"    s{k} = i")
                got = self.memo_run(fields[k:k + run], build, keep, lines)
                lines.append(f"    e{k} = i")
                if parts is not None:
                    spans.append((len(parts), len(parts) + run, f"b[s{k}:e{k}]"))
                    made = dict(got)
                    for f in fields[k:k + run]:  # a made one: its value's bytes; another: any short ASCII text
                        parts.append((len(out) + list(made).index(f["name"]), self.text_branches(f["type"]))
                                     if f["name"] in made else self.text_pattern(f["type"]))
                out += got
                k += run
                continue
            run = 0
            while k + run < len(fields) and not (build and _wanted(keep, fields[k + run]["name"])) \
                    and self.pattern(fields[k + run]["type"]) is not None:
                run += 1
            if run >= 2:  # numbers checked only (Debezium's ts_us, ts_ns, txId, lsn...): one match for all
                self.skip_run(fields[k:k + run], lines)
                if parts is not None:
                    parts += [self.pattern(f["type"]) for f in fields[k:k + run]]
                k += run
                continue
            f = fields[k]
            want = build and _wanted(keep, f["name"])
            v = self.emit(f["type"], lines, 1, want, _sub(keep, f["name"]) if want else None)
            if want:
                out.append((f["name"], v))
            if parts is not None:
                pat = None if want else self.pattern(f["type"]) or self.text_pattern(f["type"])
                if pat is None:
                    parts = None
                else:
                    parts.append(pat)
            k += 1
        result = self.made(build, keep, out, [v for _, v in out])
        if top:
            head = ["def read(b, i):", "    L = len(b)"]
            lines += ["    if i != L:", "        raise Corrupt(f'{L - i} byte(s) left after the Avro body')",
                      f"    return {result}"]
        else:
            head = [f"def {fn}(b, i, L):"]
            if parts and len(parts) >= 3 and any(self.textual(f["type"]) for f in fields):
                head, lines = self.template(fn, parts, spans, out, self.made(build, keep, out, [
                    f"tv[{j}]" for j in range(len(out))]), lines)
            lines.append(f"    return {result}, i")
        self.sources.append("\n".join(head + lines))
        return fn

    def call(self, fn: str, v: str, lines: list, ind: int) -> None:
        """``v, i = fn(b, i, L)``; for a record with a template (``template``), its match tried
        here first, one call less when it matches."""
        p = "    " * ind
        if fn not in self.templates:
            lines.append(f"{p}{v}, i = {fn}(b, i, L)")
            return
        state, expr = self.templates[fn]
        lines += [f"{p}tp = {state}[0]", f"{p}m = tp[0](b, i) or tp[2](b, i) if tp is not None else None",
                  f"{p}if m is not None:",
                  f"{p}    {state}[1] += 1", f"{p}    tv = tp[1]", f"{p}    {v} = {expr}", f"{p}    i = m.end()",
                  f"{p}else:", f"{p}    {v}, i = {fn}(b, i, L)"]

    @staticmethod
    def made(build: bool, keep: Any, out: list, exprs: list) -> str:
        """The expression of what a record function returns: None (checked only), a tuple
        (AS_TUPLE) or a dict of the made fields ``out`` (name, variable), their values ``exprs``."""
        if not build:
            return "None"
        if keep is AS_TUPLE:
            return "(" + "".join(f"{x}, " for x in exprs) + ")"
        return "{" + ", ".join(f"{n!r}: {x}" for (n, _), x in zip(out, exprs)) + "}"

    def template(self, fn: str, parts: list, spans: list, out: list, expr: str, lines: list) -> tuple[list, list]:
        """A record made only of text and of numbers checked only, its only values made some
        of the text (Debezium's source: its table): after a record is read field by field,
        one regular expression of the record: each made text field the bytes of the value just
        read, each other text field any text of up to 63 ASCII bytes (what ``text_pattern``
        matches is valid UTF-8 of the length its prefix says), each number its pattern. The
        next record it matches is read in one match, with the values remembered (the same
        bytes read the same; the rest matches only encodings the field's own check accepts;
        a record it does not match is read field by field). Rebuilt when a made value changes,
        within the limits of ``retemplate``. Beside it, a template with the remembered runs'
        bytes as they were (``spans``), tried first: text that repeats matches it faster."""
        state = self.const([None, 0, 0, 0, 0])  # see ``retemplate``
        names = [v for _, v in out]  # ``expr``: what the record returns, its values from the template's tuple tv
        head = [f"def {fn}(b, i, L):"]  # the match is tried where the record is read (``call``)
        self.templates[fn] = (state, expr)
        pieces = self.const(tuple(parts))
        cuts = self.const(tuple((a, z) for a, z, _ in spans))
        lines = lines + [f"    retemplate({state}, {pieces}, (" + "".join(f"{v}, " for v in names) + "), "
                         f"{cuts}, (" + "".join(f"{x}, " for _, _, x in spans) + "))"]
        return head, lines

    def text_branches(self, t: Any) -> dict | None:
        """A text type's union index bytes by branch ("null", "string"); None for a plain string."""
        t = self.resolve(t)
        return {self.resolve(x): 2 * k for k, x in enumerate(t)} if isinstance(t, list) else None

    def text_pattern(self, t: Any) -> bytes | None:
        """For a text type (``textual``): a regular expression matching a value of up to 63
        ASCII bytes (a one-byte length prefix; ASCII is valid UTF-8) or null; None otherwise."""
        if not self.textual(t):
            return None
        branches = self.text_branches(t)
        if branches is None:
            return _ASCII_TEXT
        return b"(?:" + b"|".join(b"\\x%02x" % k + (_ASCII_TEXT if x == "string" else b"")
                                  for x, k in branches.items()) + b")"

    def pattern(self, t: Any) -> bytes | None:
        """A regular expression matching exactly the encodings ``skip`` accepts for ``t`` (the
        numbers, booleans, floats and their unions with null), or None for another type."""
        t = self.resolve(t)
        if t == "null":
            return b""
        if t == "boolean":
            return b"[\\x00\\x01]"
        if t in ("int", "long"):
            return b"(?:" + (_INT_OK if t == "int" else _LONG_OK).__self__.pattern + b")"
        if t in ("float", "double"):
            return b"[\\x00-\\xff]{%d}" % (4 if t == "float" else 8)
        if isinstance(t, list) and len(t) <= 63:
            alts = [self.pattern(x) for x in t]
            if any(a is None for a in alts):
                return None
            return b"(?:" + b"|".join(b"\\x%02x" % (2 * k) + a for k, a in enumerate(alts)) + b")"
        return None

    def skip_run(self, run: list, lines: list) -> None:
        """Fields checked only, each of a type ``pattern`` covers: one match over them all; when
        it fails, each field's own check says what is wrong."""
        match = self.const(re.compile(b"".join(self.pattern(f["type"]) for f in run)).match)
        lines += [f"    m = {match}(b, i)", "    if m is not None:", "        i = m.end()", "    else:"]
        for f in run:
            self.emit(f["type"], lines, 2, False)

    def textual(self, t: Any) -> bool:
        """A string, or a union of null and string."""
        t = self.resolve(t)
        if isinstance(t, list):
            return all(self.resolve(x) in ("null", "string") for x in t) and len(t) <= 63
        return t == "string"

    def memo_run(self, run: list, build: bool, keep: Any, lines: list) -> list:
        """A run of text fields read once and remembered: the next record whose bytes at this
        point start with the same bytes gets the same values without reading them again (the
        same bytes read from the same point of a schema read the same: they were checked the
        first time). One tuple per run, replaced whole, so a reader shared by threads stays right."""
        memo = self.const([None])
        inner: list = []
        got = []
        for f in run:
            want = build and _wanted(keep, f["name"])
            v = self.emit(f["type"], inner, 2, want, None)
            if want:
                got.append((f["name"], v))
        lines += ["    mt = " + memo + "[0]", "    if mt is not None and b.startswith(mt[0], i):",
                  "        i += mt[1]"]
        lines += [f"        {v} = mt[{2 + j}]" for j, (_, v) in enumerate(got)]
        lines += ["    else:", "        ms = i"] + inner
        lines.append(f"        {memo}[0] = (b[ms:i], i - ms" + "".join(f", {v}" for _, v in got) + ")")
        return got

    def varint(self, v: str, lines: list, ind: int) -> None:
        p = "    " * ind
        lines += [f"{p}c = b[i]", f"{p}i += 1",
                  f"{p}if c < 128:", f"{p}    {v} = (c >> 1) ^ -(c & 1)",
                  f"{p}else:", f"{p}    {v}, i = varint_tail(b, i, c)"]

    def number(self, v: str, lines: list, ind: int, is_int: bool = False) -> None:
        """A varint value (an int or a long): as ``varint``, its two- and three-byte forms read
        inline (a last byte 1-127: a zero would be an over-long form, which ``varint_tail``
        refuses, as it reads every other form). ``is_int``: a longer form is checked to fit
        32 bits (three bytes hold 21: those fit)."""
        p = "    " * ind
        lines += [f"{p}c = b[i]", f"{p}i += 1",
                  f"{p}if c < 128:", f"{p}    {v} = (c >> 1) ^ -(c & 1)",
                  f"{p}else:", f"{p}    d = b[i]",
                  f"{p}    if 0 < d < 128:", f"{p}        n = (c & 127) | (d << 7)", f"{p}        i += 1",
                  f"{p}        {v} = (n >> 1) ^ -(n & 1)",
                  f"{p}    elif d >= 128 and 0 < b[i + 1] < 128:",
                  f"{p}        n = (c & 127) | ((d & 127) << 7) | (b[i + 1] << 14)", f"{p}        i += 2",
                  f"{p}        {v} = (n >> 1) ^ -(n & 1)",
                  f"{p}    else:", f"{p}        {v}, i = varint_tail(b, i, c)"]
        if is_int:
            lines += [f"{p}        if not {_INT_MIN} <= {v} <= {_INT_MAX}:",
                      f"{p}            raise Corrupt('an int past 32 bits')"]

    def length(self, v: str, what: str, lines: list, ind: int) -> None:
        p = "    " * ind
        self.varint(v, lines, ind)
        lines += [f"{p}if {v} < 0:", f"{p}    raise Corrupt('a negative {what}')"]

    def emit(self, t: Any, lines: list, ind: int, build: bool = True, keep: Any = None) -> str:
        """Lines that read a value of ``t`` at ``i``; the expression holding it. ``build``
        False: lines that check the bytes and move past them, the value not made ("None")."""
        t = self.resolve(t)
        p = "    " * ind
        if t == "null":
            return "None"
        if not build:
            self.skip(t, lines, ind)
            return "None"
        v = self.var()
        if t == "boolean":
            lines += [f"{p}{v} = b[i]", f"{p}i += 1", f"{p}if {v} > 1:",
                      f"{p}    raise Corrupt(f'a boolean byte {{{v}}}')", f"{p}{v} = {v} == 1"]
        elif t in ("int", "long"):
            self.number(v, lines, ind, t == "int")
        elif t == "float":
            lines += [f"{p}{v} = _FLOAT(b, i)[0]", f"{p}i += 4"]
        elif t == "double":
            lines += [f"{p}{v} = _DOUBLE(b, i)[0]", f"{p}i += 8"]
        elif t in ("bytes", "string"):
            n = self.var()
            self.length(n, "length", lines, ind)
            lines += [f"{p}{n} += i", f"{p}if {n} > L:", f"{p}    raise IndexError",
                      f"{p}{v} = b[i:{n}]" + (".decode()" if t == "string" else ""), f"{p}i = {n}"]
        elif isinstance(t, list):
            self.union(t, v, lines, ind, keep)
        elif isinstance(t, dict) and t.get("type") in ("record", "error"):
            if keep is AS_TUPLE and not any(self.textual(f["type"]) and self.textual(g["type"])
                                            for f, g in zip(t["fields"], t["fields"][1:])):
                # a row record (no remembered text runs, which read at a fixed depth): inline, one call less
                vs = [self.emit(f["type"], lines, ind, True, None) for f in t["fields"]]
                lines.append(f"{p}{v} = (" + "".join(f"{x}, " for x in vs) + ")")
            else:
                self.call(self.record_func(t, True, keep), v, lines, ind)
        elif isinstance(t, dict) and t.get("type") == "enum":
            syms = t["symbols"]
            k = self.const(tuple(syms))
            self.varint(v, lines, ind)
            lines += [f"{p}if not 0 <= {v} < {len(syms)}:", f"{p}    raise Corrupt('an enum index out of range')",
                      f"{p}{v} = {k}[{v}]"]
        elif isinstance(t, dict) and t.get("type") == "fixed":
            size = int(t["size"])
            lines += [f"{p}if i + {size} > L:", f"{p}    raise IndexError", f"{p}{v} = b[i:i + {size}]",
                      f"{p}i += {size}"]
        elif isinstance(t, dict) and t.get("type") in ("array", "map"):
            self.blocks(t, v, lines, ind)
        else:
            raise ValueError(f"unknown Avro type {str(t)[:80]!r}")
        return v

    def skip(self, t: Any, lines: list, ind: int) -> None:
        """Check a value's bytes as ``emit`` does, without making the value."""
        p = "    " * ind
        if t in ("int", "long"):  # a canonical varint of the width, at C speed; else the exact error
            lines += [f"{p}m = {'_INT_OK' if t == 'int' else '_LONG_OK'}(b, i)", f"{p}if m is None:",
                      f"{p}    bad_number(b, i, {32 if t == 'int' else 64})", f"{p}i = m.end()"]
        elif t == "boolean":
            lines += [f"{p}if b[i] > 1:", f"{p}    raise Corrupt(f'a boolean byte {{b[i]}}')", f"{p}i += 1"]
        elif t in ("float", "double"):
            w = 4 if t == "float" else 8
            lines += [f"{p}i += {w}", f"{p}if i > L:", f"{p}    raise IndexError"]
        elif t == "string":  # decoded all the same: that is the UTF-8 check
            self.emit(t, lines, ind)
        elif t == "bytes":
            n = self.var()
            self.length(n, "length", lines, ind)
            lines += [f"{p}i += {n}", f"{p}if i > L:", f"{p}    raise IndexError"]
        elif isinstance(t, list):
            self.union(t, None, lines, ind, None)
        elif isinstance(t, dict) and t.get("type") in ("record", "error"):
            self.call(self.record_func(t, False), "_", lines, ind)
        elif isinstance(t, dict) and t.get("type") in ("enum", "fixed", "array", "map"):
            self.emit(t, lines, ind)
        else:
            raise ValueError(f"unknown Avro type {str(t)[:80]!r}")

    def union(self, branches: list, v: str | None, lines: list, ind: int, keep: Any) -> None:
        """``v`` None: the branch checked, no value made."""
        p = "    " * ind
        n = self.var()
        if len(branches) > 63:  # indexes past 63 take two bytes: the general varint
            self.varint(n, lines, ind)
            lines += [f"{p}if not 0 <= {n} < {len(branches)}:", f"{p}    raise Corrupt('a union index out of range')"]
        else:  # every index a single byte, 2 * index (zig-zag): any other byte is no valid index
            lines += [f"{p}{n} = b[i]", f"{p}i += 1"]
        order = sorted(enumerate(branches), key=lambda kb: self.resolve(kb[1]) == "null")  # a value's branch first
        for j, (k, br) in enumerate(order):
            key = 2 * k if len(branches) <= 63 else k
            lines.append(f"{p}{'if' if j == 0 else 'elif'} {n} == {key}:")
            expr = self.emit(br, lines, ind + 1, v is not None, keep)
            lines.append(f"{p}    {v} = {expr}" if v is not None else f"{p}    pass")
        lines += [f"{p}else:", f"{p}    raise Corrupt(f'a union index byte {{{n}}} out of range')"]

    def blocks(self, t: dict, v: str, lines: list, ind: int) -> None:
        p = "    " * ind
        is_map = t["type"] == "map"
        n, size, start, j = self.var(), self.var(), self.var(), self.var()
        lines.append(f"{p}{v} = {{}}" if is_map else f"{p}{v} = []")
        lines.append(f"{p}while True:")
        q = p + "    "
        self.varint(n, lines, ind + 1)
        lines += [f"{q}if {n} == 0:", f"{q}    break", f"{q}{size} = -1",
                  f"{q}if {n} < 0:", f"{q}    {n} = -{n}"]
        self.length(size, "block size", lines, ind + 2)
        # every item of a type that is not null takes a byte or more: a count past the bytes is corrupt
        lines += [f"{q}if {n} > L:", f"{q}    raise Corrupt('a block count past the body')", f"{q}{start} = i",
                  f"{q}for {j} in range({n}):"]
        r = q + "    "
        if is_map:
            key = self.emit("string", lines, ind + 2)
            val = self.emit(t["values"], lines, ind + 2)
            lines.append(f"{r}{v}[{key}] = {val}")
        else:
            item = self.emit(t["items"], lines, ind + 2)
            lines.append(f"{r}{v}.append({item})")
        lines += [f"{q}if {size} >= 0 and i - {start} != {size}:",
                  f"{q}    raise Corrupt('a block size that is not its bytes')"]


def row_record_fields(parsed: Any, name: str) -> tuple[str, ...] | None:
    """The field names of the record a top-level field holds (its type a record, or a union
    of null and a record); () when the top record has no such field; None for any other type."""
    try:
        gen = _Gen(parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {})
        top = gen.resolve(parsed)
        for f in top["fields"]:
            if f["name"] == name:
                t = gen.resolve(f["type"])
                if isinstance(t, list):
                    recs = [gen.resolve(x) for x in t if gen.resolve(x) != "null"]
                    t = recs[0] if len(recs) == 1 and len(t) == 2 else None
                if isinstance(t, dict) and t.get("type") == "record":
                    return tuple(x["name"] for x in t["fields"])
                return None
        return ()
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def compile_reader(parsed: Any, skip: dict | str | None = None) -> Callable[[bytes, int], Any] | None:
    """The reader of one top-level record schema; None when it cannot be generated.

    ``skip``: top-level fields whose values are not wanted: False (the bytes checked, the field
    left out of the result) or a frozenset of the fields to make of that field's record (its
    other fields checked only); or AS_TUPLE: that field's record made as a tuple of its
    fields' values in the schema's order (no dict per record; the caller knows the names);
    ``skip`` AS_TUPLE itself: the top record so. A skipped ``long`` costs one regular-expression match instead
    of a loop over its bytes.
    """
    try:
        named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
        gen = _Gen(named)
        top = gen.resolve(parsed)
        keep = AS_TUPLE if skip is AS_TUPLE else dict(skip) if skip else None
        if isinstance(top, dict) and top.get("type") in ("record", "error"):
            gen.record_func(top, True, keep, top=True)
            src = "\n\n".join(gen.sources)
        else:
            lines = ["def read(b, i):", "    L = len(b)"]
            expr = gen.emit(top, lines, 1, True, keep)
            lines += ["    if i != L:", "        raise Corrupt(f'{L - i} byte(s) left after the Avro body')",
                      f"    return {expr}"]
            src = "\n\n".join(gen.sources + ["\n".join(lines)])
        scope: dict[str, Any] = {"Corrupt": Corrupt, "varint_tail": varint_tail, "bad_number": bad_number,
                                 "retemplate": retemplate,
                                 "_FLOAT": _FLOAT, "_DOUBLE": _DOUBLE, "_LONG_OK": _LONG_OK, "_INT_OK": _INT_OK,
                                 **gen.consts}
        exec(compile(src, "<avro reader>", "exec"), scope)  # noqa: S102 - source generated above from a schema
        return scope["read"]
    except (SyntaxError, RecursionError, MemoryError, ValueError, KeyError, TypeError):
        return None
