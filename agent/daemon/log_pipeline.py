"""The agent's log path: poll the log sources, group their lines into events, classify the events.

One tick's lines (the sources' and any a sampler produced, such as a simulated job's output)
go through one :class:`~fleetscope.agent.logs.grouping.EventGrouper`, the grouper ``fleetscope
scan`` uses on files, so a live agent and a scan find the same incidents in the same text. A
source that raises is counted and said once; the others go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from fleetscope.agent.classify.repeats import merge_repeats
from fleetscope.agent.logs._base import LogSource
from fleetscope.agent.logs.grouping import EventGrouper
from fleetscope.agent.records import IncidentRecord, LogEvent
from fleetscope.agent.samplers._base import SampleSet

__all__ = ["Classify", "LogPipeline"]

log = logging.getLogger(__name__)

Classify = Callable[[LogEvent], list[IncidentRecord]]


class LogPipeline:
    def __init__(
        self,
        sources: Sequence[LogSource],
        *,
        classify: Classify | None = None,
        grouper: EventGrouper | None = None,
    ) -> None:
        self._sources = list(sources)
        self._classify = classify
        self._grouper = grouper if grouper is not None else EventGrouper()
        self.errors = 0  # polls that raised
        self._warned: set[str] = set()

    def read(self, now_ns: int, lines: Sequence[LogEvent] = ()) -> SampleSet:
        """The events (and their incidents) that ended this tick: the sources' new lines and
        ``lines``, grouped. Call it every tick, also when nothing was written: that is when held
        multi-line blocks time out."""
        polled = list(lines)
        for source in self._sources:
            try:
                polled.extend(source.poll(now_ns))
            except Exception as exc:  # a log source must not stop sampling
                self.errors += 1
                if source.name not in self._warned:
                    self._warned.add(source.name)
                    log.warning("log source %s failed: %s", source.name, exc)
        return self._events(self._grouper.feed(polled))

    def close(self) -> SampleSet:
        """The blocks still held, as events; then the sources are closed."""
        out = self._events(self._grouper.flush_all())
        for source in self._sources:
            try:
                source.close()
            except Exception as exc:  # closing is best effort
                log.debug("closing %s: %s", source.name, exc)
        return out

    def _events(self, events: list[LogEvent]) -> SampleSet:
        incidents: list[IncidentRecord] = []
        if self._classify is not None:
            for ev in events:
                incidents.extend(self._classify(ev))
        # One fault, one incident: copies within one tick's events are merged, as a scan merges
        # them within a file (agent/classify/repeats.py); later copies are the collector's to count.
        return SampleSet(logs=events, incidents=merge_repeats(incidents))
