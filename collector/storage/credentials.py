"""Enrolment tokens and device credentials: the rows, and the one check of who may use an agent id.

An enrolment token reads ``fse1.<id>.<secret>``: the id finds its row, the secret is compared
(in constant time) by its SHA-256, and the row says the fleet, the expiry and whether it was
revoked. A device credential is the pair (agent id, device key): the agent makes a random key
once and keeps it in its state directory; the first registration that presents it for an agent
id with no row binds the two (``bind_agent``), and from then on only that key opens the agent
id. The secrets themselves are never stored.

The checks run inside the registration's transaction (``storage.registry.register_device``), so
two clients racing for one agent id cannot both win: the row's primary key is the agent id.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from fleetscope.collector.storage.schema import Device, device_credentials, enrolment_tokens

TOKEN_PREFIX = "fse1"
REVOKED_VIA = "revoked"


class IdentityRefused(Exception):
    """A client may not act as the agent id it named. ``code`` is "unauthenticated" (no valid
    credential at all) or "permission_denied" (a valid one, for something it may not do)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def same_secret(secret: str, stored_sha256: str) -> bool:
    """Constant-time comparison of a presented secret with a stored digest."""
    return bool(stored_sha256) and hmac.compare_digest(sha256_hex(secret), stored_sha256)


def is_enrolment_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX + ".")


@dataclass(frozen=True)
class EnrolmentToken:
    id: str
    fleet: str
    created_ns: int
    expires_ns: int | None
    revoked_ns: int | None
    uses: int
    last_used_ns: int | None
    comment: str


def create_enrolment_token(
    engine: Engine, *, fleet: str, now_ns: int, expires_ns: int | None = None, comment: str = ""
) -> tuple[EnrolmentToken, str]:
    """A new token of ``fleet``; returns its row and the token text (shown once, never stored)."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    with Session(engine) as session, session.begin():
        session.execute(
            enrolment_tokens.insert().values(
                id=token_id, fleet=fleet, secret_sha256=sha256_hex(secret), created_ns=now_ns,
                expires_ns=expires_ns, revoked_ns=None, uses=0, last_used_ns=None, comment=comment,
            )
        )
    row = EnrolmentToken(token_id, fleet, now_ns, expires_ns, None, 0, None, comment)
    return row, f"{TOKEN_PREFIX}.{token_id}.{secret}"


def revoke_enrolment_token(engine: Engine, token_id: str, *, now_ns: int) -> bool:
    """Revoke a token (devices it enrolled keep their credentials); False when no such token."""
    with Session(engine) as session, session.begin():
        found = session.execute(select(enrolment_tokens.c.revoked_ns).where(enrolment_tokens.c.id == token_id)).first()
        if found is None:
            return False
        if found[0] is None:
            session.execute(update(enrolment_tokens).where(enrolment_tokens.c.id == token_id).values(revoked_ns=now_ns))
    return True


def check_enrolment_token(session: Session, token: str, *, now_ns: int) -> tuple[str, str]:
    """The (token id, fleet) of a valid token; counts the use. Raises ``IdentityRefused``."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise IdentityRefused("unauthenticated", "malformed enrolment token")
    token_id, secret = parts[1], parts[2]
    row = session.execute(
        select(enrolment_tokens.c.fleet, enrolment_tokens.c.secret_sha256, enrolment_tokens.c.expires_ns,
               enrolment_tokens.c.revoked_ns).where(enrolment_tokens.c.id == token_id)
    ).first()
    # The same refusal whether the id or the secret is wrong: nothing to learn from it.
    if row is None or not same_secret(secret, row.secret_sha256):
        raise IdentityRefused("unauthenticated", "unknown enrolment token")
    if row.revoked_ns is not None:
        raise IdentityRefused("unauthenticated", f"enrolment token {token_id} was revoked")
    if row.expires_ns is not None and row.expires_ns <= now_ns:
        raise IdentityRefused("unauthenticated", f"enrolment token {token_id} has expired")
    session.execute(
        update(enrolment_tokens).where(enrolment_tokens.c.id == token_id)
        .values(uses=enrolment_tokens.c.uses + 1, last_used_ns=now_ns)
    )
    return token_id, str(row.fleet)


@dataclass(frozen=True)
class Binding:
    """Who an agent id is: its fleet, and how it enrolled."""

    agent_id: str
    fleet: str
    via: str
    created_ns: int
    revoked_ns: int | None


def check_device_key(session: Session, agent_id: str, device_key: str) -> Binding | None:
    """The agent id's binding when ``device_key`` opens it; None when it has none yet.

    Raises ``IdentityRefused`` for a revoked agent id or another key.
    """
    row = session.execute(select(device_credentials).where(device_credentials.c.agent_id == agent_id)).first()
    if row is None:
        return None
    if row.revoked_ns is not None:
        raise IdentityRefused("permission_denied", f"agent {agent_id!r} was revoked")
    if not same_secret(device_key, row.key_sha256):
        raise IdentityRefused("permission_denied", f"agent {agent_id!r} is enrolled with another device key")
    return Binding(row.agent_id, row.fleet, row.via, row.created_ns, row.revoked_ns)


def is_bound(session: Session, agent_id: str) -> bool:
    """True when the agent id has a row (bound to a key, or revoked): no key-less client may use it."""
    return session.execute(select(device_credentials.c.agent_id).where(device_credentials.c.agent_id == agent_id)).first() is not None


def bind_agent(session: Session, agent_id: str, device_key: str, *, fleet: str, via: str, now_ns: int) -> Binding:
    """Bind ``agent_id`` to ``device_key``; the caller checked that it has no row yet. A racing
    binder fails on the primary key when the transaction flushes."""
    session.execute(
        device_credentials.insert().values(
            agent_id=agent_id, key_sha256=sha256_hex(device_key), fleet=fleet, via=via, created_ns=now_ns, revoked_ns=None,
        )
    )
    return Binding(agent_id, fleet, via, now_ns, None)


def revoke_devices(engine: Engine, name_or_agent_id: str, *, now_ns: int) -> list[str]:
    """Revoke the credential of the device so named (or with that agent id); returns the agent ids
    revoked. A device that never enrolled gets a revoked row, so its id is refused from now on."""
    with Session(engine) as session, session.begin():
        agent_ids = list(session.scalars(select(Device.agent_id).where(Device.agent_id == name_or_agent_id)))
        if not agent_ids:
            agent_ids = list(session.scalars(select(Device.agent_id).where(Device.name == name_or_agent_id)))
        if not agent_ids:
            bound = session.execute(
                select(device_credentials.c.agent_id).where(device_credentials.c.agent_id == name_or_agent_id)
            ).first()
            agent_ids = [bound[0]] if bound else []
        for agent_id in agent_ids:
            if is_bound(session, agent_id):
                session.execute(
                    update(device_credentials)
                    .where(device_credentials.c.agent_id == agent_id, device_credentials.c.revoked_ns.is_(None))
                    .values(revoked_ns=now_ns)
                )
            else:
                session.execute(
                    device_credentials.insert().values(
                        agent_id=agent_id, key_sha256="", fleet="", via=REVOKED_VIA, created_ns=now_ns, revoked_ns=now_ns,
                    )
                )
    return agent_ids


def revoked_since(engine: Engine, since_ns: int) -> list[tuple[str, int]]:
    """(agent id, revoked at) of the revocations after ``since_ns``, oldest first."""
    with Session(engine) as session:
        rows = session.execute(
            select(device_credentials.c.agent_id, device_credentials.c.revoked_ns)
            .where(device_credentials.c.revoked_ns > since_ns)
            .order_by(device_credentials.c.revoked_ns)
        ).all()
    return [(str(r[0]), int(r[1])) for r in rows]
