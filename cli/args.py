"""Argument types shared by every subcommand: durations, sizes, labels, times."""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime, timezone

from fleetscope.proto.vocabulary import BINARY_BYTE_UNITS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d|w)?\s*$")
_DURATION_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9, "w": 7 * 86400 * 10**9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def duration_ns(text: str) -> int:
    """``"1s"``, ``"500ms"``, ``"7d"`` -> nanoseconds. A bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 500ms, 1s, 15m, 24h, 7d)")
    return int(float(m.group(1)) * _DURATION_NS[m.group(2) or "s"])


def duration_s(text: str) -> float:
    return duration_ns(text) / 1e9


def size_bytes(text: str) -> int:
    """``"256MiB"``, ``"1G"``, ``"4096"`` -> bytes (powers of two)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 64MiB, 1GiB, 500M)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _SIZE_MULT[unit])


def label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"a label is key=value, got {text!r}")
    return key.strip(), value.strip()


def time_ns(text: str, *, now_ns: int | None = None) -> int:
    """An absolute time (ISO 8601, or epoch seconds) or a duration ago (``"2h"`` = two hours ago)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    if text == "now":
        return now_ns
    if _DURATION.match(text) and not text.strip().isdigit():
        return now_ns - duration_ns(text)
    try:
        if text.strip().isdigit():
            return int(text) * 10**9
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (ISO 8601 like 2026-12-01T10:00, epoch seconds, or 2h for two hours ago)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 10**9)


def format_ns(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def format_ago(ts_ns: int, now_ns: int) -> str:
    s = max(0, (now_ns - ts_ns) // 10**9)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    if s < 86400:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in BINARY_BYTE_UNITS:
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"
