"""Hand-built compact-v1 blobs (fleetscope.proto.compact's layout), for tests that play a hostile sender."""

from __future__ import annotations

import struct
import zlib

import zstandard

from fleetscope.proto import compact as c


def blob(body: bytes, compressor: int = c.COMPRESS_ZLIB) -> bytes:
    packed = zlib.compress(body) if compressor == c.COMPRESS_ZLIB else zstandard.ZstdCompressor().compress(body)
    return bytes((c.FORMAT, compressor)) + packed


def section(number: int, payload: bytes) -> bytes:
    return struct.pack("<BI", number, len(payload)) + payload


def message(*fields: tuple[int, int, bytes]) -> bytes:
    return struct.pack("<H", len(fields)) + b"".join(struct.pack("<HBI", n, t, len(p)) + p for n, t, p in fields)


def ints_raw(values: list[int], width: int = 8) -> bytes:
    """An integer field's payload: count, order 0, width, planes (unshuffled is fine for one value)."""
    fmt = {1: "b", 2: "h", 4: "i", 8: "q"}[width]
    raw = struct.pack(f"<{len(values)}{fmt}", *values)
    planes = b"".join(raw[k::width] for k in range(width))
    return struct.pack("<IBB", len(values), 0, width) + planes
