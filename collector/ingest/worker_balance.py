"""Even out agents across the worker processes of one ``--workers N`` collector.

The workers share one port through ``SO_REUSEPORT``, and the kernel picks a worker for each new
connection by a hash of its addresses. Nothing makes that even: 20 agents land 13 and 7 about a
quarter of the time, and an agent streams to the worker it landed on for as long as its
connection lives. The busier worker then sets the pace of the whole group (every core but one
idles while it works through its extra agents).

So the workers tell each other how many agent connections each holds (``WorkerLoads``: per
worker a count and a heartbeat in a small shared file, mapped into every worker; a worker whose
heartbeat is older than ``stale_s`` is left out, so one that died or has not started yet does not
look idle and draw every agent's reconnect), and each one (``StreamBalancer``):

* **at registration** (an agent's first call on a new connection) refuses the agent with
  ``UNAVAILABLE`` and a detail starting with ``REBALANCE_DETAIL`` unless it is the least loaded
  worker (within a slack of 5 %). A connection's load is its weight: one for the host and one per
  GPU in the inventory the agent registers with (``connection_weight``). The agent reconnects (a new connection: a new source
  port, hashed afresh, so it lands on the same worker again only by chance). A worker turns one
  agent away at most ``turn_away_limit`` times per ``refuse_again_s``, so no agent bounces for
  long whatever the hash does.
* **while streaming**, every ``check_s``, asks streams to leave when agents that left made it
  the busiest by more than the slack (half the excess in weight, ``choose_to_shed``): such a stream stops reading, acknowledges what
  it had read, and ends with the same status. Nothing is lost: what was not acknowledged stays
  in the agent's spool and is sent again on the new connection (stored once: the exactly-once
  claim).

A connection is counted from its registration until its last stream ends (or ``unclaimed_s``
after a registration not followed by a stream). Connections are told apart by their peer
address (``context.peer()``), which is the same for every call on one connection.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from fleetscope.proto.vocabulary import REBALANCE_DETAIL

K = TypeVar("K")  # what the caller names a stream by

_SLOT = struct.Struct("<qq")  # agent connections, heartbeat (time.monotonic_ns: one clock for every process)

__all__ = ["REBALANCE_DETAIL", "StreamBalancer", "WorkerLoads", "connection_weight"]


class WorkerLoads:
    """A count and a heartbeat per worker in a file every worker maps: each writes its own slot only."""

    def __init__(self, path: str | os.PathLike[str], index: int, *, stale_s: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.path = Path(path)
        with open(self.path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0 or size % _SLOT.size:
                raise ValueError(f"{self.path}: not a worker loads file ({size} bytes)")
            self._map = mmap.mmap(f.fileno(), size)
        self.workers = size // _SLOT.size
        if not 0 <= index < self.workers:
            raise ValueError(f"worker index {index} outside the {self.workers} workers of {self.path}")
        self.index = index
        self.stale_ns = int(stale_s * 1e9)
        self._clock_ns = clock_ns

    @staticmethod
    def create(path: str | os.PathLike[str], workers: int) -> None:
        """A file of ``workers`` zero counts (written by the process that starts the workers)."""
        Path(path).write_bytes(bytes(_SLOT.size * workers))

    def publish(self, count: int) -> None:
        # A reader may see the count of one store and the heartbeat of another: both are only
        # ever read as "about this many, lately".
        _SLOT.pack_into(self._map, self.index * _SLOT.size, count, self._clock_ns())

    def counts(self) -> list[int | None]:
        """Each worker's agent connections; None for one whose heartbeat is stale (stopped, dead,
        not started yet)."""
        now = self._clock_ns()
        out: list[int | None] = []
        for i in range(self.workers):
            count, beat = _SLOT.unpack_from(self._map, i * _SLOT.size)
            out.append(count if beat and now - beat <= self.stale_ns else None)
        return out

    def least_of_others(self) -> int | None:
        """The least loaded live other worker's count; None when no other worker is alive."""
        others = [c for i, c in enumerate(self.counts()) if i != self.index and c is not None]
        return min(others) if others else None

    def leave(self) -> None:
        """This worker stops: its slot reads as not alive at once."""
        _SLOT.pack_into(self._map, self.index * _SLOT.size, 0, 0)

    def close(self) -> None:
        self._map.close()


def connection_weight(gpus: int) -> int:
    """What one agent's connection is expected to carry, in units of about one GPU's readings: its
    host's readings and one share per GPU (an 8-GPU server sends about four and a half times a
    one-GPU Jetson's values). Counting connections alone, a worker given the servers and another
    the drones would be "even" and far apart."""
    return 1 + max(0, gpus)


def slack(least: int) -> int:
    """How much more than the least loaded worker a worker may hold and still take agents: 5 % of
    that load, rounded down (a small fleet is split to the agent; a 10,000-agent one need not be,
    and a reconnect storm should not be answered with more reconnects)."""
    return least // 20


class StreamBalancer:
    """This worker's connections, each with its weight (``connection_weight``), and the decisions
    to turn an agent away (see the module). Its load is the sum of its connections' weights."""

    def __init__(self, loads: WorkerLoads, *, refuse_again_s: float = 30.0, turn_away_limit: int = 3,
                 unclaimed_s: float = 60.0, check_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.loads = loads
        self.refuse_again_s = refuse_again_s
        self.turn_away_limit = turn_away_limit
        self.unclaimed_s = unclaimed_s
        self.check_s = check_s
        self._clock = clock
        self._weights: dict[str, int] = {}  # peer -> its weight, while it is counted
        self._registered: dict[str, float] = {}  # peer -> when it registered, until its first stream
        self._streams: dict[str, int] = {}  # peer -> its open streams
        # agent id -> (when this worker first turned it away in the current window, how often since)
        self._turned_away: dict[str, tuple[float, int]] = {}
        self.refused = 0  # registrations turned away
        self.shed = 0  # streams asked to leave
        self._left = False
        loads.publish(0)

    @property
    def load(self) -> int:
        return sum(self._weights.values())

    def weight_of(self, peer: str) -> int:
        return self._weights.get(peer, 1)

    def _publish(self) -> None:
        if not self._left:
            self.loads.publish(self.load)

    def leave(self) -> None:
        """This worker is stopping: from now on it reads as not alive to the others (its streams
        closing meanwhile must not make it look like the least loaded worker)."""
        self._left = True
        self.loads.leave()

    def heartbeat(self) -> None:
        """Say this worker is alive (and its load), every ``check_s`` at least."""
        self._forget_unclaimed(self._clock())
        self._publish()

    def _over(self) -> int | None:
        """This worker's load beyond the least loaded other worker's plus the slack; None with no
        other worker alive."""
        least = self.loads.least_of_others()
        if least is None:
            return None
        return self.load - least - slack(least)

    def _turn_away(self, agent_id: str, now: float) -> bool:
        """Whether ``agent_id`` may be turned away now; counts it when so."""
        since, times = self._turned_away.get(agent_id, (now, 0))
        if now - since >= self.refuse_again_s:
            since, times = now, 0
        if times >= self.turn_away_limit:
            return False
        self._turned_away[agent_id] = (since, times + 1)
        return True

    def admit(self, peer: str, agent_id: str, weight: int = 1) -> bool:
        """A registration on connection ``peer``: False to turn the agent away (then reconnecting).
        A worker takes agents while it is the least loaded, within the slack."""
        now = self._clock()
        self._forget_unclaimed(now)
        if peer in self._weights:  # a connection already counted
            return True
        over = self._over()
        if over is not None and over > 0 and self._turn_away(agent_id, now):
            self.refused += 1
            return False
        self._weights[peer] = max(1, weight)
        self._registered[peer] = now
        self._publish()
        return True

    def opened(self, peer: str) -> None:
        self._registered.pop(peer, None)
        self._weights.setdefault(peer, 1)  # a stream with no registration on its connection (an old agent's)
        self._streams[peer] = self._streams.get(peer, 0) + 1
        self._publish()

    def closed(self, peer: str) -> None:
        left = self._streams.get(peer, 0) - 1
        if left > 0:
            self._streams[peer] = left
        else:
            self._streams.pop(peer, None)
            if peer not in self._registered:
                self._weights.pop(peer, None)
        self._publish()

    def surplus(self) -> int:
        """The load to move off this worker now: half its excess over the least loaded worker
        (what leaves lands on any worker, this one included; the next check sees where)."""
        self._forget_unclaimed(self._clock())
        over = self._over()
        return 0 if over is None or over <= 1 else over // 2

    def choose_to_shed(self, streams: Sequence[tuple[K, str | None, str]]) -> list[K]:
        """Of ``streams`` (key, agent id, peer), newest first, the ones to ask to leave now: up to
        ``surplus`` in weight, each lighter than the whole excess (moving a heavier one would only
        turn the imbalance around), each agent at most ``turn_away_limit`` times a window."""
        want = self.surplus()
        chosen: list[K] = []
        for key, agent_id, peer in streams:
            if want <= 0:
                break
            w = self.weight_of(peer)
            if w >= 2 * want + 1 or not self._turn_away(agent_id or "", self._clock()):
                continue
            chosen.append(key)
            self.shed += 1
            want -= w
        return chosen

    def _forget_unclaimed(self, now: float) -> None:
        stale = [p for p, t in self._registered.items() if now - t > self.unclaimed_s and p not in self._streams]
        for p in stale:
            del self._registered[p]
            self._weights.pop(p, None)
        if stale:
            self._publish()
        if len(self._turned_away) > 4096:
            for agent, (t, _times) in list(self._turned_away.items()):
                if now - t >= self.refuse_again_s:
                    del self._turned_away[agent]
