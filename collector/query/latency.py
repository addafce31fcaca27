"""Latency: percentiles from the SDK's histograms, merged exactly, never averaged.

One computation serves every reader: histograms (raw rows, or minute and hour rollups where
rolled, see ``planning``) are summed bucket by bucket per operation, label set, device and time
bucket (``_fetch``), then merged across whatever the question spans and read with the bucket
scheme's quantile (bounded relative error). Counts are kept per bucket scheme (legacy base 1.04,
or an OTel exponential scale: ``proto.exponential``) and never added across schemes; a window
holding both is read by ``exponential.quantile_of``, each bucket by its own scheme, so its
percentiles stay within the larger of the two bounds and nothing is re-bucketed. ``latency_stats`` is one figure per operation over
a window (``fleetscope latency``, the Compare page); ``latency_series`` and
``group_latency_series`` are the same figures per time bucket (the Device and Compare charts).

Throughput divides each series' calls by the time it was measured (the histograms' own
windows), per device and label set, then adds those rates up: a model that served for ten
minutes of an hour did not serve slowly, and two label sets measured side by side are two
streams of calls, not one measured twice as long.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, device_ids, floor_to
from fleetscope.collector.query.planning import groups_by_plan, resolution_for
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.schema import latency_histograms
from fleetscope.proto import exponential

# {(device_id, name, labels_json, bucket_ns): [count, sum_ns, errors, zero_count, window_ns, {scheme: {bucket: n}}]}
Histograms = dict[tuple[int, str, str, int], list]


@dataclass(frozen=True)
class LatencySeries:
    name: str
    labels: dict[str, str]
    ts_ns: list[int]
    count: list[int]
    errors: list[int]
    p50_ms: list[float | None]
    p90_ms: list[float | None]
    p99_ms: list[float | None]


@dataclass(frozen=True)
class LatencyStats:
    """One operation's merged histogram over a window (per label set, or all label sets together)."""

    name: str
    labels: dict[str, str]  # {} when label sets were merged
    count: int
    errors: int
    window_s: float  # time the operation was measured: the sum of its histograms' windows
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    qps: float | None  # calls per measured second, per device and label set, summed: the total throughput


def latency_stats(
    *,
    session: Session,
    devices: Sequence[str],
    since_ns: int,
    until_ns: int,
    name: str | None = None,
    by_labels: bool = True,
) -> list[LatencyStats]:
    """Per operation (``name`` for one) and, with ``by_labels``, per label set: the devices'
    histograms that start in [since, until), merged; sorted by operation, then labels."""
    ids = list(device_ids(session, devices).values())
    return _stats(_fetch(session, ids, since_ns, until_ns, None, name), by_labels=by_labels)


def latency_series(
    session: Session, ids: Sequence[int], lo: int, hi: int, step_s: int, *, by_labels: bool
) -> list[LatencySeries]:
    """Percentiles per ``step_s`` bucket, merged across the devices (and label sets unless ``by_labels``)."""
    return _series(_fetch(session, ids, lo, hi, step_s), by_labels=by_labels)


def latency_operations(
    *, session: Session, devices: Sequence[str], since_ns: int, until_ns: int
) -> list[str]:
    """Names of the operations these devices timed in the window, most-counted first."""
    ids = list(device_ids(session, devices).values())
    counts: dict[str, int] = {}
    for (_d, name, _labels, _b), e in _fetch(session, ids, since_ns, until_ns, None).items():
        counts[name] = counts.get(name, 0) + e[0]
    return sorted(counts, key=lambda n: (-counts[n], n))


def group_latency_series(
    *,
    session: Session,
    groups: Mapping[str, Sequence[str]],
    operation: str,
    since_ns: int,
    until_ns: int,
    step_s: int | None = None,
) -> dict[str, LatencySeries | None]:
    """Per group, the operation's percentiles over time from histograms merged across its devices."""
    step_s = step_s or resolution_for(until_ns - since_ns, max_points=300)
    lo = floor_to(since_ns, step_s * NS)
    out: dict[str, LatencySeries | None] = {}
    for group, names in groups.items():
        ids = list(device_ids(session, names).values())
        series = _series(_fetch(session, ids, lo, until_ns, step_s, operation), by_labels=False)
        out[group] = series[0] if series else None
    return out


# ------------------------------------------------------------------------------ reading


def _fetch(
    session: Session, all_ids: Sequence[int], lo: int, hi: int, step_s: int | None, name: str | None = None
) -> Histograms:
    """Histograms starting in [lo, hi), summed per device, operation, labels and ``step_s`` bucket
    (one bucket, 0, for the whole window when ``step_s`` is None)."""
    acc: Histograms = {}
    if not all_ids or lo >= hi:
        return acc
    step_ns = step_s * NS if step_s else None
    for ids, stretches in groups_by_plan(session, all_ids, lo, hi, step_s):
        for table_step, a, b in stretches:
            if table_step == 0:
                h = latency_histograms.c
                q = select(
                    h.device_id,
                    h.start_ns,
                    h.name,
                    h.labels,
                    h.count,
                    h.sum_ns,
                    h.errors,
                    h.zero_count,
                    h.end_ns - h.start_ns,
                    h.buckets,
                    h.scheme,
                ).where(h.device_id.in_(ids), h.start_ns >= a, h.start_ns < b)
                if name is not None:
                    q = q.where(h.name == name)
            else:
                r = latency_rollups.c
                q = select(
                    r.device_id,
                    r.bucket_ns,
                    r.name,
                    r.labels,
                    r.count,
                    r.sum_ns,
                    r.errors,
                    r.zero_count,
                    r.window_ns,
                    r.buckets,
                    r.scheme,
                ).where(r.device_id.in_(ids), r.step_s == table_step, r.bucket_ns >= a, r.bucket_ns < b)
                if name is not None:
                    q = q.where(r.name == name)
            for d, ts, n, labels, count, sum_ns, errors, zero, window, buckets, scheme in session.execute(q):
                bucket = ts - ts % step_ns if step_ns else 0
                e = acc.setdefault((d, n, labels, bucket), [0, 0, 0, 0, 0, {}])
                e[0] += count
                e[1] += sum_ns
                e[2] += errors
                e[3] += zero
                e[4] += max(0, window)
                exponential.add(e[5], scheme, {int(k): v for k, v in json.loads(buckets).items()})
    return acc


# ------------------------------------------------------------------------------ merging


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _quantile_ms(by_scheme: Mapping[int, Mapping[int, int]], zero: int, p: float) -> float | None:
    return _ms(exponential.quantile_of(by_scheme, p, zero_count=zero))


def _merge_buckets(into: exponential.ByScheme, by_scheme: Mapping[int, Mapping[int, int]]) -> None:
    for scheme, counts in by_scheme.items():
        exponential.add(into, scheme, counts)


def _series(acc: Histograms, *, by_labels: bool) -> list[LatencySeries]:
    """Merge across devices (and labels unless ``by_labels``) into one series per operation."""
    merged: dict[tuple[str, str], dict[int, list]] = {}
    for (_d, name, labels, bucket), e in acc.items():
        per = merged.setdefault((name, labels if by_labels else "{}"), {})
        m = per.setdefault(bucket, [0, 0, 0, {}])
        m[0] += e[0]
        m[1] += e[2]
        m[2] += e[3]
        _merge_buckets(m[3], e[5])
    out = []
    for (name, labels), per in sorted(merged.items()):
        ts = sorted(per)
        out.append(
            LatencySeries(
                name=name,
                labels=json.loads(labels),
                ts_ns=ts,
                count=[per[t][0] for t in ts],
                errors=[per[t][1] for t in ts],
                p50_ms=[_quantile_ms(per[t][3], per[t][2], 0.50) for t in ts],
                p90_ms=[_quantile_ms(per[t][3], per[t][2], 0.90) for t in ts],
                p99_ms=[_quantile_ms(per[t][3], per[t][2], 0.99) for t in ts],
            )
        )
    return out


def _stats(acc: Histograms, *, by_labels: bool) -> list[LatencyStats]:
    """Merge each operation's (and label set's, with ``by_labels``) histograms over the whole window."""
    merged: dict[tuple[str, str], list] = {}
    for (d, name, labels, _b), e in acc.items():
        # count, sum_ns, errors, zero, buckets, {(device, labels): [count, window_ns]}
        m = merged.setdefault((name, labels if by_labels else "{}"), [0, 0, 0, 0, {}, {}])
        m[0] += e[0]
        m[1] += e[1]
        m[2] += e[2]
        m[3] += e[3]
        _merge_buckets(m[4], e[5])
        measured = m[5].setdefault((d, labels), [0, 0])
        measured[0] += e[0]
        measured[1] += e[4]
    out = []
    for (name, labels), (count, total_ns, errors, zero, buckets, measured) in sorted(merged.items()):
        out.append(
            LatencyStats(
                name=name,
                labels=json.loads(labels),
                count=count,
                errors=errors,
                window_s=sum(w for _c, w in measured.values()) / NS,
                mean_ms=total_ns / count / 1e6 if count else None,
                p50_ms=_quantile_ms(buckets, zero, 0.50),
                p90_ms=_quantile_ms(buckets, zero, 0.90),
                p99_ms=_quantile_ms(buckets, zero, 0.99),
                p999_ms=_quantile_ms(buckets, zero, 0.999),
                qps=sum(c / (w / NS) for c, w in measured.values() if w > 0) or None,
            )
        )
    return out
