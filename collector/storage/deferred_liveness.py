"""On Citus: the device rows' liveness, written a second at a time outside the batches' transactions.

``devices`` and ``streams`` are reference tables on Citus (``storage.citus``): a copy on every node,
written on every node in two phases, one such write at a time. A batch group that updated its
devices' last-seen time and counts in its own transaction therefore touched every node: while
any worker was stopped no group committed (the whole fleet stalled, not only the devices on that
worker), and the writes queued behind each other. So on Citus a batch's transaction touches only
its device's worker, and what it used to write on the device row (last seen, batches stored and
rejected, clock skew, the agent's counters, the last rejection, clock steps) and what an agent's
re-registration writes on its device and stream rows (last seen, skew) is merged here and
written in one statement per table, at most once a second, by the writer's thread.

What that costs, and why it is the better trade: the device rows trail the stored batches by up
to a second (more while a node is down: a failed write is kept and merged into the next); and a
collector killed between a commit and the next write loses that second's counts on the device row
(``batches_stored`` is a count shown to people, not a guard: exactly once is the claims', which
commit with the rows). Plain PostgreSQL and SQLite keep the updates in the batch's transaction.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

# Summed when two updates of one device merge; every other key is the newer update's.
_ADDED = ("stored", "rejected", "reanchored")


def merge_device_update(older: dict, newer: dict) -> dict:
    """One device's update standing for ``older`` then ``newer`` (the writer's update dicts:
    ``statements.update_devices``): the counts summed, last seen the later, the rest the newer's
    where it has them."""
    merged = {**older, **newer}
    for key in _ADDED:
        if key in older or key in newer:
            merged[key] = older.get(key, 0) + newer.get(key, 0)
    merged["last_seen_ns"] = max(older.get("last_seen_ns", 0), newer.get("last_seen_ns", 0))
    return merged


class DeferredLiveness:
    """Device and stream liveness waiting to be written (thread-safe: the writer's thread adds
    and flushes, registrations add from their own threads)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._devices: dict[int, dict] = {}
        self._streams: dict[tuple[str, str], tuple[int, int]] = {}  # (agent, boot) -> (skew ns, last seen ns)
        self._last_flush = time.monotonic()
        self.failures = 0  # writes that failed and were put back

    def add_devices(self, updates: dict[int, dict]) -> None:
        with self._lock:
            for device_id, upd in updates.items():
                old = self._devices.get(device_id)
                self._devices[device_id] = upd if old is None else merge_device_update(old, upd)

    def add_stream(self, agent_id: str, boot_id: str, clock_skew_ns: int, last_seen_ns: int) -> None:
        with self._lock:
            old = self._streams.get((agent_id, boot_id))
            if old is None or last_seen_ns >= old[1]:
                self._streams[(agent_id, boot_id)] = (clock_skew_ns, last_seen_ns)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._devices) + len(self._streams)

    def due(self, now: float | None = None) -> bool:
        """Whether something waits and the last flush was ``interval_s`` ago."""
        now = time.monotonic() if now is None else now
        return self.pending > 0 and now - self._last_flush >= self.interval_s

    def take(self) -> tuple[dict[int, dict], dict[tuple[str, str], tuple[int, int]]]:
        with self._lock:
            devices, streams = self._devices, self._streams
            self._devices, self._streams = {}, {}
        self._last_flush = time.monotonic()
        return devices, streams

    def put_back(self, devices: dict[int, dict], streams: dict[tuple[str, str], tuple[int, int]]) -> None:
        """What a failed write took, merged under what arrived since (which is newer)."""
        with self._lock:
            for device_id, upd in devices.items():
                newer = self._devices.get(device_id)
                self._devices[device_id] = upd if newer is None else merge_device_update(upd, newer)
            for key, value in streams.items():
                newer_stream = self._streams.get(key)
                if newer_stream is None or value[1] > newer_stream[1]:
                    self._streams[key] = value


__all__ = ["DeferredLiveness", "merge_device_update"]
