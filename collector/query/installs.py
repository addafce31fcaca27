"""Reads over every install of a name, for the subjects whose one-device readers take one install.

A device reinstalled with a fresh state directory (a reflashed drone) registers again under its
name with a new agent id. ``_common.device_rows`` resolves a name to all of its installs; the
incidents, latency, metrics and comparison reads use it directly. This module does the same for
the log search, whose reader takes one device: the same arguments as ``logs.search_logs``, one
history across installs (an agent id still reads its one install).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_rows
from fleetscope.collector.query.types import LogLine


def search_logs_all_installs(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    levels: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 1000,
) -> list[LogLine]:
    """``search_logs`` over every install ``device`` reaches: the newest ``limit`` events, oldest first."""
    from fleetscope.collector import query  # the package's search_logs: the one log reader

    search_logs = query.search_logs
    installs = device_rows(session, device)
    if len(installs) == 1:  # the usual case: the one reader, as asked
        return search_logs(session=session, device=device, since_ns=since_ns, until_ns=until_ns, levels=levels,
                           text=text, limit=limit)
    lines: list[LogLine] = []
    for d in installs:
        lines += search_logs(session=session, device=d.agent_id, since_ns=since_ns, until_ns=until_ns, levels=levels,
                             text=text, limit=limit)
    lines.sort(key=lambda ln: ln.ts_ns)
    return lines[-limit:] if limit else lines
