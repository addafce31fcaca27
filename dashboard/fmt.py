"""Units and times as people read them, the same on every page.

Sizes are binary (GiB, MiB: what nvidia-smi and the kernel print), temperatures °C, power W,
latency ms. Times are shown in the browser's time zone when Streamlit knows it, else UTC, and
recent ones also as "3 min ago".
"""

from __future__ import annotations

import math
from datetime import datetime, timezone, tzinfo
from typing import Any, TypeGuard
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fleetscope.proto.vocabulary import (
    BINARY_BYTE_UNITS,
    INCIDENT_OPEN,
    INCIDENT_RESOLVED,
    SEVERITY_CRITICAL,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
)

NS = 10**9
MISSING = "–"

# One colour per severity on every page and chart, worst first (the vocabulary's order).
SEVERITY_COLORS: dict[str, str] = {
    SEVERITY_CRITICAL: "#b40426",
    SEVERITY_ERROR: "#e45756",
    SEVERITY_WARNING: "#f2a93b",
    SEVERITY_INFO: "#4c78a8",
}

# An incident's state (vocabulary.INCIDENT_STATES): open ones stand out, resolved ones recede.
INCIDENT_STATE_COLORS: dict[str, str] = {INCIDENT_OPEN: "#e45756", INCIDENT_RESOLVED: "#8c8c8c"}


def _known(x: float | None) -> TypeGuard[float]:
    """A value to show: neither missing (None) nor NaN."""
    return not (x is None or (isinstance(x, float) and math.isnan(x)))


def bytes_(n: float | None, *, digits: int = 1) -> str:
    if not _known(n):
        return MISSING
    for unit, div in BINARY_BYTE_UNITS:
        if abs(n) >= div:
            return f"{n / div:.{digits}f} {unit}"
    return f"{int(n)} B"


def gib(n: float | None, *, digits: int = 1) -> str:
    return MISSING if not _known(n) else f"{n / 1024**3:.{digits}f} GiB"


def used_of(used: float | None, total: float | None) -> str:
    """'61.2 / 80.0 GiB'."""
    if not _known(used):
        return MISSING
    if not _known(total):
        return gib(used)
    return f"{used / 1024**3:.1f} / {total / 1024**3:.1f} GiB"


def pct(x: float | None, *, digits: int = 0) -> str:
    return MISSING if not _known(x) else f"{x:.{digits}f} %"


def celsius(x: float | None) -> str:
    return MISSING if not _known(x) else f"{x:.0f} °C"


def watts(x: float | None) -> str:
    if not _known(x):
        return MISSING
    return f"{x / 1000:.2f} kW" if abs(x) >= 10_000 else f"{x:.0f} W"


def ms(x: float | None) -> str:
    if not _known(x):
        return MISSING
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    return f"{x:.2f} ms" if x < 100 else f"{x:.0f} ms"


def joules(x: float | None) -> str:
    if not _known(x):
        return MISSING
    if abs(x) >= 3.6e6:
        return f"{x / 3.6e6:.2f} kWh"
    if abs(x) >= 1000:
        return f"{x / 1000:.1f} kJ"
    return f"{x:.3g} J"


def rate(x: float | None, unit: str = "/s") -> str:
    """'1,250 qps', '41.5 qps', '0.0213 inferences/J': three significant figures below 10, where
    one decimal printed 0.02 inferences per joule as '0.0'."""
    if not _known(x):
        return MISSING
    if abs(x) < 10:
        return f"{x:.3g} {unit}"
    return f"{x:,.1f} {unit}" if abs(x) < 1000 else f"{x:,.0f} {unit}"


def mhz(x: float | None) -> str:
    return MISSING if not _known(x) else f"{x:.0f} MHz"


def duration(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def ago(ts_ns: int, now_ns: int) -> str:
    s = (now_ns - ts_ns) / NS
    if s < 5:
        return "just now"
    return f"{duration(s)} ago"


def browser_tz() -> tzinfo:
    """The viewer's time zone (Streamlit reads it from the browser), else UTC."""
    try:
        import streamlit as st

        name = st.context.timezone
    except Exception:  # outside a Streamlit run (tests of this module, the CLI)
        name = None
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return timezone.utc


def when(ts_ns: int, *, tz: tzinfo | None = None, seconds: bool = True) -> str:
    """'2026-12-01 10:03:12 CET'."""
    dt = datetime.fromtimestamp(ts_ns / NS, tz=tz or browser_tz())
    return dt.strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z").strip()


def fact(key: str, value: Any) -> str:
    """A fact's value with the unit its name carries (``requested_bytes`` -> GiB, ``*_ms`` -> ms)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if key.endswith("_bytes"):
            return f"{bytes_(value, digits=2)}"
        if key.endswith("_ms"):
            return ms(value)
        if key.endswith("_s"):
            return f"{value:g} s"
        if key.endswith("_c"):
            return celsius(value)
        if key.endswith("_w"):
            return watts(value)
        if key.endswith("_mhz"):
            return mhz(value)
        if key.endswith("_qps"):
            return rate(value, "qps")
        return f"{value:g}" if isinstance(value, float) else str(value)
    return str(value)


_ACRONYMS = {
    "gpu": "GPU",
    "cpu": "CPU",
    "pid": "PID",
    "xid": "Xid",
    "sxid": "SXid",
    "pci": "PCI",
    "cuda": "CUDA",
    "id": "ID",
    "trt": "TensorRT",
    "ecc": "ECC",
    "sm": "SM",
    "oom": "OOM",
    "p99": "p99",
    "p90": "p90",
    "pytorch": "PyTorch",
    "rss": "RSS",
    "qps": "qps",
    "mem": "memory",
}


def fact_label(key: str) -> str:
    """``reserved_unallocated_bytes`` -> 'Reserved unallocated'; the unit goes with the value."""
    for suffix in ("_bytes", "_ms", "_mhz", "_qps", "_s", "_c", "_w"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    words = key.replace(".", " ").replace("_", " ").split()
    words = [_ACRONYMS.get(w.lower(), w) for w in words]
    if words and words[0] not in _ACRONYMS.values():
        words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words)
