"""The incident lifecycle after an incident is written: the one way a detector opens, refreshes and
resolves a derived incident, and the quiet-period resolution of event incidents.

Derived incidents (``vocabulary.DERIVED_KINDS`` and ``repeated_oom``, origin ``detector``) are
*conditions*: a detector opens one when its condition starts to hold, refreshes it while it holds
(``last_seen_ns``, the latest facts and hints; ``count`` stays 1: a condition is one occurrence
however long it lasts) and resolves it when it clears (state ``resolved``, ``ended_ns``, final
facts such as the length of a gap). There is at most one open incident per device + kind +
``gpu_index`` + ``group_key`` (an operation's name, ``proc:<name>``, ``gpu``/``host``): ``open_incident``
refreshes the open one instead of adding a second. Detectors run under their lease, one writer
at a time, so the lookup and the insert cannot race another detector pass.

Event incidents (an OOM, an Xid; every kind not in ``DERIVED_KINDS``) are grouped as they
arrive by ``storage.incidents``; ``resolve_quiet_incidents`` resolves those whose
``last_seen_ns`` is older than the quiet period.

Every change sets ``updated_ns`` (the collector's clock), which is what the alert job and the
dashboard read to notice a change.

Why SQLAlchemy Core on a ``Connection`` here, and not ``storage.incidents.write_incidents``:
that function takes the ingest writer's raw DB-API cursor because it runs inside the group-commit
writer's transaction, at ingest rates, and its work (the Xid merge, grouping of agent reports
within a window) does not apply to a condition that a detector tracks itself. Detectors work on
SQLAlchemy connections; Core binds the JSON columns right on both dialects. The rows written here
fill every column the way ``write_incidents`` fills a row that does not name it (the defaults of
its ``_LIFECYCLE_DEFAULTS``: count 1, ``last_seen_ns`` = ``ts_ns``, ``updated_ns`` = ``received_ns``),
so a reader cannot tell the two paths apart except by ``origin``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, select, update

from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.vocabulary import (
    DERIVED_KINDS,
    INCIDENT_OPEN,
    INCIDENT_RESOLVED,
    ORIGIN_DETECTOR,
    ORIGIN_IMPORT,
)

__all__ = [
    "DerivedKey",
    "OpenIncident",
    "list_open",
    "open_incident",
    "refresh_incident",
    "resolve_incident",
    "resolve_quiet_incidents",
    "set_hints",
]

NS = 10**9

_T = cast(Table, Incident.__table__)
_C = _T.c


@dataclass(frozen=True)
class DerivedKey:
    """What makes a derived incident one: at most one open incident per key."""

    device_id: int
    kind: str
    gpu_index: int | None = None
    group_key: str = ""


@dataclass(frozen=True)
class OpenIncident:
    id: int
    key: DerivedKey
    ts_ns: int
    last_seen_ns: int
    facts: dict[str, Any]
    hints: list[dict[str, Any]]
    origin: str


def _key_where(key: DerivedKey) -> list:
    gpu = _C.gpu_index.is_(None) if key.gpu_index is None else _C.gpu_index == key.gpu_index
    return [
        _C.device_id == key.device_id,
        _C.kind == key.kind,
        gpu,
        _C.group_key == key.group_key,
        _C.state == INCIDENT_OPEN,
    ]


def list_open(
    conn: Connection, *, kinds: Iterable[str] | None = None, device_ids: Sequence[int] | None = None
) -> dict[DerivedKey, OpenIncident]:
    """The open incidents (of ``kinds``, on ``device_ids``) by key; served by the ``incidents_open`` index."""
    q = select(
        _C.id, _C.device_id, _C.kind, _C.gpu_index, _C.group_key, _C.ts_ns, _C.last_seen_ns, _C.facts, _C.hints,
        _C.origin,
    ).where(_C.state == INCIDENT_OPEN)
    if kinds is not None:
        q = q.where(_C.kind.in_(list(kinds)))
    if device_ids is not None:
        q = q.where(_C.device_id.in_(list(device_ids)))
    out: dict[DerivedKey, OpenIncident] = {}
    for r in conn.execute(q.order_by(_C.id)):
        key = DerivedKey(r.device_id, r.kind, r.gpu_index, r.group_key or "")
        out.setdefault(key, OpenIncident(r.id, key, r.ts_ns, r.last_seen_ns, dict(r.facts or {}), list(r.hints or []),
                                         r.origin))
    return out


def open_incident(
    conn: Connection,
    key: DerivedKey,
    *,
    now_ns: int,
    started_ns: int,
    severity: str,
    title: str,
    facts: Mapping[str, Any],
    hints: Sequence[Mapping[str, Any]] = (),
    last_seen_ns: int | None = None,
    pid: int | None = None,
    process_name: str = "",
    source: str = "detector",
) -> tuple[int, bool]:
    """Open the derived incident ``key``, or refresh it when one is open already.

    Returns (incident id, True when a new one was opened)."""
    existing = conn.execute(select(_C.id).where(*_key_where(key)).order_by(_C.id).limit(1)).scalar()
    seen = started_ns if last_seen_ns is None else last_seen_ns
    if existing is not None:
        refresh_incident(conn, existing, now_ns=now_ns, last_seen_ns=seen, facts=facts, hints=hints, title=title,
                         severity=severity)
        return int(existing), False
    res = conn.execute(
        insert(_T).values(
            device_id=key.device_id,
            ts_ns=started_ns,
            received_ns=now_ns,
            kind=key.kind,
            severity=severity,
            title=title,
            facts=dict(facts),
            source=source,
            excerpt="",
            context={},
            gpu_index=key.gpu_index,
            pid=pid,
            process_name=process_name,
            group_key=key.group_key,
            state=INCIDENT_OPEN,
            origin=ORIGIN_DETECTOR,
            count=1,
            last_seen_ns=seen,
            ended_ns=None,
            updated_ns=now_ns,
            hints=[dict(h) for h in hints],
        )
    )
    pk = res.inserted_primary_key
    assert pk is not None
    return int(pk[0]), True


def _given(
    *,
    facts: Mapping[str, Any] | None,
    hints: Sequence[Mapping[str, Any]] | None,
    title: str | None,
    severity: str | None = None,
) -> dict[str, Any]:
    """The column values of an update for the fields a caller gave (None: leave the column as it is)."""
    values: dict[str, Any] = {}
    if facts is not None:
        values["facts"] = dict(facts)
    if hints is not None:
        values["hints"] = [dict(h) for h in hints]
    if title is not None:
        values["title"] = title
    if severity is not None:
        values["severity"] = severity
    return values


def refresh_incident(
    conn: Connection,
    incident_id: int,
    *,
    now_ns: int,
    last_seen_ns: int,
    facts: Mapping[str, Any] | None = None,
    hints: Sequence[Mapping[str, Any]] | None = None,
    title: str | None = None,
    severity: str | None = None,
) -> None:
    """The condition still holds: move ``last_seen_ns`` (never back), keep the latest facts and hints.
    ``count`` is left alone."""
    current = conn.execute(select(_C.last_seen_ns).where(_C.id == incident_id)).scalar()
    values: dict[str, Any] = {"updated_ns": now_ns, "last_seen_ns": max(last_seen_ns, current or 0)}
    values.update(_given(facts=facts, hints=hints, title=title, severity=severity))
    conn.execute(update(_T).where(_C.id == incident_id).values(**values))


def resolve_incident(
    conn: Connection,
    incident_id: int,
    *,
    now_ns: int,
    ended_ns: int,
    facts: Mapping[str, Any] | None = None,
    hints: Sequence[Mapping[str, Any]] | None = None,
    title: str | None = None,
) -> bool:
    """The condition cleared at ``ended_ns``: state resolved, with its final facts. False if it was
    not open (resolved already)."""
    values: dict[str, Any] = {"state": INCIDENT_RESOLVED, "ended_ns": ended_ns, "updated_ns": now_ns}
    values.update(_given(facts=facts, hints=hints, title=title))
    res = conn.execute(update(_T).where(_C.id == incident_id, _C.state == INCIDENT_OPEN).values(**values))
    return (res.rowcount or 0) > 0


def set_hints(conn: Connection, incident_id: int, hints: Sequence[Mapping[str, Any]], *, now_ns: int) -> None:
    """Replace an incident's hints (any origin: event incidents get theirs from the lifecycle step)."""
    conn.execute(update(_T).where(_C.id == incident_id).values(hints=[dict(h) for h in hints], updated_ns=now_ns))


def resolve_quiet_incidents(conn: Connection, now_ns: int, quiet_s: float) -> list[int]:
    """Resolve the open event incidents (kinds not in ``DERIVED_KINDS``) not seen for ``quiet_s``.

    Event incidents come from agents (origin ``agent``) and, for ``repeated_oom``, from a detector:
    both are events with no condition that could clear, so both end after the quiet period. Each
    gets ``ended_ns`` = its ``last_seen_ns`` (when it last happened, not when we noticed the quiet).
    Imported incidents are stored resolved and never match. Returns the ids resolved."""
    cutoff = now_ns - int(quiet_s * NS)
    rows = conn.execute(
        select(_C.id, _C.last_seen_ns).where(
            _C.state == INCIDENT_OPEN,
            _C.kind.not_in(sorted(DERIVED_KINDS)),
            _C.origin != ORIGIN_IMPORT,
            _C.last_seen_ns < cutoff,
        )
    ).all()
    done: list[int] = []
    for incident_id, last_seen in rows:
        res = conn.execute(
            update(_T)
            .where(_C.id == incident_id, _C.state == INCIDENT_OPEN)
            .values(state=INCIDENT_RESOLVED, ended_ns=last_seen, updated_ns=now_ns)
        )
        if res.rowcount:
            done.append(int(incident_id))
    return done
