"""The collector's numpy reader of compact-v1 (``collector.storage.compact_numpy``) reads every blob as the
pure reader does: the same batch, bit for bit, or the same error naming the same field, on
real batches, arbitrary ones, hostile hand-built ones and mutations of real ones."""

from __future__ import annotations

import struct
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.collector.storage.compact_numpy import NUMPY, SectionArrays, read_sample_section
from fleetscope.proto import compact as c
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.compact_blobs import blob as _blob
from tests.compact_blobs import message as _message
from tests.compact_blobs import section as _section
from tests.proto.test_compact import TEMP, TS, _samples, _simulated_batch


def _both(blob: bytes, **limits: int) -> tuple[object, object]:
    """What each reader makes of ``blob``: the expanded batch's bytes, or (field, message).
    The second is the numpy reader's, which must also be what the collector's reader into
    arrays (``read_sample_section``) gives, put back into protobuf."""
    out = []
    for streams in (c.PURE, NUMPY):
        batch = pb.Batch(agent_id="a", seq=1, compact=blob)
        try:
            c.expand(batch, streams=streams, **limits)
        except c.CompactError as exc:
            out.append((exc.field, _unified(str(exc))))
        else:
            out.append(batch.SerializeToString(deterministic=True))
    assert _through_arrays(blob, **limits) == out[1]
    return out[0], out[1]


def _unified(message: str) -> str:
    """protobuf's own words for a value out of its field's range differ from the arrays reader's
    (which never fills the field); both say the value does not fit the field."""
    cut = message.find("a value does not fit the field")
    return message[: cut + len("a value does not fit the field")] if cut >= 0 else message


def _through_arrays(blob: bytes, **limits: int) -> object:
    sections: dict[int, SectionArrays] = {}

    def read(number: int, payload: memoryview, budget: c._Budget) -> None:
        sections[number] = read_sample_section(number, payload, budget)

    batch = pb.Batch(agent_id="a", seq=1, compact=blob)
    try:
        c.expand(batch, streams=NUMPY, sample_reader=read, **limits)
    except c.CompactError as exc:
        return (exc.field, _unified(str(exc)))
    assert not batch.HasField("host") and not batch.HasField("gpu"), "the arrays reader leaves the samples out of the batch"
    for number, got in sections.items():
        msg = getattr(batch, "host" if number == c.SECTION_HOST else "gpu")
        msg.SetInParent()
        msg.MergeFrom(got.fields)
        msg.ts_ns.extend(got.ts_ns.tolist())
        if got.gpu_index is not None:
            msg.gpu_index.extend(got.gpu_index.tolist())
        for name, (values, nulls) in got.columns.items():
            column = getattr(msg, name)
            column.values.extend(values.tolist())
            if nulls is not None:
                column.null_rows.extend(nulls.tolist())
    return batch.SerializeToString(deterministic=True)


def test_real_batches_read_the_same() -> None:
    for kind, gpus in (("jetson", 1), ("server", 8)):
        blob = c.compact(_simulated_batch(kind, gpus, 60)).compact
        pure, fast = _both(blob)
        assert isinstance(pure, bytes) and pure == fast


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_samples())
def test_any_batch_reads_the_same(batch: pb.Batch) -> None:
    pure, fast = _both(c.compact(batch).compact)
    assert pure == fast


def _planes(values: list[int], fmt: str, width: int) -> bytes:
    raw = struct.pack(f"<{len(values)}{fmt}", *values)
    return b"".join(raw[k::width] for k in range(width))


def test_hostile_streams_fail_the_same_way() -> None:
    bad = [
        # deltas whose sum leaves int64 (the numpy reader must not wrap around)
        struct.pack("<IBq", 3, 1, 2**62) + struct.pack("<B", 8) + _planes([2**62, 2**62], "q", 8),
        # second deltas that overflow only in the second sum
        struct.pack("<IBqq", 4, 2, 2**62, 2**61) + struct.pack("<B", 8) + _planes([2**61, 2**61], "q", 8),
        # a common factor that overflows, and one that is not positive
        struct.pack("<IB", 2, 0) + struct.pack("<Bq", 8 | 0x80, 2**40) + _planes([2**30, -(2**30)], "q", 8),
        struct.pack("<IB", 1, 0) + struct.pack("<Bq", 1 | 0x80, 0) + b"\x01",
        struct.pack("<IB", 1, 0) + struct.pack("<B", 3) + b"\x01\x02\x03",  # an unknown width
        struct.pack("<IB", 0, 1),  # deltas of no values
        struct.pack("<IB", 1, 2) + struct.pack("<q", 1),  # second deltas of one value
        struct.pack("<IB", 1, 9),  # an unknown order
        struct.pack("<IB", 5, 0) + struct.pack("<B", 8) + b"\x00" * 7,  # truncated planes
    ]
    for payload in bad:
        pure, fast = _both(_blob(_section(c.SECTION_GPU, _message((TS, 2, payload)))))
        assert isinstance(pure, tuple), payload
        assert pure == fast, payload
    # A GPU index that is no uint32 (protobuf refuses it; the arrays reader must too).
    for index in (-1, 2**32):
        gpu_index = struct.pack("<IB", 1, 0) + struct.pack("<B", 8) + struct.pack("<q", index)
        pure, fast = _both(_blob(_section(c.SECTION_GPU, _message((TS, 2, struct.pack("<IBB", 1, 0, 1) + b"\x05"),
                                                                   (pb.GpuSamples.GPU_INDEX_FIELD_NUMBER, 2, gpu_index)))))
        assert pure == fast == ("compact.gpu.gpu_index", "compact.gpu.gpu_index: a value does not fit the field"), (index, pure)
    # A reading column: a scaled value too large to be exact, an unknown scale, a corrupt null flag.
    readings = [
        struct.pack("<IBBB", 1, 0, 1, 0) + struct.pack("<BB", 0, 8) + struct.pack("<q", 2**60),
        struct.pack("<IBBB", 1, 0, 1, 9),
        struct.pack("<IB", 1, 7),
        struct.pack("<IBB", 2, 1, 0b11),  # both rows null: no values follow
    ]
    for payload in readings:
        pure, fast = _both(_blob(_section(c.SECTION_GPU, _message((TS, 2, struct.pack("<IBB", 2, 0, 1) + b"\x05\x06"),
                                                                   (TEMP, 1, payload)))))
        assert pure == fast, (payload, pure, fast)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_mutation_of_a_real_blob_reads_the_same(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["jetson", "server"]))
    body = zlib.decompress(c.compact(_simulated_batch(kind, 1 if kind == "jetson" else 2, 5),
                                     compressor=c.COMPRESS_ZLIB).compact[2:])
    raw = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    pure, fast = _both(_blob(bytes(raw)), max_values=200_000)
    assert pure == fast
