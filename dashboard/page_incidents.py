"""Incidents: every OOM, Xid, TensorRT error, latency and other incident, filterable, with a
detail view that explains one: its facts, what to try, the device's samples around it and the
log lines it came with.

The view is in the URL (``?incident=123&range=7d&kind=cuda_oom``) so a link in a chat opens
the same incident for a colleague.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fleetscope.collector.query import IncidentContext, IncidentView, labels_match
from fleetscope.dashboard import charts, data, fmt, frames, hints, nav, params, timerange
from fleetscope.proto.vocabulary import (
    INCIDENT_RESOLVED,
    SEVERITIES,
    SEVERITY_CRITICAL,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
)

SEVERITY_ICON = {
    SEVERITY_CRITICAL: ":red[:material/dangerous:]",
    SEVERITY_ERROR: ":red[:material/error:]",
    SEVERITY_WARNING: ":orange[:material/warning:]",
    SEVERITY_INFO: ":blue[:material/info:]",
}
BAR_STEPS_S = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400)
SKIP_FACTS = {"message", "line_prefix", "has_header", "timestamp_style"}  # shown elsewhere, or noise
# What explains an incident first; the rest follows alphabetically.
FIRST_FACTS = (
    "requested_bytes",
    "free_bytes",
    "total_capacity_bytes",
    "reserved_unallocated_bytes",
    "allocated_by_pytorch_bytes",
    "batch_size",
    "device",
    "xid",
    "xid_name",
    "meaning",
    "action",
    "needs_gpu_reset",
    "needs_reboot",
    "throughput_qps",
    "latency_p99_ms",
    "latency_mean_ms",
    "gpu_compute_mean_ms",
    "precision",
    "exception_type",
    "process_name",
    "pid",
)


def _bar_step(span_s: float) -> int:
    return next((s for s in BAR_STEPS_S if span_s / s <= 80), BAR_STEPS_S[-1])


def _filters(now_ns: int) -> tuple[timerange.TimeRange, list[str], list[str], tuple[str, ...] | None, str]:
    kinds = data.incident_kinds(data.url())
    devices = data.devices_to_pick(data.url(), now_ns).devices
    names = [d.name for d in devices]
    labels = sorted({f"{k}={v}" for d in devices for k, v in d.labels.items()})
    params.init_from_url("inc_kinds", "kind", kinds)
    params.init_from_url("inc_devices", "device", names)
    params.init_from_url("inc_sev", "severity", list(SEVERITIES))
    c = st.columns([1.6, 2, 1.6, 2, 2, 2])
    with c[0]:
        tr = timerange.picker("inc_range", default="7d")
    picked_kinds = c[1].multiselect("Kind", kinds, key="inc_kinds", placeholder="all kinds")
    picked_sev = c[2].multiselect("Severity", list(SEVERITIES), key="inc_sev", placeholder="all")
    picked_devices = c[3].multiselect("Device", names, key="inc_devices", placeholder="all devices")
    picked_labels = c[4].multiselect("Labels", labels, key="inc_labels", placeholder="site, fleet…")
    text = c[5].text_input("Search", key="inc_text", placeholder="text in title or excerpt")
    params.set_param("kind", picked_kinds)
    params.set_param("device", picked_devices)
    params.set_param("severity", picked_sev)
    scope: tuple[str, ...] | None = None
    if picked_devices or picked_labels:
        chosen = set(picked_devices) if picked_devices else set(names)
        scope = tuple(d.name for d in devices if d.name in chosen and labels_match(d.labels, picked_labels))
    return tr, picked_kinds, picked_sev, scope, text.strip()


def _chart(tr: timerange.TimeRange, kinds: list[str], sev: list[str], scope: tuple[str, ...] | None) -> None:
    step = _bar_step(tr.span_s)
    counts = data.incident_counts(data.url(), tr.since_ns, tr.until_ns, step, tuple(kinds), scope, tuple(sev))
    if not counts:
        return
    df = pd.DataFrame(
        [
            (float(c.bucket_ns // 10**6), float((c.bucket_ns + step * 10**9) // 10**6), c.kind, c.count)
            for c in counts
        ],
        columns=["t", "end", "kind", "count"],
    )
    # The axis spans whole buckets: the current one (today, on a week) is a full-width bar, not a
    # sliver cut at "now".
    step_ms = step * 1000
    domain = (tr.since_ns // 10**6 // step_ms * step_ms, -(-(tr.until_ns // 10**6) // step_ms) * step_ms)
    charts.show(
        charts.count_bars(df, domain=domain, title=f"Incidents per {fmt.duration(step)}"), key="c_counts"
    )


def _table(
    tr: timerange.TimeRange,
    kinds: list[str],
    sev: list[str],
    scope: tuple[str, ...] | None,
    text: str,
    now_ns: int,
) -> int | None:
    found = data.incidents(data.url(), tr.since_ns, tr.until_ns, tuple(kinds), scope, tuple(sev), text)
    if not found:
        if scope == ():
            st.info("No device matches these labels.")
        else:
            st.info(
                "No incidents match these filters in this range. Incidents come from the agents' log classifiers "
                "(OOMs, Xids, TensorRT) and from programs using the SDK."
            )
        return None
    df = pd.DataFrame(
        [
            {
                "When": fmt.when(i.ts_ns),
                "Ago": fmt.ago(i.ts_ns, now_ns),
                "Device": i.device,
                "Kind": i.kind,
                "Severity": [i.severity],
                "State": [i.state],
                "Count": i.count,
                "Last seen": fmt.ago(i.last_seen_ns or i.ts_ns, now_ns),
                "Title": i.title,
                "id": i.id,
            }
            for i in found
        ]
    )
    severity = st.column_config.MultiselectColumn(
        options=list(fmt.SEVERITY_COLORS), color=list(fmt.SEVERITY_COLORS.values())
    )
    picked = st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        on_select="rerun",
        selection_mode="single-row",
        column_order=["When", "Ago", "Device", "Kind", "Severity", "State", "Count", "Last seen", "Title"],
        key="inc_table",
        column_config={
            "Severity": severity,
            "State": st.column_config.MultiselectColumn(
                options=list(fmt.INCIDENT_STATE_COLORS),
                color=list(fmt.INCIDENT_STATE_COLORS.values()),
                width=80,
                help="open while its condition holds (or until a quiet period passes), then resolved",
            ),
            "Count": st.column_config.NumberColumn(format="%d", width=60, help="occurrences grouped in it"),
        },
        height=min(38 + 35 * len(df), 420),
    )
    st.caption(
        f"{len(found)} incidents{' (newest 500)' if len(found) >= 500 else ''} · select one for its details"
    )
    rows = picked.selection.rows if picked else []
    return int(df.iloc[rows[0]]["id"]) if rows else None


def _facts_table(facts: dict) -> pd.DataFrame:
    order = {k: i for i, k in enumerate(FIRST_FACTS)}
    keys = sorted(facts, key=lambda k: (order.get(k, len(order)), k))
    rows = [
        {"Fact": fmt.fact_label(k), "Value": fmt.fact(k, facts[k]), "Key": k}
        for k in keys
        if k not in SKIP_FACTS and facts[k] is not None and facts[k] != ""
    ]
    return pd.DataFrame(rows, columns=["Fact", "Value", "Key"])


def _context_charts(ctx: IncidentContext) -> None:
    s = ctx.series
    if s is None:  # read without its series: nothing to chart
        return
    gpu, host = frames.gpu_frame(s), frames.host_frame(s)
    markers = frames.incident_markers(
        [ctx.incident, *[i for i in ctx.nearby if s.since_ns <= i.ts_ns < s.until_ns]]
    )
    domain = (s.since_ns // 10**6, s.until_ns // 10**6)
    if gpu.empty and host.empty:
        st.info("No samples were stored for this device in the two minutes around the incident.")
        return
    specs = []
    if not gpu.empty:
        g = gpu.rename(columns={"gpu": "series"})
        specs += [
            charts.time_chart(
                g, y="util", title="GPU utilisation", unit="%", domain=domain, markers=markers, height=170
            ),
            charts.time_chart(
                g,
                y="mem_gib",
                title="GPU memory used",
                unit="GiB",
                domain=domain,
                markers=markers,
                height=170,
                number_format=".2f",
            ),
            charts.time_chart(
                g, y="temp", title="GPU temperature", unit="°C", domain=domain, markers=markers, height=170
            ),
            charts.time_chart(
                g, y="power", title="GPU power", unit="W", domain=domain, markers=markers, height=170
            ),
        ]
    if not host.empty:
        specs += [
            charts.time_chart(
                frames.long(host, {"cpu": "CPU"}),
                title="CPU",
                unit="%",
                domain=domain,
                markers=markers,
                height=170,
                y_domain=(0, 100),
            ),
            charts.time_chart(
                frames.long(host, {"ram_gib": "RAM", "swap_gib": "swap"}),
                title="RAM and swap",
                unit="GiB",
                domain=domain,
                markers=markers,
                height=170,
                number_format=".2f",
            ),
        ]
    cols = st.columns(3)
    for i, spec in enumerate(specs):
        with cols[i % 3]:
            charts.show(spec, key=f"c_ctx_{i}")


def _lifecycle(inc: IncidentView, now_ns: int) -> str:
    """'open · 3 occurrences · last 2 min ago' / 'resolved after 12 min · 1 occurrence'."""
    times = "1 occurrence" if inc.count == 1 else f"{inc.count} occurrences"
    last = inc.last_seen_ns or inc.ts_ns
    if inc.state == INCIDENT_RESOLVED:
        ended = inc.ended_ns or last
        return f"resolved {fmt.when(ended)}, after {fmt.duration((ended - inc.ts_ns) / 10**9)} · {times}"
    return f"{inc.state} · {times} · last seen {fmt.ago(last, now_ns)}"


def detail(incident_id: int, now_ns: int) -> None:
    ctx = data.incident_detail(data.url(), incident_id)
    if ctx is None:
        st.warning(
            f"There is no incident #{incident_id} in this database (the link may come from another one)."
        )
        return
    inc = ctx.incident
    st.divider()
    st.subheader(f"{SEVERITY_ICON.get(inc.severity, '')} {inc.title}")
    st.markdown(
        f"**{inc.kind}** · {inc.severity} · **{inc.device}** · {fmt.when(inc.ts_ns)} ({fmt.ago(inc.ts_ns, now_ns)})"
        + (f" · from `{inc.source}`" if inc.source else "")
    )
    st.caption(_lifecycle(inc, now_ns))
    c1, c2 = st.columns([1, 1])
    c1.page_link(
        nav.page("device"),
        label=f"Open {inc.device} around this time",
        icon=":material/memory:",
        query_params={"device": inc.device, "range": "1h"},
    )
    base = (st.context.url or "").rstrip("/")
    link = f"{base}?incident={inc.id}" if base else f"?incident={inc.id}"
    c2.caption(f"Share this incident: `{link}`")
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Facts**")
        facts = _facts_table(inc.facts)
        if facts.empty:
            st.caption("This incident carries no extracted facts.")
        else:
            st.dataframe(
                facts,
                hide_index=True,
                width="stretch",
                column_order=["Fact", "Value"],
                height=min(38 + 35 * len(facts), 460),
                key="inc_facts",
            )
    with right:
        st.markdown("**What to try**")
        for h in hints.hints_for(inc.kind, inc.facts):
            st.markdown(f"- {h}")
    st.markdown("**The device around the incident** (a minute before to a minute after, 1 s buckets)")
    _context_charts(ctx)
    if inc.excerpt:
        with st.expander("Excerpt (the text the incident was read from)", expanded=True):
            st.code(inc.excerpt, language=None, wrap_lines=True)
    st.markdown("**Log lines around it**")
    if ctx.logs:
        logs = pd.DataFrame(
            [
                {"Time": fmt.when(ln.ts_ns), "Level": ln.level, "Source": ln.source, "Message": ln.message}
                for ln in ctx.logs
            ]
        )
        st.dataframe(
            logs, hide_index=True, width="stretch", height=min(38 + 35 * len(logs), 320), key="inc_logs"
        )
    else:
        st.caption("No log lines within a minute of it.")
    if ctx.nearby:
        st.markdown("**Other incidents on this device within ten minutes**")
        st.dataframe(
            pd.DataFrame(
                [
                    {"When": fmt.when(i.ts_ns), "Kind": i.kind, "Severity": i.severity, "Title": i.title}
                    for i in ctx.nearby
                ]
            ),
            hide_index=True,
            width="stretch",
            key="inc_nearby",
        )


def render() -> None:
    st.title("Incidents")
    status = data.status(data.url())
    if not status.ok or status.devices == 0:
        st.info(status.message)
        return
    now = timerange.now_ns()
    tr, kinds, sev, scope, text = _filters(now)
    _chart(tr, kinds, sev, scope)
    selected = _table(tr, kinds, sev, scope, text, now)
    if selected is not None:
        st.query_params["incident"] = str(selected)
    raw = st.query_params.get("incident")
    if raw:
        if raw.isdigit():
            detail(int(raw), now)
        else:
            st.warning(f"`incident={raw}` in the address is not an incident number.")
