"""A mergeable latency histogram over the shared bucket schemes (``fleetscope.proto.exponential``).

The SDK, the agent and the collector must put a value in the same bucket, so the index comes
from the same formula with the same constant; ``fast_bucket_index`` only saves the call. The SDK
records on OpenTelemetry's exponential grid at ``SCHEME`` (scale 4); a histogram read from the
wire keeps the scheme it was sent with (0 = the legacy base-1.04 scheme).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fleetscope.proto import exponential
from fleetscope.proto.v1 import telemetry_pb2 as pb

SCHEME = exponential.DEFAULT_SCHEME
# Computed exactly as fleetscope.proto.exponential computes its own, so the floats are identical.
INDEX_FACTOR = 1 << SCHEME


def fast_bucket_index(value_ns: float, _log2=math.log2, _ceil=math.ceil, _k=INDEX_FACTOR) -> int:
    """``exponential.bucket_index(v, SCHEME)`` for a positive value, globals bound for the hot path."""
    return _ceil(_log2(value_ns) * _k) - 1


class Histogram:
    """Counts per bucket, plus the totals a LatencyHistogram carries. Not thread-safe by itself:
    the SDK gives each thread its own and merges them when it reports."""

    __slots__ = ("buckets", "zero_count", "sum_ns", "errors", "scheme")

    def __init__(self) -> None:
        self.scheme = SCHEME  # what the indexes of ``buckets`` mean (``from_proto`` keeps the sender's)
        self.buckets: dict[int, int] = {}
        self.zero_count = 0  # durations <= 0 ns (a clock step, a too-coarse timer)
        self.sum_ns = 0
        self.errors = 0

    @property
    def count(self) -> int:
        return self.zero_count + sum(self.buckets.values())

    def record(self, value_ns: int | float, error: bool = False) -> None:
        if value_ns > 0:
            i = fast_bucket_index(value_ns) if self.scheme == SCHEME else exponential.bucket_index(value_ns, self.scheme)
            self.buckets[i] = self.buckets.get(i, 0) + 1
            self.sum_ns += int(value_ns)
        else:
            self.zero_count += 1
        if error:
            self.errors += 1

    def record_many(self, values_ns: object) -> None:
        """Record an iterable of durations (a benchmark's or a test's bulk load)."""
        for v in values_ns:  # type: ignore[attr-defined]
            self.record(v)

    def merge(self, other: Histogram) -> Histogram:
        if other.scheme != self.scheme:
            raise ValueError(f"cannot merge a scheme-{other.scheme} histogram into a scheme-{self.scheme} one")
        for i, c in other.buckets.items():
            self.buckets[i] = self.buckets.get(i, 0) + c
        self.zero_count += other.zero_count
        self.sum_ns += other.sum_ns
        self.errors += other.errors
        return self

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) in ns, within ``exponential.relative_error(scheme)``; None when empty."""
        return exponential.quantile(self.buckets, q, zero_count=self.zero_count, scheme=self.scheme)

    def to_proto(
        self, name: str, labels: Mapping[str, str], start_ns: int, end_ns: int
    ) -> pb.LatencyHistogram:
        indexes = sorted(self.buckets)
        return pb.LatencyHistogram(
            name=name,
            labels=dict(labels),
            start_ns=start_ns,
            end_ns=end_ns,
            count=self.count,
            sum_ns=max(self.sum_ns, 0),
            errors=self.errors,
            bucket_index=indexes,
            bucket_count=[self.buckets[i] for i in indexes],
            zero_count=self.zero_count,
            scheme=self.scheme,
        )

    @classmethod
    def from_proto(cls, msg: pb.LatencyHistogram) -> Histogram:
        h = cls()
        h.scheme = exponential.check_scheme(msg.scheme)
        h.buckets = dict(zip(msg.bucket_index, msg.bucket_count))
        h.zero_count = msg.zero_count
        h.sum_ns = msg.sum_ns
        h.errors = msg.errors
        return h


@dataclass(frozen=True)
class LatencySummary:
    """What one timed operation looked like since the process started (or over one report)."""

    name: str
    labels: Mapping[str, str]
    count: int
    errors: int
    sum_ns: int
    calls_per_s: float | None
    p50_ns: float | None
    p90_ns: float | None
    p99_ns: float | None
    p999_ns: float | None

    @property
    def mean_ns(self) -> float | None:
        return self.sum_ns / self.count if self.count else None

    @classmethod
    def of(
        cls, name: str, labels: Mapping[str, str], h: Histogram, elapsed_s: float | None
    ) -> LatencySummary:
        count = h.count
        return cls(
            name=name,
            labels=dict(labels),
            count=count,
            errors=h.errors,
            sum_ns=h.sum_ns,
            calls_per_s=(count / elapsed_s) if elapsed_s and elapsed_s > 0 else None,
            p50_ns=h.quantile(0.5),
            p90_ns=h.quantile(0.9),
            p99_ns=h.quantile(0.99),
            p999_ns=h.quantile(0.999),
        )
