"""Limits per agent: batches per second, bytes per second, series cardinality, registrations.

One noisy or hostile agent must not take the collector from the rest of the fleet. Each agent id
has token buckets (refilled at the rate, holding up to ``burst_s`` seconds of it):

* **batches and bytes per second**: over the rate, the collector stops reading that agent's
  stream for as long as the buckets need to refill. Nothing is dropped: HTTP/2 flow control and
  the agent's window hold the agent back, its spool keeps the rest, and other agents' streams
  are read as before (each stream has its own reader).
* **registrations per minute**: over it, Register is refused with RESOURCE_EXHAUSTED and a
  ``retry-after`` (seconds) the agent's uplink honours. Only registrations that passed the
  identity check count: a client that claims an agent id it cannot open spends nothing of it.
* **a quota per token**: the bytes per second of all the devices one enrolment token enrolled
  (devices without one: per fleet), so that the identities minted with one stolen token share
  one rate and cannot fill the disk faster than it; streams over it are read more slowly, as
  above.
* **refused calls per caller**: a caller (its address, and the token it holds) whose calls were
  refused more than ``refusals_per_min`` times gets RESOURCE_EXHAUSTED before any database work,
  except for calls with a device key this collector has already seen pass.
* **series**: the distinct latency histograms and metric names (with their labels) one agent
  has sent since this collector started; the points of new series beyond ``max_series`` are
  dropped from the batch (the rest of it is stored) and counted.

Each agent is reported once in the log when first limited, and counted in ``AgentLimiter.report()``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetscope.proto.v1 import telemetry_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentLimits:
    batches_per_s: float = 200.0  # an agent sends ~1/s; a spool replay after an outage goes faster
    bytes_per_s: float = 32 << 20
    burst_s: float = 5.0  # how much of the rate an idle agent may spend at once
    max_series: int = 2_000  # distinct latency + metric series per agent (name and labels)
    registrations_per_min: float = 30.0
    # All the devices of one enrolment token (or one fleet, without one) together: a thousand
    # devices at the default interval send 1 to 2 MiB/s, so a spool replay still goes at ten times that.
    token_bytes_per_s: float = 16 << 20
    refusals_per_min: float = 60.0  # refused Register/Stream calls per caller (address, token)

    @property
    def off(self) -> bool:
        return (self.batches_per_s <= 0 and self.bytes_per_s <= 0 and self.max_series <= 0 and self.registrations_per_min <= 0
                and self.token_bytes_per_s <= 0 and self.refusals_per_min <= 0)


class _Bucket:
    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self.level = capacity
        self.at = now

    def take(self, amount: float, now: float) -> float:
        """Take ``amount``; returns how long to wait before the level is back at zero (0: none)."""
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def wait_for(self, amount: float, now: float) -> float:
        """How long until ``amount`` could be taken (0: now), without taking it."""
        level = min(self.capacity, self.level + (now - self.at) * self.rate)
        return 0.0 if level >= amount else (amount - level) / self.rate

    def full(self, now: float) -> bool:
        return self.level + (now - self.at) * self.rate >= self.capacity


@dataclass
class AgentReport:
    throttled: int = 0  # batches after which reading paused
    throttled_s: float = 0.0
    series_dropped: int = 0  # points of series beyond the cap
    registrations_refused: int = 0
    quota_throttled_s: float = 0.0  # seconds its stream paused for its token's (or fleet's) quota


@dataclass
class _AgentState:
    batches: _Bucket | None
    bytes: _Bucket | None
    registrations: _Bucket | None
    series: set[int] = field(default_factory=set)
    report: AgentReport = field(default_factory=AgentReport)
    reported: bool = False


class AgentLimiter:
    """The limits' state, per agent id, in one collector process (event-loop thread only)."""

    def __init__(self, limits: AgentLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._agents: dict[str, _AgentState] = {}
        self._groups: dict[str, _Bucket] = {}  # the quota per token (or fleet), by quota group
        self._refusals: dict[str, _Bucket] = {}  # refused calls, by caller (address, token)
        self.callers_throttled = 0  # calls refused for their caller's refusals

    def _state(self, agent_id: str) -> _AgentState:
        st = self._agents.get(agent_id)
        if st is None:
            lim, now = self.limits, self._clock()

            def bucket(rate: float, burst_s: float) -> _Bucket | None:
                return _Bucket(rate, max(1.0, rate * burst_s), now) if rate > 0 else None

            st = _AgentState(bucket(lim.batches_per_s, lim.burst_s), bucket(lim.bytes_per_s, lim.burst_s),
                             bucket(lim.registrations_per_min / 60.0, 60.0))
            self._agents[agent_id] = st
        return st

    def _note(self, agent_id: str, st: _AgentState, what: str) -> None:
        if not st.reported:
            st.reported = True
            log.warning("agent %s exceeds its limits (%s); it is throttled, other agents are not", agent_id, what)

    def batch_delay(self, agent_id: str, size_bytes: int) -> float:
        """Seconds to pause reading this agent's stream after a batch of ``size_bytes``."""
        st = self._state(agent_id)
        now = self._clock()
        wait = 0.0
        if st.batches is not None:
            wait = max(wait, st.batches.take(1.0, now))
        if st.bytes is not None:
            wait = max(wait, st.bytes.take(float(size_bytes), now))
        if wait > 0:
            st.report.throttled += 1
            st.report.throttled_s += wait
            self._note(agent_id, st, f"over {self.limits.batches_per_s:g} batches/s or {self.limits.bytes_per_s:g} bytes/s")
        return wait

    def registration_retry_after(self, agent_id: str) -> float:
        """0 when this registration may go on; else the seconds after which to retry. Takes
        nothing: ``registered`` counts a registration once it passed the identity check."""
        st = self._state(agent_id)
        if st.registrations is None:
            return 0.0
        wait = st.registrations.wait_for(1.0, self._clock())
        if wait > 0:
            st.report.registrations_refused += 1
            self._note(agent_id, st, f"over {self.limits.registrations_per_min:g} registrations/min")
        return wait

    def registered(self, agent_id: str) -> None:
        """Count a registration that passed the identity check against its agent's allowance."""
        st = self._state(agent_id)
        if st.registrations is not None:
            st.registrations.take(1.0, self._clock())

    def quota_delay(self, group: str, agent_id: str, size_bytes: int) -> float:
        """Seconds to pause reading a stream of quota ``group`` (its token, or its fleet) after a
        batch of ``size_bytes``."""
        rate = self.limits.token_bytes_per_s
        if rate <= 0:
            return 0.0
        now = self._clock()
        bucket = self._groups.get(group)
        if bucket is None:
            bucket = self._groups[group] = _Bucket(rate, max(1.0, rate * self.limits.burst_s), now)
        wait = bucket.take(float(size_bytes), now)
        if wait > 0:
            st = self._state(agent_id)
            st.report.quota_throttled_s += wait
            self._note(agent_id, st, f"its token or fleet ({group}) over {rate:g} bytes/s together")
        return wait

    def caller_retry_after(self, callers: tuple[str, ...]) -> float:
        """0 when these callers (address, token) may make a call; else the seconds until one of
        them may again, having had too many calls refused."""
        rate = self.limits.refusals_per_min / 60.0
        if rate <= 0:
            return 0.0
        now = self._clock()
        wait = max((b.wait_for(1.0, now) for c in callers if (b := self._refusals.get(c)) is not None), default=0.0)
        if wait > 0:
            self.callers_throttled += 1
        return wait

    def refused(self, callers: tuple[str, ...]) -> None:
        """A call of these callers was refused (wrong key, no token, a revoked device...)."""
        rate = self.limits.refusals_per_min / 60.0
        if rate <= 0:
            return
        now = self._clock()
        if len(self._refusals) >= 100_000:  # a scan from many addresses: forget the callers that are quiet again
            self._refusals = {c: b for c, b in self._refusals.items() if not b.full(now)}
        for caller in callers:
            bucket = self._refusals.get(caller)
            if bucket is None:
                bucket = self._refusals[caller] = _Bucket(rate, max(1.0, rate * 60.0), now)
            bucket.take(1.0, now)

    def trim_series(self, batch: pb.Batch) -> int:
        """Drop from ``batch`` the latency and metric points of new series beyond the cap; returns
        how many were dropped."""
        cap = self.limits.max_series
        if cap <= 0 or not (len(batch.latency) or len(batch.metrics)):
            return 0
        st = self._state(batch.agent_id)
        dropped = 0
        for repeated in (batch.latency, batch.metrics):
            keep: list[int] = []
            for i, item in enumerate(repeated):
                key = hash((type(item).__name__, item.name, tuple(sorted(item.labels.items()))))
                if key in st.series:
                    keep.append(i)
                elif len(st.series) < cap:
                    st.series.add(key)
                    keep.append(i)
            if len(keep) < len(repeated):
                kept = [repeated[i] for i in keep]
                copies = [type(k)() for k in kept]
                for c, k in zip(copies, kept):
                    c.CopyFrom(k)
                dropped += len(repeated) - len(keep)
                del repeated[:]
                repeated.extend(copies)
        if dropped:
            st.report.series_dropped += dropped
            self._note(agent_id=batch.agent_id, st=st, what=f"over {cap} series")
        return dropped

    def report(self) -> dict[str, AgentReport]:
        """Agents that were limited, with what happened to them."""
        return {a: st.report for a, st in self._agents.items() if st.reported}
