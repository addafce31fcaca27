"""Log sources (followed files, the kernel log, the systemd journal), each behind the
``LogSource`` interface and built through the registry, and the one multi-line grouper that
both the agent and ``fleetscope scan`` read lines with."""

from fleetscope.agent.logs._base import LogSource
from fleetscope.agent.logs.grouping import EventGrouper, LineGrouper
from fleetscope.agent.logs.registry import LogSourceRegistry, LogSourceSettings, default_log_sources

__all__ = [
    "EventGrouper",
    "LineGrouper",
    "LogSource",
    "LogSourceRegistry",
    "LogSourceSettings",
    "default_log_sources",
]
