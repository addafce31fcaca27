"""The SDK's histogram against numpy's exact percentiles, and its wire form."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope.agent.sdk import Histogram
from fleetscope.agent.sdk._histogram import SCHEME
from fleetscope.proto import buckets, exponential

N = 1_000_000
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def _distributions() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20240601)
    bimodal = np.concatenate(
        [
            rng.lognormal(np.log(200_000), 0.1, int(N * 0.7)),
            rng.lognormal(np.log(20_000_000), 0.2, N - int(N * 0.7)),
        ]
    )
    return {
        "lognormal": rng.lognormal(mean=np.log(1_000_000), sigma=0.8, size=N),  # ~1 ms, heavy right tail
        "exponential": rng.exponential(scale=50_000, size=N) + 1,  # ~50 us
        "uniform": rng.uniform(10_000, 5_000_000, size=N),
        "bimodal": rng.permutation(bimodal),  # cache hits and misses
    }


@pytest.mark.parametrize("scheme", [SCHEME, exponential.LEGACY], ids=["otel-scale-4", "legacy-1.04"])
@pytest.mark.parametrize("name", ["lognormal", "exponential", "uniform", "bimodal"])
def test_percentiles_within_the_schemes_bound_of_numpy_on_a_million_latencies(name: str, scheme: int) -> None:
    values = np.rint(_distributions()[name]).astype(np.int64)
    h = Histogram()
    h.scheme = scheme
    h.record_many(values.tolist())
    assert h.count == N
    bound = exponential.relative_error(scheme)
    for q in QUANTILES:
        exact = float(np.quantile(values, q))
        got = h.quantile(q)
        assert got is not None
        assert abs(got - exact) / exact <= bound + 1e-12, f"{name} p{q * 100:g}: {got:.0f} vs numpy {exact:.0f}"


def test_the_sdk_records_on_the_otel_scale_4_grid_with_about_two_percent_error() -> None:
    assert SCHEME == 4 == Histogram().scheme
    assert 0.021 < exponential.relative_error(SCHEME) < 0.022  # (2**(1/16) - 1) / (2**(1/16) + 1)
    rng = np.random.default_rng(3)
    for v in [1, 2, 3, 1000, 1024, 10**6, 2**40, *rng.integers(1, 10**12, 5000).tolist()]:
        i = exponential.bucket_index(v, SCHEME)
        # OTel: bucket i holds (base**i, base**(i+1)], checked here in exact integer arithmetic:
        # 2**(i/16) < v <= 2**((i+1)/16)  <=>  2**i < v**16 <= 2**(i+1)
        assert 2**i < v**16 <= 2 ** (i + 1) if i >= 0 else v == 1
        rep = exponential.bucket_value(i, SCHEME)
        assert abs(rep - v) / v <= exponential.relative_error(SCHEME) + 1e-12


def test_histograms_of_different_schemes_refuse_to_merge() -> None:
    a, b = Histogram(), Histogram()
    b.scheme = exponential.LEGACY
    a.record(1000)
    b.record(1000)
    with pytest.raises(ValueError, match="scheme"):
        a.merge(b)


def test_relative_error_bound_of_the_legacy_scheme_is_below_two_percent() -> None:
    assert buckets.RELATIVE_ERROR < 0.02
    for v in (1, 7, 999, 10**6 + 3, 123_456_789, 3_600 * 10**9):
        rep = buckets.bucket_value(buckets.bucket_index(v))
        assert abs(rep - v) / v <= buckets.RELATIVE_ERROR + 1e-12


def test_merging_shards_equals_recording_everything_in_one() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(12, 1.5, 50_000).astype(np.int64).tolist()
    whole = Histogram()
    whole.record_many(values)
    parts = [Histogram() for _ in range(4)]
    for i, v in enumerate(values):
        parts[i % 4].record(v)
    merged = Histogram()
    for p in parts:
        merged.merge(p)
    assert merged.buckets == whole.buckets and merged.sum_ns == whole.sum_ns and merged.count == whole.count
    assert buckets.merge(p.buckets for p in parts) == whole.buckets


def test_wire_round_trip_keeps_sparse_buckets_and_totals() -> None:
    h = Histogram()
    for v in (0, 10, 10, 1000, 5_000_000):
        h.record(v, error=v == 1000)
    msg = h.to_proto("op", {"model": "m"}, 100, 200)
    assert msg.scheme == SCHEME
    assert msg.count == 5 and msg.zero_count == 1 and msg.errors == 1 and msg.sum_ns == 5_001_020
    assert list(msg.bucket_index) == sorted(msg.bucket_index) and len(msg.bucket_index) == 3
    assert (msg.start_ns, msg.end_ns, dict(msg.labels)) == (100, 200, {"model": "m"})
    back = Histogram.from_proto(msg)
    assert back.buckets == h.buckets and back.count == h.count and back.quantile(0.5) == h.quantile(0.5)
    assert back.scheme == SCHEME


def test_a_message_without_a_scheme_is_read_as_the_legacy_scheme() -> None:
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    i = buckets.bucket_index(2_000_000)  # what an agent from before the field sends
    msg = pb.LatencyHistogram(name="op", count=3, bucket_index=[i], bucket_count=[3])
    assert not msg.HasField("scheme") if msg.DESCRIPTOR.fields_by_name["scheme"].has_presence else msg.scheme == 0
    h = Histogram.from_proto(msg)
    assert h.scheme == exponential.LEGACY and h.quantile(0.5) == buckets.bucket_value(i)
