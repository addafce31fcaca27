"""Enrolment tokens and device credentials: the rows, and the one check of who may use an agent id.

An enrolment token reads ``fse1.<id>.<secret>``: the id finds its row, the secret is compared
(in constant time) by its SHA-256, and the row says the fleet, the expiry and whether it was
revoked. A device credential is the pair (agent id, device key): the agent makes a random key
once and keeps it in its state directory; the first registration that presents it for an agent
id with no row binds the two (``bind_agent``), and from then on only that key opens the agent
id. The secrets themselves are never stored.

The checks run inside the registration's transaction (``storage.registry.register_device``), so
two clients racing for one agent id cannot both win: the row's primary key is the agent id.

A token is bounded: it enrols at most ``max_devices`` devices, at most ``max_enrolments_per_min``
a minute (``token create`` gives every token defaults a fleet never meets). A revocation
(``revoke_devices``) is a row of ``device_revocations``, numbered by the database; collectors
notice it by the rows' count (``revocation_count``), never by a timestamp, and the revoked
device's name and hardware ids cannot enrol again, under any agent id, until an operator allows
it (``allow_devices``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, update
from sqlalchemy.orm import Session

from fleetscope.collector.storage.schema import (
    Device,
    device_credentials,
    device_revocations,
    enrolment_tokens,
)

TOKEN_PREFIX = "fse1"
REVOKED_VIA = "revoked"
TOKEN_VIA_PREFIX = "token:"
DEFAULT_MAX_DEVICES = 10_000  # per token: a fleet that needs more makes more tokens, or says so
DEFAULT_MAX_ENROLMENTS_PER_MIN = 1_000  # a fleet switched on at once enrols in a minute or two


class IdentityRefused(Exception):
    """A client may not act as the agent id it named. ``code`` is "unauthenticated" (no valid
    credential at all), "permission_denied" (a valid one, for something it may not do) or
    "resource_exhausted" (a token enrolling faster than its rate: ``retry_after_s``)."""

    def __init__(self, code: str, message: str, *, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


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
    max_devices: int | None = DEFAULT_MAX_DEVICES  # None: no limit
    max_enrolments_per_min: int | None = DEFAULT_MAX_ENROLMENTS_PER_MIN


def create_enrolment_token(
    engine: Engine, *, fleet: str, now_ns: int, expires_ns: int | None = None, comment: str = "",
    max_devices: int | None = DEFAULT_MAX_DEVICES, max_enrolments_per_min: int | None = DEFAULT_MAX_ENROLMENTS_PER_MIN,
) -> tuple[EnrolmentToken, str]:
    """A new token of ``fleet``; returns its row and the token text (shown once, never stored).
    ``max_devices`` and ``max_enrolments_per_min`` bound what it enrols (None: no bound)."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    with Session(engine) as session, session.begin():
        session.execute(
            enrolment_tokens.insert().values(
                id=token_id, fleet=fleet, secret_sha256=sha256_hex(secret), created_ns=now_ns,
                expires_ns=expires_ns, revoked_ns=None, uses=0, last_used_ns=None, comment=comment,
                max_devices=max_devices, max_enrolments_per_min=max_enrolments_per_min,
            )
        )
    row = EnrolmentToken(token_id, fleet, now_ns, expires_ns, None, 0, None, comment, max_devices, max_enrolments_per_min)
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
    """The (token id, fleet) of a valid token with room for one more device; counts the use.
    Raises ``IdentityRefused``: unknown, revoked, expired, its device limit reached
    (permission_denied), or over its enrolment rate (resource_exhausted, with a retry-after)."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise IdentityRefused("unauthenticated", "malformed enrolment token")
    token_id, secret = parts[1], parts[2]
    row = session.execute(
        select(enrolment_tokens.c.fleet, enrolment_tokens.c.secret_sha256, enrolment_tokens.c.expires_ns,
               enrolment_tokens.c.revoked_ns, enrolment_tokens.c.max_devices, enrolment_tokens.c.max_enrolments_per_min)
        .where(enrolment_tokens.c.id == token_id)
    ).first()
    # The same refusal whether the id or the secret is wrong: nothing to learn from it.
    if row is None or not same_secret(secret, row.secret_sha256):
        raise IdentityRefused("unauthenticated", "unknown enrolment token")
    if row.revoked_ns is not None:
        raise IdentityRefused("unauthenticated", f"enrolment token {token_id} was revoked")
    if row.expires_ns is not None and row.expires_ns <= now_ns:
        raise IdentityRefused("unauthenticated", f"enrolment token {token_id} has expired")
    rate = row.max_enrolments_per_min
    if rate is not None and rate > 0:
        # By the collectors' clocks, which agree to far better than a minute (unlike an operator's
        # laptop): a bound on bursts, not an accounting.
        recent = session.execute(
            select(func.count()).select_from(device_credentials)
            .where(device_credentials.c.via == TOKEN_VIA_PREFIX + token_id, device_credentials.c.created_ns > now_ns - 60 * 10**9)
        ).scalar_one()
        if recent >= rate:
            raise IdentityRefused("resource_exhausted", f"enrolment token {token_id} enrols at most {rate} devices a minute",
                                  retry_after_s=60.0 * (0.5 + secrets.randbelow(1000) / 1000))
    # One statement checks the limit and counts the use, so racing enrolments cannot pass it together.
    counted = session.execute(
        update(enrolment_tokens)
        .where(enrolment_tokens.c.id == token_id,
               or_(enrolment_tokens.c.max_devices.is_(None), enrolment_tokens.c.max_devices <= 0,
                   enrolment_tokens.c.uses < enrolment_tokens.c.max_devices))
        .values(uses=enrolment_tokens.c.uses + 1, last_used_ns=now_ns)
    )
    if counted.rowcount != 1:  # type: ignore[attr-defined]
        raise IdentityRefused("permission_denied", f"enrolment token {token_id} has enrolled its limit of {row.max_devices} devices: "
                                                   "make another ('fleetscope token create') or raise the limit")
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


def hardware_ids(inventory: Any) -> list[str]:
    """The ids that name a device's hardware whatever its agent id: its GPUs' UUIDs and serials.
    ``inventory`` is a ``pb.Inventory`` or the device row's JSON of it."""
    gpus = inventory.get("gpus", []) if isinstance(inventory, dict) else getattr(inventory, "gpus", [])
    ids: list[str] = []
    for gpu in gpus or ():
        for field in ("uuid", "serial"):
            value = gpu.get(field, "") if isinstance(gpu, dict) else getattr(gpu, field, "")
            value = str(value or "").strip()
            # "N/A" and the like are what drivers report for no serial: they name no device.
            if len(value) >= 8 and " " not in value and value not in ids:
                ids.append(value)
    return ids


def check_not_revoked_device(session: Session, *, name: str, hardware: Iterable[str]) -> None:
    """Refuse an enrolment (a new agent id) of a device that was revoked and not allowed back:
    the same name, or any of the same hardware ids. Raises ``IdentityRefused``."""
    hardware = set(hardware)
    conditions = [device_revocations.c.name == name] if name else []
    conditions += [device_revocations.c.hardware_ids.contains(h, autoescape=True) for h in hardware]
    if not conditions:
        return
    rows = session.execute(
        select(device_revocations.c.name, device_revocations.c.hardware_ids, device_revocations.c.agent_id)
        .where(and_(device_revocations.c.allowed_ns.is_(None), or_(*conditions)))
    ).all()
    for row in rows:
        same_hardware = hardware & set(str(row.hardware_ids).split())
        if row.name == name or same_hardware:
            what = f"named {name!r}" if row.name == name else f"with GPU {sorted(same_hardware)[0]}"
            raise IdentityRefused("permission_denied", f"a device {what} was revoked (agent {row.agent_id}): it enrols again only "
                                                       f"after an operator runs 'fleetscope device allow {row.name or row.agent_id}'")


def revoke_devices(engine: Engine, name_or_agent_id: str, *, now_ns: int) -> list[str]:
    """Revoke the credential of the device so named (or with that agent id); returns the agent ids
    revoked. A device that never enrolled gets a revoked row, so its id is refused from now on.
    Each revocation is numbered by the database (``device_revocations``) and keeps the device's
    name and hardware ids, which cannot enrol again until ``allow_devices``."""
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
            device = session.scalars(select(Device).where(Device.agent_id == agent_id)).first()
            fleet = session.execute(
                select(device_credentials.c.fleet).where(device_credentials.c.agent_id == agent_id)
            ).scalar_one()
            session.execute(
                device_revocations.insert().values(
                    agent_id=agent_id, fleet=fleet, name=device.name if device is not None else "",
                    hardware_ids=" ".join(hardware_ids(device.inventory or {})) if device is not None else "",
                    revoked_ns=now_ns, allowed_ns=None,
                )
            )
    return agent_ids


def allow_devices(engine: Engine, name_or_agent_id: str, *, now_ns: int) -> list[str]:
    """An operator's approval: the revoked device so named (or of that agent id) may enrol again,
    as a new agent id (its old one stays revoked). Returns the names (or agent ids) allowed."""
    with Session(engine) as session, session.begin():
        match = or_(device_revocations.c.name == name_or_agent_id, device_revocations.c.agent_id == name_or_agent_id)
        rows = session.execute(
            select(device_revocations.c.seq, device_revocations.c.name, device_revocations.c.agent_id)
            .where(match, device_revocations.c.allowed_ns.is_(None))
        ).all()
        if rows:
            session.execute(update(device_revocations).where(device_revocations.c.seq.in_([r.seq for r in rows]))
                            .values(allowed_ns=now_ns))
    return [str(r.name or r.agent_id) for r in rows]


def revocation_count(engine: Engine) -> int:
    """How many revocations were ever made: it only grows, so a change means a new one, whatever
    the clocks of the hosts that made them say."""
    with Session(engine) as session:
        return int(session.execute(select(func.count()).select_from(device_revocations)).scalar_one())


def revoked_among(engine: Engine, agent_ids: Iterable[str]) -> set[str]:
    """The agent ids among ``agent_ids`` whose credential is revoked."""
    ids = list(agent_ids)
    out: set[str] = set()
    with Session(engine) as session:
        for i in range(0, len(ids), 500):
            out.update(session.scalars(
                select(device_credentials.c.agent_id)
                .where(device_credentials.c.agent_id.in_(ids[i : i + 500]), device_credentials.c.revoked_ns.is_not(None))
            ))
    return out
