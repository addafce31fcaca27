"""The encoding of one chunk of raw samples: many rows of one device (and GPU) over a time range,
stored column by column as one compressed blob (``gpu_chunks.data``, ``host_chunks.data``).

A row of ``gpu_samples`` costs about 110 bytes in the tail tables (row header, 20 columns of
8 bytes, index entries). Readings are quantised (%, °C, MHz, bytes, mW) and move slowly, so
column by column they compress to a byte or two a value, the way TimescaleDB's compression and
Prometheus' chunks do it:

* **Timestamps**: the first, the first delta, then delta-of-delta (0 for a steady 1 Hz
  sampler), stored as fixed-width signed integers of the narrowest width the chunk needs.
* **Float columns** (NaN is NULL): a column whose values are all integers after a decimal
  scale (x1, x10, x100, x1000) is stored as those integers' deltas (or delta-of-deltas for
  counters, whichever is narrower), with a bitmap of its NULLs; any other column is stored as
  its raw IEEE bits XOR the previous value's. Integer streams and XOR streams are
  byte-shuffled (each byte plane of the fixed-width values together, as blosc does), so the
  zero high bytes form long runs.
* **Text columns** (JSON of the per-core and top-process tables): dictionary-coded.
* The whole body is compressed once with zstd (zlib when ``zstandard`` is not installed).

Lossless, bit for bit: a value goes the integer way only when dividing the integer back gives
exactly its bits (so -0.0, 0.1 + 0.2 and 1e300 go the raw way), and a column with a NaN that is
not the canonical NaN is stored raw. ``decode_chunk(encode_chunk(...))`` returns the same
timestamps, the same float bits and the same strings (``None`` kept apart from ``""``).

The first byte of a blob is the format (``CODEC_VERSION``, also stored in the ``codec``
column), the second the compressor, so the format can change and old chunks stay readable.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import TYPE_CHECKING, Any

from fleetscope.collector.storage import compact_chunk

if TYPE_CHECKING:
    import numpy as np

CODEC_VERSION = 1  # the format of the body below; stored in the chunk tables' ``codec`` column

COMPRESS_NONE = 0
COMPRESS_ZLIB = 1
COMPRESS_ZSTD = 2
ZSTD_LEVEL = 9  # compaction runs in the background; decompression speed hardly depends on level
ZLIB_LEVEL = 6

# Float column kinds.
_ALL_NULL = 0
_SCALED = 1
_XOR = 2

_SCALES = (1.0, 10.0, 100.0, 1000.0)
_EXACT_LIMIT = 2**53  # integers above this do not convert to float64 and back exactly
_CANONICAL_NAN = 0x7FF8000000000000

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


class ChunkFormatError(ValueError):
    """A blob that is not a chunk this code can read (corrupt, truncated, or a newer format)."""


# ------------------------------------------------------------------------------ encoding


def encode_chunk(
    ts_ns: np.ndarray,
    columns: dict[str, np.ndarray],
    text_columns: dict[str, list[str | None]] | None = None,
    *,
    level: int = ZSTD_LEVEL,
) -> bytes:
    """One chunk: ``ts_ns`` (int64, the rows' times, normally sorted), ``columns`` (float64,
    NaN for NULL) and ``text_columns`` (str or None), each of ``len(ts_ns)`` values.
    ``level``: the zstd level (lower is faster; any level decodes the same)."""
    import numpy as np

    ts = np.ascontiguousarray(ts_ns, dtype=np.int64)
    if ts.ndim != 1:
        raise ValueError("ts_ns must be one-dimensional")
    n = len(ts)
    parts: list[bytes] = [_U32.pack(n), _encode_timestamps(ts)]
    parts.append(_U16.pack(len(columns)))
    for name, values in columns.items():
        arr = np.ascontiguousarray(values, dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"column {name!r} has {arr.size} values for {n} timestamps")
        parts.append(_name(name))
        parts.append(_encode_floats(arr))
    texts = text_columns or {}
    parts.append(_U16.pack(len(texts)))
    for name, strings in texts.items():
        if len(strings) != n:
            raise ValueError(f"text column {name!r} has {len(strings)} values for {n} timestamps")
        parts.append(_name(name))
        parts.append(_encode_texts(strings))
    body = b"".join(parts)
    compressor, packed = compress(body, level)
    return bytes((CODEC_VERSION, compressor)) + packed


def _name(name: str) -> bytes:
    raw = name.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("column name too long")
    return _U16.pack(len(raw)) + raw


def _signed_width(lo: int, hi: int) -> int:
    for width, bound in ((1, 1 << 7), (2, 1 << 15), (4, 1 << 31)):
        if -bound <= lo and hi < bound:
            return width
    return 8


_SIGNED = {1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}
_UNSIGNED = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def _shuffled(values: np.ndarray, width: int) -> bytes:
    """Fixed-width values with each byte plane together (the high bytes of small numbers form
    runs of zeros the compressor sees)."""
    import numpy as np

    raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1, width)
    return raw.T.tobytes()


def _unshuffled(buf: bytes | memoryview, count: int, dtype: str) -> np.ndarray:
    import numpy as np

    width = np.dtype(dtype).itemsize
    planes = np.frombuffer(buf, dtype=np.uint8, count=count * width).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(count)


def _int_stream(values: np.ndarray) -> bytes:
    """Signed int64 values at the narrowest width that holds them: width byte, then the planes."""
    if len(values) == 0:
        return _U8.pack(1)
    width = _signed_width(int(values.min()), int(values.max()))
    return _U8.pack(width) + _shuffled(values.astype(_SIGNED[width]), width)


def _encode_timestamps(ts: np.ndarray) -> bytes:
    import numpy as np

    n = len(ts)
    out = b""
    if n >= 1:
        out += _I64.pack(int(ts[0]))
    if n >= 2:
        # int64 arithmetic wraps, and the cumulative sums on decode wrap back: exact for any input.
        with np.errstate(over="ignore"):
            delta = np.diff(ts)
            out += _I64.pack(int(delta[0]))
            if n >= 3:
                out += _int_stream(np.diff(delta))
    return out


def _encode_floats(arr: np.ndarray) -> bytes:
    import numpy as np

    bits = arr.view(np.uint64)
    nan = np.isnan(arr)
    if nan.any() and not (bits[nan] == _CANONICAL_NAN).all():
        return _encode_xor(bits)
    if nan.all():
        return _U8.pack(_ALL_NULL)
    present = arr[~nan] if nan.any() else arr
    scaled = _scaled_ints(present)
    if scaled is None:
        return _encode_xor(bits)
    exponent, ints = scaled
    out = [_U8.pack(_SCALED), _U8.pack(1 if nan.any() else 0)]
    if nan.any():
        out.append(np.packbits(nan, bitorder="little").tobytes())
    out.append(_U8.pack(exponent))
    out.append(_I64.pack(int(ints[0])))
    d1 = np.diff(ints)
    d2 = np.diff(d1) if len(d1) >= 1 else d1
    # Counters (energy, bytes) rise steadily: their second differences are the smaller numbers.
    order = 2 if len(d1) >= 2 and _cost(d2) < _cost(d1) else 1
    out.append(_U8.pack(order))
    if order == 2:
        out.append(_I64.pack(int(d1[0])))
        out.append(_int_stream(d2))
    else:
        out.append(_int_stream(d1))
    return b"".join(out)


def _cost(values: np.ndarray) -> tuple[int, int]:
    import numpy as np

    if len(values) == 0:
        return (1, 0)
    return (_signed_width(int(values.min()), int(values.max())), int(np.count_nonzero(values)))


def _scaled_ints(present: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(decimal exponent, int64 values) such that ``ints / 10**exponent`` gives back exactly the
    bits of ``present`` (no NaN in it), or None when no scale up to 1000 does."""
    import numpy as np

    if not np.isfinite(present).all():
        return None
    if (np.signbit(present) & (present == 0)).any():  # -0.0 would come back as 0.0
        return None
    biggest = float(np.abs(present).max())
    for exponent, scale in enumerate(_SCALES):
        if biggest * scale >= _EXACT_LIMIT:
            return None
        rounded = np.rint(present * scale)
        back = rounded / scale if scale != 1.0 else rounded
        if np.array_equal(back.view(np.uint64), present.view(np.uint64)):
            return exponent, rounded.astype(np.int64)
    return None


def _encode_xor(bits: np.ndarray) -> bytes:
    """Raw IEEE bits, each XOR the previous one (equal neighbours give 0, close ones share their
    high bytes), shuffled."""

    xored = bits.copy()
    if len(bits) > 1:
        xored[1:] ^= bits[:-1]
    return _U8.pack(_XOR) + _shuffled(xored.astype("<u8"), 8)


def _encode_texts(strings: list[str | None]) -> bytes:
    import numpy as np

    codes = np.empty(len(strings), dtype=np.int64)
    dictionary: dict[str, int] = {}
    for i, s in enumerate(strings):
        if s is None:
            codes[i] = 0
        else:
            if not isinstance(s, str):
                raise ValueError(f"text column value {s!r} is not a string")
            codes[i] = dictionary.setdefault(s, len(dictionary) + 1)
    out = [_U32.pack(len(dictionary))]
    for s in dictionary:
        raw = s.encode("utf-8", "surrogatepass")
        out.append(_U32.pack(len(raw)) + raw)
    top = len(dictionary)
    width = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4
    out.append(_U8.pack(width))
    out.append(_shuffled(codes.astype(_UNSIGNED[width]), width))
    return b"".join(out)


def compress(body: bytes, level: int) -> tuple[int, bytes]:
    """(compressor byte, compressed body): zstd at ``level``, zlib where zstandard is missing."""
    zstd = _zstandard()
    if zstd is not None:
        name = f"level{level}"
        compressor = getattr(_COMPRESSORS, name, None)
        if compressor is None:
            compressor = zstd.ZstdCompressor(level=level)
            setattr(_COMPRESSORS, name, compressor)
        return COMPRESS_ZSTD, compressor.compress(body)
    return COMPRESS_ZLIB, zlib.compress(body, min(ZLIB_LEVEL, max(1, level)))


# One compressor per level and thread, reused: it keeps its compression context between calls,
# and a ZstdCompressor must not be used by two threads at once (python-zstandard's docs).
_COMPRESSORS = threading.local()


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:  # the collector extra installs it; zlib keeps a bare install working
        return None
    return zstandard


# ------------------------------------------------------------------------------ decoding


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.buf):
            raise ChunkFormatError("chunk is truncated")
        out = self.buf[self.pos : self.pos + size]
        self.pos += size
        return out

    def unpack(self, fmt: struct.Struct) -> int:
        return int(fmt.unpack(self.take(fmt.size))[0])

    def name(self) -> str:
        return bytes(self.take(self.unpack(_U16))).decode()


def decode_chunk(data: bytes) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, list[str | None]]]:
    """(timestamps int64, float columns float64 with NaN for NULL, text columns) of a chunk."""
    if len(data) < 2:
        raise ChunkFormatError("chunk is truncated")
    version, compressor = data[0], data[1]
    if version == compact_chunk.FORMAT:  # a batch's compact section as it came (ingest)
        return compact_chunk.decode_section_chunk(compressor, bytes(data[2:]))
    if version != CODEC_VERSION:
        raise ChunkFormatError(f"chunk format {version} is not known to this version of fleetscope")
    body = decompress(compressor, bytes(data[2:]))
    r = _Reader(body)
    try:
        n = r.unpack(_U32)
        ts = _decode_timestamps(r, n)
        columns = {}
        for _ in range(r.unpack(_U16)):
            name = r.name()
            columns[name] = _decode_floats(r, n)
        texts = {}
        for _ in range(r.unpack(_U16)):
            name = r.name()
            texts[name] = _decode_texts(r, n)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ChunkFormatError):
            raise
        raise ChunkFormatError(f"chunk is corrupt: {exc}") from None
    if r.pos != len(body):
        raise ChunkFormatError("chunk has trailing bytes")
    return ts, columns, texts


def decompress(compressor: int, packed: bytes) -> bytes:
    if compressor == COMPRESS_NONE:
        return packed
    try:
        if compressor == COMPRESS_ZLIB:
            return zlib.decompress(packed)
        if compressor == COMPRESS_ZSTD:
            zstd = _zstandard()
            if zstd is None:
                raise ChunkFormatError("chunk is zstd-compressed and the zstandard package is not installed")
            return bytes(zstd.ZstdDecompressor().decompress(packed))
    except ChunkFormatError:
        raise
    except Exception as exc:  # zlib.error, zstd.ZstdError: a damaged blob
        raise ChunkFormatError(f"chunk does not decompress: {exc}") from None
    raise ChunkFormatError(f"chunk compressor {compressor} is not known")


def _read_int_stream(r: _Reader, count: int) -> np.ndarray:
    width = r.unpack(_U8)
    if width not in _SIGNED:
        raise ChunkFormatError(f"integer width {width} is not known")
    return _unshuffled(r.take(count * width), count, _SIGNED[width]).astype("<i8")


def _decode_timestamps(r: _Reader, n: int) -> np.ndarray:
    import numpy as np

    ts = np.empty(n, dtype=np.int64)
    if n == 0:
        return ts
    first = r.unpack(_I64)
    if n == 1:
        ts[0] = first
        return ts
    deltas = np.empty(n - 1, dtype=np.int64)
    deltas[0] = r.unpack(_I64)
    with np.errstate(over="ignore"):
        if n >= 3:
            deltas[1:] = deltas[0] + np.cumsum(_read_int_stream(r, n - 2), dtype=np.int64)
        ts[0] = first
        ts[1:] = first + np.cumsum(deltas, dtype=np.int64)
    return ts


def _decode_floats(r: _Reader, n: int) -> np.ndarray:
    import numpy as np

    kind = r.unpack(_U8)
    if kind == _ALL_NULL:
        return np.full(n, np.nan)
    if kind == _XOR:
        bits = _unshuffled(r.take(n * 8), n, "<u8")
        return np.bitwise_xor.accumulate(bits).astype(np.uint64).view(np.float64)
    if kind != _SCALED:
        raise ChunkFormatError(f"column kind {kind} is not known")
    has_mask = r.unpack(_U8)
    if has_mask:
        mask = np.unpackbits(np.frombuffer(r.take((n + 7) // 8), dtype=np.uint8), count=n, bitorder="little")
        nan = mask.astype(bool)
    else:
        nan = np.zeros(n, dtype=bool)
    m = n - int(nan.sum())
    exponent = r.unpack(_U8)
    if exponent >= len(_SCALES) or m == 0:
        raise ChunkFormatError("scaled column is corrupt")
    first = r.unpack(_I64)
    order = r.unpack(_U8)
    ints = np.empty(m, dtype=np.int64)
    ints[0] = first
    if order == 2:
        if m >= 2:
            d1 = np.empty(m - 1, dtype=np.int64)
            d1[0] = r.unpack(_I64)
            d1[1:] = d1[0] + np.cumsum(_read_int_stream(r, m - 2), dtype=np.int64)
            ints[1:] = first + np.cumsum(d1, dtype=np.int64)
    elif order == 1:
        ints[1:] = first + np.cumsum(_read_int_stream(r, m - 1), dtype=np.int64)
    else:
        raise ChunkFormatError(f"delta order {order} is not known")
    scale = _SCALES[exponent]
    present = ints.astype(np.float64)
    if scale != 1.0:
        present = present / scale
    if not has_mask:
        return present
    out = np.full(n, np.nan)
    out[~nan] = present
    return out


def _decode_texts(r: _Reader, n: int) -> list[str | None]:
    size = r.unpack(_U32)
    words: list[str | None] = [None]
    for _ in range(size):
        words.append(bytes(r.take(r.unpack(_U32))).decode("utf-8", "surrogatepass"))
    width = r.unpack(_U8)
    if width not in _UNSIGNED:
        raise ChunkFormatError(f"code width {width} is not known")
    codes = _unshuffled(r.take(n * width), n, _UNSIGNED[width])
    if n and int(codes.max()) > size:
        raise ChunkFormatError("text code out of range")
    return [words[c] for c in codes.tolist()]
