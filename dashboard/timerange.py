"""The time range picker every page shares, kept in the URL (``?range=24h``) so links keep it.

"Now" is quantised to ``QUANTUM_NS``: every rerun within the same few seconds asks the data
layer for the same window, which is what makes its cache hit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from datetime import time as dtime

import streamlit as st

from fleetscope.dashboard import fmt

NS = 10**9
QUANTUM_NS = 5 * NS
PRESETS: dict[str, tuple[str, int]] = {
    "15m": ("Last 15 minutes", 15 * 60),
    "1h": ("Last hour", 3600),
    "6h": ("Last 6 hours", 6 * 3600),
    "24h": ("Last 24 hours", 86400),
    "7d": ("Last 7 days", 7 * 86400),
    "30d": ("Last 30 days", 30 * 86400),
    "custom": ("Custom range", 0),
}


@dataclass(frozen=True)
class TimeRange:
    since_ns: int
    until_ns: int
    key: str  # a PRESETS key
    label: str

    @property
    def span_s(self) -> float:
        return (self.until_ns - self.since_ns) / NS


def now_ns() -> int:
    return time.time_ns() // QUANTUM_NS * QUANTUM_NS + QUANTUM_NS


def preset(key: str, now: int | None = None) -> TimeRange:
    label, seconds = PRESETS[key]
    end = now_ns() if now is None else now
    return TimeRange(end - seconds * NS, end, key, label)


def picker(widget_key: str, *, default: str = "24h", param: str = "range") -> TimeRange:
    """A select box of presets plus a custom date/time range; reads and writes ``?range=``."""
    wanted = st.query_params.get(param, default)
    if wanted not in PRESETS:
        wanted = default
    if widget_key not in st.session_state:
        st.session_state[widget_key] = wanted
    key = st.selectbox("Time range", list(PRESETS), format_func=lambda k: PRESETS[k][0], key=widget_key)
    if key != "custom":
        st.query_params[param] = key
        return preset(key)
    tz = fmt.browser_tz()
    today = datetime.now(tz).date()
    days = st.date_input(
        "Dates", value=(today - timedelta(days=1), today), key=f"{widget_key}_dates", max_value=today
    )
    c1, c2 = st.columns(2)
    start_t = c1.time_input("From", value=dtime(0, 0), key=f"{widget_key}_from", step=timedelta(minutes=15))
    end_t = c2.time_input("To", value=dtime(23, 59), key=f"{widget_key}_to", step=timedelta(minutes=15))
    first, last = (days[0], days[-1]) if isinstance(days, (tuple, list)) and days else (today, today)
    if not isinstance(first, date):
        first = last = today
    since = int(datetime.combine(first, start_t, tzinfo=tz).timestamp() * NS)
    until = int(datetime.combine(last, end_t, tzinfo=tz).timestamp() * NS) + 60 * NS
    if until <= since:
        st.warning("The end of the range is before its start: showing the hour after the start.")
        until = since + 3600 * NS
    st.query_params[param] = "custom"
    return TimeRange(
        since,
        min(until, now_ns()),
        "custom",
        f"{fmt.when(since, seconds=False)} – {fmt.when(until, seconds=False)}",
    )
