"""Giving memory the collector freed back to the system.

After a connection flood (hundreds of idle or silent sockets, clients stalled mid-batch with
megabytes buffered each) is closed, the collector has freed what the flood held, but glibc's
malloc keeps freed memory in its arenas (one per thread that allocated, so gRPC's and the
writer's threads each strand some) and the process's RSS stays 20-160 MiB above its start for
as long as no later allocation reuses it. ``malloc_trim(0)`` returns those free pages: measured
with ``benchmarks/bench_connection_flood.py``, it takes RSS back to within ~10 MiB of the start
(what stays does not grow from flood to flood: not a leak). The ``MemoryTrimmer`` calls it on a
thread of its own every ``interval_s``; a trim costs milliseconds. Without glibc (musl, macOS)
there is no ``malloc_trim`` and the trimmer does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

__all__ = ["MemoryTrimmer", "malloc_trim"]


def _find_malloc_trim() -> Callable[[], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: glibc's, when it is linked
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


_MALLOC_TRIM = _find_malloc_trim()


def malloc_trim() -> bool:
    """Return free heap memory to the system; True when some was returned (False without glibc)."""
    return bool(_MALLOC_TRIM()) if _MALLOC_TRIM is not None else False


class MemoryTrimmer:
    """Calls ``malloc_trim`` every ``interval_s`` on a thread of its own; ``start``/``stop``."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self.trims = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if _MALLOC_TRIM is None or self.interval_s <= 0:
            log.debug("no malloc_trim here (or turned off): freed memory stays with the allocator")
            return
        self._thread = threading.Thread(target=self._run, name="fleetscope-trim", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            malloc_trim()
            self.trims += 1

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
