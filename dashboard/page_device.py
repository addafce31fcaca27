"""Device: one device's GPUs and host over a chosen range, its latencies, incidents and logs.

Every chart shares the range's x axis, and the device's incidents are drawn on each as
dashed rules, so "the p99 went up when the GPU throttled, right before the OOM" is one look.
The resolution follows the range (``query.resolution_for``) and is stated under the
charts. ``?device=NAME&range=24h`` in the URL opens the same view.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fleetscope.collector.errors import UnknownDevice
from fleetscope.collector.query import (
    STATE_IMPORTED,
    STATE_ONLINE,
    AlertPeriod,
    DeviceSeries,
    DeviceSummary,
    IncidentView,
    describe_resolution,
    device_model,
    device_state,
)
from fleetscope.dashboard import charts, data, device_hardware, fmt, frames, nav, timerange
from fleetscope.proto.vocabulary import KIND_TRT_BENCHMARK, LOG_LEVELS


def _pick_device(devices: list[DeviceSummary]) -> tuple[DeviceSummary, list[DeviceSummary]]:
    """The device the user picked, by name: its newest install and every install of the name
    (a reflashed drone registers again under its name with a new agent id; the name reaches all)."""
    installs: dict[str, list[DeviceSummary]] = {}
    for d in devices:
        installs.setdefault(d.name, []).append(d)
    for same in installs.values():
        same.sort(key=lambda d: d.first_seen_ns, reverse=True)
    names = sorted(installs)
    by_agent = {d.agent_id: d.name for d in devices}
    wanted = st.query_params.get("device")
    wanted_name = by_agent.get(wanted, wanted) if wanted else None
    # A link (a fleet row, an incident) names a device in the URL: it wins over the last pick.
    if wanted_name in names and wanted_name != st.session_state.get("_device_from_url"):
        st.session_state["device_pick"] = wanted_name
    if st.session_state.get("device_pick") not in names:
        st.session_state["device_pick"] = names[0]
    unknown = wanted is not None and wanted_name not in names
    name = st.selectbox("Device", names, key="device_pick")
    if unknown:
        # Never show another device as if it were the one asked for.
        known = ", ".join(names[:10]) + (" …" if len(names) > 10 else "")
        st.warning(f"No device named **{wanted}** (known: {known}). Showing **{name}** instead; pick one above.",
                   icon=":material/search_off:")
    st.query_params["device"] = name
    st.session_state["_device_from_url"] = name
    return installs[name][0], installs[name]


GPU_PICK_FROM = 5  # with more GPUs than this, a picker: eight lines in one chart are hard to read


def _pick_gpus(gpu: pd.DataFrame) -> pd.DataFrame:
    """With many GPUs, a picker (kept in the URL as ``?gpus=0,3``); every GPU by default."""
    if gpu.empty or gpu["gpu"].nunique() < GPU_PICK_FROM:
        return gpu
    names = sorted(gpu["gpu"].unique(), key=lambda n: int(str(n).split()[-1]) if str(n).split()[-1].isdigit() else 0)
    wanted = [f"GPU {x}" for x in st.query_params.get("gpus", "").split(",") if x.strip()]
    default = [n for n in names if n in wanted] or names
    picked = st.pills("GPUs", names, selection_mode="multi", default=default, key="gpu_pick") or names
    if set(picked) == set(names):
        st.query_params.pop("gpus", None)
    else:
        st.query_params["gpus"] = ",".join(str(p).split()[-1] for p in picked)
    return gpu[gpu["gpu"].isin(picked)]


def _header(d: DeviceSummary, installs: list[DeviceSummary], now_ns: int) -> None:
    state = device_state(d)
    if state == STATE_IMPORTED:
        shown = ":gray[● imported] · history from log files (`fleetscope scan --db`), never an agent"
    elif d.stopped:
        shown = f":blue[● stopped] · its agent stopped cleanly {fmt.ago(d.last_seen_ns, now_ns)}"
    elif d.online:
        shown = ":green[● online]"
    else:
        shown = f":red[● offline] · last seen {fmt.ago(d.last_seen_ns, now_ns)}"
    inv = d.inventory or {}
    bits = [device_model(d), shown]
    if inv.get("driver_version"):
        bits.append(f"driver {inv['driver_version']}")
    if inv.get("jetpack_version"):
        bits.append(f"JetPack {inv['jetpack_version']}")
    if d.agent_version:
        bits.append(f"agent {d.agent_version}")
    st.markdown(" · ".join(bits))
    labels = " ".join(f"`{k}={v}`" for k, v in sorted(d.labels.items()))
    if labels:
        st.markdown(labels)
    if len(installs) > 1:
        ids = ", ".join(f"`{i.agent_id}` (from {fmt.when(i.first_seen_ns)})" for i in installs)
        st.caption(
            f"Reinstalled: {len(installs)} installs of this name (agent ids {ids}, newest first). "
            "Charts, incidents, logs and alerts cover all of them; `--device AGENT_ID` on the command line picks one."
        )


def _now_metrics(gpu: pd.DataFrame, host: pd.DataFrame, d: DeviceSummary, now_ns: int) -> None:
    """The device's readings now; an offline device has none, so its last readings are said as
    such, with their age, in a line under the (empty) figures, never as if they were current."""
    c = st.columns(6)
    last_gpu = gpu.dropna(subset=["util"]).sort_values("t").groupby("gpu").tail(1) if not gpu.empty else gpu
    last_host = host.dropna(subset=["cpu"]).tail(1) if not host.empty else host
    has_gpu, has_host = not last_gpu.empty, not last_host.empty
    figures = [
        ("GPU utilisation", fmt.pct(last_gpu["util"].mean()) if has_gpu else fmt.MISSING),
        ("GPU memory", fmt.gib(last_gpu["mem_gib"].sum() * 1024**3) if has_gpu else fmt.MISSING),
        ("Hottest GPU", fmt.celsius(last_gpu["temp_max"].max()) if has_gpu else fmt.MISSING),
        ("GPU power", fmt.watts(last_gpu["power"].sum()) if has_gpu else fmt.MISSING),
        ("CPU", fmt.pct(last_host["cpu"].iloc[0]) if has_host else fmt.MISSING),
        ("RAM", fmt.gib(last_host["ram_gib"].iloc[0] * 1024**3) if has_host else fmt.MISSING),
    ]
    state = device_state(d)
    if state == STATE_ONLINE:
        for col, (label, value) in zip(c, figures):
            col.metric(label, value)
        return
    for col, (label, _value) in zip(c, figures):
        col.metric(label, fmt.MISSING, help=f"no current reading: the device is {state}")
    known = [f"{label} {value}" for label, value in figures if value != fmt.MISSING]
    if known:
        times = [float(x["t"].max()) for x in (last_gpu, last_host) if not x.empty]
        at_ns = int(max(times) * 10**6)
        st.caption(
            f"No current readings ({state}). Last known, {fmt.ago(at_ns, now_ns)} "
            f"({fmt.when(at_ns)}) in this range: " + " · ".join(known)
        )


def _gpu_charts(
    s: DeviceSeries, gpu: pd.DataFrame, markers: pd.DataFrame, alerts: pd.DataFrame, domain: tuple[int, int]
) -> None:
    if gpu.empty:
        st.info(
            "No GPU samples in this range. Devices without an NVIDIA GPU (or without NVML) send host samples only."
        )
        return
    bands = frames.throttle_bands(gpu, s.step_s)
    mem_total = max((g.memory_total_bytes or 0) for g in s.gpus) / 1024**3 if s.gpus else 0
    left, right = st.columns(2)
    with left:
        charts.show(
            charts.time_chart(
                gpu.rename(columns={"gpu": "series"}),
                y="util",
                title="GPU utilisation",
                unit="%",
                domain=domain,
                y_domain=(0, 100),
                markers=markers,
                alerts=alerts,
                number_format=".0f",
            ),
            key="c_util",
        )
        charts.show(
            charts.time_chart(
                gpu.rename(columns={"gpu": "series"}),
                y="temp",
                title="GPU temperature",
                unit="°C",
                domain=domain,
                markers=markers,
                alerts=alerts,
                bands=bands,
                number_format=".0f",
            ),
            key="c_temp",
        )
        charts.show(
            charts.time_chart(
                gpu.rename(columns={"gpu": "series"}),
                y="sm_clock",
                title="SM clock (shaded: throttled)",
                unit="MHz",
                domain=domain,
                bands=bands,
                markers=markers,
                alerts=alerts,
                number_format=".0f",
            ),
            key="c_clock",
        )
    with right:
        charts.show(
            charts.time_chart(
                gpu.rename(columns={"gpu": "series"}),
                y="mem_gib",
                title="GPU memory used",
                unit="GiB",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".2f",
                y_domain=(0, mem_total) if mem_total else None,
            ),
            key="c_mem",
        )
        charts.show(
            charts.time_chart(
                gpu.rename(columns={"gpu": "series"}),
                y="power",
                title="GPU power",
                unit="W",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".0f",
            ),
            key="c_power",
        )
        if not bands.empty:
            total = (bands["end"] - bands["start"]).sum() / 1000
            st.caption(
                f"Throttled for about {fmt.duration(total)} of this range "
                f"({', '.join(sorted(set(bands['reason'])))}): shaded on the temperature and clock charts."
            )
        else:
            st.caption("No throttling in this range.")


def _host_charts(
    host: pd.DataFrame, markers: pd.DataFrame, alerts: pd.DataFrame, domain: tuple[int, int]
) -> None:
    if host.empty:
        st.info("No host samples in this range.")
        return
    left, right = st.columns(2)
    with left:
        charts.show(
            charts.time_chart(
                frames.long(host, {"cpu": "mean", "cpu_max": "busiest sample"}),
                title="CPU",
                unit="%",
                domain=domain,
                y_domain=(0, 100),
                markers=markers,
                alerts=alerts,
                number_format=".0f",
            ),
            key="c_cpu",
        )
        charts.show(
            charts.time_chart(
                frames.long(host, {"disk_read": "read", "disk_write": "write"}),
                title="Disk I/O",
                unit="MiB/s",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".2f",
            ),
            key="c_disk",
        )
    with right:
        charts.show(
            charts.time_chart(
                frames.long(host, {"ram_gib": "RAM used", "swap_gib": "swap used"}),
                title="RAM and swap",
                unit="GiB",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".2f",
            ),
            key="c_ram",
        )
        charts.show(
            charts.time_chart(
                frames.long(host, {"net_rx": "received", "net_tx": "sent"}),
                title="Network",
                unit="MiB/s",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".2f",
            ),
            key="c_net",
        )


def _latency(s: DeviceSeries, markers: pd.DataFrame, alerts: pd.DataFrame, domain: tuple[int, int]) -> None:
    lat = frames.latency_frame(s.latency)
    if lat.empty:
        st.info(
            "No latency histograms in this range. Time an operation with the SDK: "
            '`with sdk.latency("infer"): ...` (see docs/sdk/).'
        )
        return
    ops = list(dict.fromkeys(lat["operation"]))
    rows = []
    for series in s.latency:
        total = sum(series.count)
        rows.append(
            {
                "Operation": series.name,
                "Labels": ", ".join(f"{k}={v}" for k, v in sorted(series.labels.items())),
                "Count": total,
                "Errors": sum(series.errors),
                "Worst p99": fmt.ms(max((p for p in series.p99_ms if p is not None), default=None)),
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="device_latency")
    for i, op in enumerate(ops[:6]):
        part = lat[lat["operation"] == op]
        charts.show(
            charts.time_chart(
                frames.long(part, {"p50": "p50", "p90": "p90", "p99": "p99"}),
                title=f"{op}: latency",
                unit="ms",
                domain=domain,
                markers=markers,
                alerts=alerts,
                number_format=".2f",
            ),
            key=f"c_lat_{i}",
        )


def _incidents(
    incidents: list[IncidentView],
    periods: list[AlertPeriod],
    markers: pd.DataFrame,
    alerts: pd.DataFrame,
    domain: tuple[int, int],
    now_ns: int,
) -> None:
    if not markers.empty or not alerts.empty:
        charts.show(charts.incident_strip(markers, domain=domain, alerts=alerts), key="c_strip")
    if not incidents:
        st.success("No incidents in this range.")
    else:
        df = pd.DataFrame(
            [
                {
                    "When": fmt.when(i.ts_ns),
                    "Ago": fmt.ago(i.ts_ns, now_ns),
                    "Kind": i.kind,
                    "Severity": i.severity,
                    "State": i.state,
                    "Count": i.count,
                    "Title": i.title,
                    "id": i.id,
                }
                for i in incidents
            ]
        )
        picked = st.dataframe(
            df,
            hide_index=True,
            width="stretch",
            column_order=["When", "Ago", "Kind", "Severity", "State", "Count", "Title"],
            column_config={"Count": st.column_config.NumberColumn(format="%d", width=60)},
            on_select="rerun",
            selection_mode="single-row",
            key="device_incidents",
        )
        if picked and picked.selection.rows:
            nav.go("incidents", incident=str(int(df.iloc[picked.selection.rows[0]]["id"])))
    st.markdown("**Alerts**")
    if not periods:
        st.caption("No alert on this device in this range.")
        return
    table = pd.DataFrame(
        [
            {
                "From": fmt.when(p.start_ns),
                "To": fmt.when(p.end_ns) if p.end_ns is not None else f"now ({p.state})",
                "Rule": p.rule,
                "State": p.state,
                "Severity": p.severity,
                "Summary": p.summary,
                "id": p.alert_id,
            }
            for p in reversed(periods)
        ]
    )
    picked = st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_order=["From", "To", "Rule", "State", "Severity", "Summary"],
        on_select="rerun",
        selection_mode="single-row",
        key="device_alerts",
    )
    st.caption("Select an alert for its details and notifications on the Alerts page.")
    if picked and picked.selection.rows:
        nav.go("alerts", alert=str(int(table.iloc[picked.selection.rows[0]]["id"])))


def _logs(device: str, since_ns: int, until_ns: int) -> None:
    c1, c2 = st.columns([1, 3])
    level = c1.selectbox("Level at least", ["all", *LOG_LEVELS], key="keep_device_log_level")
    text = c2.text_input("Search logs", key="keep_device_log_search", placeholder="text in the message")
    lines = data.logs(
        data.url(), device, since_ns, until_ns, None if level == "all" else level, text.strip() or None
    )
    if not lines:
        st.info("No log lines match." if text or level != "all" else "No log lines in this range.")
        return
    df = pd.DataFrame(
        [
            {"Time": fmt.when(ln.ts_ns), "Level": ln.level, "Source": ln.source, "Message": ln.message}
            for ln in reversed(lines)
        ]
    )
    st.dataframe(
        df, hide_index=True, width="stretch", height=min(38 + 35 * len(df), 420), key="device_logs",
        column_config={
            "Time": st.column_config.TextColumn(width=180),  # "2026-12-03 22:47:39 UTC" whole
            "Level": st.column_config.TextColumn(width=70),
            "Source": st.column_config.TextColumn(width=160),
            "Message": st.column_config.TextColumn(width=max(600, min(2400, 7 * int(df["Message"].str.len().max())))),
        },
    )
    st.caption(f"{len(lines)} newest lines shown (at most 500), newest first.")


def render() -> None:
    status = data.status(data.url())
    if not status.ok or status.devices == 0:
        st.title("Device")
        st.info(status.message)
        return
    now = timerange.now_ns()
    devices = data.devices(data.url(), now)
    top = st.columns([3, 2])
    with top[0]:
        device, installs = _pick_device(devices)
    with top[1]:
        tr = timerange.picker("keep_device_range", default="1h")
    st.title(device.name)
    _header(device, installs, now)
    try:
        s = data.device_series(data.url(), device.name, tr.since_ns, tr.until_ns)
    except UnknownDevice as exc:
        st.error(str(exc))
        return
    incidents = data.incidents(data.url(), tr.since_ns, tr.until_ns, devices=(device.name,))
    # The axis is the range asked for, even for a device younger than it: "last 24 hours" that
    # drew 14 minutes read as a day of data. The caption says when the device's data begins.
    domain = (tr.since_ns // 10**6, tr.until_ns // 10**6)
    markers = frames.incident_markers([i for i in incidents if i.kind != KIND_TRT_BENCHMARK])
    periods = data.alert_periods(data.url(), device.name, tr.since_ns, tr.until_ns)
    alerts = frames.alert_spans(periods, tr.since_ns, min(now, tr.until_ns))
    gpu, host = frames.gpu_frame(s), frames.host_frame(s)
    gpu = _pick_gpus(gpu)
    _now_metrics(gpu, host, device, now)
    marks = "dashed lines are incidents"
    if periods:
        marks += (
            f" · shaded spans with a bar above are alerts ({len(periods)}, see the Incidents tab)"
        )
    first_ns = min([i.first_seen_ns for i in installs]
                   + [int(t) for t in (*s.gpu.columns["ts_ns"][:1], *s.host.columns["ts_ns"][:1])])
    begins = f" · first data {fmt.when(first_ns)}" if tr.since_ns < first_ns < tr.until_ns else ""
    st.caption(f"{tr.label}{begins}: {describe_resolution(s.step_s, s.sources)} · {marks}")
    # Only the open tab runs (and only its charts go to the browser); the tab is in the URL.
    names = ["GPU", "Host", "Latency", "Incidents", "Logs", "Hardware"]
    tabs = st.tabs(names, key="tab", on_change="rerun", bind="query-params")
    sections = [
        lambda: _gpu_charts(s, gpu, markers, alerts, domain),
        lambda: _host_charts(host, markers, alerts, domain),
        lambda: _latency(s, markers, alerts, domain),
        lambda: _incidents(incidents, periods, markers, alerts, domain, now),
        lambda: _logs(device.name, tr.since_ns, tr.until_ns),
        lambda: device_hardware.render(device.name, min(now, tr.until_ns), now),
    ]
    for tab, draw in zip(tabs, sections):
        with tab:
            if tab.open is not False:
                draw()
