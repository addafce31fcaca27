"""Log search: a device's log events in a window, by level and text, newest kept, in time order."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_row
from fleetscope.collector.query.types import LogLine
from fleetscope.collector.storage.schema import log_events


def search_logs(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    levels: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 1000,
) -> list[LogLine]:
    """A device's (by name or agent id) log events in [since, until): the newest ``limit`` of them,
    oldest first. ``levels`` keeps those levels (``log_levels_at_least`` of the vocabulary for
    "this one and worse"); ``text`` keeps messages containing it, taken literally."""
    d = device_row(session, device)
    return log_lines(session, d.id, d.name, since_ns, until_ns, levels=levels, text=text, limit=limit)


def log_lines(
    session: Session,
    device_id: int,
    device: str,
    since_ns: int,
    until_ns: int,
    *,
    levels: Sequence[str] | None = None,
    text: str | None = None,
    limit: int,
) -> list[LogLine]:
    """``search_logs`` for a device already looked up."""
    c = log_events.c
    q = select(c.ts_ns, c.source, c.level, c.message).where(
        c.device_id == device_id, c.ts_ns >= since_ns, c.ts_ns < until_ns
    )
    if levels is not None:
        q = q.where(c.level.in_(list(levels)))
    if text:
        q = q.where(c.message.contains(text, autoescape=True))
    rows = session.execute(q.order_by(c.ts_ns.desc()).limit(limit)).all()
    return [LogLine(device, r.ts_ns, r.source, r.level, r.message) for r in reversed(rows)]
