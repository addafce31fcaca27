"""Which log sources an agent follows: each registered by name, built from its settings.

The registry is filled explicitly by :func:`default_log_sources` (no discovery); a second source
with a name already taken is refused. A source's module is imported only when the settings turn
it on, so an agent that follows no journal never loads the journal reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetscope.agent.logs._base import LogSource

__all__ = ["LogSourceFactory", "LogSourceRegistry", "LogSourceSettings", "default_log_sources"]


@dataclass(frozen=True)
class LogSourceSettings:
    """What to follow; everything is off by default."""

    files: tuple[str, ...] = ()  # paths or globs, e.g. "/var/log/train/*.log"
    kernel_log: bool = False  # /dev/kmsg, else journalctl -k
    journal_units: tuple[str, ...] = ()  # systemd units, e.g. "triton.service"


# Builds the source the settings ask for, or returns None when they do not ask for it.
LogSourceFactory = Callable[[LogSourceSettings], LogSource | None]


class LogSourceRegistry:
    """Log source factories by unique name, built in the order registered."""

    def __init__(self) -> None:
        self._factories: dict[str, LogSourceFactory] = {}

    def register(self, name: str, factory: LogSourceFactory) -> None:
        if name in self._factories:
            raise ValueError(f"a log source named {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return list(self._factories)

    def build(self, settings: LogSourceSettings) -> list[LogSource]:
        """The sources ``settings`` turn on. A source that cannot read says so itself, once."""
        sources: list[LogSource] = []
        for factory in self._factories.values():
            source = factory(settings)
            if source is not None:
                sources.append(source)
        return sources


def _files(settings: LogSourceSettings) -> LogSource | None:
    if not settings.files:
        return None
    from fleetscope.agent.logs.files import FileFollower

    return FileFollower(list(settings.files))


def _kernel_log(settings: LogSourceSettings) -> LogSource | None:
    if not settings.kernel_log:
        return None
    from fleetscope.agent.logs.kernel_log import KernelLogSource

    return KernelLogSource()


def _journal(settings: LogSourceSettings) -> LogSource | None:
    if not settings.journal_units:
        return None
    from fleetscope.agent.logs.journal import JournalSource

    return JournalSource(list(settings.journal_units))


def default_log_sources() -> LogSourceRegistry:
    """The agent's log sources: followed files, the kernel log, systemd units' journals."""
    registry = LogSourceRegistry()
    registry.register("files", _files)
    registry.register("kernel", _kernel_log)
    registry.register("journal", _journal)
    return registry
