"""The chunk codec is lossless bit for bit (every float, NaN payloads and -0.0 included, every
int64 time, every string with None kept apart from ""), small on quantised readings, and refuses
a damaged blob with one clear error."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fleetscope.collector.storage import chunk_codec
from fleetscope.collector.storage.chunk_codec import (
    CODEC_VERSION,
    ChunkFormatError,
    decode_chunk,
    encode_chunk,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.uint64 if a.dtype == np.float64 else np.int64),
                          b.view(np.uint64 if b.dtype == np.float64 else np.int64))


def round_trip(ts: np.ndarray, cols: dict[str, np.ndarray], texts: dict[str, list[str | None]] | None = None) -> None:
    blob = encode_chunk(ts, cols, texts)
    assert blob[0] == CODEC_VERSION
    ts2, cols2, texts2 = decode_chunk(blob)
    assert_same(ts2, ts.astype(np.int64))
    assert list(cols2) == list(cols)
    for name in cols:
        assert_same(cols2[name], cols[name])
    assert texts2 == (texts or {})


# Floats as raw bit patterns: every NaN payload, both zeros, subnormals, infinities.
any_float_bits = hnp.arrays(np.uint64, st.integers(0, 60), elements=st.integers(0, 2**64 - 1))
# Readings like NVML's: quantised to a decimal step, often NULL, sometimes repeating.
quantised = st.integers(0, 3).flatmap(
    lambda e: hnp.arrays(np.float64, st.integers(0, 60),
                         elements=st.one_of(st.integers(-(10**9), 10**9).map(lambda i, e=e: i / 10**e),
                                            st.just(float("nan")), st.just(0.0), st.just(-0.0)))
)
mixed_floats = hnp.arrays(np.float64, st.integers(0, 60),
                          elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), bits=any_float_bits)
def test_any_float_bits_come_back_exactly(data: st.DataObject, bits: np.ndarray) -> None:
    n = len(bits)
    ts = np.array(data.draw(st.lists(INT64, min_size=n, max_size=n)), dtype=np.int64)
    round_trip(ts, {"x": bits.view(np.float64)})


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), a=quantised, sparse=st.booleans())
def test_quantised_and_mixed_columns_come_back_exactly(data: st.DataObject, a: np.ndarray, sparse: bool) -> None:
    n = len(a)
    b = data.draw(hnp.arrays(np.float64, n, elements=st.floats(allow_nan=True, width=64)))
    counter = np.cumsum(np.abs(np.nan_to_num(a))) if n else a
    if sparse and n:
        a = a.copy()
        a[::3] = np.nan
    start = data.draw(st.integers(0, 2**62))
    steps = data.draw(hnp.arrays(np.int64, n, elements=st.integers(0, 2 * 10**9)))
    ts = start + np.cumsum(steps)
    round_trip(ts, {"a": a, "b": b, "counter": counter, "nulls": np.full(n, np.nan)})


@settings(max_examples=200)
@given(mixed=mixed_floats)
def test_any_float_values_come_back_exactly(mixed: np.ndarray) -> None:
    round_trip(np.arange(len(mixed), dtype=np.int64) * 10**9, {"m": mixed})


@settings(max_examples=200)
@given(texts=st.lists(st.one_of(st.none(), st.just(""), st.text(max_size=30), st.sampled_from(['[[1.5,null]]', '[]'])),
                      max_size=60))
def test_text_columns_come_back_exactly_with_none_apart_from_empty(texts: list[str | None]) -> None:
    n = len(texts)
    round_trip(np.arange(n, dtype=np.int64), {}, {"cpu_cores": texts, "top_processes": list(reversed(texts))})


@pytest.mark.parametrize("values", [
    [-0.0, 0.0, -0.0], [0.1 + 0.2, 0.3], [1e300, -1e-300, 5e-324], [2.0**53, 2.0**53 + 2], [float("inf"), 1.0],
    [0.001, 0.002, 1234.567], [9.5e12, 9.5e12 + 1], [float("nan"), -float("nan"), 1.0],
])
def test_edge_values(values: list[float]) -> None:
    arr = np.array(values, dtype=np.float64)
    round_trip(np.array([5, 3, 3][: len(values)] + [0] * max(0, len(values) - 3), dtype=np.int64), {"v": arr})


def test_empty_and_single_row_chunks() -> None:
    round_trip(np.array([], dtype=np.int64), {"a": np.array([], dtype=np.float64)}, {"t": []})
    round_trip(np.array([7], dtype=np.int64), {"a": np.array([1.5])}, {"t": [None]})
    round_trip(np.array([7, 9], dtype=np.int64), {"a": np.array([np.nan, 2.0])}, {"t": ["x", "x"]})


def test_an_hour_of_quantised_gpu_readings_takes_well_under_two_bytes_a_value() -> None:
    rng = np.random.default_rng(3)
    n = 3600
    ts = 1_780_000_000 * 10**9 + np.arange(n) * 10**9 + rng.integers(0, 200_000, n)
    cols = {
        "util_gpu_percent": np.clip(np.round(50 + np.cumsum(rng.normal(0, 2, n))), 0, 100),
        "temp_c": np.round(65 + np.cumsum(rng.normal(0, 0.05, n))),
        "power_w": np.round(250 + np.cumsum(rng.normal(0, 0.5, n)), 3),
        "memory_used_bytes": 40e9 + np.round(np.cumsum(rng.normal(0, 1, n))) * 2**20,
        "energy_j": np.round(1e6 + np.cumsum(np.full(n, 250.0)), 3),
        "sm_clock_mhz": np.full(n, 1980.0),
        "fan_percent": np.full(n, np.nan),
    }
    blob = encode_chunk(ts, cols)
    assert len(blob) / (n * (len(cols) + 1)) < 1.5
    round_trip(ts, cols)


def test_zlib_chunks_decode_and_zlib_is_used_without_zstandard(monkeypatch: pytest.MonkeyPatch) -> None:
    ts = np.arange(100, dtype=np.int64) * 10**9
    cols = {"a": np.arange(100) / 10.0}
    assert encode_chunk(ts, cols)[1] == chunk_codec.COMPRESS_ZSTD
    monkeypatch.setattr(chunk_codec, "_zstandard", lambda: None)
    blob = encode_chunk(ts, cols)
    assert blob[1] == chunk_codec.COMPRESS_ZLIB
    monkeypatch.undo()
    round_trip(ts, cols)
    assert_same(decode_chunk(blob)[1]["a"], cols["a"])


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="column 'a' has 2 values for 3 timestamps"):
        encode_chunk(np.arange(3), {"a": np.zeros(2)})
    with pytest.raises(ValueError, match="text column 't' has 1 values for 3 timestamps"):
        encode_chunk(np.arange(3), {}, {"t": ["x"]})


def test_a_damaged_blob_is_one_clear_error() -> None:
    blob = encode_chunk(np.arange(50, dtype=np.int64), {"a": np.arange(50.0)}, {"t": ["x"] * 50})
    for bad in (b"", blob[:1], bytes([99]) + blob[1:], blob[:1] + bytes([7]) + blob[2:], blob[:-5], blob[:10]):
        with pytest.raises(ChunkFormatError) as err:
            decode_chunk(bad)
        assert "\n" not in str(err.value)
    # A body that decompresses but is cut short, or has bytes left over.
    import zstandard

    body = zstandard.ZstdDecompressor().decompress(blob[2:])
    for bad_body in (body[:-3], body + b"\0", struct.pack("<I", 10**6) + body[4:]):
        with pytest.raises(ChunkFormatError):
            decode_chunk(blob[:2] + zstandard.ZstdCompressor().compress(bad_body))
