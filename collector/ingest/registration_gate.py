"""How many registrations the collector writes at once, and which it sheds.

A collector restart, a database failover or a network blip makes every agent register again
within seconds. Each registration is a transaction on the device registry (on Citus, ``devices``
is a reference table: every write is committed on every node in two phases), so a thousand of
them queue. Without a gate they all wait in the thread pool the streams' own lookups need, and
an agent whose ``Register`` deadline (10 s) passed while it waited still gets its write done:
the agent has already retried, so the same work is done two or three times over and the queue
never drains (3,000 registrations for 1,000 devices in 3.5 minutes, measured on Citus).

The gate admits ``max_in_flight`` registrations at a time. A caller waits for a slot at most
until its own deadline; one whose deadline passes, or is too close to do the write, is shed
without touching the database (DEADLINE_EXCEEDED: the agent has given up on the call anyway).
Beyond ``max_waiting`` waiters a caller is refused at once with RESOURCE_EXHAUSTED and a
``retry-after`` sized to the queue, spread with jitter, which the agent's uplink honours.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# A registration admitted with less time than this left could not finish before the caller's
# deadline: it would be written for an agent that is no longer waiting for the answer.
MIN_TIME_LEFT_S = 0.25
_MAX_RETRY_AFTER_S = 60.0


class RegistrationShed(Exception):
    """The registration was not written. ``expired``: the caller's deadline passed while it
    waited; otherwise the queue was full and ``retry_after_s`` says when to try again."""

    def __init__(self, *, expired: bool, retry_after_s: float = 0.0, waiting: int = 0) -> None:
        self.expired = expired
        self.retry_after_s = retry_after_s
        self.waiting = waiting
        super().__init__("deadline passed while waiting" if expired else f"{waiting} registrations waiting")


class RegistrationGate:
    def __init__(self, max_in_flight: int, *, max_waiting: int | None = None, max_wait_s: float = 30.0) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self.max_waiting = 4 * max_in_flight if max_waiting is None else max_waiting
        self._max_wait_s = max_wait_s  # for a caller that set no deadline
        self._slots = asyncio.Semaphore(max_in_flight)
        self._mean_s = 0.05  # running mean of a registration's write, for the retry-after
        # Read by the self-metrics at scrape time.
        self.in_flight = 0
        self.waiting = 0
        self.shed = {"expired": 0, "queue_full": 0}

    async def write(self, time_remaining_s: float | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker thread once a slot is free; raises RegistrationShed
        instead when the caller (``time_remaining_s`` left of its deadline, None: no deadline)
        should not be written now. The slot is held until ``fn`` returns, even when the caller
        goes away meanwhile: the thread is still writing, and the cap is on the writes."""
        await self._acquire(time_remaining_s)
        self.in_flight += 1
        began = time.monotonic()

        def release(_: asyncio.Future) -> None:
            self.in_flight -= 1
            self._slots.release()
            self._mean_s += 0.1 * ((time.monotonic() - began) - self._mean_s)

        work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
        work.add_done_callback(release)
        return await asyncio.shield(work)

    async def _acquire(self, time_remaining_s: float | None) -> None:
        if self.waiting >= self.max_waiting and self._slots.locked():
            self.shed["queue_full"] += 1
            raise RegistrationShed(expired=False, retry_after_s=self._retry_after(), waiting=self.waiting)
        budget = self._max_wait_s if time_remaining_s is None else time_remaining_s - MIN_TIME_LEFT_S
        self.waiting += 1
        try:
            if budget <= 0:
                raise TimeoutError
            await asyncio.wait_for(self._slots.acquire(), budget)
        except TimeoutError:
            if time_remaining_s is None:  # no deadline of its own: the queue is what held it
                self.shed["queue_full"] += 1
                raise RegistrationShed(expired=False, retry_after_s=self._retry_after(), waiting=self.waiting) from None
            self.shed["expired"] += 1
            raise RegistrationShed(expired=True) from None
        except asyncio.CancelledError:  # the caller went first (its deadline, or it hung up)
            self.shed["expired"] += 1
            raise
        finally:
            self.waiting -= 1

    def _retry_after(self) -> float:
        """Long enough for the queue ahead to drain at the recent pace, spread over a further
        half of it so that the refused agents do not come back together."""
        drain = (self.waiting + self.in_flight) * self._mean_s / self.max_in_flight
        return min(_MAX_RETRY_AFTER_S, max(1.0, drain) * random.uniform(1.0, 1.5))
