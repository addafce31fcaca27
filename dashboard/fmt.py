"""Units and times as people read them, the same on every page.

Sizes are binary (GiB, MiB: what nvidia-smi and the kernel print), temperatures °C, power W,
latency ms. Times are shown in the browser's time zone when Streamlit knows it, else UTC, and
recent ones also as "3 min ago".
"""

from __future__ import annotations

import math
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NS = 10**9
MISSING = "–"


def _bad(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def bytes_(n: float | None, *, digits: int = 1) -> str:
    if _bad(n):
        return MISSING
    for unit, div in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= div:  # type: ignore[arg-type]
            return f"{n / div:.{digits}f} {unit}"  # type: ignore[operator]
    return f"{int(n)} B"  # type: ignore[arg-type]


def gib(n: float | None, *, digits: int = 1) -> str:
    return MISSING if _bad(n) else f"{n / 1024**3:.{digits}f} GiB"  # type: ignore[operator]


def used_of(used: float | None, total: float | None) -> str:
    """'61.2 / 80.0 GiB'."""
    if _bad(used):
        return MISSING
    if _bad(total):
        return gib(used)
    return f"{used / 1024**3:.1f} / {total / 1024**3:.1f} GiB"  # type: ignore[operator]


def pct(x: float | None, *, digits: int = 0) -> str:
    return MISSING if _bad(x) else f"{x:.{digits}f} %"


def celsius(x: float | None) -> str:
    return MISSING if _bad(x) else f"{x:.0f} °C"


def watts(x: float | None) -> str:
    if _bad(x):
        return MISSING
    return f"{x / 1000:.2f} kW" if abs(x) >= 10_000 else f"{x:.0f} W"  # type: ignore[operator]


def ms(x: float | None) -> str:
    if _bad(x):
        return MISSING
    if x >= 1000:  # type: ignore[operator]
        return f"{x / 1000:.2f} s"  # type: ignore[operator]
    return f"{x:.2f} ms" if x < 100 else f"{x:.0f} ms"  # type: ignore[operator]


def joules(x: float | None) -> str:
    if _bad(x):
        return MISSING
    if abs(x) >= 3.6e6:  # type: ignore[operator]
        return f"{x / 3.6e6:.2f} kWh"  # type: ignore[operator]
    if abs(x) >= 1000:  # type: ignore[operator]
        return f"{x / 1000:.1f} kJ"  # type: ignore[operator]
    return f"{x:.3g} J"


def rate(x: float | None, unit: str = "/s") -> str:
    if _bad(x):
        return MISSING
    return f"{x:,.1f} {unit}" if x < 1000 else f"{x:,.0f} {unit}"  # type: ignore[operator]


def mhz(x: float | None) -> str:
    return MISSING if _bad(x) else f"{x:.0f} MHz"


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
