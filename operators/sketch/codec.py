"""Versioned byte encoding of a sketch maintainer's state (``sketch.maintainer.v1``).

Layout: the 8-byte magic ``IVMSKCH\\0``, a 2-byte big-endian format version, then a
zlib-compressed pickle of a plain dict: the query text, partitions (attribute and
boundaries), options, base-table schemas, and one entry per operator of the planned
tree in depth-first order - ``(operator kind, state encoding name, state object)`` -
plus the final merge's state.  ``decode`` refuses unknown magic or versions with
``StateError``; the maintainer checks that every operator's encoding name matches the
one its code writes today (e.g. ``aggregate.groups.v3``) before it adopts the state.
Snapshots are trusted input (they are written by the job itself, into its own state
tables): pickle must never be fed bytes from elsewhere.
"""

from __future__ import annotations

import pickle
import struct
import zlib

from core.errors import StateError

MAGIC = b"IVMSKCH\x00"
VERSION = 1
ENCODING = "sketch.maintainer.v1"


def encode(payload: dict) -> bytes:
    body = zlib.compress(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL), 1)
    return MAGIC + struct.pack(">H", VERSION) + body


def decode(data: bytes) -> dict:
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < len(MAGIC) + 2:
        raise StateError("sketch snapshot is empty or not bytes")
    data = bytes(data)
    if data[: len(MAGIC)] != MAGIC:
        raise StateError("not a sketch maintainer snapshot (bad magic)")
    (version,) = struct.unpack(">H", data[len(MAGIC): len(MAGIC) + 2])
    if version != VERSION:
        raise StateError(f"unknown sketch snapshot version {version} (this build reads {VERSION})")
    try:
        payload = pickle.loads(zlib.decompress(data[len(MAGIC) + 2:]))
    except Exception as e:  # corrupt body
        raise StateError(f"corrupt sketch snapshot: {e}") from None
    if not isinstance(payload, dict) or payload.get("encoding") != ENCODING:
        raise StateError(f"unknown sketch snapshot encoding {payload.get('encoding') if isinstance(payload, dict) else None!r}")
    return payload
