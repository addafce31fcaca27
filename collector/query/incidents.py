"""Incidents: search, counts over time, the kinds stored, one incident by id.

The context of an incident (what the device looked like around it) is in ``context``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import NS, device_ids
from fleetscope.collector.query.types import IncidentView
from fleetscope.collector.storage.rollups import bucket_of
from fleetscope.collector.storage.schema import Device, Incident


@dataclass(frozen=True)
class IncidentCount:
    bucket_ns: int
    kind: str
    count: int


def incident_view(i: Incident, device: str) -> IncidentView:
    return IncidentView(
        id=i.id,
        device=device,
        ts_ns=i.ts_ns,
        kind=i.kind,
        severity=i.severity,
        title=i.title,
        facts=dict(i.facts or {}),
        source=i.source,
        excerpt=i.excerpt,
    )


def _filters(
    q: Any,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None,
    devices: Sequence[str] | None,
    severities: Sequence[str] | None,
    exclude_kinds: Sequence[str] | None,
) -> Any:
    q = q.where(Incident.ts_ns >= since_ns, Incident.ts_ns < until_ns)
    if kinds:
        q = q.where(Incident.kind.in_(list(kinds)))
    if exclude_kinds:
        q = q.where(Incident.kind.not_in(list(exclude_kinds)))
    if devices is not None:
        q = q.where(Incident.device_id.in_(list(device_ids(session, devices).values())))
    if severities:
        q = q.where(Incident.severity.in_(list(severities)))
    return q


def search_incidents(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    severities: Sequence[str] | None = None,
    exclude_kinds: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 1000,
) -> list[IncidentView]:
    """Incidents in [since, until), newest first.

    ``devices`` is a scope of device names: names nobody registered match nothing, and
    ``devices=[]`` matches none (a label filter that matched no device). To name one device as
    a person typed it (name or agent id, ``UnknownDevice`` when unknown), resolve it with
    ``get_device`` first. ``text`` is looked for, literally, in the title and the excerpt.
    """
    q = select(Incident, Device.name).join(Device, Device.id == Incident.device_id)
    q = _filters(q, session, since_ns, until_ns, kinds, devices, severities, exclude_kinds)
    if text:
        q = q.where(
            Incident.title.contains(text, autoescape=True) | Incident.excerpt.contains(text, autoescape=True)
        )
    rows = session.execute(q.order_by(Incident.ts_ns.desc()).limit(limit)).all()
    return [incident_view(i, name) for i, name in rows]


def incident_counts(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    step_s: int,
    kinds: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    severities: Sequence[str] | None = None,
) -> list[IncidentCount]:
    """How many incidents of each kind per ``step_s`` bucket, counted in SQL (filters as ``search_incidents``)."""
    bucket = bucket_of(Incident.ts_ns, step_s * NS)  # type: ignore[arg-type]
    q = select(bucket.label("b"), Incident.kind, func.count())
    q = _filters(q, session, since_ns, until_ns, kinds, devices, severities, None)
    rows = session.execute(q.group_by(bucket, Incident.kind).order_by(bucket)).all()
    return [IncidentCount(int(b), k, int(c)) for b, k, c in rows]


def incident_kinds(*, session: Session) -> list[str]:
    return list(session.scalars(select(Incident.kind).distinct().order_by(Incident.kind)))


def get_incident(*, session: Session, incident_id: int) -> IncidentView | None:
    row = session.execute(
        select(Incident, Device.name)
        .join(Device, Device.id == Incident.device_id)
        .where(Incident.id == incident_id)
    ).first()
    return incident_view(row[0], row[1]) if row else None
