"""The decoder's short paths give exactly what its general path gives, or the same rejection.

Short paths: msgspec's parser in front of the json module, and the decimal column decoders
(text and base64 unscaled forms). Each is checked against the general code on generated
inputs, values and their representation (digits and exponent) alike.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import debezium as D
from connectors.debezium_types import Bad, FieldSpec, Modes, column_decoder, convert

JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                      st.decimals(allow_nan=False, allow_infinity=False), st.text(max_size=12))
JSON_DOC = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=20)


def _dump(doc) -> str:
    """JSON text with Decimals written as number literals (1E+5, -0.00, 0E-8)."""
    if isinstance(doc, Decimal):
        return str(doc)
    if isinstance(doc, list):
        return "[" + ",".join(_dump(x) for x in doc) + "]"
    if isinstance(doc, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _dump(v) for k, v in doc.items()) + "}"
    return json.dumps(doc)


def _exact(data):
    """What the json module alone makes of the bytes (the decoder before the short path)."""
    try:
        return D._JSON.decode(bytes(data).decode("utf-8")), None
    except (ValueError, RecursionError) as e:
        return None, type(e).__name__


def _same(a, b) -> bool:
    """Equal, with Decimals equal in digits and exponent too, and of the same types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=400, deadline=None)
@given(doc=JSON_DOC)
def test_msgspec_parse_equals_json_module(doc):
    data = _dump(doc).encode("utf-8", "surrogatepass")
    got, _ = D._parse(data, "value")
    want, err = _exact(data)
    assert err is None
    assert _same(got, want)


@settings(max_examples=400, deadline=None)
@given(data=st.one_of(st.binary(max_size=40), st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
                      st.sampled_from([b'{"a": NaN}', b'"\\ud800"', b'{"a": 1} x', b"[" * 3000, b'{"a":1,"a":2}',
                                       b'{"a": 1e400}', b'\xef\xbb\xbf{}', b'{"a": "\\u00e9"}', b' {"a": -0.0} '])))
def test_msgspec_parse_refuses_or_agrees(data):
    """Arbitrary bytes: the short path either agrees with the json module or defers to it."""
    want, err = _exact(data)
    try:
        got, _ = D._parse(data, "value")
    except Bad as bad:
        assert err is not None, f"short path refused what json reads: {bad.reason}"
        return
    assert err is None, "short path read what json refuses"
    assert _same(got, want)


DECIMAL_TEXT = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.from_regex(r"-?[0-9]{1,14}(\.[0-9]{1,4})?", fullmatch=True),
    st.sampled_from(["0.00", "-0.00", "NaN", "Infinity", "1e5", "12.", ".5", "99999999999.99", "-99999999999.99",
                     "100000000000.00", "٣.١٤"]),
)


def _outcome(decode, raw):
    try:
        return decode(raw), None
    except Bad as bad:
        return None, (bad.code, bad.reason)


def _check_same_as_convert(spec, modes: Modes, raw) -> None:
    """The column decoder (short path or not) returns what ``convert`` returns, or the same rejection."""
    typ = "decimal(13,2)"
    want = _outcome(lambda v: convert(v, spec, typ, modes, "v"), raw)
    got = _outcome(lambda v: column_decoder(typ, spec, modes)(v, "v"), raw)
    assert got[1] == want[1]
    assert want[0] is None or _same(got[0], want[0])


@pytest.mark.parametrize("spec", [None, FieldSpec("string")])
@settings(max_examples=600, deadline=None)
@given(raw=DECIMAL_TEXT)
def test_decimal_text_column_is_convert(spec, raw):
    _check_same_as_convert(spec, Modes(decimal="string"), raw)


def _b64(n: int) -> str:
    length = max(1, (n.bit_length() + 8) // 8)
    return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode()


UNSCALED = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(_b64),
    st.integers(min_value=-(10**14), max_value=10**14).map(_b64),
    st.sampled_from(["", "AA==", "/w==", "not base64!", "AAAA", "AQ", "gAAAAAAAAAAAAAAAAAAAAAAA" * 2]),
)


@pytest.mark.parametrize("spec", [None, FieldSpec("bytes", "org.apache.kafka.connect.data.Decimal", 2),
                                  FieldSpec("bytes", "org.apache.kafka.connect.data.Decimal", 3)])
@settings(max_examples=600, deadline=None)
@given(raw=UNSCALED)
def test_decimal_unscaled_column_is_convert(spec, raw):
    _check_same_as_convert(spec, Modes(decimal="precise"), raw)
