"""The exponential bucket schemes: OTel's index definition checked in exact integer arithmetic,
percentiles against numpy (one scheme and mixed schemes), and the OTLP / Prometheus native
mappings round-tripping exactly, with Prometheus' bucket bounds checked value by value."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope.proto import buckets as legacy
from fleetscope.proto import exponential as ex

QUANTILES = (0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def _in_otel_bucket(v: int, i: int, scale: int) -> bool:
    """base**i < v <= base**(i+1) with base = 2**(2**-scale), exactly: 2**i < v**(2**scale) <= 2**(i+1)."""
    p = v ** (1 << scale)
    lo_ok = (2**i < p) if i >= 0 else (p * 2 ** (-i) > 1)
    hi_ok = (p <= 2 ** (i + 1)) if i + 1 >= 0 else (p * 2 ** (-(i + 1)) <= 1)
    return lo_ok and hi_ok


@pytest.mark.parametrize("scale", range(1, ex.MAX_SCALE + 1))
def test_the_index_is_otels_for_every_scale(scale: int) -> None:
    rng = np.random.default_rng(scale)
    values = [1, 2, 3, 4, 1023, 1024, 1025, 2**33, 2**33 + 1, *rng.integers(1, 10**13, 2000).tolist()]
    for v in values:
        i = ex.bucket_index(v, scale)
        assert _in_otel_bucket(v, i, scale), (v, i, scale)
        assert ex.lower_bound(i, scale) <= v <= ex.upper_bound(i, scale) * (1 + 1e-15)
        assert abs(ex.bucket_value(i, scale) - v) / v <= ex.relative_error(scale) + 1e-12


def test_relative_error_bounds() -> None:
    assert ex.relative_error(ex.LEGACY) == legacy.RELATIVE_ERROR
    assert ex.relative_error(4) == pytest.approx((2 ** (1 / 16) - 1) / (2 ** (1 / 16) + 1))
    assert 0.02 < ex.relative_error(4) < 0.022 and ex.relative_error(5) < 0.011
    for bad in (-1, 9, 20):
        with pytest.raises(ValueError, match="scheme"):
            ex.relative_error(bad)


def _hist(values: np.ndarray, scheme: int) -> tuple[dict[int, int], int]:
    out: dict[int, int] = {}
    zero = 0
    for v in values.tolist():
        if v <= 0:
            zero += 1
            continue
        i = ex.bucket_index(v, scheme)
        out[i] = out.get(i, 0) + 1
    return out, zero


def _samples(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mix = np.concatenate([rng.lognormal(np.log(3e6), 0.6, n // 2), rng.exponential(2e5, n - n // 2) + 1])
    return np.rint(rng.permutation(mix)).astype(np.int64)


@pytest.mark.parametrize("scheme", [ex.LEGACY, 3, 4, 6])
def test_percentiles_within_the_schemes_bound_of_numpy(scheme: int) -> None:
    values = _samples(scheme, 200_000)
    counts, zero = _hist(values, scheme)
    for q in QUANTILES:
        exact = float(np.quantile(values, q, method="inverted_cdf" if q == 0 else "linear"))
        got = ex.quantile(counts, q, zero_count=zero, scheme=scheme)
        assert got is not None and abs(got - exact) / exact <= ex.relative_error(scheme) + 1e-12, (q, got, exact)


def test_a_window_mixing_schemes_is_within_the_larger_bound_and_never_rebucketed() -> None:
    old, new = _samples(1, 60_000), _samples(2, 140_000)
    by_scheme = ex.merge_by_scheme([(ex.LEGACY, _hist(old, ex.LEGACY)[0]), (4, _hist(new, 4)[0])])
    assert set(by_scheme) == {ex.LEGACY, 4}
    assert by_scheme[ex.LEGACY] == _hist(old, ex.LEGACY)[0], "legacy counts kept as they were"
    both = np.concatenate([old, new])
    bound = max(ex.relative_error(ex.LEGACY), ex.relative_error(4))
    for q in QUANTILES[1:]:
        exact = float(np.quantile(both, q))
        got = ex.quantile_of(by_scheme, q)
        assert got is not None and abs(got - exact) / exact <= bound + 1e-12, (q, got, exact)
    # One scheme alone reads exactly as that scheme's own quantile (the legacy one included).
    only_old = {ex.LEGACY: by_scheme[ex.LEGACY]}
    for q in QUANTILES:
        assert ex.quantile_of(only_old, q) == legacy.quantile(by_scheme[ex.LEGACY], q)


def test_zero_counts_and_empty_histograms() -> None:
    assert ex.quantile_of({}, 0.5) is None and ex.quantile_of({4: {}}, 0.5, zero_count=0) is None
    assert ex.quantile_of({4: {10: 1}}, 0.5, zero_count=3) == 0.0
    with pytest.raises(ValueError):
        ex.quantile_of({4: {1: 1}}, 1.5)


def test_downscale_is_exact_and_legacy_conversion_is_only_approximate() -> None:
    values = _samples(5, 20_000)
    fine, _ = _hist(values, 6)
    assert ex.downscale(fine, 6, 4) == _hist(values, 4)[0]
    with pytest.raises(ValueError):
        ex.downscale(fine, 4, 6)
    old, _ = _hist(values, ex.LEGACY)
    moved = ex.legacy_to_exponential(old, 4)
    assert sum(moved.values()) == len(values)
    for q in (0.5, 0.99):  # each value off by up to both bounds: approximate, as documented
        exact = float(np.quantile(values, q))
        got = ex.quantile(moved, q, scheme=4)
        assert got is not None and abs(got - exact) / exact <= ex.relative_error(0) + ex.relative_error(4) + 1e-3


def _random_sparse(rng: np.random.Generator) -> dict[int, int]:
    out: dict[int, int] = {}
    i = int(rng.integers(-40, 700))
    for _ in range(int(rng.integers(1, 60))):
        out[i] = int(rng.integers(1, 10**9))
        i += int(rng.choice([1, 1, 1, 2, 3, 17]))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_otlp_and_prometheus_round_trip_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scale = int(rng.integers(1, ex.MAX_SCALE + 1))
    counts = _random_sparse(rng)
    zero = int(rng.integers(0, 5))
    total_sum = float(rng.integers(1, 10**12))

    otlp = ex.to_otlp(counts, scheme=scale, zero_count=zero, sum_ns=total_sum)
    assert otlp.scale == scale and otlp.zero_count == zero and otlp.zero_threshold == 0.0
    assert otlp.offset == min(counts) and len(otlp.bucket_counts) == max(counts) - min(counts) + 1
    assert otlp.count == zero + sum(counts.values()) and otlp.sum == total_sum
    assert ex.from_otlp(otlp) == (scale, counts, zero)

    prom = ex.to_prometheus(counts, scheme=scale, zero_count=zero, sum_ns=total_sum)
    assert prom.schema == scale and prom.count == otlp.count and prom.zero_threshold == 0.0
    assert sum(length for _o, length in prom.positive_spans) == len(counts) == len(prom.positive_deltas)
    assert ex.from_prometheus(prom) == (scale, counts, zero)
    # Prometheus' own reading of spans and deltas: bucket j = (2**((j-1)/2**s), 2**(j/2**s)].
    absolute, index, run = [], 0, 0
    for n, (offset, length) in enumerate(prom.positive_spans):
        index = offset if n == 0 else index + offset
        for _ in range(length):
            absolute.append(index)
            index += 1
    for j, d in zip(absolute, prom.positive_deltas):
        run += d
        otel_i = ex.bucket_index(ex.bucket_value(j - 1, scale), scale)
        assert counts[otel_i] == run and otel_i == j - 1


def test_a_stored_value_lands_in_the_prometheus_bucket_that_holds_it() -> None:
    scale = 4
    for v in [1, 2, 3, 1000, 1024, 999_999, 10**6, 2**40 + 7]:
        i = ex.bucket_index(v, scale)
        (offset, length), = ex.to_prometheus({i: 1}, scheme=scale).positive_spans
        assert length == 1
        # Prometheus bucket `offset` at schema 4 is (2**((offset-1)/16), 2**(offset/16)]
        assert _in_otel_bucket(v, offset - 1, scale)


def test_prometheus_client_accepts_the_mapping() -> None:
    samples = pytest.importorskip("prometheus_client.samples")
    prom = ex.to_prometheus({100: 3, 101: 5, 105: 1}, scheme=4, zero_count=2, sum_ns=12345.0)
    nh = samples.NativeHistogram(
        count_value=float(prom.count), sum_value=prom.sum, schema=prom.schema, zero_threshold=prom.zero_threshold,
        zero_count=float(prom.zero_count), pos_spans=[samples.BucketSpan(o, n) for o, n in prom.positive_spans],
        pos_deltas=list(prom.positive_deltas),
    )
    assert nh.pos_spans == (samples.BucketSpan(101, 2), samples.BucketSpan(3, 1)) or list(nh.pos_spans) == [
        samples.BucketSpan(101, 2), samples.BucketSpan(3, 1)]
    assert list(nh.pos_deltas) == [3, 2, -4] and nh.count_value == 11


def test_legacy_histograms_have_no_exact_export() -> None:
    with pytest.raises(ValueError, match="legacy"):
        ex.to_otlp({5: 1}, scheme=ex.LEGACY)
    with pytest.raises(ValueError, match="legacy"):
        ex.to_prometheus({5: 1}, scheme=ex.LEGACY)
    with pytest.raises(ValueError, match="zero threshold"):
        ex.from_prometheus(ex.PrometheusNative(4, 1, 0.0, 1e-9, 1, (), ()))
