"""Latency: percentiles from the SDK's histograms, merged exactly, never averaged.

One computation serves every reader: histograms (raw rows, or minute and hour rollups where
rolled, see ``planning``) are summed bucket by bucket per operation, label set (or all label
sets) and time bucket across the devices (``_fetch``: the bucket counts of all rows at once in
numpy, ``_bucket_sums``), then read with the bucket scheme's quantile (bounded relative error). Counts are kept per bucket scheme (legacy base 1.04,
or an OTel exponential scale: ``proto.exponential``) and never added across schemes; a window
holding both is read by ``exponential.quantile_of``, each bucket by its own scheme, so its
percentiles stay within the larger of the two bounds and nothing is re-bucketed. ``latency_stats`` is one figure per operation over
a window (``fleetscope latency``, the Compare page); ``latency_series`` and
``group_latency_series`` are the same figures per time bucket (the Device chart, and groups
side by side); ``groups_latency`` gives the Compare page both from one read.

Throughput divides each series' calls by the time it was measured (the histograms' own
windows), per device and label set, then adds those rates up: a model that served for ten
minutes of an hour did not serve slowly, and two label sets measured side by side are two
streams of calls, not one measured twice as long.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, device_ids, floor_to
from fleetscope.collector.query.planning import comparison_step, groups_by_plan
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.schema import Device, latency_histograms
from fleetscope.proto import exponential


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
    # Throughput per name, not per install: a device reinstalled in the window (a new agent id)
    # served one stream of calls, measured over both installs' windows together.
    names = {i: n for i, n in session.execute(select(Device.id, Device.name).where(in_ids(Device.id, ids)))} if ids else {}
    return _stats(_fetch(session, ids, since_ns, until_ns, None, name, by_labels=by_labels, streams=names))


def latency_series(
    session: Session, ids: Sequence[int], lo: int, hi: int, step_s: int, *, by_labels: bool
) -> list[LatencySeries]:
    """Percentiles per ``step_s`` bucket, merged across the devices (and label sets unless ``by_labels``)."""
    return _series(_fetch(session, ids, lo, hi, step_s, by_labels=by_labels))


def latency_operations(
    *, session: Session, devices: Sequence[str], since_ns: int, until_ns: int
) -> list[str]:
    """Names of the operations these devices timed in the window, most-counted first."""
    return operations_of(session, list(device_ids(session, devices).values()), since_ns, until_ns)


def operations_of(session: Session, ids: Sequence[int], since_ns: int, until_ns: int) -> list[str]:
    """``latency_operations`` of these installs (device ids)."""
    counts: dict[str, int] = {}
    for (name, _labels, _b), e in _fetch(session, ids, since_ns, until_ns, None, by_labels=False).hist.items():
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
    step_s = step_s or comparison_step(until_ns - since_ns)
    lo = floor_to(since_ns, step_s * NS)
    out: dict[str, LatencySeries | None] = {}
    for group, names in groups.items():
        ids = list(device_ids(session, names).values())
        series = _series(_fetch(session, ids, lo, until_ns, step_s, operation, by_labels=False))
        out[group] = series[0] if series else None
    return out


def groups_latency(
    *,
    session: Session,
    groups: Mapping[str, Collection[int]],
    streams: Mapping[int, str],
    operation: str,
    since_ns: int,
    until_ns: int,
    step_s: int,
) -> dict[str, tuple[LatencyStats | None, LatencySeries | None]]:
    """Per group of device ids, the operation over exactly [since, until), all label sets
    together: its whole-window figures and its percentiles per ``step_s`` bucket (the first and
    last buckets hold only the part inside the window), or Nones when it was never called.

    One read serves every group, figures and series alike: the rows are read once for all the
    groups' devices, with the tiers a ``step_s`` bucket allows, merged per bucket, and each
    group's figures are its buckets merged (histograms add exactly, so this equals reading the
    whole window as one bucket). Reading them apart was two reads of the same rows per group:
    most of a comparison's time on PostgreSQL at 200 devices. Throughput is per
    ``streams[id]`` (a device's name), as in ``latency_stats``."""
    every_id = sorted({i for ids in groups.values() for i in ids})
    rows = _read_rows(session, every_id, since_ns, until_ns, step_s, operation)
    out: dict[str, tuple[LatencyStats | None, LatencySeries | None]] = {}
    for group, ids in groups.items():
        members = set(ids)
        merged = _merge_rows([r for r in rows if r[0] in members], step_s * NS, by_labels=False, streams=streams)
        stats = _stats(_whole_window(merged))
        series = _series(merged)
        out[group] = (stats[0] if stats and stats[0].count else None, series[0] if series else None)
    return out


# ------------------------------------------------------------------------------ reading


@dataclass
class _Merged:
    """What a read sums up: per (operation, label set or "{}" when merged, time bucket) the
    counts and the bucket counts per scheme, and per (operation, that label key, device, label
    set) the calls and measured time that throughput divides (``_stats``)."""

    # {(name, labels key, bucket_ns): [count, sum_ns, errors, zero_count, {scheme: {index: n}}]}
    hist: dict[tuple[str, str, int], list] = field(default_factory=dict)
    # {(name, labels key): {(device name or id, labels): [count, window_ns]}}
    measured: dict[tuple[str, str], dict[tuple[Any, str], list[int]]] = field(default_factory=dict)


def _fetch(
    session: Session,
    all_ids: Sequence[int],
    lo: int,
    hi: int,
    step_s: int | None,
    name: str | None = None,
    *,
    by_labels: bool = True,
    streams: Mapping[int, str] | None = None,
) -> _Merged:
    """Histograms starting in [lo, hi), summed per operation, label set (all together unless
    ``by_labels``) and ``step_s`` bucket (one bucket, 0, for the whole window when ``step_s`` is
    None), across the devices. Throughput is measured per device id, or per ``streams[id]``
    (its name) where given."""
    rows = _read_rows(session, all_ids, lo, hi, step_s, name)
    return _merge_rows(rows, step_s * NS if step_s else None, by_labels=by_labels, streams=streams or {})


def _read_rows(
    session: Session, all_ids: Sequence[int], lo: int, hi: int, step_s: int | None, name: str | None
) -> list[Any]:
    """The histogram rows (raw or rolled up, see ``planning``) that serve [lo, hi) in ``step_s`` buckets."""
    rows: list[Any] = []
    if all_ids and lo < hi:
        for ids, stretches in groups_by_plan(session, all_ids, lo, hi, step_s):
            for table_step, a, b in stretches:
                rows.extend(session.execute(_stretch_query(ids, table_step, a, b, name)).all())
    return rows


def _stretch_query(ids: Sequence[int], table_step: int, a: int, b: int, name: str | None) -> Any:
    """One stretch of a read plan: raw histograms (``table_step`` 0) or one rollup tier."""
    if table_step == 0:
        h = latency_histograms.c
        q = select(
            h.device_id, h.start_ns, h.name, h.labels, h.count, h.sum_ns, h.errors, h.zero_count,
            h.end_ns - h.start_ns, h.buckets, h.scheme,
        ).where(in_ids(h.device_id, ids), h.start_ns >= a, h.start_ns < b)
        return q.where(h.name == name) if name is not None else q
    r = latency_rollups.c
    q = select(
        r.device_id, r.bucket_ns, r.name, r.labels, r.count, r.sum_ns, r.errors, r.zero_count,
        r.window_ns, r.buckets, r.scheme,
    ).where(in_ids(r.device_id, ids), r.step_s == table_step, r.bucket_ns >= a, r.bucket_ns < b)
    return q.where(r.name == name) if name is not None else q


_SCHEME_SLOTS = exponential.MAX_SCALE + 1


def _merge_rows(
    rows: Sequence[Any], step_ns: int | None, *, by_labels: bool, streams: Mapping[int, str] | None = None
) -> _Merged:
    """Sum the rows' scalars per key in Python (a few adds a row) and their bucket counts in
    numpy (``_bucket_sums``): parsing each row's JSON into a dict and adding it key by key was
    most of a month's read (tens of thousands of rows, dozens of buckets each)."""
    out = _Merged()
    hist = out.hist
    measured: dict[tuple[str, str, Any, str], list[int]] = {}
    streams = streams or {}
    slots: list[int] = []  # per row: key number * _SCHEME_SLOTS + scheme
    texts: list[str] = []
    schemes: set[int] = set()
    for d, ts, n, labels, count, sum_ns, errors, zero, window, buckets, scheme in rows:
        lk = labels if by_labels else "{}"
        key = (n, lk, ts - ts % step_ns if step_ns else 0)
        e = hist.get(key)
        if e is None:
            e = hist[key] = [0, 0, 0, 0, {}, len(hist)]
        e[0] += count
        e[1] += sum_ns
        e[2] += errors
        e[3] += zero
        stream = (n, lk, streams.get(d, d), labels)
        m = measured.get(stream)
        if m is None:
            m = measured[stream] = [0, 0]
        m[0] += count
        m[1] += window if window > 0 else 0
        slots.append(e[5] * _SCHEME_SLOTS + scheme)
        texts.append(buckets)
        schemes.add(scheme)
    for scheme in schemes:
        exponential.check_scheme(scheme)  # a slot holds one of MAX_SCALE + 1 schemes
    for (n, lk, d, labels), m in measured.items():
        out.measured.setdefault((n, lk), {})[(d, labels)] = m
    by_key = list(hist.values())
    for e in by_key:
        del e[5]  # the key's number, for the slots
    for slot in set(slots):
        k, scheme = divmod(slot, _SCHEME_SLOTS)
        by_key[k][4].setdefault(scheme, {})  # a scheme's histograms with no counts still name it
    for slot, index, n_calls in _bucket_sums(texts, slots):
        k, scheme = divmod(slot, _SCHEME_SLOTS)
        by_key[k][4][scheme][index] = n_calls
    return out


def _bucket_sums(texts: Sequence[str], slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """(slot, bucket index, count) summed over the rows of each slot, sorted: the JSON bucket
    maps ({"index": count, ...}) of all rows parsed as one list of integers and summed with a
    sort and ``np.add.reduceat`` (exact int64). Anything that is not plain integer JSON
    (whitespace aside) goes through ``_bucket_sums_by_row``, the same sums one row at a time."""
    import numpy as np

    if not texts:
        return []
    entries = np.fromiter((t.count(":") for t in texts), dtype=np.int64, count=len(texts))
    total = int(entries.sum())
    if total == 0:
        return []
    blob = ",".join(t for t, n in zip(texts, entries.tolist()) if n).translate(_JSON_TO_CSV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a parse that stops early is caught by the size check
        try:
            flat = np.fromstring(blob, dtype=np.int64, sep=",")  # noqa: NPY201 - text mode is not deprecated
        except ValueError:
            flat = np.empty(0, dtype=np.int64)
    if flat.size != 2 * total:
        return _bucket_sums_by_row(texts, slots)
    index, counts = flat[0::2], flat[1::2]
    row_slot = np.repeat(np.asarray(slots, dtype=np.int64), entries)
    low = int(index.min())
    width = int(index.max()) - low + 1
    combined = row_slot * width + (index - low)
    order = np.argsort(combined, kind="stable")
    combined, counts = combined[order], counts[order]
    starts = np.flatnonzero(np.r_[True, combined[1:] != combined[:-1]])
    sums = np.add.reduceat(counts, starts)
    slot, offset = np.divmod(combined[starts], width)
    return list(zip(slot.tolist(), (offset + low).tolist(), sums.tolist()))


# '{"441":145, "443":128}' -> ',441,145,,443,128,' would not parse: braces, quotes and blanks
# go, the colon becomes a comma: '441,145,443,128'.
_JSON_TO_CSV = str.maketrans({"{": None, "}": None, '"': None, " ": None, "\n": None, ":": ","})


def _bucket_sums_by_row(texts: Sequence[str], slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """The reference for ``_bucket_sums``: each row's JSON parsed and added key by key."""
    acc: dict[tuple[int, int], int] = {}
    for text, slot in zip(texts, slots):
        for i, c in json.loads(text).items():
            acc[(slot, int(i))] = acc.get((slot, int(i)), 0) + int(c)
    return sorted((s, i, c) for (s, i), c in acc.items())


# ------------------------------------------------------------------------------ merging


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _quantile_ms(by_scheme: Mapping[int, Mapping[int, int]], zero: int, p: float) -> float | None:
    return _ms(exponential.quantile_of(by_scheme, p, zero_count=zero))


def _series(merged: _Merged) -> list[LatencySeries]:
    """One series per operation (and label set, if the read kept them apart)."""
    per: dict[tuple[str, str], dict[int, list]] = {}
    for (name, labels, bucket), e in merged.hist.items():
        per.setdefault((name, labels), {})[bucket] = e
    out = []
    for (name, labels), buckets in sorted(per.items()):
        ts = sorted(buckets)
        out.append(
            LatencySeries(
                name=name,
                labels=json.loads(labels),
                ts_ns=ts,
                count=[buckets[t][0] for t in ts],
                errors=[buckets[t][2] for t in ts],
                p50_ms=[_quantile_ms(buckets[t][4], buckets[t][3], 0.50) for t in ts],
                p90_ms=[_quantile_ms(buckets[t][4], buckets[t][3], 0.90) for t in ts],
                p99_ms=[_quantile_ms(buckets[t][4], buckets[t][3], 0.99) for t in ts],
            )
        )
    return out


def _whole_window(merged: _Merged) -> _Merged:
    """``merged`` with each operation's (and label set's) time buckets added into one (0)."""
    out = _Merged(measured=merged.measured)
    for (name, labels, _bucket), (count, sum_ns, errors, zero, by_scheme) in merged.hist.items():
        e = out.hist.get((name, labels, 0))
        if e is None:
            e = out.hist[(name, labels, 0)] = [0, 0, 0, 0, {}]
        e[0] += count
        e[1] += sum_ns
        e[2] += errors
        e[3] += zero
        for scheme, counts in by_scheme.items():
            into = e[4].setdefault(scheme, {})
            for index, n in counts.items():
                into[index] = into.get(index, 0) + n
    return out


def _stats(merged: _Merged) -> list[LatencyStats]:
    """Each operation's (and label set's, if the read kept them apart) whole-window figures."""
    out = []
    for (name, labels, _b), (count, total_ns, errors, zero, buckets) in sorted(merged.hist.items()):
        measured = merged.measured[(name, labels)]
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
