"""Identity: enrolment tokens and device credentials (never their secrets: only digests are stored)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.storage.schema import Device, device_credentials, enrolment_tokens


@dataclass(frozen=True)
class EnrolmentTokenRow:
    id: str
    fleet: str
    created_ns: int
    expires_ns: int | None  # None: never
    revoked_ns: int | None
    uses: int  # devices enrolled with it
    last_used_ns: int | None
    comment: str

    def state(self, now_ns: int) -> str:
        """"revoked", "expired" or "active"."""
        if self.revoked_ns is not None:
            return "revoked"
        if self.expires_ns is not None and self.expires_ns <= now_ns:
            return "expired"
        return "active"


@dataclass(frozen=True)
class DeviceCredentialRow:
    agent_id: str
    device_name: str | None  # None: revoked before it ever registered
    fleet: str
    via: str  # "token:<id>", "static", "open" or "revoked"
    created_ns: int
    revoked_ns: int | None


def list_enrolment_tokens(*, session: Session, fleet: str | None = None) -> list[EnrolmentTokenRow]:
    """Every enrolment token (of ``fleet``), newest first."""
    q = select(
        enrolment_tokens.c.id, enrolment_tokens.c.fleet, enrolment_tokens.c.created_ns, enrolment_tokens.c.expires_ns,
        enrolment_tokens.c.revoked_ns, enrolment_tokens.c.uses, enrolment_tokens.c.last_used_ns, enrolment_tokens.c.comment,
    ).order_by(enrolment_tokens.c.created_ns.desc(), enrolment_tokens.c.id)
    if fleet is not None:
        q = q.where(enrolment_tokens.c.fleet == fleet)
    return [
        EnrolmentTokenRow(str(r[0]), str(r[1]), int(r[2]), r[3], r[4], int(r[5]), r[6], str(r[7]))
        for r in session.execute(q).all()
    ]


def list_device_credentials(*, session: Session) -> list[DeviceCredentialRow]:
    """Every agent id with an identity, with its device's name, oldest first."""
    q = (
        select(device_credentials.c.agent_id, Device.name, device_credentials.c.fleet, device_credentials.c.via,
               device_credentials.c.created_ns, device_credentials.c.revoked_ns)
        .select_from(device_credentials.outerjoin(Device, Device.agent_id == device_credentials.c.agent_id))
        .order_by(device_credentials.c.created_ns, device_credentials.c.agent_id)
    )
    return [DeviceCredentialRow(str(r[0]), r[1], str(r[2]), str(r[3]), int(r[4]), r[5]) for r in session.execute(q).all()]
