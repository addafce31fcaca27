"""Latency bucket schemes, and the exact mapping of a histogram onto OTLP and Prometheus.

A stored or sent histogram carries a ``scheme`` (``LatencyHistogram.scheme`` on the wire, a
``scheme`` column in storage) that says what its bucket indexes mean:

* ``LEGACY`` (0, also an absent field, so agents from before the field are read as they wrote):
  the base-1.04 scheme of ``fleetscope.proto.buckets``, bucket ``i`` = ``(1.04**(i-1), 1.04**i]``.
* ``1..MAX_SCALE``: OpenTelemetry's exponential grid at that scale. ``base = 2**(2**-scale)``
  and bucket ``i`` holds ``(base**i, base**(i+1)]``, exactly as an OTLP ExponentialHistogram's
  positive bucket ``i`` does, which is Prometheus' native-histogram bucket ``i+1`` at
  ``schema = scale``. ``DEFAULT_SCHEME`` is scale 4: 16 buckets per power of two, a midpoint
  relative error of 2.17 % (the legacy scheme's is 1.96 %). Scales stop at 8, Prometheus' finest.

Values <= 0 (a clock step) go to the zero count in every scheme (zero threshold 0).

Counts of the same scheme merge by adding per index. Counts of different schemes are never
added into one map: ``quantile_of`` reads each bucket by its own scheme's representative value
(nearest-rank over the union), so a percentile over a window mixing schemes is within the larger
of the schemes' bounds and nothing is re-bucketed. ``legacy_to_exponential`` re-buckets legacy
counts by their representative value, an approximation for exports only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleetscope.proto import buckets as legacy

LEGACY = 0
DEFAULT_SCHEME = 4
MAX_SCALE = 8
SCHEMES = frozenset(range(0, MAX_SCALE + 1))

# {scheme: {index: count}}: histograms kept apart by scheme.
ByScheme = dict[int, dict[int, int]]


def check_scheme(scheme: int) -> int:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown latency bucket scheme {scheme} (0 = legacy base 1.04, 1..{MAX_SCALE} = OTel scale)")
    return scheme


def base(scale: int) -> float:
    return float(2.0 ** (2.0**-scale))


def relative_error(scheme: int) -> float:
    """The worst relative error of a bucket's representative value in ``scheme``."""
    if check_scheme(scheme) == LEGACY:
        return legacy.RELATIVE_ERROR
    b = base(scheme)
    return (b - 1.0) / (b + 1.0)


def bucket_index(value_ns: float, scheme: int = DEFAULT_SCHEME) -> int:
    """The bucket a positive value falls in. For an exponential scheme, OTel's index:
    ``ceil(log2(v) * 2**scale) - 1``, exact at powers of two (where log2 is exact)."""
    if scheme == LEGACY:
        return legacy.bucket_index(value_ns)
    return math.ceil(math.log2(value_ns) * (1 << check_scheme(scheme))) - 1


def lower_bound(index: int, scheme: int) -> float:
    if scheme == LEGACY:
        return float(legacy.GAMMA ** (index - 1))
    return float(2.0 ** (index / (1 << check_scheme(scheme))))


def upper_bound(index: int, scheme: int) -> float:
    if scheme == LEGACY:
        return float(legacy.GAMMA**index)
    return float(2.0 ** ((index + 1) / (1 << check_scheme(scheme))))


def bucket_value(index: int, scheme: int = DEFAULT_SCHEME) -> float:
    """The value (ns) representing bucket ``index`` with the least relative error: ``2*lo*hi/(lo+hi)``."""
    if scheme == LEGACY:
        return legacy.bucket_value(index)
    lo, hi = lower_bound(index, scheme), upper_bound(index, scheme)
    return 2.0 * lo * hi / (lo + hi)


def add(into: ByScheme, scheme: int, counts: Mapping[int, int]) -> ByScheme:
    """Add one histogram's counts to ``into`` under its own scheme (never across schemes)."""
    m = into.setdefault(scheme, {})
    for i, c in counts.items():
        m[i] = m.get(i, 0) + c
    return into


def merge_by_scheme(parts: Iterable[tuple[int, Mapping[int, int]]]) -> ByScheme:
    out: ByScheme = {}
    for scheme, counts in parts:
        add(out, scheme, counts)
    return out


def quantile_of(by_scheme: Mapping[int, Mapping[int, int]], q: float, *, zero_count: int = 0) -> float | None:
    """The ``q`` quantile (0..1) in ns over histograms of one or several schemes; None when empty.

    Nearest-rank over every bucket's representative value, each read by its own scheme: with one
    scheme this is that scheme's quantile exactly; over several, each value is off by at most its
    own scheme's bound, so the k-th smallest representative is within the largest bound of the
    true k-th smallest value."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    points: list[tuple[float, int]] = []
    for scheme, counts in by_scheme.items():
        points.extend((bucket_value(i, scheme), c) for i, c in counts.items() if c)
    total = zero_count + sum(c for _v, c in points)
    if total == 0:
        return None
    rank = q * (total - 1)
    if rank < zero_count:
        return 0.0
    points.sort()
    seen = zero_count
    for v, c in points:
        seen += c
        if seen > rank:
            return v
    return points[-1][0]


def quantile(counts: Mapping[int, int], q: float, *, zero_count: int = 0, scheme: int = DEFAULT_SCHEME) -> float | None:
    return quantile_of({scheme: counts}, q, zero_count=zero_count)


def downscale(counts: Mapping[int, int], from_scale: int, to_scale: int) -> dict[int, int]:
    """Exact: bucket ``i`` at scale ``s`` lies inside bucket ``i >> (s - t)`` at scale ``t <= s``."""
    if to_scale > from_scale:
        raise ValueError("an exponential histogram can only be downscaled exactly")
    shift = from_scale - to_scale
    out: dict[int, int] = {}
    for i, c in counts.items():
        j = i >> shift
        out[j] = out.get(j, 0) + c
    return out


def legacy_to_exponential(counts: Mapping[int, int], scale: int = DEFAULT_SCHEME) -> dict[int, int]:
    """Approximate: each legacy bucket's count moved whole to the bucket of its representative
    value. For exporting old data only; stored legacy histograms are never rewritten."""
    out: dict[int, int] = {}
    for i, c in counts.items():
        j = bucket_index(legacy.bucket_value(i), scale)
        out[j] = out.get(j, 0) + c
    return out


# ------------------------------------------------------------------------------ export


@dataclass(frozen=True)
class OtlpExponential:
    """The fields of an OTLP ``ExponentialHistogramDataPoint`` (unit ns; no negative buckets)."""

    scale: int
    count: int
    sum: float
    zero_count: int
    zero_threshold: float
    offset: int  # positive.offset
    bucket_counts: tuple[int, ...]  # positive.bucket_counts, dense from offset


@dataclass(frozen=True)
class PrometheusNative:
    """The fields of a Prometheus native histogram (integer counts; unit ns)."""

    schema: int
    count: int
    sum: float
    zero_threshold: float
    zero_count: int
    positive_spans: tuple[tuple[int, int], ...]  # (offset, length); the first offset absolute
    positive_deltas: tuple[int, ...]  # first count absolute, then each minus the previous


def _exponential_scheme(scheme: int) -> int:
    if check_scheme(scheme) == LEGACY:
        raise ValueError("a legacy (base 1.04) histogram has no exact exponential form: legacy_to_exponential approximates it")
    return scheme


def to_otlp(counts: Mapping[int, int], *, scheme: int, zero_count: int = 0, sum_ns: float = 0.0) -> OtlpExponential:
    scale = _exponential_scheme(scheme)
    used = sorted(i for i, c in counts.items() if c)
    offset = used[0] if used else 0
    dense = [0] * (used[-1] - offset + 1 if used else 0)
    for i in used:
        dense[i - offset] = counts[i]
    return OtlpExponential(
        scale=scale, count=zero_count + sum(dense), sum=float(sum_ns), zero_count=zero_count,
        zero_threshold=0.0, offset=offset, bucket_counts=tuple(dense),
    )


def from_otlp(point: OtlpExponential) -> tuple[int, dict[int, int], int]:
    """(scheme, counts, zero_count) of an OTLP point this module made (or any with scale 1..8)."""
    scheme = _exponential_scheme(point.scale)
    counts = {point.offset + k: c for k, c in enumerate(point.bucket_counts) if c}
    return scheme, counts, point.zero_count


def to_prometheus(counts: Mapping[int, int], *, scheme: int, zero_count: int = 0, sum_ns: float = 0.0) -> PrometheusNative:
    schema = _exponential_scheme(scheme)
    # OTel bucket i = (base**i, base**(i+1)] is Prometheus bucket i+1 = (base**i, base**(i+1)].
    used = sorted(i + 1 for i, c in counts.items() if c)
    spans: list[tuple[int, int]] = []
    deltas: list[int] = []
    prev_index: int | None = None
    prev_count = 0
    for idx in used:
        if prev_index is None:
            spans.append((idx, 1))
        elif idx == prev_index + 1:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((idx - prev_index - 1, 1))
        c = counts[idx - 1]
        deltas.append(c - prev_count)
        prev_index, prev_count = idx, c
    return PrometheusNative(
        schema=schema, count=zero_count + sum(counts.values()), sum=float(sum_ns), zero_threshold=0.0,
        zero_count=zero_count, positive_spans=tuple(spans), positive_deltas=tuple(deltas),
    )


def from_prometheus(h: PrometheusNative) -> tuple[int, dict[int, int], int]:
    """(scheme, counts, zero_count) of a native histogram with schema 1..8 and zero threshold 0."""
    scheme = _exponential_scheme(h.schema)
    if h.zero_threshold != 0.0:
        raise ValueError("a zero threshold above 0 would merge the smallest buckets into the zero bucket")
    counts: dict[int, int] = {}
    k = 0
    index = 0
    count = 0
    for n, (offset, length) in enumerate(h.positive_spans):
        index = offset if n == 0 else index + offset
        for _ in range(length):
            count += h.positive_deltas[k]
            k += 1
            if count:
                counts[index - 1] = count
            index += 1
    return scheme, counts, h.zero_count
