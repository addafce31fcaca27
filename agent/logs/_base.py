"""The one interface every log source has.

A log source hands the agent the lines written since its last poll. ``poll`` never waits (a
source that reads a pipe or a child process reads it on its own thread) and returns at most a
bounded number of lines, in the order written. Blank lines need not be dropped: the grouper
(``fleetscope.agent.logs.grouping``) reads where blocks end from them and drops the others.
Each event's ``source`` says which file or unit it came from, so the grouper keeps sources
apart. A source that cannot read (no permission, no journalctl) says so
once in the log and returns nothing; ``close`` stops it and is called once.
"""

from __future__ import annotations

from typing import Protocol

from fleetscope.agent.records import LogEvent

__all__ = ["DEFAULT_JOURNALCTL", "LogSource", "priority_level"]

# Shared by the journal source and the kernel log (which falls back to ``journalctl -k``): kept
# here so that a kernel log read from /dev/kmsg does not import the journal reader.
DEFAULT_JOURNALCTL: tuple[str, ...] = ("journalctl",)

# syslog priority (the low 3 bits of a PRI) -> LogEvent level: emerg, alert, crit, err, warning,
# notice, info, debug.
_PRIORITY_LEVELS = ("critical", "critical", "critical", "error", "warning", "info", "info", "debug")


def priority_level(priority: int) -> str:
    """A syslog priority (or a whole PRI: only the low 3 bits count) as a LogEvent level."""
    return _PRIORITY_LEVELS[priority & 7]


class LogSource(Protocol):
    name: str

    def poll(self, now_ns: int | None = None) -> list[LogEvent]:
        """Lines since the last poll; ``now_ns`` is their receive time (default: now)."""
        ...

    def close(self) -> None: ...
