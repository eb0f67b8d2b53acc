"""Spark DDL column lists as Arrow schemas, so a local or s3 lake's tables are created without Spark.

The job's tables are declared once, as Spark DDL (``"job STRING, batch_id BIGINT, step_ms
MAP<STRING, DOUBLE>"``). Spark's CREATE TABLE costs a second or more per table (the first one
five, while Delta initialises in the JVM); delta-rs writes the same first commit in
milliseconds. This parser covers the types those lists use: the primitives, DECIMAL(p, s),
ARRAY, MAP and STRUCT, names optionally in backquotes. Every field is nullable, as Spark
makes them. Anything else raises ValueError: the caller then asks Spark.
"""

from __future__ import annotations

import re

import pyarrow as pa

_PRIMITIVE = {
    "string": pa.string(), "bigint": pa.int64(), "long": pa.int64(), "int": pa.int32(),
    "integer": pa.int32(), "smallint": pa.int16(), "short": pa.int16(), "tinyint": pa.int8(),
    "byte": pa.int8(), "double": pa.float64(), "float": pa.float32(), "real": pa.float32(),
    "boolean": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"DDL: cannot read {text[pos:pos + 20]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok.lower() != want):
            raise ValueError(f"DDL: expected {want or 'a token'}, found {tok!r}")
        self.i += 1
        return tok

    def name(self) -> str:
        tok = self.take()
        return tok[1:-1].replace("``", "`") if tok.startswith("`") else tok

    def fields(self, closing: str | None) -> list[pa.Field]:
        out = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take(":")
            out.append(pa.field(name, self.type(), nullable=True))
            if self.peek() == ",":
                self.take(",")
                continue
            if self.peek() == closing:
                return out
            raise ValueError(f"DDL: unexpected {self.peek()!r} after field {name!r}")

    def type(self) -> pa.DataType:
        word = self.take().lower()
        if word in ("decimal", "numeric", "dec"):
            self.take("(")
            p = int(self.take())
            self.take(",")
            s = int(self.take())
            self.take(")")
            return pa.decimal128(p, s)
        if word == "array":
            self.take("<")
            item = self.type()
            self.take(">")
            return pa.list_(pa.field("element", item, nullable=True))
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return pa.map_(key, pa.field("value", value, nullable=True))
        if word == "struct":
            self.take("<")
            inner = self.fields(">")
            self.take(">")
            return pa.struct(inner)
        if word in _PRIMITIVE:
            return _PRIMITIVE[word]
        raise ValueError(f"DDL: type {word!r} is not supported here")


def ddl_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a Spark DDL column list (every field nullable)."""
    p = _Parser(ddl)
    fields = p.fields(None)
    if p.peek() is not None:
        raise ValueError(f"DDL: trailing {p.peek()!r}")
    return pa.schema(fields)
