"""Alerts: the alert instances (live and history), silences, notifications and their attempts.

An alert is one rule matched for one subject; its row goes pending -> firing -> resolved and
stays as the history once resolved. ``silenced`` on an ``AlertRow`` is computed when read: an
unexpired silence matches the alert now (its rule, device and labels; a silence's ``None`` or
empty ``{}`` matches anything). ``silenced_by`` is what the alert job recorded at the alert's
last transition, which may differ (a silence added or expired since).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_row
from fleetscope.collector.storage.schema import (
    Device,
    alerts,
    notification_attempts,
    notifications,
    silences,
)


@dataclass(frozen=True)
class AlertRow:
    id: int
    rule: str
    fingerprint: str
    state: str  # vocabulary.ALERT_STATES: pending | firing | resolved
    device_id: int | None
    device_name: str | None  # None for an alert on no device (a fleet-wide rule) or a device since removed
    incident_id: int | None
    kind: str  # the incident kind, or "metric", "absent", "slo"
    severity: str
    summary: str
    labels: dict[str, str]
    facts: dict[str, Any]
    pending_ns: int  # the condition first held
    firing_ns: int | None
    resolved_ns: int | None
    last_eval_ns: int
    silenced: bool  # an unexpired silence matches it now
    silenced_by: int | None  # the silence that held it at its last transition


@dataclass(frozen=True)
class SilenceRow:
    id: int
    rule: str | None  # None: any rule
    device: str | None  # a device name; None: any device
    labels: dict[str, str]  # all must match; {} matches every alert
    created_ns: int
    expires_ns: int
    created_by: str
    comment: str


@dataclass(frozen=True)
class NotificationAttempt:
    ts_ns: int
    ok: bool
    status: int | None  # the HTTP status; None when no answer came
    error: str
    duration_ms: float


@dataclass(frozen=True)
class NotificationRow:
    id: int
    alert_id: int
    transition: str  # firing | resolved
    notifier: str
    state: str  # pending | delivered | failed (gave up)
    payload: dict[str, Any]
    created_ns: int
    next_attempt_ns: int
    delivered_ns: int | None
    last_error: str
    attempts: list[NotificationAttempt]  # oldest first


@dataclass(frozen=True)
class AlertPeriod:
    """One alert's span on a device's time axis: from pending to resolved (``end_ns`` None: still active)."""

    alert_id: int
    rule: str
    kind: str
    severity: str
    state: str
    summary: str
    start_ns: int  # pending since
    firing_ns: int | None
    end_ns: int | None


def silence_matches(
    silence: SilenceRow, *, rule: str, device: str | None, labels: Mapping[str, str], at_ns: int
) -> bool:
    """Whether ``silence`` holds an alert of ``rule`` on ``device`` with ``labels`` at ``at_ns``."""
    if not silence.created_ns <= at_ns < silence.expires_ns:
        return False
    if silence.rule is not None and silence.rule != rule:
        return False
    if silence.device is not None and silence.device != device:
        return False
    return all(labels.get(k) == v for k, v in silence.labels.items())


def _silence(r: Any) -> SilenceRow:
    return SilenceRow(
        id=int(r.id),
        rule=r.rule,
        device=r.device,
        labels={str(k): str(v) for k, v in (r.labels or {}).items()},
        created_ns=int(r.created_ns),
        expires_ns=int(r.expires_ns),
        created_by=r.created_by,
        comment=r.comment,
    )


def list_silences(*, session: Session, active_at_ns: int | None = None) -> list[SilenceRow]:
    """Silences, newest first: all of them, or those in force at ``active_at_ns`` (created, not expired)."""
    q = select(silences)
    if active_at_ns is not None:
        q = q.where(silences.c.created_ns <= active_at_ns, silences.c.expires_ns > active_at_ns)
    rows = session.execute(q.order_by(silences.c.created_ns.desc(), silences.c.id.desc())).all()
    return [_silence(r) for r in rows]


def _labels_wanted(labels: Mapping[str, str] | Iterable[str] | None) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    if labels is None:
        return wanted
    if isinstance(labels, Mapping):
        return {str(k): {str(v)} for k, v in labels.items()}
    for s in labels:
        k, _, v = s.partition("=")
        wanted.setdefault(k, set()).add(v)
    return wanted


def list_alerts(
    *,
    session: Session,
    states: Sequence[str] | None = None,
    rule: str | None = None,
    device: str | None = None,
    labels: Mapping[str, str] | Iterable[str] | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    silenced: bool | None = None,
    now_ns: int | None = None,
    limit: int = 500,
) -> list[AlertRow]:
    """Alerts, most recently begun first.

    ``states`` keeps those in these states (pending, firing, resolved); ``rule`` those of one
    rule; ``device`` those of one device, by name or agent id (``UnknownDevice`` when nobody
    registered it). ``labels`` is {key: value} (all must match) or "key=value" strings (every
    key must match, any of the values given for one key will do, as ``labels_match``).
    ``since_ns``/``until_ns`` keep the alerts active at some time in [since, until): begun
    before ``until``, and not resolved before ``since``. ``silenced`` keeps only the silenced
    (True) or the unsilenced (False) ones, judged at ``now_ns`` (default: the current time).
    """
    now = time.time_ns() if now_ns is None else now_ns
    q = select(alerts, Device.name.label("device_name")).outerjoin(Device, Device.id == alerts.c.device_id)
    if states is not None:
        q = q.where(alerts.c.state.in_(list(states)))
    if rule is not None:
        q = q.where(alerts.c.rule == rule)
    if device is not None:
        q = q.where(alerts.c.device_id == device_row(session, device).id)
    if until_ns is not None:
        q = q.where(alerts.c.pending_ns < until_ns)
    if since_ns is not None:
        q = q.where(alerts.c.resolved_ns.is_(None) | (alerts.c.resolved_ns >= since_ns))
    q = q.order_by(alerts.c.pending_ns.desc(), alerts.c.id.desc())
    wanted = _labels_wanted(labels)
    active = list_silences(session=session, active_at_ns=now)
    out: list[AlertRow] = []
    # Labels are JSON (no portable SQL filter on them), so they are matched here, in pages.
    offset, page = 0, max(limit, 200)
    while len(out) < limit:
        rows = session.execute(q.offset(offset).limit(page)).all()
        for r in rows:
            row_labels = {str(k): str(v) for k, v in (r.labels or {}).items()}
            if any(row_labels.get(k) not in vs for k, vs in wanted.items()):
                continue
            held = any(
                silence_matches(s, rule=r.rule, device=r.device_name, labels=row_labels, at_ns=now)
                for s in active
            )
            if silenced is not None and held != silenced:
                continue
            out.append(_alert(r, row_labels, held))
            if len(out) >= limit:
                break
        if len(rows) < page:
            break
        offset += page
    return out


def _alert(r: Any, labels: dict[str, str], held: bool) -> AlertRow:
    return AlertRow(
        id=int(r.id),
        rule=r.rule,
        fingerprint=r.fingerprint,
        state=r.state,
        device_id=r.device_id,
        device_name=r.device_name,
        incident_id=None if r.incident_id is None else int(r.incident_id),
        kind=r.kind,
        severity=r.severity,
        summary=r.summary,
        labels=labels,
        facts=dict(r.facts or {}),
        pending_ns=int(r.pending_ns),
        firing_ns=None if r.firing_ns is None else int(r.firing_ns),
        resolved_ns=None if r.resolved_ns is None else int(r.resolved_ns),
        last_eval_ns=int(r.last_eval_ns),
        silenced=held,
        silenced_by=None if r.silenced_by is None else int(r.silenced_by),
    )


def alert_notifications(alert_id: int, *, session: Session) -> list[NotificationRow]:
    """The notifications owed for one alert (oldest first), each with every delivery attempt."""
    rows = session.execute(
        select(notifications)
        .where(notifications.c.alert_id == alert_id)
        .order_by(notifications.c.created_ns, notifications.c.id)
    ).all()
    if not rows:
        return []
    tries: dict[int, list[NotificationAttempt]] = {int(r.id): [] for r in rows}
    for a in session.execute(
        select(notification_attempts)
        .where(notification_attempts.c.notification_id.in_(list(tries)))
        .order_by(notification_attempts.c.ts_ns, notification_attempts.c.id)
    ):
        tries[int(a.notification_id)].append(
            NotificationAttempt(
                ts_ns=int(a.ts_ns),
                ok=bool(a.ok),
                status=None if a.status is None else int(a.status),
                error=a.error,
                duration_ms=float(a.duration_ms),
            )
        )
    return [
        NotificationRow(
            id=int(r.id),
            alert_id=int(r.alert_id),
            transition=r.transition,
            notifier=r.notifier,
            state=r.state,
            payload=dict(r.payload or {}),
            created_ns=int(r.created_ns),
            next_attempt_ns=int(r.next_attempt_ns),
            delivered_ns=None if r.delivered_ns is None else int(r.delivered_ns),
            last_error=r.last_error,
            attempts=tries[int(r.id)],
        )
        for r in rows
    ]


def alert_periods(device_id: int | str, start_ns: int, end_ns: int, *, session: Session) -> list[AlertPeriod]:
    """The alerts of one device active at some time in [start, end), oldest first.

    ``device_id`` is the device's id, or its name or agent id (``UnknownDevice`` when unknown).
    """
    did = device_id if isinstance(device_id, int) else device_row(session, device_id).id
    rows = session.execute(
        select(alerts)
        .where(
            alerts.c.device_id == did,
            alerts.c.pending_ns < end_ns,
            alerts.c.resolved_ns.is_(None) | (alerts.c.resolved_ns >= start_ns),
        )
        .order_by(alerts.c.pending_ns, alerts.c.id)
    ).all()
    return [
        AlertPeriod(
            alert_id=int(r.id),
            rule=r.rule,
            kind=r.kind,
            severity=r.severity,
            state=r.state,
            summary=r.summary,
            start_ns=int(r.pending_ns),
            firing_ns=None if r.firing_ns is None else int(r.firing_ns),
            end_ns=None if r.resolved_ns is None else int(r.resolved_ns),
        )
        for r in rows
    ]
