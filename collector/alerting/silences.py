"""Writing silences: add one with an expiry, or expire one now. Reading them is the query API's
(``fleetscope.collector.query.list_silences``); the alert job honours them at each transition.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from fleetscope.collector.storage.schema import silences

__all__ = ["UnknownSilence", "add_silence", "expire_silence"]


class UnknownSilence(LookupError):
    """No silence has this id."""


def add_silence(
    *,
    session: Session,
    duration_s: float,
    rule: str | None = None,
    device: str | None = None,
    labels: Mapping[str, str] | None = None,
    created_by: str = "",
    comment: str = "",
    now_ns: int | None = None,
) -> int:
    """Silence the alerts of ``rule`` on ``device`` with ``labels`` (each None/empty: any) for ``duration_s``; its id."""
    if duration_s <= 0:
        raise ValueError("a silence needs a duration above 0")
    if rule is None and device is None and not labels:
        raise ValueError("a silence needs a rule, a device or a label: it would silence every alert")
    now = time.time_ns() if now_ns is None else now_ns
    return int(session.execute(
        insert(silences).values(
            rule=rule, device=device, labels={str(k): str(v) for k, v in (labels or {}).items()},
            created_ns=now, expires_ns=now + int(duration_s * 1e9), created_by=created_by, comment=comment,
        ).returning(silences.c.id)
    ).scalar_one())


def expire_silence(silence_id: int, *, session: Session, now_ns: int | None = None) -> bool:
    """End a silence now; False when it had expired already. ``UnknownSilence`` if there is none."""
    now = time.time_ns() if now_ns is None else now_ns
    expires = session.execute(select(silences.c.expires_ns).where(silences.c.id == silence_id)).scalar()
    if expires is None:
        raise UnknownSilence(f"no silence {silence_id}")
    if expires <= now:
        return False
    session.execute(update(silences).where(silences.c.id == silence_id).values(expires_ns=now))
    return True
