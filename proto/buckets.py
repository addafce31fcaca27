"""The legacy latency bucket scheme (scheme 0 of ``fleetscope.proto.exponential``).

Today's SDK records on OpenTelemetry's exponential grid (``exponential.DEFAULT_SCHEME``); this
scheme is what agents from before the wire's ``scheme`` field send, and what histograms stored
before revision 0005 hold. They are read with it, unchanged.

It is part of the wire contract: a histogram's ``bucket_index`` only means something because
every party computes it the same way, and stored histograms from different devices and times
are merged by adding counts per index. Never change ``GAMMA`` within ``fleetscope.v1``.

Bucket ``i`` holds values ``v`` (nanoseconds, > 0) with ``GAMMA**(i-1) < v <= GAMMA**i``.
Reporting a bucket by the midpoint ``2*GAMMA**i/(GAMMA+1)`` bounds the relative error by
``(GAMMA-1)/(GAMMA+1)``: 1.96 % for ``GAMMA = 1.04`` (the DDSketch construction). Zero and
negative durations (a clock step) go to a separate zero count. One second is bucket 529, an
hour bucket 738: a few hundred indexes cover every latency worth timing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

GAMMA = 1.04
_LOG_GAMMA = math.log(GAMMA)
RELATIVE_ERROR = (GAMMA - 1) / (GAMMA + 1)


def bucket_index(value_ns: float) -> int:
    """The bucket a positive value falls in."""
    return math.ceil(math.log(value_ns) / _LOG_GAMMA)


def bucket_value(index: int) -> float:
    """The value (ns) that represents bucket ``index`` with the least relative error."""
    return 2.0 * GAMMA**index / (GAMMA + 1.0)


def merge(histograms: Iterable[Mapping[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in histograms:
        for i, c in h.items():
            out[i] = out.get(i, 0) + c
    return out


def quantile(buckets: Mapping[int, int], q: float, *, zero_count: int = 0) -> float | None:
    """The ``q`` quantile (0..1) in ns from summed bucket counts; None when there is no data."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    total = zero_count + sum(buckets.values())
    if total == 0:
        return None
    # The rank of the q-quantile among `total` sorted values (nearest-rank, 0-based).
    rank = q * (total - 1)
    if rank < zero_count:
        return 0.0
    seen = zero_count
    for index in sorted(buckets):
        seen += buckets[index]
        if seen > rank:
            return bucket_value(index)
    return bucket_value(max(buckets))
