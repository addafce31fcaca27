"""Latency detectors: an SLO broken (``latency_slo``) and a regression against the operation's own
baseline (``latency_regression``), both from histograms merged bucket by bucket (never averaged
percentiles), like the query API's latency code: counts kept per bucket scheme (never added across
schemes) and read with ``exponential.quantile_of``.

Both judge *closed, aligned windows* (``[k*w, (k+1)*w)``): a window is read once, when its data
is complete, and the progress mark is its end. Where the rollup job keeps a device's minute
rollups, a window waits for them (``rollup_wait_s`` at most) and is read from a few minute rows
instead of one histogram per operation per second; otherwise (no rollups, windows under a
minute, or the rollups late) from the raw histograms once ``settle_s`` has passed.

The regression baseline is the previous ``regression_baseline_s`` of the same operation on the
same device: the closed windows' merged buckets, kept in memory (a ring of windows, so a window is
never read twice). Where the ring is missing (a first pass, a restart, a takeover) it is read from
the stored history at once, from the minute rollups where they exist (``_fill_baselines``, within
the pass's catch-up budget), so a regression is found from the first window, not after an hour.
Windows that were themselves regressed stay out of the baseline, so a slowdown does not become
its own baseline within the hour; the progress state keeps which ones they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from fleetscope.collector.jobs.detectors import hints as hint_math
from fleetscope.collector.jobs.detectors._common import (
    CATCHUP_CHUNK,
    NS,
    Changes,
    Open,
    PassContext,
    Refresh,
    Resolve,
)
from fleetscope.collector.jobs.detectors.settings import SloObjective
from fleetscope.collector.storage.incident_lifecycle import DerivedKey
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.schema import latency_histograms
from fleetscope.proto import exponential
from fleetscope.proto.vocabulary import (
    KIND_LATENCY_REGRESSION,
    KIND_LATENCY_SLO,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
)

MINUTE_NS = 60 * NS

# {(device_id, op): {window_start: [count, errors, zero, {scheme: {bucket: n}}]}}
Windows = dict[tuple[int, str], dict[int, list]]


def _ready_ns(ctx: PassContext, device_id: int, window_ns: int) -> int:
    """Until when this device's windows are complete and readable."""
    settled = ctx.now_ns - int(ctx.settings.settle_s * NS)
    rolled = ctx.rolled.get(device_id)
    if rolled is None or window_ns % MINUTE_NS:
        return settled
    return min(settled, max(rolled, settled - int(ctx.settings.rollup_wait_s * NS)))


def read_windows(
    ctx: PassContext, spans: Mapping[int, tuple[int, int]], window_ns: int, names: Iterable[str] | None = None
) -> Windows:
    """Histograms whose start falls in each device's [lo, hi), merged per device, operation (all
    label sets together) and window. Whole minutes below the device's minute-rollup mark come from
    ``latency_rollups``, the rest from ``latency_histograms`` (by operation name, so the
    (device, name, start) index serves it)."""
    plans: dict[tuple[int, int, int], list[int]] = {}
    for d, (lo, hi) in spans.items():
        if lo >= hi:
            continue
        split = lo
        rolled = ctx.rolled.get(d)
        if rolled is not None and window_ns % MINUTE_NS == 0:
            split = max(lo, min(hi, rolled - rolled % MINUTE_NS))
        plans.setdefault((lo, split, hi), []).append(d)
    acc: Windows = {}
    wanted = None if names is None else set(names)

    def add(d: int, ts: int, name: str, count: int, errors: int, zero: int, buckets: Any, scheme: int) -> None:
        if wanted is not None and name not in wanted:
            return
        w = acc.setdefault((d, name), {}).setdefault(ts - ts % window_ns, [0, 0, 0, {}])
        w[0] += count
        w[1] += errors
        w[2] += zero
        exponential.add(w[3], scheme, {int(k): v for k, v in json.loads(buckets).items()})

    for (lo, split, hi), ids in plans.items():
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            if split > lo:
                r = latency_rollups.c
                q = select(r.device_id, r.bucket_ns, r.name, r.count, r.errors, r.zero_count, r.buckets, r.scheme).where(
                    r.device_id.in_(chunk), r.step_s == 60, r.bucket_ns >= lo, r.bucket_ns < split
                )
                for row in ctx.conn.execute(q):
                    add(*row)
            if hi > split:
                ops = sorted(wanted) if wanted is not None else sorted({op for d in chunk for op in ctx.operations(d)})
                if not ops:
                    continue
                h = latency_histograms.c
                q = select(h.device_id, h.start_ns, h.name, h.count, h.errors, h.zero_count, h.buckets, h.scheme).where(
                    h.device_id.in_(chunk), h.name.in_(ops), h.start_ns >= split, h.start_ns < hi
                )
                for row in ctx.conn.execute(q):
                    add(*row)
    return acc


def _p99_ms(by_scheme: Mapping[int, Mapping[int, int]], zero: int) -> float | None:
    v = exponential.quantile_of(by_scheme, 0.99, zero_count=zero)
    return None if v is None else v / 1e6


def _copy(by_scheme: Mapping[int, Mapping[int, int]]) -> exponential.ByScheme:
    return {scheme: dict(counts) for scheme, counts in by_scheme.items()}


# ------------------------------------------------------------------------------------ SLO


def detect_slo(ctx: PassContext) -> Changes:
    ch = Changes(KIND_LATENCY_SLO)
    s = ctx.settings
    for obj in s.slos:
        _one_objective(ctx, ch, obj)
    return ch


def _one_objective(ctx: PassContext, ch: Changes, obj: SloObjective) -> None:
    s = ctx.settings
    w = int(obj.window_s * NS)
    lookback = max(w, int(s.lookback_s * NS))
    spans: dict[int, tuple[int, int]] = {}
    for d, dev in ctx.devices.items():
        if not obj.matches(dev.name, dev.labels):
            continue
        ready = _ready_ns(ctx, d, w)
        hi = ready - ready % w
        until, _ = ctx.mark(KIND_LATENCY_SLO, d, obj.key)
        lo = hi - w if until is None else max(until, hi - lookback)
        lo -= lo % w
        if lo < hi:
            spans[d] = (lo, hi)
    if not spans:
        return
    windows = read_windows(ctx, spans, w, [obj.operation])
    group = obj.name or obj.operation
    for d, (lo, hi) in spans.items():
        key = DerivedKey(d, KIND_LATENCY_SLO, None, group)
        cur = ctx.open.get(key)
        is_open = cur is not None
        started = cur.ts_ns if cur else None
        facts: dict[str, Any] = dict(cur.facts) if cur else {}
        per = windows.get((d, obj.operation), {})
        for start in range(lo, hi, w):
            count, errors, zero, buckets = per.get(start, (0, 0, 0, {}))
            p99 = _p99_ms(buckets, zero) if count else None
            end = start + w
            if count >= s.slo_min_count and p99 is not None and p99 > obj.p99_ms:
                worst = max(p99, float(facts.get("worst_p99_ms", 0.0)))
                facts = {
                    "operation": obj.operation, "objective_p99_ms": obj.p99_ms, "window_s": obj.window_s,
                    "p99_ms": round(p99, 3), "worst_p99_ms": round(worst, 3), "count": count, "errors": errors,
                    "window_start_ns": start, "window_end_ns": end,
                    "breached_windows": int(facts.get("breached_windows", 0)) + 1,
                }
                title = (f"p99 of {obj.operation} on {ctx.devices[d].name} is {p99:.1f} ms, above its "
                         f"{obj.p99_ms:g} ms objective ({obj.window_s:g} s windows)")
                severity = SEVERITY_ERROR if p99 > 2 * obj.p99_ms else SEVERITY_WARNING
                if not is_open:
                    hints = hint_math.hints_for(ctx.conn, d, end, ctx.settings, exclude=KIND_LATENCY_SLO)
                    ch.ops.append(Open(key, start, severity, title, dict(facts), last_seen_ns=end, hints=hints))
                    is_open, started = True, start
                else:
                    ch.ops.append(Refresh(cur.id if cur else None, end, facts=dict(facts), title=title,
                                          severity=severity, key=key))
            elif is_open and (count == 0 or (count >= s.slo_min_count and p99 is not None)):
                final = dict(facts)
                final.update({"resolved_p99_ms": None if p99 is None else round(p99, 3), "resolved_count": count,
                              "duration_s": round((start - (started or start)) / NS, 3)})
                ch.ops.append(Resolve(cur.id if cur else None, start, facts=final, key=key))
                is_open, cur, facts = False, None, {}
        ch.set_progress(d, obj.key, hi)


# ----------------------------------------------------------------------------- regression


def detect_regression(ctx: PassContext) -> Changes:
    ch = Changes(KIND_LATENCY_REGRESSION)
    s = ctx.settings
    w = int(s.regression_window_s * NS)
    base_ns = int(s.regression_baseline_s * NS)
    lookback = max(w, int(s.lookback_s * NS))
    memo = ctx.memo.setdefault(KIND_LATENCY_REGRESSION, {})
    rings: dict[int, dict[str, list]] = memo.setdefault("rings", {})
    first_lo: dict[int, int] = memo.setdefault("first_lo", {})
    spans: dict[int, tuple[int, int]] = {}
    states: dict[int, dict] = {}
    for d in ctx.devices:
        ready = _ready_ns(ctx, d, w)
        hi = ready - ready % w
        until, state = ctx.mark(KIND_LATENCY_REGRESSION, d)
        lo = first_lo.setdefault(d, hi - w) if until is None else max(until, hi - lookback)
        lo = max(lo, hi - lookback)
        lo -= lo % w
        if lo < hi:
            spans[d] = (lo, hi)
            states[d] = state
    _fill_baselines(ctx, spans, states, rings, w, base_ns)
    spans = {d: span for d, span in spans.items() if d in rings}  # the rest once their baseline is read
    if not spans:
        return ch
    windows = read_windows(ctx, spans, w)
    by_device: dict[int, dict[str, dict[int, list]]] = {}
    for (d, op), per in windows.items():
        by_device.setdefault(d, {})[op] = per
    for d, (lo, hi) in spans.items():
        ring = rings[d]
        ops = set(by_device.get(d, {})) | set(ring)
        for op in sorted(ops):
            _one_operation(ctx, ch, d, op, lo, hi, w, base_ns, by_device.get(d, {}).get(op, {}), ring)
        rings[d] = ring = {op: entries for op, entries in ring.items() if entries}
        first_lo.pop(d, None)
        # The marks keep only which windows were regressed (they stay out of the baseline); the
        # baseline itself is in memory, and read again from the stored history when it is gone.
        regressed = {op: [e[0] for e in entries if e[4]] for op, entries in ring.items()}
        ch.set_progress(d, "", hi, {"regressed": {op: v for op, v in regressed.items() if v}})
    return ch


def _fill_baselines(
    ctx: PassContext, spans: Mapping[int, tuple[int, int]], states: Mapping[int, dict], rings: dict[int, dict[str, list]],
    w: int, base_ns: int,
) -> None:
    """Read the baseline before each device's next window from the stored history (the minute
    rollups where they exist, raw histograms for the rest), for devices whose baseline is not in
    memory: a new database, a restart or a takeover judges its first window against the hour
    before, instead of waiting an hour. Read in chunks within the pass's catch-up budget;
    devices left over keep their marks and are judged in order next pass."""
    todo = sorted(d for d in spans if d not in rings)
    step = max(1, CATCHUP_CHUNK // 4)  # an hour of each device's history: smaller chunks
    for k in range(0, len(todo), step):
        if not ctx.take_catchup():
            return
        chunk = todo[k : k + step]
        history = {d: (spans[d][0] - base_ns, spans[d][0]) for d in chunk}
        got = read_windows(ctx, history, w)
        for d in chunk:
            rings[d] = {}
        for (d, op), per in got.items():
            regressed = set(states[d].get("regressed", {}).get(op, []))
            rings[d][op] = [[start, c - z, z, _copy(b), start in regressed]
                            for start, (c, _e, z, b) in sorted(per.items()) if c]


def _one_operation(
    ctx: PassContext, ch: Changes, d: int, op: str, lo: int, hi: int, w: int, base_ns: int,
    per: dict[int, list], ring: dict[str, list],
) -> None:
    s = ctx.settings
    entries: list = ring.setdefault(op, [])  # [start, count, zero, {scheme: {bucket: n}}, regressed]
    key = DerivedKey(d, KIND_LATENCY_REGRESSION, None, op)
    cur = ctx.open.get(key)
    is_open = cur is not None
    started = cur.ts_ns if cur else None
    for start in range(lo, hi, w):
        count, _errors, zero, buckets = per.get(start, (0, 0, 0, {}))
        base = [e for e in entries if start - base_ns <= e[0] < start and not e[4]]
        base_count = sum(e[1] + e[2] for e in base)
        regressed = False
        if count >= s.regression_min_count and base_count >= s.regression_min_count:
            merged: exponential.ByScheme = {}
            for e in base:
                for scheme, counts in e[3].items():
                    exponential.add(merged, int(scheme), {int(k): v for k, v in counts.items()})
            p99 = _p99_ms(buckets, zero)
            p99_base = _p99_ms(merged, sum(e[2] for e in base))
            if p99 is not None and p99_base:
                ratio = p99 / p99_base
                facts = {"operation": op, "p99_ms": round(p99, 3), "baseline_p99_ms": round(p99_base, 3),
                         "ratio": round(ratio, 2), "factor": s.regression_factor, "count": count,
                         "baseline_count": base_count, "window_s": s.regression_window_s,
                         "baseline_s": s.regression_baseline_s, "window_start_ns": start, "window_end_ns": start + w}
                title = (f"p99 of {op} on {ctx.devices[d].name} is {p99:.1f} ms, {ratio:.1f}x its baseline "
                         f"of {p99_base:.1f} ms")
                if ratio > s.regression_factor:
                    regressed = True
                    severity = SEVERITY_ERROR if ratio > 2 * s.regression_factor else SEVERITY_WARNING
                    if not is_open:
                        hints = hint_math.hints_for(ctx.conn, d, start + w, s, exclude=KIND_LATENCY_REGRESSION)
                        ch.ops.append(Open(key, start, severity, title, facts, last_seen_ns=start + w, hints=hints))
                        is_open, started = True, start
                    else:
                        ch.ops.append(Refresh(cur.id if cur else None, start + w, facts=facts, title=title,
                                              severity=severity, key=key))
                elif is_open:
                    facts["duration_s"] = round((start - (started or start)) / NS, 3)
                    ch.ops.append(Resolve(cur.id if cur else None, start, facts=facts, key=key))
                    is_open, cur = False, None
        elif is_open and count == 0:
            ch.ops.append(Resolve(cur.id if cur else None, start, key=key,
                                  facts={"operation": op, "resolved": "no calls in the window"}))
            is_open, cur = False, None
        if count:
            entries.append([start, count - zero, zero, _copy(buckets), regressed])
        # keep what the next windows' baselines need
        entries[:] = [e for e in entries if e[0] >= start + w - base_ns]
