"""Flag types of the `ivmstream` command line, shared by every command's parser.

argparse turns their ValueError/ArgumentTypeError into the parser's one-line error.
"""

from __future__ import annotations

import argparse
import math
import re


# Flag types: argparse turns their ValueError/ArgumentTypeError into Parser.error. They also
# apply to defaults taken from the environment (argparse converts string defaults).
def positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return v


def non_negative_number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def int_in(lo: int, hi: int | None = None):
    """An integer flag in lo..hi (no upper bound when hi is None)."""

    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            span = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"must be an integer {span}, got {text!r}")
        return v

    parse.__name__ = "integer"
    return parse


def non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


port = int_in(1, 65535)


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def bucket_name(text: str) -> str:
    """An S3 bucket name: 3-63 lower-case letters, digits, '.' and '-', a letter or digit at each end."""
    if not _BUCKET.fullmatch(text) or ".." in text:
        raise argparse.ArgumentTypeError(f"must be an S3 bucket name (3-63 of a-z 0-9 . -), got {text!r}")
    return text
