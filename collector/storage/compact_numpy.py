"""compact-v1's sample streams read with numpy: the collector's reader (``compact.Streams``).

``proto.compact`` reads a blob in pure Python, because the agent on a drone must not need numpy,
and there an integer stream costs a Python step per value (unshuffling, summing deltas, checking
int64). The collector has numpy: this reads the same bytes into the same values, and fails on
the same blobs with the same ``CompactError`` (field and message), about an order of magnitude
faster per value (``benchmarks/bench_ingest_path.py``). Only the collector imports this module.

Exactness where numpy could differ from Python's integers:

* **Sums of deltas** wrap silently in numpy. A stream is summed with numpy only when the sum of
  the absolute deltas and the first value, bounded in float64, stays below 2**62, so no partial
  sum can leave int64; anything larger (only a hostile or absurd blob) is summed and checked by
  the pure reader's code, which raises the same error.
* **Common factors** are checked on the smallest and largest value before multiplying.
* **Readings** divide integers below 2**53 by a power of ten in float64, as Python does, and
  float32 streams round through float32 as ``array("f")`` does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from fleetscope.proto import compact as C
from fleetscope.proto.v1 import telemetry_pb2 as pb

_SIGNED = {1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}
_UNSIGNED = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
_SAFE_SUM = float(2**62)


def _unshuffle(planes: memoryview, count: int, width: int, dtype: str) -> np.ndarray:
    raw = np.frombuffer(planes, dtype=np.uint8, count=count * width)
    if width > 1:
        raw = np.ascontiguousarray(raw.reshape(width, count).T)
    return raw.view(dtype).reshape(count)


def _read_packed(r: C._Reader, count: int) -> tuple[np.ndarray, int]:
    """The values, and a bound on their magnitude known from the width and factor alone (no
    pass over the values)."""
    head = r.unpack(C._U8)
    width = head & ~C._FACTORED
    if width not in _SIGNED:
        raise C.CompactError(r.where, f"integer width {width} is not known")
    factor = r.unpack(C._I64) if head & C._FACTORED else 1
    if factor < 1:
        raise C.CompactError(r.where, f"common factor {factor} is not positive")
    values = _unshuffle(r.take(count * width), count, width, _SIGNED[width]).astype(np.int64)
    bound = (1 << (8 * width - 1)) * factor
    if factor != 1 and count:
        if bound > C._I64_MAX and (
            int(values.min()) * factor < C._I64_MIN or int(values.max()) * factor > C._I64_MAX
        ):
            raise C.CompactError(r.where, "a value leaves int64 (a delta or a factor overflows)")
        values = values * factor
    return values, bound


def _summed(first: int, deltas: np.ndarray, bound: int, where: str) -> tuple[np.ndarray, int]:
    """``first`` then its running sums with ``deltas`` (``accumulate(deltas, initial=first)``),
    each delta at most ``bound`` in magnitude; and a bound on the sums."""
    total = abs(first) + len(deltas) * bound
    if total >= _SAFE_SUM:  # only wide deltas can get here: look at the values themselves
        total = abs(first) + int(np.abs(deltas.astype(np.float64)).sum()) + 1
    if total < _SAFE_SUM:
        out = np.empty(len(deltas) + 1, dtype=np.int64)
        out[0] = first
        np.cumsum(deltas, out=out[1:])
        out[1:] += first
        return out, total
    summed = np.array(C._checked(accumulate(deltas.tolist(), initial=first), where), dtype=np.int64)
    return summed, C._I64_MAX


def _read_int_array(r: C._Reader, count: int) -> tuple[np.ndarray, int]:
    """The stream's values and a bound on their magnitude."""
    order = r.unpack(C._U8)
    if order == C._RAW_INTS:
        return _read_packed(r, count)
    if count == 0:
        raise C.CompactError(r.where, "deltas of no values")
    first = r.unpack(C._I64)
    if order == C._DELTA:
        deltas, bound = _read_packed(r, count - 1)
        return _summed(first, deltas, bound, r.where)
    if order == C._DELTA2:
        if count < 2:
            raise C.CompactError(r.where, "second deltas of one value")
        d1_first = r.unpack(C._I64)
        d2, bound = _read_packed(r, count - 2)
        d1, d1_bound = _summed(d1_first, d2, bound, r.where)
        return _summed(first, d1, d1_bound, r.where)
    raise C.CompactError(r.where, f"integer order {order} is not known")


def _read_float_array(r: C._Reader, count: int, single: bool) -> np.ndarray:
    kind = r.unpack(C._U8)
    if kind == C._SCALED:
        exponent = r.unpack(C._U8)
        if exponent >= len(C._SCALES):
            raise C.CompactError(r.where, f"decimal scale {exponent} is not known")
        scale = C._SCALES[exponent]
        ints, bound = _read_int_array(r, count)
        if (
            count
            and bound >= C._EXACT_LIMIT
            and max(abs(int(ints.min())), abs(int(ints.max()))) >= C._EXACT_LIMIT
        ):
            raise C.CompactError(r.where, "a scaled reading is too large to be exact")
        values = ints.astype(np.float64)
        if scale != 1.0:
            values /= scale
        return values.astype(np.float32).astype(np.float64) if single else values
    if kind == C._XOR:
        width = 4 if single else 8
        bits = _unshuffle(r.take(count * width), count, width, _UNSIGNED[width])
        plain = np.bitwise_xor.accumulate(bits) if count else bits
        return plain.view("<f4" if single else "<f8").astype(np.float64)
    raise C.CompactError(r.where, f"reading encoding {kind} is not known")


def _read_ints(r: C._Reader, count: int) -> list[int]:
    out: list[int] = _read_int_array(r, count)[0].tolist()
    return out


def _read_floats(r: C._Reader, count: int, single: bool) -> list[float]:
    out: list[float] = _read_float_array(r, count, single).tolist()
    return out


def read_column_array(r: C._Reader, budget: C._Budget) -> tuple[np.ndarray, np.ndarray | None]:
    """A ``Column`` payload as (values, null rows): float64 values, 0.0 under each null row as
    the plain wire has it, and the null rows' indexes (None when there are none)."""
    steady = _steady_header(r)
    if steady is not None:
        budget.spend(steady.n, r.where)
        r.pos = len(r.buf)
        return _unfold_steady([steady])[0], None
    n = r.unpack(C._U32)
    budget.spend(n, r.where)
    has_nulls = r.unpack(C._U8)
    if has_nulls not in (0, 1):
        raise C.CompactError(r.where, "null flag is corrupt")
    null_mask = None
    if has_nulls:
        bitmap = np.frombuffer(r.take((n + 7) // 8), dtype=np.uint8)
        null_mask = np.unpackbits(bitmap, bitorder="little")[:n].astype(bool)
        if not null_mask.any():
            null_mask = None
    present_count = n - (int(null_mask.sum()) if null_mask is not None else 0)
    present = _read_float_array(r, present_count, False) if present_count else np.empty(0)
    if null_mask is None:
        return present, None
    values = np.zeros(n)
    values[~null_mask] = present
    return values, np.flatnonzero(null_mask)


_STEADY_HEAD = struct.Struct("<IBBBB")  # values, null flag, encoding, decimal scale, integer order
_TWO_I64 = struct.Struct("<qq")
_INTS_HEAD = struct.Struct("<IB")  # values, integer order
_DELTA_WIDTHS = {1: "<i1", 2: "<i2", 4: "<i4"}


class _Steady(NamedTuple):
    """Where a steady column's integers lie and how they unfold (``_steady_header``)."""

    n: int
    order: int
    width: int
    factor: int
    exponent: int
    first: int
    d1_first: int
    planes: memoryview


def _steady_header(r: C._Reader) -> _Steady | None:
    """The column most readings travel as, recognised from its header alone: no null rows,
    scaled integers raw or as first or second deltas, 1, 2 or 4 bytes wide, whose sums stay
    well inside exact float64 integers (so no overflow or exactness check can fail), ending
    with its byte planes. None, with nothing read, for any other column: the general reader
    reads it, or names what is wrong with it. The general reader costs a column about ten
    small reads and a dozen numpy calls; steady columns of one shape unfold together
    (``_unfold_steady``), a dozen numpy calls for all of them."""
    buf, pos = r.buf, r.pos
    if len(buf) - pos < _STEADY_HEAD.size + 1:
        return None
    n, has_nulls, kind, exponent, order = _STEADY_HEAD.unpack_from(buf, pos)
    if has_nulls or kind != C._SCALED or exponent >= len(C._SCALES):
        return None
    return _steady_stream(buf, pos + _STEADY_HEAD.size, n, order, exponent, C._EXACT_LIMIT)


def _steady_ints_header(r: C._Reader) -> _Steady | None:
    """An integer field's stream (times, GPU indexes) of the steady shape (``_steady_header``),
    whose sums stay inside int64 with room to spare; None, with nothing read, for any other."""
    buf, pos = r.buf, r.pos
    if len(buf) - pos < 6:
        return None
    n, order = _INTS_HEAD.unpack_from(buf, pos)
    return _steady_stream(buf, pos + _INTS_HEAD.size, n, order, 0, _SAFE_SUM)


def _steady_stream(buf: memoryview, p: int, n: int, order: int, exponent: int, limit: float) -> _Steady | None:
    """The integer stream at ``p`` (after its order byte) if it is steady and its sums stay below ``limit``."""
    size = len(buf)
    if n < 2:
        return None
    first = d1_first = 0
    if order == C._RAW_INTS:
        m = n
    elif order == C._DELTA2 and size - p >= 17:
        first, d1_first = _TWO_I64.unpack_from(buf, p)
        p += 16
        m = n - 2
    elif order == C._DELTA and size - p >= 9:
        first = C._I64.unpack_from(buf, p)[0]
        p += 8
        m = n - 1
    else:
        return None
    head = buf[p]
    p += 1
    width, factor = head & ~C._FACTORED, 1
    if head & C._FACTORED:
        if size - p < 8:
            return None
        factor = C._I64.unpack_from(buf, p)[0]
        p += 8
    if width not in _DELTA_WIDTHS or factor < 1 or size - p != m * width:
        return None
    bound = (1 << (8 * width - 1)) * factor
    if order == C._DELTA2:
        total = abs(first) + (n - 1) * (abs(d1_first) + m * bound)
    else:
        total = abs(first) + m * bound
    if total >= limit:
        return None
    return _Steady(n, order, width, factor, exponent, first, d1_first, buf[p:])


def _unfold_steady(columns: list[_Steady]) -> np.ndarray:
    """Steady columns of one (order, width, n), unfolded together: row j of the result is
    column j's readings."""
    values = _unfold_steady_ints(columns).astype(np.float64)
    if any(c.exponent for c in columns):
        values /= np.array([C._SCALES[c.exponent] for c in columns])[:, None]
    return values


def _unfold_steady_ints(columns: list[_Steady]) -> np.ndarray:
    """Steady integer streams of one (order, width, n), unfolded together (int64, a row each)."""
    c0 = columns[0]
    k, n, width, order = len(columns), c0.n, c0.width, c0.order
    m = len(c0.planes) // width
    raw = np.frombuffer(b"".join(c.planes for c in columns), dtype=np.uint8).reshape(k, width, m)
    if width > 1:
        raw = np.ascontiguousarray(raw.transpose(0, 2, 1))
    packed = raw.view(_DELTA_WIDTHS[width]).reshape(k, m)
    if any(c.factor != 1 for c in columns):
        packed = packed.astype(np.int64) * np.array([c.factor for c in columns], dtype=np.int64)[:, None]
    if order == C._RAW_INTS:
        out = packed.astype(np.int64)
    else:
        out = np.empty((k, n), dtype=np.int64)
        out[:, 0] = 0
        if order == C._DELTA2:
            d1 = np.empty((k, n - 1), dtype=np.int64)
            d1[:, 0] = [c.d1_first for c in columns]
            np.cumsum(packed, axis=1, out=d1[:, 1:])
            d1[:, 1:] += d1[:, :1]
            np.cumsum(d1, axis=1, out=out[:, 1:])
        else:
            np.cumsum(packed, axis=1, out=out[:, 1:])
        out += np.array([c.first for c in columns], dtype=np.int64)[:, None]
    return out


def _read_column(r: C._Reader, target: pb.Column, budget: C._Budget) -> None:
    values, nulls = read_column_array(r, budget)
    if nulls is not None:
        target.null_rows.extend(nulls.tolist())
    if len(values):
        # Parsed as the packed field it is on the wire (one copy), not extended value by value.
        data = values.astype("<f8").tobytes()
        target.MergeFromString(_VALUES_TAG + _varint(len(data)) + data)


@dataclass
class SectionArrays:
    """A compact sample section read into arrays, not into its protobuf message: what ingest
    checks and the writer stores. ``columns``: each reported reading column as (values, null
    rows), as ``read_column_array`` gives them; ``fields``: the section's other fields (per-core
    figures, process tables and their per-row counts), read into its protobuf message."""

    ts_ns: np.ndarray  # int64, or empty when the section has none
    gpu_index: np.ndarray | None  # int64 (GPU sections)
    columns: dict[str, tuple[np.ndarray, np.ndarray | None]]
    fields: pb.HostSamples | pb.GpuSamples


_ARRAY_INTS = frozenset({"ts_ns", "gpu_index"})  # read as arrays; every other integer field into ``fields``
_UINT32_MAX = 2**32 - 1


def read_sample_section(number: int, payload: memoryview, budget: C._Budget) -> SectionArrays:
    """The sample section ``number`` (``C.SECTION_HOST`` or ``C.SECTION_GPU``) of a compact blob,
    read into arrays with the same checks and ``CompactError`` fields as unfolding it into its
    message (``C._read_message``), without building a protobuf field per reading column."""
    name, cls = C._SECTIONS[number]
    where = f"compact.{name}"
    msg: pb.HostSamples | pb.GpuSamples = cls()
    columns: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    ints: dict[str, np.ndarray] = {}
    steady: dict[tuple[int, int, int], tuple[list[str], list[_Steady]]] = {}
    for field, kind, fr, body in C.read_fields(payload, msg.DESCRIPTOR, where):
        field_where, length = fr.where, len(body)
        if kind == C._T_COLUMN:
            head = _steady_header(fr)
            if head is None:
                columns[field.name] = read_column_array(fr, budget)
            else:  # unfolded below with the section's other steady columns of its shape
                budget.spend(head.n, field_where)
                fr.pos = length
                names, heads = steady.setdefault((head.order, head.width, head.n), ([], []))
                names.append(field.name)
                heads.append(head)
        elif kind == C._T_INTS and field.name in _ARRAY_INTS:
            steady_ints = _steady_ints_header(fr)
            if steady_ints is not None:
                budget.spend(steady_ints.n, field_where)
                fr.pos = length
                values = _unfold_steady_ints([steady_ints])[0]
            else:
                n = fr.unpack(C._U32)
                budget.spend(n, field_where)
                values = _read_int_array(fr, n)[0]
            # What protobuf's own range check refuses when the field is filled (gpu_index is uint32).
            if field.name == "gpu_index" and len(values) and (int(values.min()) < 0 or int(values.max()) > _UINT32_MAX):
                raise C.CompactError(field_where, "a value does not fit the field (not a uint32)")
            ints[field.name] = values
        else:
            C.read_field(field, kind, fr, body, msg, budget, 0, NUMPY)
            continue  # read_field checked the payload's end
        if fr.rest():
            raise C.CompactError(field_where, "has trailing bytes")
    for names, heads in steady.values():
        for column_name, values in zip(names, _unfold_steady(heads)):
            columns[column_name] = (values, None)
    empty = np.empty(0, dtype=np.int64)
    gpu_index = ints.get("gpu_index", empty) if number == C.SECTION_GPU else None
    return SectionArrays(ints.get("ts_ns", empty), gpu_index, columns, msg)


_VALUES_TAG = bytes([pb.Column.VALUES_FIELD_NUMBER << 3 | 2])  # field 1, length-delimited (packed)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


NUMPY = C.Streams(_read_ints, _read_floats, _read_column)
