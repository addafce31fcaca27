"""Answers that are slow to make, served as last made while the next one is made.

The Fleet page of a 10,000-device fleet summarises every device (about two seconds of queries
on Citus) on each refresh. A page that waits for that on every load is slow for the thing people
look at most; Grafana and dcgm-exporter answer such views from what they read last, and so does
this: an answer older than ``fresh_s`` whose making took ``stale_after_s`` or more is returned at
once, up to ``max_age_s`` old, while the next one is made on a thread of its own. A quick answer
(a small fleet) is made for every request past ``fresh_s``, as before, so nothing is stale
without a reason. The page shows how old what it draws is.

Answers are kept per key (the database, the devices a table page shows...), the
``max_entries`` used last.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
NS = 1_000_000_000


@dataclass(frozen=True)
class Served(Generic[T]):
    value: T
    as_of_ns: int  # the time the answer is about (the ``now_ns`` it was made for)
    stale: bool  # an older answer served while a newer one is made


@dataclass
class _Entry(Generic[T]):
    value: T
    as_of_ns: int
    made_at: float  # monotonic, when its making started
    took_s: float


class ServedLast(Generic[T]):
    """A keyed cache that returns a slow answer's last value while refreshing it (see the module)."""

    def __init__(self, *, fresh_s: float, stale_after_s: float = 1.0, max_age_s: float = 60.0, max_entries: int = 32,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.fresh_s, self.stale_after_s, self.max_age_s = fresh_s, stale_after_s, max_age_s
        self._max_entries = max_entries
        self._monotonic = monotonic
        self._lock = threading.Lock()  # the dicts below
        self._entries: OrderedDict[Hashable, _Entry[T]] = OrderedDict()
        self._making: dict[Hashable, threading.Lock] = {}  # one making per key at a time
        self._background: dict[Hashable, threading.Thread] = {}

    def get(self, key: Hashable, now_ns: int, make: Callable[[int], T]) -> Served[T]:
        """The answer for ``key`` as of ``now_ns``: the kept one when it is at most ``fresh_s``
        older than ``now_ns``; the kept one, stale, while ``make(now_ns)`` runs in the background
        when making it is slow and it is not past ``max_age_s``; otherwise made now."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if now_ns - entry.as_of_ns < self.fresh_s * NS:
                    return Served(entry.value, entry.as_of_ns, stale=False)
                if entry.took_s >= self.stale_after_s and self._monotonic() - entry.made_at < self.max_age_s:
                    self._refresh_in_background(key, now_ns, make)
                    return Served(entry.value, entry.as_of_ns, stale=True)
        made = self._make(key, now_ns, make)
        return Served(made.value, made.as_of_ns, stale=False)

    def wait_for_refresh(self, key: Hashable, timeout_s: float | None = None) -> None:
        """Until the background making for ``key``, if any, is done (tests)."""
        thread = self._background.get(key)
        if thread is not None:
            thread.join(timeout_s)

    def _refresh_in_background(self, key: Hashable, now_ns: int, make: Callable[[int], T]) -> None:
        running = self._background.get(key)
        if running is not None and running.is_alive():
            return  # one at a time: twenty viewers refreshing start one making

        def refresh() -> None:
            try:
                self._make(key, now_ns, make)
            except Exception as exc:  # the database is away: the last answer is served until max_age_s
                log.warning("refreshing %r failed, the last answer is served meanwhile: %s", key, exc)

        thread = threading.Thread(target=refresh, name="fleetscope-served-last", daemon=True)
        self._background[key] = thread
        thread.start()

    def _make(self, key: Hashable, now_ns: int, make: Callable[[int], T]) -> _Entry[T]:
        with self._lock:
            making = self._making.setdefault(key, threading.Lock())
        with making:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and now_ns - entry.as_of_ns < self.fresh_s * NS:
                    return entry  # made by another request while this one waited
            started = self._monotonic()
            value = make(now_ns)
            made = _Entry(value, now_ns, started, self._monotonic() - started)
            with self._lock:
                kept = self._entries.get(key)
                if kept is None or kept.as_of_ns <= now_ns:  # never replace a newer answer
                    self._entries[key] = made
                    self._entries.move_to_end(key)
                while len(self._entries) > self._max_entries:
                    old, _ = self._entries.popitem(last=False)
                    self._making.pop(old, None)
                    self._background.pop(old, None)
            return made
