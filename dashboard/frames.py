"""Query results (frozen dataclasses) to pandas frames in display units, ready for charts.

Times become epoch milliseconds in a column ``t`` (what Vega-Lite's temporal scale reads,
shown in the viewer's time zone). Sizes become GiB, rates MiB/s, throttle counts the share of
each bucket spent throttled. A gap in the data (a device offline) becomes a row of NaN marked
``gap``, so a line breaks there instead of drawing a straight line across the outage; any other
missing value (a rate of a bucket that holds one sample) is a point the chart leaves out
(``charts.time_chart``), never a break.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from fleetscope.collector.query import AlertPeriod, DeviceSeries, IncidentView, LatencySeries
from fleetscope.dashboard import fmt

GIB = 1024**3
MIB = 1024**2
NS_PER_MS = 10**6


# The shortest silence drawn as a break in a line. Buckets of a few seconds over samples taken
# every second miss one now and then (a sample late by a fraction of a second on a busy host
# leaves its bucket empty), and a break at every such miss drew 1 s data as dashes.
GAP_MIN_MS = 10_000


def gap_after_ms(step_ms: int) -> float:
    """How far apart two buckets with data must be for the line between them to break: a whole
    missing bucket at minute steps and coarser, ``GAP_MIN_MS`` of silence at steps of seconds."""
    return max(1.5 * step_ms, step_ms + GAP_MIN_MS)


def _with_gaps(df: pd.DataFrame, step_ms: int, by: str | None) -> pd.DataFrame:
    """Insert a NaN row after each bucket that is followed by a gap (``gap_after_ms``)."""
    if df.empty:
        return df.assign(gap=pd.Series(dtype=bool))
    df = df.assign(gap=False)
    parts = []
    groups = df.groupby(by, sort=True) if by else [(None, df)]
    for key, g in groups:
        g = g.sort_values("t")
        gap = g["t"].diff().shift(-1) > gap_after_ms(step_ms)
        if gap.any():
            fill = g.loc[gap, ["t"]].copy()
            fill["t"] = fill["t"] + step_ms
            fill["gap"] = True
            if by:
                fill[by] = key[0] if isinstance(key, tuple) else key
            g = pd.concat([g, fill], ignore_index=True).sort_values("t")
        parts.append(g)
    return pd.concat(parts, ignore_index=True)


def _ms(ts_ns: pd.Series) -> pd.Series:
    # Float, not int64: the browser reads Arrow int64 as BigInt, which Vega's scales cannot place.
    return (ts_ns // NS_PER_MS).astype("float64")


def _rate(delta: pd.Series, span_ns: pd.Series) -> pd.Series:
    span_s = span_ns.where(span_ns > 0) / 1e9
    return delta / span_s / MIB


def gpu_frame(s: DeviceSeries) -> pd.DataFrame:
    c = s.gpu.columns
    if not c.get("ts_ns"):
        return pd.DataFrame(columns=["t", "gpu"])
    df = pd.DataFrame(c)
    totals = {g.gpu_index: g.memory_total_bytes for g in s.gpus}
    out = pd.DataFrame(
        {
            "t": _ms(df["ts_ns"]),
            "gpu": "GPU " + df["gpu_index"].astype(str),
            "util": df["util_avg"],
            "util_max": df["util_max"],
            "mem_gib": df["memory_used_avg"] / GIB,
            "mem_pct": 100 * df["memory_used_avg"] / df["gpu_index"].map(totals).astype(float),
            "temp": df["temp_avg"],
            "temp_max": df["temp_max"],
            "power": df["power_avg"],
            "power_max": df["power_max"],
            "sm_clock": df["sm_clock_avg"],
            "sm_clock_min": df["sm_clock_min"],
            "mem_clock": df["memory_clock_avg"],
            "thermal_share": df["throttle_thermal_n"] / df["n"].where(df["n"] > 0),
            "power_share": df["throttle_power_n"] / df["n"].where(df["n"] > 0),
        }
    )
    return _with_gaps(out, s.step_s * 1000, "gpu")


def host_frame(s: DeviceSeries) -> pd.DataFrame:
    c = s.host.columns
    if not c.get("ts_ns"):
        return pd.DataFrame(columns=["t"])
    df = pd.DataFrame(c)
    out = pd.DataFrame(
        {
            "t": _ms(df["ts_ns"]),
            "cpu": df["cpu_avg"],
            "cpu_max": df["cpu_max"],
            "load1": df["load1_avg"],
            "ram_gib": df["mem_used_avg"] / GIB,
            "ram_total_gib": df["mem_total_max"] / GIB,
            "swap_gib": df["swap_used_avg"] / GIB,
            "swap_total_gib": df["swap_total_max"] / GIB,
            "disk_read": _rate(df["disk_read_delta"], df["span_ns"]),
            "disk_write": _rate(df["disk_write_delta"], df["span_ns"]),
            "net_rx": _rate(df["net_rx_delta"], df["span_ns"]),
            "net_tx": _rate(df["net_tx_delta"], df["span_ns"]),
        }
    )
    return _with_gaps(out, s.step_s * 1000, None)


def long(df: pd.DataFrame, columns: dict[str, str], *, series: str = "series") -> pd.DataFrame:
    """Wide to long: {column: display name} become rows of (t, series, value), and ``gap`` (a
    break in the line) where the wide frame has one."""
    if df.empty:
        return pd.DataFrame(columns=["t", series, "value", "gap"])
    ids = ["t", "gap"] if "gap" in df.columns else ["t"]
    out = df[[*ids, *columns]].melt(id_vars=ids, var_name=series, value_name="value")
    out[series] = out[series].map(columns)
    return out


def throttle_bands(gpu: pd.DataFrame, step_s: int) -> pd.DataFrame:
    """Time spans where any GPU spent part of a bucket throttled, merged into runs, per reason."""
    rows = []
    if gpu.empty:
        return pd.DataFrame(columns=["start", "end", "reason", "color"])
    step_ms = step_s * 1000
    for col, reason, color in (
        ("thermal_share", "thermal", "#e45756"),
        ("power_share", "power cap", "#f58518"),
    ):
        hit = sorted(set(gpu.loc[gpu[col].fillna(0) > 0, "t"].astype("int64")))
        start: int | None = None  # of the band being built; prev is its last hit
        prev = 0
        for t in hit:
            if start is None:
                start = prev = t
            elif t - prev > step_ms:
                rows.append((float(start), float(prev + step_ms), reason, color))
                start = prev = t
            else:
                prev = t
        if start is not None:
            rows.append((float(start), float(prev + step_ms), reason, color))
    return pd.DataFrame(rows, columns=["start", "end", "reason", "color"])


def incident_markers(incidents: Iterable[IncidentView]) -> pd.DataFrame:
    rows = [
        (float(i.ts_ns // NS_PER_MS), i.kind, i.severity, i.title[:140], fmt.when(i.ts_ns), i.device, i.id)
        for i in incidents
    ]
    return pd.DataFrame(rows, columns=["t", "kind", "severity", "title", "when", "device", "id"])


def latency_frame(series: Sequence[LatencySeries]) -> pd.DataFrame:
    rows = []
    for s in series:
        name = s.name + (" " + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) if s.labels else "")
        for t, n, p50, p90, p99 in zip(s.ts_ns, s.count, s.p50_ms, s.p90_ms, s.p99_ms):
            rows.append((float(t // NS_PER_MS), name, n, p50, p90, p99))
    return pd.DataFrame(rows, columns=["t", "operation", "count", "p50", "p90", "p99"])


def alert_spans(periods: Iterable[AlertPeriod], since_ns: int, now_ns: int) -> pd.DataFrame:
    """Alert periods as shaded spans: from pending to resolved, or to ``now_ns`` while active,
    cut to [since, now] so that no span reaches outside the chart.

    ``opacity`` is what the ribbon along the top of a chart is drawn with: a pending alert (its
    condition holds, not yet for the rule's duration) lighter than a firing or resolved one.
    """
    rows = []
    for p in periods:
        start = max(p.start_ns, since_ns)
        end = min(p.end_ns if p.end_ns is not None else now_ns, now_ns)
        to = fmt.when(p.end_ns) if p.end_ns is not None else f"now ({p.state})"
        rows.append(
            (
                float(start // NS_PER_MS),
                float(max(end, start + NS_PER_MS) // NS_PER_MS),
                p.rule,
                p.state,
                p.severity,
                p.summary[:140],
                fmt.when(p.start_ns),
                to,
                0.45 if p.firing_ns is None else 0.9,
                p.alert_id,
            )
        )
    return pd.DataFrame(
        rows,
        columns=["start", "end", "rule", "state", "severity", "summary", "from", "to", "opacity", "id"],
    )
