"""The agent's two clocks: the wall clock rows are stamped with, and a monotonic one beside it.

The wall clock can step (NTP arriving on a Jetson that booted without a real-time clock);
CLOCK_BOOTTIME never does, and keeps counting through a suspend, so a (wall, boottime) pair
read at batch creation and again at send tells the collector how far the wall clock moved in
between (docs/design.md, "Clocks").
"""

from __future__ import annotations

import time

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)  # Linux only


def boot_clock_ns() -> int:
    """Nanoseconds since boot on a clock that never steps (CLOCK_BOOTTIME; monotonic elsewhere)."""
    if _BOOTTIME is not None:
        return time.clock_gettime_ns(_BOOTTIME)
    return time.monotonic_ns()
