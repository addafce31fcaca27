"""compact-v1: a batch's samples and records in about a byte a value (``Batch.compact``).

On the plain wire every reading is an 8-byte double inside a protobuf Column, and a batch's
framing (ids, counters) is paid again for every batch: a Jetson at 1 s cost 11 MB an hour on its
link and in its spool. Readings move slowly and are quantised (%, °C, MHz, bytes, mW), so column
by column they compress to a byte or two, the way the collector's chunks store them
(``fleetscope.collector.storage.chunk_codec``, whose stream layouts this module shares):

* **Integer fields** (times, GPU indexes, per-row counts, pids): the first value, then deltas or
  delta-of-deltas (whichever is narrower; a steady 1 Hz clock gives zeros), at the narrowest
  fixed width that holds them, byte-shuffled (each byte plane together, so the zero high bytes
  of small numbers form runs the compressor sees).
* **Readings** (``Column``, repeated double, repeated float): a column whose values are all
  integers after a decimal scale (x1 .. x1000) travels as those integers' deltas; any other as
  its IEEE bits XOR the previous value's. Rows without a reading are a bitmap, not values.
* **Text** (process names, container ids): a dictionary and its codes.
* The latency histograms, logs, incidents, metric points and inventory records of the batch
  ride in the same blob as their protobuf encoding, and the whole body is compressed once
  (zlib by default: on these bodies zstd saved 1-2 %, and importing it cost the agent a MiB of
  resident memory; zstd is read, and written when asked for).

The encoding walks the protobuf descriptors of ``HostSamples``, ``GpuSamples`` and
``ProcessTable``, field by field number, so a field added to them travels compact with no change
here, and a decoder skips numbers it does not know (a newer agent) as protobuf does.

Lossless: ``expand(compact(batch))`` gives back the same messages, bit for bit (a reading goes
the integer way only when dividing the integer back gives exactly its bits, so -0.0, NaN and
0.1 + 0.2 go the raw way). Pure Python on purpose: the agent must not need numpy. A blob from an
untrusted sender is bounded before it costs memory: the decompressed body (``max_body_bytes``)
and the number of values it may unfold into (``max_values``); every failure is ``CompactError``
naming the field.

Blob layout: format byte (``FORMAT``), compressor byte, compressed body. Body: sections, each
``u8 kind, u32 length, bytes``: 6 = host samples, 7 = GPU samples (the Batch field numbers),
0 = records (a serialized Batch with only the record fields). A message section: ``u16`` field
count, then per field ``u16 number, u8 type, u32 length, payload``.
"""

from __future__ import annotations

import math
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, NamedTuple

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from fleetscope.proto.v1 import telemetry_pb2 as pb

FORMAT = 1
COMPRESS_ZLIB = 1
COMPRESS_ZSTD = 2
ZLIB_LEVEL = 9  # batches are small: the best ratio costs well under a millisecond
ZSTD_LEVEL = 12

SECTION_RECORDS = 0
SECTION_HOST = pb.Batch.HOST_FIELD_NUMBER  # 6
SECTION_GPU = pb.Batch.GPU_FIELD_NUMBER  # 7
_SECTIONS = {SECTION_HOST: ("host", pb.HostSamples), SECTION_GPU: ("gpu", pb.GpuSamples)}
SECTION_METRICS = pb.Batch.METRICS_FIELD_NUMBER  # 12
RECORD_FIELDS = ("latency", "logs", "incidents", "metrics", "inventory_records")

# Field payload types.
_T_COLUMN = 1
_T_INTS = 2
_T_FLOATS = 3  # repeated float (float32)
_T_DOUBLES = 4
_T_STRINGS = 5
_T_MESSAGE = 6

# Number stream kinds.
_RAW_INTS = 0
_DELTA = 1
_DELTA2 = 2
_SCALED = 1
_XOR = 2

_SCALES = (1.0, 10.0, 100.0, 1000.0)
_EXACT_LIMIT = 2**53
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_MAX_DEPTH = 2  # samples, then their process tables
_FACTORED = 0x80  # in a width byte: the values were divided by a common factor, which follows

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_SIGNED = {1: "b", 2: "h", 4: "i", 8: "q"}
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}
_BIG_ENDIAN = sys.byteorder == "big"
assert array("i").itemsize == 4 and array("q").itemsize == 8  # noqa: S101 - every platform Python runs on

DEFAULT_MAX_BODY_BYTES = 64 << 20
DEFAULT_MAX_VALUES = 4_000_000  # what a 32 MiB plain batch can carry as doubles


class CompactError(ValueError):
    """A compact blob that cannot be read; ``field`` names where (``compact.gpu.temp_c``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# ============================================================================== fixed widths


def _signed_width(lo: int, hi: int) -> int:
    for width, bound in ((1, 1 << 7), (2, 1 << 15), (4, 1 << 31)):
        if -bound <= lo and hi < bound:
            return width
    return 8


def _to_bytes(values: array) -> bytes:
    if _BIG_ENDIAN:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_bytes(typecode: str, raw: bytes | bytearray) -> array:
    out = array(typecode)
    out.frombytes(raw)
    if _BIG_ENDIAN:
        out.byteswap()
    return out


def _shuffle(raw: bytes, width: int) -> bytes:
    if width == 1:
        return raw
    return b"".join(raw[k::width] for k in range(width))


def _unshuffle(planes: bytes | memoryview, count: int, width: int) -> bytearray:
    out = bytearray(count * width)
    for k in range(width):
        out[k::width] = planes[k * count : (k + 1) * count]
    return out


def _packed_ints(values: Sequence[int]) -> bytes:
    """Signed values at the narrowest width: width byte, then the byte planes. Values sharing a
    factor (bytes counted in 4 KiB pages, in MiB, in 512-byte sectors) are stored divided by it:
    the width byte's high bit says so and the factor follows it."""
    if not values:
        return _U8.pack(1)
    factor = math.gcd(*values)
    if factor > 1:
        values = [v // factor for v in values]
    width = _signed_width(min(values), max(values))
    head = _U8.pack(width | _FACTORED) + _I64.pack(factor) if factor > 1 else _U8.pack(width)
    return head + _shuffle(_to_bytes(array(_SIGNED[width], values)), width)


def _diff(values: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(values, values[1:])]


def _fits_i64(values: Sequence[int]) -> bool:
    return not values or (_I64_MIN <= min(values) and max(values) <= _I64_MAX)


# ============================================================================== encoding


def _int_stream(values: Sequence[int]) -> bytes:
    """int64 values: raw, deltas or delta-of-deltas, whichever is narrowest (never overflowing)."""
    values = list(values)
    best = (_U8.pack(_RAW_INTS) + _packed_ints(values)) if _fits_i64(values) else None
    if best is None:
        raise ValueError("integer field value outside int64")
    if len(values) >= 2:
        d1 = _diff(values)
        if _fits_i64(d1):
            cand = _U8.pack(_DELTA) + _I64.pack(values[0]) + _packed_ints(d1)
            if len(cand) < len(best):
                best = cand
            if len(d1) >= 2:
                d2 = _diff(d1)
                if _fits_i64(d2):
                    cand = _U8.pack(_DELTA2) + _I64.pack(values[0]) + _I64.pack(d1[0]) + _packed_ints(d2)
                    # Equal length: the second differences of a steady clock are zeros that compress away.
                    if len(cand) <= len(best):
                        best = cand
    return best


def _scaled(values: Sequence[float], single: bool) -> tuple[int, list[int]] | None:
    """(decimal exponent, integers) giving back exactly ``values`` (as float32 when ``single``)."""
    if not values:
        return None
    for v in values:
        if not math.isfinite(v) or (v == 0.0 and math.copysign(1.0, v) < 0):
            return None
    biggest = max(abs(v) for v in values)
    want = _to_bytes(array("f", values)) if single else None
    for exponent, scale in enumerate(_SCALES):
        if biggest * scale >= _EXACT_LIMIT:
            return None
        ints = [round(v * scale) for v in values]
        if single:
            if _to_bytes(array("f", [i / scale for i in ints])) == want:
                return exponent, ints
        elif scale == 1.0:
            if all(float(i) == v for i, v in zip(ints, values)):
                return exponent, ints
        elif all(i / scale == v for i, v in zip(ints, values)):
            return exponent, ints
    return None


def _float_stream(values: Sequence[float], single: bool) -> bytes:
    scaled = _scaled(values, single)
    if scaled is not None:
        exponent, ints = scaled
        return _U8.pack(_SCALED) + _U8.pack(exponent) + _int_stream(ints)
    width = 4 if single else 8
    bits = _from_bytes(_UNSIGNED[width], _to_bytes(array("f" if single else "d", values)))
    xored = array(_UNSIGNED[width], [bits[0]] if bits else [])
    xored.extend(b ^ a for a, b in zip(bits, bits[1:]))
    return _U8.pack(_XOR) + _shuffle(_to_bytes(xored), width)


def _column_payload(column: pb.Column) -> bytes:
    values = column.values
    n = len(values)
    nulls = sorted(set(i for i in column.null_rows if 0 <= i < n))
    out = [_U32.pack(n)]
    if nulls:
        bitmap = bytearray((n + 7) // 8)
        for i in nulls:
            bitmap[i >> 3] |= 1 << (i & 7)
        null_set = set(nulls)
        present = [v for i, v in enumerate(values) if i not in null_set]
        out += [_U8.pack(1), bytes(bitmap)]
    else:
        present = list(values)
        out.append(_U8.pack(0))
    out.append(_float_stream(present, single=False) if present else b"")
    return b"".join(out)


def _strings_payload(strings: Sequence[str]) -> bytes:
    dictionary: dict[str, int] = {}
    codes = [dictionary.setdefault(s, len(dictionary)) for s in strings]
    out = [_U32.pack(len(strings)), _U32.pack(len(dictionary))]
    out.extend(_text(s) for s in dictionary)
    out.append(_packed_ints(codes))
    return b"".join(out)


def _series_key(point: pb.MetricPoint) -> tuple[str, tuple[tuple[str, str], ...]]:
    return point.name, tuple(sorted(point.labels.items()))


def _metrics_payload(points: Sequence[pb.MetricPoint]) -> bytes:
    """Metric points as series: a dictionary of (name, labels), each point's series code and
    time in the points' order, and each series' values as one reading stream (a Jetson's rails
    and sensors are a dozen series sampled together)."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    codes = [series.setdefault(_series_key(p), len(series)) for p in points]
    values: list[list[float]] = [[] for _ in series]
    for code, p in zip(codes, points):
        values[code].append(p.value)
    out = [_U32.pack(len(points)), _U32.pack(len(series))]
    for name, labels in series:
        out.append(_text(name) + _U16.pack(len(labels)))
        out.extend(_text(k) + _text(v) for k, v in labels)
    out.append(_packed_ints(codes))
    out.append(_int_stream([p.ts_ns for p in points]))
    out.extend(_float_stream(v, single=False) for v in values)
    return b"".join(out)


def _text(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _field_type(field: FieldDescriptor) -> int | None:
    if field.message_type is pb.Column.DESCRIPTOR:
        return _T_COLUMN
    repeated = field.is_repeated
    if field.type == FieldDescriptor.TYPE_MESSAGE and not repeated:
        return _T_MESSAGE
    if not repeated:
        return None
    if field.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32,
                      FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64):
        return _T_INTS
    if field.type == FieldDescriptor.TYPE_FLOAT:
        return _T_FLOATS
    if field.type == FieldDescriptor.TYPE_DOUBLE:
        return _T_DOUBLES
    if field.type == FieldDescriptor.TYPE_STRING:
        return _T_STRINGS
    return None


def _message_payload(msg: Message) -> bytes:
    fields: list[bytes] = []
    for field, value in msg.ListFields():
        kind = _field_type(field)
        if kind is None:
            raise ValueError(f"{type(msg).__name__}.{field.name} has no compact form")
        if kind == _T_COLUMN:
            if not len(value.values):
                continue  # an empty Column says what an absent one says: not reported
            payload = _column_payload(value)
        elif kind == _T_MESSAGE:
            payload = _message_payload(value)
        elif kind == _T_INTS:
            payload = _U32.pack(len(value)) + _int_stream(value)
        elif kind in (_T_FLOATS, _T_DOUBLES):
            payload = _U32.pack(len(value)) + _float_stream(list(value), single=kind == _T_FLOATS)
        else:
            payload = _strings_payload(value)
        fields.append(_U16.pack(field.number) + _U8.pack(kind) + _U32.pack(len(payload)) + payload)
    return _U16.pack(len(fields)) + b"".join(fields)


def _compress(body: bytes, compressor: int | None) -> bytes:
    zstd = _zstandard() if compressor in (None, COMPRESS_ZSTD) else None
    if zstd is not None:
        return bytes((FORMAT, COMPRESS_ZSTD)) + bytes(zstd.ZstdCompressor(level=ZSTD_LEVEL).compress(body))
    if compressor == COMPRESS_ZSTD:
        raise ValueError("zstd asked for and the zstandard package is not installed")
    return bytes((FORMAT, COMPRESS_ZLIB)) + zlib.compress(body, ZLIB_LEVEL)


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:  # a drone's install may lack it: zlib does nearly as well on these bodies
        return None
    return zstandard


def compact(batch: pb.Batch, *, compressor: int | None = COMPRESS_ZLIB) -> pb.Batch:
    """``batch`` with its samples and records moved into ``batch.compact`` (in place; returned).

    ``compressor``: COMPRESS_ZLIB (the default) or COMPRESS_ZSTD; None takes zstd when it is installed. A
    batch with nothing to move is returned as it is.
    """
    sections: list[bytes] = []
    for number, (name, _cls) in _SECTIONS.items():
        if batch.HasField(name):
            payload = _message_payload(getattr(batch, name))
            sections.append(_U8.pack(number) + _U32.pack(len(payload)) + payload)
            batch.ClearField(name)
    if len(batch.metrics):
        payload = _metrics_payload(batch.metrics)
        sections.append(_U8.pack(SECTION_METRICS) + _U32.pack(len(payload)) + payload)
        batch.ClearField("metrics")
    records = pb.Batch()
    for name in RECORD_FIELDS:
        if len(getattr(batch, name)):
            getattr(records, name).extend(getattr(batch, name))
            batch.ClearField(name)
    if records.ByteSize():
        payload = records.SerializeToString()
        sections.append(_U8.pack(SECTION_RECORDS) + _U32.pack(len(payload)) + payload)
    if sections:
        batch.compact = _compress(b"".join(sections), compressor)
    return batch


# ============================================================================== decoding


class _Reader:
    def __init__(self, buf: bytes | memoryview, where: str) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.where = where

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.buf):
            raise CompactError(self.where, "is truncated")
        out = self.buf[self.pos : self.pos + size]
        self.pos += size
        return out

    def unpack(self, fmt: struct.Struct) -> int:
        # Read in place (no slice object): a section of 30 columns makes hundreds of these calls.
        pos = self.pos
        end = pos + fmt.size
        if end > len(self.buf):
            raise CompactError(self.where, "is truncated")
        self.pos = end
        value: int = fmt.unpack_from(self.buf, pos)[0]
        return value

    def rest(self) -> int:
        return len(self.buf) - self.pos


class _Budget:
    """Values a blob may still unfold into: a 10 KB blob must not become a billion Nones."""

    def __init__(self, max_values: int) -> None:
        self.left = max_values

    def spend(self, n: int, where: str) -> None:
        self.left -= n
        if self.left < 0:
            raise CompactError(where, "unfolds into more values than a batch may hold")


def _read_packed(r: _Reader, count: int) -> Sequence[int]:
    head = r.unpack(_U8)
    width = head & ~_FACTORED
    if width not in _SIGNED:
        raise CompactError(r.where, f"integer width {width} is not known")
    factor = r.unpack(_I64) if head & _FACTORED else 1
    if factor < 1:
        raise CompactError(r.where, f"common factor {factor} is not positive")
    values = _from_bytes(_SIGNED[width], _unshuffle(r.take(count * width), count, width))
    return values if factor == 1 else _checked((v * factor for v in values), r.where)


def _checked(values: Iterable[int], where: str) -> list[int]:
    out = list(values)
    if not _fits_i64(out):
        raise CompactError(where, "a value leaves int64 (a delta or a factor overflows)")
    return out


def _read_int_stream(r: _Reader, count: int) -> list[int]:
    order = r.unpack(_U8)
    if order == _RAW_INTS:
        return list(_read_packed(r, count))
    if count == 0:
        raise CompactError(r.where, "deltas of no values")
    first = r.unpack(_I64)
    if order == _DELTA:
        return _checked(accumulate(_read_packed(r, count - 1), initial=first), r.where)
    if order == _DELTA2:
        if count < 2:
            raise CompactError(r.where, "second deltas of one value")
        d1_first = r.unpack(_I64)
        d1 = _checked(accumulate(_read_packed(r, count - 2), initial=d1_first), r.where)
        return _checked(accumulate(d1, initial=first), r.where)
    raise CompactError(r.where, f"integer order {order} is not known")


def _read_float_stream(r: _Reader, count: int, single: bool) -> list[float]:
    kind = r.unpack(_U8)
    if kind == _SCALED:
        exponent = r.unpack(_U8)
        if exponent >= len(_SCALES):
            raise CompactError(r.where, f"decimal scale {exponent} is not known")
        scale = _SCALES[exponent]
        ints = _read_int_stream(r, count)
        if any(abs(i) >= _EXACT_LIMIT for i in (min(ints, default=0), max(ints, default=0))):
            raise CompactError(r.where, "a scaled reading is too large to be exact")
        values = [i / scale for i in ints] if scale != 1.0 else [float(i) for i in ints]
        return list(array("f", values)) if single else values
    if kind == _XOR:
        width = 4 if single else 8
        bits = _from_bytes(_UNSIGNED[width], _unshuffle(r.take(count * width), count, width))
        plain = array(_UNSIGNED[width], accumulate(bits, lambda a, b: a ^ b))
        return list(_from_bytes("f" if single else "d", _to_bytes(plain)))
    raise CompactError(r.where, f"reading encoding {kind} is not known")


def _read_column(r: _Reader, target: pb.Column, budget: _Budget) -> None:
    n = r.unpack(_U32)
    budget.spend(n, r.where)
    has_nulls = r.unpack(_U8)
    if has_nulls not in (0, 1):
        raise CompactError(r.where, "null flag is corrupt")
    nulls: list[int] = []
    if has_nulls:
        bitmap = bytes(r.take((n + 7) // 8))
        nulls = [i for i in range(n) if bitmap[i >> 3] >> (i & 7) & 1]
    present_count = n - len(nulls)
    present = _read_float_stream(r, present_count, single=False) if present_count else []
    if nulls:
        values = [0.0] * n
        it = iter(present)
        null_set = set(nulls)
        for i in range(n):
            if i not in null_set:
                values[i] = next(it)
        target.null_rows.extend(nulls)
        target.values.extend(values)
    else:
        target.values.extend(present)


def _read_strings(r: _Reader, budget: _Budget) -> list[str]:
    n = r.unpack(_U32)
    budget.spend(n, r.where)
    size = r.unpack(_U32)
    if size > r.rest():
        raise CompactError(r.where, "dictionary is larger than the blob")
    words = [_read_text(r) for _ in range(size)]
    return [words[c] for c in _read_codes(r, n, size, "dictionary")]


def _read_codes(r: _Reader, count: int, size: int, what: str) -> Sequence[int]:
    """``count`` indexes into a table of ``size`` entries (a dictionary, a series list)."""
    codes = _read_packed(r, count)
    if count and (min(codes) < 0 or max(codes) >= size):
        raise CompactError(r.where, f"{what} index out of range")
    return codes


class Streams(NamedTuple):
    """How a sample section's streams are read: integers, readings, and a Column of readings.
    ``PURE`` is this module's own; the collector passes numpy's (``collector.storage.compact_numpy``), which
    reads the same bytes into the same values, or fails with the same error, several times faster."""

    ints: Callable[[_Reader, int], Sequence[int]]
    floats: Callable[[_Reader, int, bool], Sequence[float]]
    column: Callable[[_Reader, pb.Column, _Budget], None]


PURE =  Streams(_read_int_stream, lambda r, n, single: _read_float_stream(r, n, single), _read_column)


def _read_message(
    buf: memoryview, msg: Message, where: str, budget: _Budget, depth: int = 0, streams: Streams | None = None
) -> None:
    streams = streams or PURE
    if depth > _MAX_DEPTH:
        raise CompactError(where, "nests too deep")
    for field, kind, fr, payload in read_fields(buf, msg.DESCRIPTOR, where):
        read_field(field, kind, fr, payload, msg, budget, depth, streams)


class _Layout(NamedTuple):
    """What walking a message section needs of its descriptor, worked out once per message and place."""

    fields: dict[int, FieldDescriptor]  # number -> field
    kinds: dict[int, int | None]  # number -> the payload type it must have
    wheres: dict[int, str]  # number -> the field's name in errors


_LAYOUTS: dict[tuple[str, str], _Layout] = {}
_FIELD_HEAD = struct.Struct("<HBI")  # a field's number, payload type and length


def _layout(descriptor: Any, where: str) -> _Layout:
    key = (descriptor.full_name, where)
    got = _LAYOUTS.get(key)
    if got is None:
        by_number = dict(descriptor.fields_by_number)
        got = _Layout(by_number, {k: _field_type(f) for k, f in by_number.items()},
                      {k: f"{where}.{f.name}" for k, f in by_number.items()})
        if len(_LAYOUTS) < 1024:  # the places a section is read from are few; never grow without end
            _LAYOUTS[key] = got
    return got


def read_fields(buf: bytes | memoryview, descriptor: Any, where: str) -> Iterator[tuple[FieldDescriptor, int, _Reader, memoryview]]:
    """A message section's fields known to ``descriptor``: (field, payload type, a reader of the
    payload, the payload), each checked to appear once and to have its field's payload type;
    fields of a newer schema are skipped, as protobuf skips unknown fields. The caller reads each
    payload whole (``read_field``) before asking for the next field. A field costs one header
    read: the collector walks thousands of sections a second."""
    buf = memoryview(buf)
    layout = _layout(descriptor, where)
    size = len(buf)
    if size < _U16.size:
        raise CompactError(where, "is truncated")
    count, pos = _U16.unpack_from(buf, 0)[0], _U16.size
    seen: set[int] = set()
    for _ in range(count):
        if size - pos < _FIELD_HEAD.size:
            raise CompactError(where, "is truncated")
        number, kind, length = _FIELD_HEAD.unpack_from(buf, pos)
        pos += _FIELD_HEAD.size
        if size - pos < length:
            raise CompactError(where, "is truncated")
        payload = buf[pos : pos + length]
        pos += length
        field = layout.fields.get(number)
        if field is None:
            continue
        field_where = layout.wheres[number]
        if number in seen:
            raise CompactError(field_where, "appears twice")
        seen.add(number)
        if kind != layout.kinds[number]:
            raise CompactError(field_where, f"payload type {kind} does not fit the field")
        yield field, kind, _Reader(payload, field_where), payload
    if pos != size:
        raise CompactError(where, "has trailing bytes")


def read_field(
    field: FieldDescriptor, kind: int, fr: _Reader, payload: memoryview, msg: Message, budget: _Budget, depth: int,
    streams: Streams,
) -> None:
    """One field's payload (from ``read_fields``) read into ``msg``."""
    try:
        if kind == _T_COLUMN:
            streams.column(fr, getattr(msg, field.name), budget)
        elif kind == _T_MESSAGE:
            _read_message(payload, getattr(msg, field.name), fr.where, budget, depth + 1, streams)
            return  # the nested reader checked its own end
        elif kind == _T_INTS:
            n = fr.unpack(_U32)
            budget.spend(n, fr.where)
            getattr(msg, field.name).extend(streams.ints(fr, n))
        elif kind in (_T_FLOATS, _T_DOUBLES):
            n = fr.unpack(_U32)
            budget.spend(n, fr.where)
            getattr(msg, field.name).extend(streams.floats(fr, n, kind == _T_FLOATS))
        else:
            getattr(msg, field.name).extend(_read_strings(fr, budget))
    except (ValueError, TypeError, OverflowError) as exc:  # protobuf's own range checks
        if isinstance(exc, CompactError):
            raise
        raise CompactError(fr.where, f"a value does not fit the field ({exc})") from None
    if fr.rest():
        raise CompactError(fr.where, "has trailing bytes")


def _decompress(blob: bytes, max_body_bytes: int) -> bytes:
    if len(blob) < 2:
        raise CompactError("compact", "is truncated")
    if blob[0] != FORMAT:
        raise CompactError("compact", f"format {blob[0]} is not known to this collector")
    compressor, packed = blob[1], blob[2:]
    if compressor == COMPRESS_ZLIB:
        d = zlib.decompressobj()
        try:
            body = d.decompress(packed, max_body_bytes + 1)
        except zlib.error as exc:
            raise CompactError("compact", f"does not decompress ({exc})") from None
        if len(body) > max_body_bytes:
            raise CompactError("compact", f"decompresses to more than {max_body_bytes} bytes")
        if not d.eof:
            raise CompactError("compact", "is truncated (the zlib stream does not end)")
        if d.unused_data:
            raise CompactError("compact", "has bytes after its zlib stream")
        return body
    if compressor == COMPRESS_ZSTD:
        zstd = _zstandard()
        if zstd is None:
            raise CompactError("compact", "is zstd-compressed and the zstandard package is not installed")
        try:
            # A reader stops at the bound: a few KB of zeros that unfold into gigabytes cost
            # max_body_bytes at most. It says nothing of a truncated frame, so what it gave is
            # checked by a second pass, itself bounded by that size.
            body = bytes(zstd.ZstdDecompressor().stream_reader(packed, read_across_frames=False).read(max_body_bytes + 1))
            if len(body) > max_body_bytes:
                raise CompactError("compact", f"decompresses to more than {max_body_bytes} bytes")
            dobj = zstd.ZstdDecompressor().decompressobj()
            if dobj.decompress(packed) != body or not dobj.eof:
                raise CompactError("compact", "is truncated (the zstd frame does not end)")
            if dobj.unused_data:
                raise CompactError("compact", "has bytes after its zstd frame")
        except zstd.ZstdError as exc:
            raise CompactError("compact", f"does not decompress ({exc})") from None
        return body
    raise CompactError("compact", f"compressor {compressor} is not known")


def expand(batch: pb.Batch, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
           max_values: int = DEFAULT_MAX_VALUES, streams: Streams | None = None,
           sections: dict[int, bytes] | None = None,
           sample_reader: Callable[[int, memoryview, _Budget], None] | None = None) -> pb.Batch:
    """``batch`` with ``batch.compact`` unfolded into its plain fields (in place; returned).

    Raises ``CompactError`` naming the field for anything wrong, and leaves the batch's plain
    fields as they were then. A batch without ``compact`` is returned as it is. ``streams``:
    how sample streams are read (``Streams``; this module's pure Python by default).
    ``sections``: filled with the sample sections' payloads as they came (``SECTION_HOST``,
    ``SECTION_GPU``), for a reader that keeps them encoded (the collector's chunks).
    ``sample_reader``: reads each sample section (its number, payload and the blob's budget of
    values) instead of unfolding it into the batch, whose sample fields then stay empty (the
    collector reads them into arrays: ``collector.storage.compact_numpy.read_sample_section``).
    """
    if not batch.compact:
        return batch
    body = _decompress(batch.compact, max_body_bytes)
    budget = _Budget(max_values)
    r = _Reader(body, "compact")
    out = pb.Batch()
    seen: set[int] = set()
    filled: list[str] = []  # the batch's sample fields read into, cleared again should a later part fail
    try:
        while r.rest():
            number = r.unpack(_U8)
            payload = r.take(r.unpack(_U32))
            if number in seen:
                raise CompactError(f"compact.section[{number}]", "appears twice")
            seen.add(number)
            if number == SECTION_RECORDS:
                _read_records(bytes(payload), out, budget)
            elif number == SECTION_METRICS:
                _read_metrics(payload, out, budget)
            elif number in _SECTIONS:
                name, _cls = _SECTIONS[number]
                if batch.HasField(name):
                    raise CompactError(f"compact.{name}", f"the batch carries {name} samples both compact and plain")
                if sample_reader is not None:
                    sample_reader(number, payload, budget)
                else:
                    # Read straight into the batch (copying a section of thousands of readings
                    # costs as much as reading it); it had none of its own, so a failure clears it again.
                    filled.append(name)
                    getattr(batch, name).SetInParent()
                    _read_message(payload, getattr(batch, name), f"compact.{name}", budget, streams=streams)
                if sections is not None:
                    sections[number] = bytes(payload)
            else:
                raise CompactError(f"compact.section[{number}]", "is not known")
    except CompactError:
        for name in filled:
            batch.ClearField(name)
        raise
    for name in RECORD_FIELDS:
        getattr(batch, name).extend(getattr(out, name))
    batch.ClearField("compact")
    return batch


def _read_text(r: _Reader) -> str:
    try:
        return bytes(r.take(r.unpack(_U32))).decode("utf-8")
    except UnicodeDecodeError:
        raise CompactError(r.where, "text is not UTF-8") from None


def _read_metrics(payload: memoryview, out: pb.Batch, budget: _Budget) -> None:
    r = _Reader(payload, "compact.metrics")
    n = r.unpack(_U32)
    budget.spend(n, r.where)
    size = r.unpack(_U32)
    if size > r.rest():
        raise CompactError(r.where, "series dictionary is larger than the blob")
    series = []
    for _ in range(size):
        name = _read_text(r)
        labels = [(_read_text(r), _read_text(r)) for _ in range(r.unpack(_U16))]
        series.append((name, labels))
    codes = _read_codes(r, n, size, "series")
    times = _read_int_stream(r, n)
    counts = [0] * size
    for c in codes:
        counts[c] += 1
    queues = [iter(_read_float_stream(r, k, single=False)) if k else iter(()) for k in counts]
    if r.rest():
        raise CompactError(r.where, "has trailing bytes")
    for code, ts in zip(codes, times):
        name, labels = series[code]
        point = out.metrics.add(name=name, ts_ns=ts, value=next(queues[code]))
        point.labels.update(labels)


def _read_records(payload: bytes, out: pb.Batch, budget: _Budget) -> None:
    try:
        records = pb.Batch.FromString(payload)
    except DecodeError as exc:
        raise CompactError("compact.records", f"is not a protobuf message ({exc})") from None
    for field, value in records.ListFields():
        if field.name not in RECORD_FIELDS:
            # Identity, sequence and clocks travel plain, where the collector checks them.
            raise CompactError(f"compact.records.{field.name}", "may not travel inside compact")
        budget.spend(len(value), f"compact.records.{field.name}")
        getattr(out, field.name).extend(value)


def plain_size(batch: pb.Batch) -> int:
    """What ``batch`` (compact or not) would weigh on the plain wire, for the benchmarks."""
    if not batch.compact:
        return int(batch.ByteSize())
    copy = pb.Batch()
    copy.CopyFrom(batch)
    return int(expand(copy).ByteSize())
