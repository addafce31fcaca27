"""compact-v1 (fleetscope.proto.compact): lossless for everything an agent sends, small, and safe
against any blob a hostile sender makes up: each bad blob is a CompactError naming the field,
within bounded memory."""

from __future__ import annotations

import math
import struct
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.agent.daemon.batcher import Pending, build_batches, fill_gpu, fill_host
from fleetscope.agent.records import GpuSample, HostSample, ProcessUsage
from fleetscope.agent.tools.simulate import SimulatedSampler
from fleetscope.proto import compact as c
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.compact_blobs import blob as _blob
from tests.compact_blobs import ints_raw as _ints_raw
from tests.compact_blobs import message as _message
from tests.compact_blobs import section as _section


def _copy(b: pb.Batch) -> pb.Batch:
    out = pb.Batch()
    out.CopyFrom(b)
    return out


def _round_trip(b: pb.Batch, compressor: int | None = None) -> pb.Batch:
    wire = c.compact(_copy(b), compressor=compressor).SerializeToString()
    return c.expand(pb.Batch.FromString(wire))


def _simulated_batch(kind: str, gpus: int, seconds: int) -> pb.Batch:
    sampler = SimulatedSampler(kind=kind, gpus=gpus, seed=3, latency=False)
    t0 = 1_780_000_000 * 10**9
    pending = Pending()
    for s in range(seconds):
        pending.add(sampler.sample(t0 + s * 10**9))
    batch = build_batches(pending, now_ns=t0)[0].batch
    batch.agent_id, batch.boot_id, batch.seq = "agent", "boot", 7
    return batch


@pytest.mark.parametrize(("kind", "gpus"), [("jetson", 1), ("server", 8)])
@pytest.mark.parametrize("compressor", [c.COMPRESS_ZLIB, c.COMPRESS_ZSTD])
def test_a_minute_of_a_simulated_device_comes_back_bit_for_bit_far_smaller(kind: str, gpus: int, compressor: int) -> None:
    batch = _simulated_batch(kind, gpus, 60)
    assert batch.host.ts_ns and batch.gpu.ts_ns and batch.host.processes.pid
    back = _round_trip(batch, compressor)
    assert back == batch
    assert not back.compact
    small = c.compact(_copy(batch), compressor=compressor)
    # Against plain protobuf (7-16 bytes a reading); against the plain spool, about 100: benchmarks/bench_wire_bytes.py.
    assert small.ByteSize() * 6 < batch.ByteSize(), (small.ByteSize(), batch.ByteSize())
    assert not small.HasField("host") and not small.HasField("gpu") and not small.metrics


def test_values_that_are_not_decimal_fractions_and_special_floats_come_back_exactly() -> None:
    specials = [-0.0, 0.1 + 0.2, 1e300, 5e-324, math.inf, -math.inf, 2.0**60, 123.456789]
    b = pb.Batch(agent_id="a", seq=1)
    fill_gpu(b.gpu, [GpuSample(ts_ns=i, gpu_index=0, power_w=v, temp_c=None if i % 2 else 40.0)
                     for i, v in enumerate(specials)])
    b.gpu.power_w.values[2] = math.nan  # a bit pattern on the wire; validation refuses it later, the codec keeps it
    back = _round_trip(b)
    assert [struct.pack("<d", v) for v in back.gpu.power_w.values] == [struct.pack("<d", v) for v in b.gpu.power_w.values]
    assert math.isnan(back.gpu.power_w.values[2])
    assert list(back.gpu.temp_c.null_rows) == [1, 3, 5, 7]


def test_records_travel_inside_and_identity_stays_outside() -> None:
    b = pb.Batch(agent_id="agent-1", boot_id="boot", seq=9, created_ns=5, final=True)
    b.logs.add(ts_ns=1, source="/var/log/train.log", level=pb.LEVEL_ERROR, message="CUDA out of memory")
    inc = b.incidents.add(ts_ns=2, kind="cuda_oom", title="OOM")
    inc.facts["requested_bytes"].integer = 2 << 30
    b.latency.add(name="infer", count=3, bucket_index=[1, 2], bucket_count=[1, 2])
    b.inventory_records.add(kind="tensorrt_engine", name="yolo")
    for t in range(5):
        for sensor in ("cpu", "gpu"):
            m = b.metrics.add(name="jetson.temp_c", ts_ns=t, value=40.0 + t / 10)
            m.labels["sensor"] = sensor
    b.counters.spool_batches = 4
    small = c.compact(_copy(b))
    assert (small.agent_id, small.boot_id, small.seq, small.final, small.counters.spool_batches) == ("agent-1", "boot", 9, True, 4)
    assert not (small.logs or small.incidents or small.latency or small.inventory_records or small.metrics)
    assert c.expand(small) == b


_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
_reading = st.one_of(st.none(), _finite, st.integers(0, 2**40).map(float), st.integers(0, 10**5).map(lambda i: i / 10))


@st.composite
def _samples(draw: st.DrawFn) -> pb.Batch:
    rows = draw(st.integers(0, 30))
    t0 = draw(st.integers(0, 2**62))
    step = draw(st.sampled_from([0, 1, 10**9, 10**9 + 7]))
    b = pb.Batch(agent_id="a", seq=1)
    gpus = [GpuSample(ts_ns=t0 + i * step, gpu_index=draw(st.integers(0, 8)), temp_c=draw(_reading),
                      power_w=draw(_reading), memory_used_bytes=draw(_reading),
                      processes=tuple(ProcessUsage(pid=draw(st.integers(0, 2**31)), name=draw(st.text(max_size=8)), cpu_percent=None, rss_bytes=None,
                                                   gpu_memory_bytes=draw(_reading)) for _ in range(draw(st.integers(0, 2)))))
            for i in range(rows)]
    hosts = [HostSample(ts_ns=t0 + i * step, cpu_percent=draw(_reading), load1=draw(_reading),
                        cpu_core_percent=tuple(draw(st.lists(st.floats(0, 100, width=32), max_size=4))))
             for i in range(rows)]
    if gpus:
        fill_gpu(b.gpu, gpus)
    if hosts:
        fill_host(b.host, hosts)
    for name, value in draw(st.lists(st.tuples(st.sampled_from(["a.x", "b.y_ms"]), _finite), max_size=6)):
        b.metrics.add(name=name, ts_ns=t0, value=value)
    return b


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_samples(), st.sampled_from([c.COMPRESS_ZLIB, c.COMPRESS_ZSTD]))
def test_any_batch_of_samples_comes_back_the_same(batch: pb.Batch, compressor: int) -> None:
    back = _round_trip(batch, compressor)
    # An empty Column says "not reported" whether present or not: compare what a reader reads.
    for name in ("host", "gpu"):
        for field, value in list(getattr(batch, name).ListFields()):
            if field.message_type is pb.Column.DESCRIPTOR and not len(value.values):
                getattr(batch, name).ClearField(field.name)
    assert back == batch


# ------------------------------------------------------------------------------ hostile blobs


def _expand_error(blob: bytes, **limits: int) -> c.CompactError:
    with pytest.raises(c.CompactError) as err:
        c.expand(pb.Batch(agent_id="a", seq=1, compact=blob), **limits)
    return err.value


TS = pb.GpuSamples.TS_NS_FIELD_NUMBER
TEMP = pb.GpuSamples.TEMP_C_FIELD_NUMBER
PROCESSES = pb.GpuSamples.PROCESSES_FIELD_NUMBER
NAME = pb.ProcessTable.NAME_FIELD_NUMBER


def test_truncated_blobs_name_the_compact_field() -> None:
    good = c.compact(_simulated_batch("jetson", 1, 10), compressor=c.COMPRESS_ZSTD).compact
    for cut in (1, 3, len(good) // 2, len(good) - 1):
        assert _expand_error(good[:cut]).field == "compact"
    zgood = c.compact(_simulated_batch("jetson", 1, 10), compressor=c.COMPRESS_ZLIB).compact
    assert "truncated" in str(_expand_error(zgood[:-4]))
    assert _expand_error(good + b"\x00\x01").field == "compact"
    assert "format 9" in str(_expand_error(bytes((9,)) + good[1:]))


@pytest.mark.parametrize("compressor", [c.COMPRESS_ZLIB, c.COMPRESS_ZSTD])
def test_a_decompression_bomb_is_stopped_at_the_bound_with_bounded_memory(compressor: int) -> None:
    blob = _blob(b"\x00" * (256 << 20), compressor)
    assert len(blob) < 300_000
    tracemalloc.start()
    try:
        err = _expand_error(blob, max_body_bytes=8 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "more than 8388608 bytes" in str(err)
    assert peak < 40 << 20, f"{peak >> 20} MiB to refuse a bomb"


def test_a_small_blob_that_would_unfold_into_a_billion_values_is_refused() -> None:
    column = struct.pack("<IB", 1_000_000_000, 0)  # a billion rows, no nulls, then nothing
    err = _expand_error(_blob(_section(c.SECTION_GPU, _message((TEMP, 1, column)))))
    assert err.field == "compact.gpu.temp_c"
    assert "more values" in str(err)


def test_a_dictionary_index_out_of_range_names_the_text_field() -> None:
    word = b"python"
    strings = struct.pack("<II", 2, 1) + struct.pack("<I", len(word)) + word + struct.pack("<BBB", 1, 0, 5)
    processes = _message((NAME, 5, strings))
    err = _expand_error(_blob(_section(c.SECTION_GPU, _message((PROCESSES, 6, processes)))))
    assert err.field == "compact.gpu.processes.name"
    assert "out of range" in str(err)


def test_a_timestamp_delta_that_overflows_int64_is_refused() -> None:
    deltas = struct.pack("<IBq", 3, 1, 2**62) + struct.pack("<B", 8) + b"".join(
        struct.pack("<2q", 2**62, 2**62)[k::8] for k in range(8))
    err = _expand_error(_blob(_section(c.SECTION_GPU, _message((TS, 2, deltas)))))
    assert err.field == "compact.gpu.ts_ns"
    assert "int64" in str(err)


def test_payload_types_sections_and_records_that_do_not_fit_are_refused() -> None:
    assert "does not fit" in str(_expand_error(_blob(_section(c.SECTION_GPU, _message((TEMP, 2, _ints_raw([1])))))))
    assert _expand_error(_blob(_section(99, b""))).field == "compact.section[99]"
    smuggled = pb.Batch(agent_id="someone-else").SerializeToString()
    assert _expand_error(_blob(_section(c.SECTION_RECORDS, smuggled))).field == "compact.records.agent_id"
    assert _expand_error(_blob(_section(c.SECTION_GPU, _message((TS, 2, _ints_raw([1]) + b"x"))))).field == "compact.gpu.ts_ns"
    twice = _section(c.SECTION_GPU, _message()) * 2
    assert "twice" in str(_expand_error(_blob(twice)))
    plain_and_compact = pb.Batch(agent_id="a", seq=1, compact=_blob(_section(c.SECTION_GPU, _message())))
    plain_and_compact.gpu.ts_ns.append(1)
    with pytest.raises(c.CompactError, match="both compact and plain"):
        c.expand(plain_and_compact)


def test_unknown_fields_of_a_newer_agent_are_skipped() -> None:
    newer = _message((TS, 2, _ints_raw([5])), (999, 1, b"whatever"))
    b = c.expand(pb.Batch(agent_id="a", seq=1, compact=_blob(_section(c.SECTION_GPU, newer))))
    assert list(b.gpu.ts_ns) == [5]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_mutation_of_a_real_blob_is_a_clear_error_or_a_batch(data: st.DataObject) -> None:
    body = zlib.decompress(c.compact(_simulated_batch("jetson", 1, 5), compressor=c.COMPRESS_ZLIB).compact[2:])
    raw = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    batch = pb.Batch(agent_id="a", seq=1, compact=_blob(bytes(raw)))
    try:
        c.expand(batch, max_values=200_000)
    except c.CompactError as exc:
        assert exc.field.startswith("compact")
        return
    assert not batch.compact



def test_a_blob_that_fails_late_leaves_the_batch_as_it_was() -> None:
    good = _section(c.SECTION_GPU, _message((TS, 2, _ints_raw([5]))))
    broken_host = _section(c.SECTION_HOST, _message((pb.HostSamples.TS_NS_FIELD_NUMBER, 2, _ints_raw([1]) + b"x")))
    batch = pb.Batch(agent_id="a", seq=1, compact=_blob(good + broken_host))
    with pytest.raises(c.CompactError):
        c.expand(batch)
    assert not batch.HasField("gpu") and not batch.HasField("host") and batch.compact, "nothing half-read stays"
    plain = pb.Batch(agent_id="a", seq=1, compact=_blob(_section(c.SECTION_GPU, _message())))
    plain.gpu.ts_ns.append(1)
    with pytest.raises(c.CompactError, match="both compact and plain"):
        c.expand(plain)
    assert list(plain.gpu.ts_ns) == [1], "the batch's own plain samples are kept"
