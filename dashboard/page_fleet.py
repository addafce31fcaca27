"""Fleet: every device at a glance, refreshing on its own.

The filters sit outside the refreshing fragment (and in ``keep_`` session keys), so a refresh
redraws the table and never resets what the operator chose. Offline devices sort first by
default and are tinted, because that is what someone glancing at the screen needs to see.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from fleetscope.collector.query import FleetDevice, FleetOverview, FleetSparklines, labels_match
from fleetscope.dashboard import data, fmt, nav, timerange
from fleetscope.dashboard.page_alerts import alert_table
from fleetscope.proto.vocabulary import ALERT_FIRING

if TYPE_CHECKING:  # what st.column_config's helpers return; streamlit does not re-export the name
    from streamlit.elements.lib.column_types import ColumnConfig

REFRESH = {"5 s": 5, "10 s": 10, "30 s": 30, "1 min": 60, "Off": 0}
SORTS = ("Offline first", "Name", "Last seen", "GPU utilisation", "Temperature", "Power", "Open incidents")
STATES = ("All", "Online", "Offline", "Stopped", "Imported")
# "imported": made by `fleetscope scan --db` from log files, never an agent: neither online nor offline.
STATE_COLORS = {"online": "#21a366", "offline": "#d62728", "stopped": "#4c78a8", "imported": "#8c8c8c"}
_STATE_ORDER = {"offline": 0, "online": 1, "stopped": 2, "imported": 3}
# The table shows a page of the devices that pass the filters, in the chosen order.
PAGE_SIZES = (50, 100, 250, 500)
PAGE_SIZE = 100
_FILTERS_OVERVIEW_KEY = "_fleet_filters_overview"  # the overview a full run's filter bar was made from


@dataclass(frozen=True)
class Filters:
    search: str
    kinds: tuple[str, ...]
    labels: tuple[str, ...]
    state: str
    sort: str


def _filter_bar(overview: FleetOverview) -> tuple[Filters, int]:
    kinds = sorted({d.kind for d in overview.devices} | {d.model for d in overview.devices})
    labels = sorted({f"{k}={v}" for d in overview.devices for k, v in d.labels.items()})
    c = st.columns([3, 2.2, 2.2, 1.4, 1.6, 1])
    search = c[0].text_input("Search", key="keep_fleet_search", placeholder="name, label, GPU model…")
    picked_kinds = c[1].multiselect("Kind", kinds, key="keep_fleet_kinds", placeholder="all kinds")
    picked_labels = c[2].multiselect(
        "Labels", labels, key="keep_fleet_labels", placeholder="site, fleet, drone…"
    )
    state = c[3].selectbox("State", STATES, key="keep_fleet_state")
    sort = c[4].selectbox("Sort by", SORTS, key="keep_fleet_sort")
    st.session_state.setdefault(
        "keep_fleet_refresh", "10 s"
    )  # a default via state: the widget keeps no default of its own
    refresh = c[5].selectbox("Refresh", list(REFRESH), key="keep_fleet_refresh")
    return Filters(search.strip().lower(), tuple(picked_kinds), tuple(picked_labels), state, sort), REFRESH[
        refresh
    ]


def select_devices(devices: Sequence[FleetDevice], f: Filters) -> list[FleetDevice]:
    out = []
    for d in devices:
        if f.kinds and d.kind not in f.kinds and d.model not in f.kinds:
            continue
        if f.labels and not labels_match(d.labels, f.labels):
            continue
        if f.state != "All" and d.state != f.state.lower():
            continue
        if f.search:
            hay = " ".join(
                [d.name, d.kind, d.model, *d.gpu_names, *(f"{k}={v}" for k, v in d.labels.items())]
            ).lower()
            if f.search not in hay:
                continue
        out.append(d)
    keys = {
        "Offline first": lambda d: (_STATE_ORDER.get(d.state, 1), d.name),
        "Name": lambda d: d.name,
        "Last seen": lambda d: -d.last_seen_ns,
        "GPU utilisation": lambda d: -(d.util_percent or -1),
        "Temperature": lambda d: -(d.temp_c or -1),
        "Power": lambda d: -(d.power_w or -1),
        "Open incidents": lambda d: (-d.open_incidents, d.name),
    }
    return sorted(out, key=keys[f.sort])


def _spark(values: Sequence[float | None]) -> list[float]:
    # Chart cells cannot draw nulls (the cell shows an error): keep the buckets that have data.
    return [round(v, 1) for v in values if v is not None]


def _kind(d: FleetDevice) -> str:
    return d.model.replace("NVIDIA ", "").replace(" Developer Kit", "").replace("x ", "× ", 1)


def table(devices: Sequence[FleetDevice], now_ns: int) -> pd.DataFrame:
    rows = []
    for d in devices:
        rows.append(
            {
                "Device": d.name,
                # One-element lists: shown as a coloured pill (MultiselectColumn), the only way to
                # colour a cell without a Styler (which would flatten the sparklines to text).
                "State": [d.state],
                "Kind": _kind(d),
                "Last seen": fmt.ago(d.last_seen_ns, now_ns),
                "GPU util": d.util_percent,
                "Util 30 min": _spark(d.spark_util),
                "GPU memory": fmt.used_of(d.memory_used_bytes, d.memory_total_bytes),
                "Memory 30 min": _spark(d.spark_mem_percent),
                "Temp": fmt.celsius(d.temp_c),
                "Temp 30 min": _spark(d.spark_temp),
                "Power": fmt.watts(d.power_w),
                "Power 30 min": _spark(d.spark_power),
                "Incidents 24 h": [f"{d.open_incidents} {d.worst_severity}"] if d.open_incidents else [],
                "Labels": [f"{k}={v}" for k, v in sorted(d.labels.items())],
                "GPUs": d.gpu_count,
                "CPU": d.cpu_percent,
            }
        )
    return pd.DataFrame(rows)


def _labels_width(devices: Sequence[FleetDevice]) -> int:
    """Pixels for the Labels column: each label a chip of ~7 px a character plus padding."""
    widest = max((sum(7 * len(f"{k}={v}") + 22 for k, v in d.labels.items()) for d in devices), default=0)
    return max(200, min(900, widest + 16))


# Pixels a cell's text takes in the grid's 14 px font (a generous ~7.5 px a character), plus the
# cell's padding; a header also has its sort and menu marks beside it.
CHAR_PX = 7.5
CELL_PAD_PX = 20
HEADER_PAD_PX = 34


def text_px(text: str, *, header: bool = False) -> int:
    return int(CHAR_PX * len(text)) + (HEADER_PAD_PX if header else CELL_PAD_PX)


def fit_widths(df: pd.DataFrame, config: dict[str, ColumnConfig]) -> dict[str, ColumnConfig]:
    """Widen each column to its header and its longest text: a cell cut to "Jetson Orin NX
    Engin…" or a header to "Memory 30 r" tells the viewer nothing. Chart and pill columns keep
    their width for the cells, and grow only to fit the header."""
    out: dict[str, ColumnConfig] = {}
    for name, cfg in config.items():
        widths = [int(cfg.get("width") or 0), text_px(name, header=True)]
        if name in df.columns:
            widths += [text_px(v) for v in df[name] if isinstance(v, str)]
        out[name] = {**cfg, "width": max(widths)}
    return out


def _columns(devices: Sequence[FleetDevice]) -> dict[str, ColumnConfig]:
    cc = st.column_config
    incident_values = sorted({f"{d.open_incidents} {d.worst_severity}" for d in devices if d.open_incidents})
    spark = 78
    return {
        "Device": cc.TextColumn(width=125, pinned=True),
        "State": cc.MultiselectColumn(
            options=list(STATE_COLORS), color=list(STATE_COLORS.values()), width=72
        ),
        "Kind": cc.TextColumn(width=130),
        "Last seen": cc.TextColumn(width=72),
        "GPU util": cc.ProgressColumn(format="%.0f %%", min_value=0, max_value=100, width=78),
        "Util 30 min": cc.AreaChartColumn(y_min=0, y_max=100, width=spark),
        "GPU memory": cc.TextColumn(width=104),
        "Memory 30 min": cc.AreaChartColumn(
            y_min=0, y_max=100, width=spark, help="GPU memory used, % of total"
        ),
        "Temp": cc.TextColumn(width=56, help="hottest GPU"),
        "Temp 30 min": cc.LineChartColumn(y_min=20, y_max=100, width=spark, help="hottest GPU"),
        "Power": cc.TextColumn(width=58, help="all GPUs together"),
        "Power 30 min": cc.LineChartColumn(y_min=0, width=spark),
        "Incidents 24 h": cc.MultiselectColumn(
            options=incident_values,
            width=96,
            help="warnings and worse in the last 24 h, with the worst severity",
            color=[fmt.SEVERITY_COLORS.get(v.split(" ", 1)[1], "#888") for v in incident_values],
        ),
        # Wide enough for every device's labels (a fixed "large" cut the longer ones).
        "Labels": cc.MultiselectColumn(width=_labels_width(devices), color="auto"),
        "GPUs": cc.NumberColumn(width=50, format="%d"),
        "CPU": cc.NumberColumn(format="%.0f %%", width=56),
    }


def _offline_notice(overview: FleetOverview) -> None:
    offline = [d for d in overview.devices if d.state == "offline"]
    if not offline:
        return
    names = ", ".join(f"**{d.name}** ({fmt.ago(d.last_seen_ns, overview.now_ns)})" for d in offline[:8])
    more = f" and {len(offline) - 8} more" if len(offline) > 8 else ""
    st.error(
        f"{len(offline)} device{'s' if len(offline) != 1 else ''} offline: {names}{more}",
        icon=":material/wifi_off:",
    )


def _summary(overview: FleetOverview, shown: Sequence[FleetDevice]) -> None:
    online = sum(d.state == "online" for d in overview.devices)
    offline = sum(d.state == "offline" for d in overview.devices)
    imported = sum(d.state == "imported" for d in overview.devices)
    total = len(overview.devices) - imported  # devices with an agent: imported ones never had one
    utils = [d.util_percent for d in shown if d.util_percent is not None]
    firing = data.alerts(data.url(), overview.now_ns, (ALERT_FIRING,))
    c = st.columns(6)
    # The total under the count, not beside it: "10000 / 10000" did not fit a sixth of the page.
    c[0].metric("Online", f"{online:,}", delta=f"of {total:,}", delta_color="off", delta_arrow="off")
    c[1].metric("Offline", offline, help=f"and {imported} imported from log files" if imported else None)
    c[2].metric("GPUs", sum(d.gpu_count for d in overview.devices))
    c[3].metric("Firing alerts", len(firing) if len(firing) < 500 else "500+")
    c[4].metric(
        "Open incidents (24 h)", len(overview.open_incidents) if len(overview.open_incidents) < 50 else "50+"
    )
    c[5].metric("GPU utilisation (shown)", fmt.pct(sum(utils) / len(utils)) if utils else fmt.MISSING)


def _alerts(now_ns: int) -> None:
    """The firing alerts (silenced ones marked), each opening on the Alerts page."""
    head = st.columns([4, 1])
    head[0].subheader("Alerts")
    head[1].page_link(nav.page("alerts"), label="All alerts", icon=":material/notifications_active:")
    # Silenced ones last: they notify no one, so someone already knows.
    firing = sorted(data.alerts(data.url(), now_ns, (ALERT_FIRING,)), key=lambda a: a.silenced)
    if not firing:
        st.success("No alert is firing.")
        return
    df = alert_table(firing[:50], now_ns)
    df["Silenced"] = ["silenced" if a.silenced else "" for a in firing[:50]]
    order = ["Since", "For", "Rule", "Device", "Severity", "Summary", "Incident", "Silenced"]
    if all(a.incident_id is None for a in firing[:50]):
        order.remove("Incident")
    cc = st.column_config
    picked = st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        column_order=order,
        column_config={
            "Device": cc.LinkColumn(display_text=r"device=(.*)$", width=130),
            "Incident": cc.LinkColumn(display_text=r"incident=(\d+)$", width=80),
            "Severity": cc.MultiselectColumn(
                options=list(fmt.SEVERITY_COLORS), color=list(fmt.SEVERITY_COLORS.values()), width=90
            ),
        },
        on_select="rerun",
        selection_mode="single-row",
        key="fleet_alerts",
        height=min(38 + 35 * len(df), 420),
    )
    more = f" (the newest 50 of {len(firing)})" if len(firing) > 50 else ""
    st.caption(f"{len(firing)} firing{more} · select one for its details on the Alerts page")
    chosen = picked.selection.rows if picked else []
    if chosen:
        nav.go("alerts", alert=str(int(df.iloc[chosen[0]]["id"])))


def _open_incidents(overview: FleetOverview) -> None:
    st.subheader("Open incidents")
    st.caption("Warnings and worse from the last 24 hours, newest first. Select one to open it.")
    if not overview.open_incidents:
        st.success("No open incidents in the last 24 hours.")
        return
    rows = [
        {
            "When": fmt.ago(i.ts_ns, overview.now_ns),
            "Device": i.device,
            "Severity": [i.severity],
            "Kind": i.kind,
            "State": [i.state],
            "Count": i.count,
            "Last seen": fmt.ago(i.last_seen_ns or i.ts_ns, overview.now_ns),
            "Title": i.title,
            "id": i.id,
        }
        for i in overview.open_incidents[:20]
    ]
    df = pd.DataFrame(rows)
    severity = st.column_config.MultiselectColumn(
        options=list(fmt.SEVERITY_COLORS), color=list(fmt.SEVERITY_COLORS.values())
    )
    state = st.column_config.MultiselectColumn(
        options=list(fmt.INCIDENT_STATE_COLORS), color=list(fmt.INCIDENT_STATE_COLORS.values()), width=80
    )
    picked = st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        column_order=["When", "Device", "Severity", "Kind", "State", "Count", "Last seen", "Title"],
        column_config={
            "Severity": severity,
            "State": state,
            "Count": st.column_config.NumberColumn(format="%d", width=60),
        },
        on_select="rerun",
        selection_mode="single-row",
        key="fleet_incidents",
    )
    chosen = picked.selection.rows if picked else []
    if chosen:
        nav.go("incidents", incident=str(int(df.iloc[chosen[0]]["id"])))


def _page_of(shown: Sequence[FleetDevice], filters: Filters) -> tuple[list[FleetDevice], int, int]:
    """The rows of the table's current page (``keep_fleet_page``, ``keep_fleet_page_size``), the
    index of its first row and the number of pages. Other filters or another sort start again at
    page 1; a page past the end (devices gone) is the last."""
    size = int(st.session_state.get("keep_fleet_page_size", PAGE_SIZE))
    pages = max(1, -(-len(shown) // size))
    if st.session_state.get("_fleet_page_for") != (filters, size):
        st.session_state["_fleet_page_for"] = (filters, size)
        st.session_state["keep_fleet_page"] = 1
    page = min(max(1, int(st.session_state.get("keep_fleet_page", 1))), pages)
    st.session_state["keep_fleet_page"] = page
    first = (page - 1) * size
    return list(shown[first : first + size]), first, pages


def _with_sparklines(devices: Sequence[FleetDevice], sparks: dict[str, FleetSparklines]) -> list[FleetDevice]:
    out = []
    for d in devices:
        s = sparks.get(d.agent_id)
        out.append(d if s is None else replace(
            d, spark_util=s.util, spark_mem_percent=s.mem_percent, spark_temp=s.temp, spark_power=s.power))  # fmt: skip
    return out


def _live(filters: Filters, refresh_s: int) -> None:
    # A page load draws the overview its filters were made from (``render``); the fragment's own
    # refreshes read the fleet as it is now.
    overview = st.session_state.pop(_FILTERS_OVERVIEW_KEY, None) or data.fleet(data.url(), timerange.now_ns())
    shown = select_devices(overview.devices, filters)
    _summary(overview, shown)
    _offline_notice(overview)
    rows: list[FleetDevice] = []
    first, pages = 0, 1
    if not shown:
        st.info("No device matches these filters.")
    else:
        # One page of the table at a time: a fleet of thousands is found by its filters and sort
        # (offline first, hottest, busiest...), and only the page on view is sent to the browser
        # and has its sparklines read.
        rows, first, pages = _page_of(shown, filters)
        rows = _with_sparklines(
            rows, data.fleet_sparklines(data.url(), overview.now_ns, tuple(d.agent_id for d in rows))
        )
        df = table(rows, overview.now_ns)
        picked = st.dataframe(
            df,
            hide_index=True,
            width="stretch",
            column_config=fit_widths(df, _columns(rows)),
            on_select="rerun",
            selection_mode="single-row",
            key="fleet_table",
            height=min(38 + 35 * len(df), 720),
        )
        chosen = picked.selection.rows if picked else []
        if chosen:
            nav.go("device", device=str(df.iloc[chosen[0]]["Device"]))
    every = f"refreshes every {fmt.duration(refresh_s)}" if refresh_s else "auto-refresh off"
    if len(shown) > len(rows):
        counted = f"{first + 1}–{first + len(rows)} of {len(shown)} shown, {len(overview.devices)} devices"
    else:
        counted = f"{len(shown)} of {len(overview.devices)} devices"
    c = st.columns([6, 1, 1]) if pages > 1 or len(shown) > PAGE_SIZES[0] else [st.container()]
    # "now" is rounded up to the next quantum; past a quantum, this is a large fleet's summary
    # as last read (data.fleet), the next one being read.
    read_s = (time.time_ns() - overview.now_ns) / fmt.NS
    age = f" (read {fmt.duration(read_s)} ago)" if read_s >= timerange.QUANTUM_NS / fmt.NS else ""
    c[0].caption(
        f"{counted} · updated {fmt.when(overview.now_ns)}{age} · {every} · "
        "sparklines: last 30 min in 1 min buckets · select a row to open the device"
    )
    if len(c) > 1:
        st.session_state.setdefault("keep_fleet_page_size", PAGE_SIZE)
        c[1].selectbox("Rows per page", PAGE_SIZES, key="keep_fleet_page_size")
        c[2].number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1, key="keep_fleet_page")
    _alerts(overview.now_ns)
    _open_incidents(overview)


def render() -> None:
    st.title("Fleet")
    status = data.status(data.url())
    if not status.ok or status.devices == 0:
        st.info(status.message)
        return
    overview = data.fleet(data.url(), timerange.now_ns())
    filters, refresh_s = _filter_bar(overview)
    # The table draws this same overview, handed over as it is: asking again could land in the
    # next quantum and summarise the whole fleet twice for one page load (a second each at
    # 10,000 devices), and even a cache hit copies it out of the cache (0.2 s at 10,000).
    st.session_state[_FILTERS_OVERVIEW_KEY] = overview
    live = st.fragment(run_every=refresh_s or None)(_live)
    live(filters, refresh_s)
