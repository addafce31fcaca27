"""Incidents: search, counts over time, the kinds stored, one incident by id.

An incident has a lifecycle (see ``storage.incidents``): it starts at ``ts_ns``, repeats within
the grouping window raise its ``count`` and move ``last_seen_ns``, and it is ``open`` until
resolved (``ended_ns``). A search's time range [since, until) matches the incidents whose span,
from start to last occurrence, overlaps it: a repeat today of an incident that started last week
is found by "the last day". ``open_only`` keeps open incidents (never the record kinds, which are
not problems), ``labels`` the devices with all these labels, and ``kinds`` naming a kind that is
neither in the vocabulary nor stored raises ``UnknownIncidentKind`` listing the known ones.

The context of an incident (what the device looked like around it) is in ``context``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.errors import UnknownIncidentKind
from fleetscope.collector.query._common import NS, device_ids
from fleetscope.collector.query.types import IncidentView
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollups import bucket_of
from fleetscope.collector.storage.schema import Device, Incident
from fleetscope.proto.vocabulary import INCIDENT_KINDS, INCIDENT_OPEN, RECORD_KINDS


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
        state=i.state,
        origin=i.origin,
        count=int(i.count or 1),
        last_seen_ns=i.last_seen_ns if i.last_seen_ns is not None else i.ts_ns,
        ended_ns=i.ended_ns,
        gpu_index=i.gpu_index,
        pid=i.pid,
        process_name=i.process_name or "",
        group_key=i.group_key or "",
        hints=[dict(h) for h in (i.hints or []) if isinstance(h, dict)],
        updated_ns=i.updated_ns if i.updated_ns is not None else i.received_ns,
    )


def check_kinds(session: Session, kinds: Sequence[str] | None) -> None:
    """``UnknownIncidentKind`` when a kind is neither in the vocabulary nor stored (an agent of
    another version may send kinds this one does not name: those stored are known too)."""
    unknown = [k for k in dict.fromkeys(kinds or ()) if k not in INCIDENT_KINDS]
    if not unknown:
        return
    stored = set(session.scalars(select(Incident.kind).where(Incident.kind.in_(unknown)).distinct()))
    unknown = [k for k in unknown if k not in stored]
    if unknown:
        raise UnknownIncidentKind(unknown, INCIDENT_KINDS)


def _filters(
    q: Any,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None,
    devices: Sequence[str] | None,
    severities: Sequence[str] | None,
    exclude_kinds: Sequence[str] | None,
    *,
    open_only: bool = False,
    labels: Mapping[str, str] | None = None,
    by_start: bool = False,
) -> Any:
    check_kinds(session, kinds)
    if by_start:  # counts per bucket: each incident once, where it started
        q = q.where(Incident.ts_ns >= since_ns, Incident.ts_ns < until_ns)
    else:  # its span, start to last occurrence, overlaps the range
        q = q.where(Incident.ts_ns < until_ns, Incident.last_seen_ns >= since_ns)
    if kinds:
        q = q.where(Incident.kind.in_(list(kinds)))
    if exclude_kinds:
        q = q.where(Incident.kind.not_in(list(exclude_kinds)))
    if open_only:
        q = q.where(Incident.state == INCIDENT_OPEN, Incident.kind.not_in(sorted(RECORD_KINDS)))
    if devices is not None:
        q = q.where(in_ids(Incident.device_id, list(device_ids(session, devices).values())))
    if labels:
        q = q.where(in_ids(Incident.device_id, labelled_device_ids(session, labels)))
    if severities:
        q = q.where(Incident.severity.in_(list(severities)))
    return q


def labelled_device_ids(session: Session, labels: Mapping[str, str]) -> list[int]:
    """The ids of the devices that carry every one of ``labels`` (key: value)."""
    return [
        i
        for i, have in session.execute(select(Device.id, Device.labels)).all()
        if all((have or {}).get(k) == v for k, v in labels.items())
    ]


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
    open_only: bool = False,
    labels: Mapping[str, str] | None = None,
) -> list[IncidentView]:
    """Incidents whose span (start to last occurrence) overlaps [since, until), newest first.

    ``devices`` is a scope of device names: names nobody registered match nothing, and
    ``devices=[]`` matches none (a label filter that matched no device). To name one device as
    a person typed it (name or agent id, ``UnknownDevice`` when unknown), resolve it with
    ``get_device`` first. ``text`` is looked for, literally, in the title and the excerpt.
    ``kinds`` (any of them) raises ``UnknownIncidentKind`` for a kind nobody knows;
    ``open_only`` keeps open incidents; ``labels`` keeps devices with all these labels.
    """
    q = select(Incident, Device.name).join(Device, Device.id == Incident.device_id)
    q = _filters(
        q, session, since_ns, until_ns, kinds, devices, severities, exclude_kinds, open_only=open_only, labels=labels
    )
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
    """How many incidents of each kind started in each ``step_s`` bucket, counted in SQL (filters as
    ``search_incidents``; an incident is counted once, where it started, whatever its ``count``)."""
    bucket = bucket_of(Incident.ts_ns, step_s * NS)  # type: ignore[arg-type]
    q = select(bucket.label("b"), Incident.kind, func.count())
    q = _filters(q, session, since_ns, until_ns, kinds, devices, severities, None, by_start=True)
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
