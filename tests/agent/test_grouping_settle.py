"""An ended traceback leaves the agent's grouper once a poll after the settle time brings nothing
that continues it (not after max_wait_s), and a chained one written across two polls stays one
event. Times come from an injected clock; no test waits."""

from __future__ import annotations

from fleetscope.agent.logs.grouping import EventGrouper
from fleetscope.agent.records import LogEvent

MS = 10**6

OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 88, in <module>',
    "    loss = model(batch).sum()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB",
]
CHAINED = [
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 91, in <module>',
    "    raise RuntimeError('training failed')",
    "RuntimeError: training failed",
]


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000 * MS

    def __call__(self) -> int:
        return self.ns


def _lines(texts: list[str]) -> list[LogEvent]:
    return [LogEvent(ts_ns=0, source="/var/log/train.log", message=t, level="info") for t in texts]


def test_an_ended_traceback_leaves_at_the_first_poll_after_the_settle_time() -> None:
    clock = Clock()
    g = EventGrouper(max_wait_s=2.0, settle_s=0.3, clock=clock)
    assert g.feed(_lines(OOM_TRACEBACK)) == [], "held: a chained exception may still follow"
    clock.ns += 250 * MS
    assert g.feed([]) == [], "not yet settled"
    clock.ns += 100 * MS
    (event,) = g.feed([])
    assert event.message.splitlines() == OOM_TRACEBACK


def test_a_chained_traceback_written_across_two_polls_stays_one_event() -> None:
    clock = Clock()
    g = EventGrouper(max_wait_s=2.0, settle_s=0.3, clock=clock)
    assert g.feed(_lines(OOM_TRACEBACK)) == []
    clock.ns += 50 * MS
    assert g.feed(_lines(CHAINED)) == []
    clock.ns += 350 * MS
    (event,) = g.feed([])
    assert event.message.splitlines() == OOM_TRACEBACK + CHAINED


def test_a_traceback_still_in_its_frames_waits_for_max_wait() -> None:
    clock = Clock()
    g = EventGrouper(max_wait_s=2.0, settle_s=0.3, clock=clock)
    assert g.feed(_lines(OOM_TRACEBACK[:3])) == []
    clock.ns += 1_000 * MS
    assert g.feed([]) == [], "no exception line yet: more frames may come"
    clock.ns += 1_000 * MS
    (event,) = g.feed([])
    assert event.message.splitlines() == OOM_TRACEBACK[:3]


def test_without_a_settle_time_an_ended_traceback_waits_for_max_wait() -> None:
    clock = Clock()
    g = EventGrouper(max_wait_s=2.0, settle_s=None, clock=clock)
    assert g.feed(_lines(OOM_TRACEBACK)) == []
    clock.ns += 1_500 * MS
    assert g.feed([]) == []
    clock.ns += 500 * MS
    assert len(g.feed([])) == 1
