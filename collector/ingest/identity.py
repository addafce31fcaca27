"""Who is on the other end of a call, and which agent id it may act as.

An agent presents, in the call's metadata:

* ``fleetscope-agent-id`` and ``fleetscope-device-key``: its agent id and the random key it made
  once and keeps in its state directory (``agent/daemon/credentials.py``);
* ``authorization: Bearer <token>``: an enrolment token (``fse1.<id>.<secret>``, made by
  ``fleetscope token create``), or one of the collector's static tokens (``--token``,
  ``--tokens-file``), needed only until the agent id is enrolled.

The rule, in every mode: **an agent id with a credential row is opened only by its device key.**
The first registration with a key for an agent id that has no row binds the two (enrolment),
admitted by an enrolment token (fleet from the token, within its device limit and rate), a
static token, or no token on a collector started with ``--allow-unauthenticated`` (an open
collector: only by that flag, never by default). A device that was revoked cannot enrol again
under a new agent id (same name or GPU) until an operator allows it. A client without a key (an
older agent, a script) is let in by a static token (or none, on an open collector) only for
agent ids nobody enrolled. A stream is bound to
the agent id its key opened (or, key-less, to the agent id of its first batch): a batch for any
other agent id ends it with PERMISSION_DENIED before anything of it is stored.

Refusals: UNAUTHENTICATED when no valid credential was presented; PERMISSION_DENIED when a valid
one asks for what it may not do (another agent's id, another fleet, a revoked device).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from fleetscope.collector.storage.credentials import (
    TOKEN_VIA_PREFIX,
    Binding,
    IdentityRefused,
    bind_agent,
    check_device_key,
    check_enrolment_token,
    check_not_revoked_device,
    hardware_ids,
    is_bound,
    is_enrolment_token,
    sha256_hex,
)
from fleetscope.proto.v1 import telemetry_pb2 as pb

__all__ = ["AGENT_ID_HEADER", "DEVICE_KEY_HEADER", "Authenticator", "IdentityRefused", "Presented", "grpc_code", "quota_group"]

AGENT_ID_HEADER = "fleetscope-agent-id"
DEVICE_KEY_HEADER = "fleetscope-device-key"
FLEET_LABEL = "fleet"
_CODES = {
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "permission_denied": grpc.StatusCode.PERMISSION_DENIED,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def grpc_code(exc: IdentityRefused) -> grpc.StatusCode:
    return _CODES.get(exc.code, grpc.StatusCode.PERMISSION_DENIED)


def quota_group(binding: Binding | None) -> str | None:
    """Whose ingest quota a stream draws on: the enrolment token that enrolled its device
    ("token:<id>"), else its fleet ("fleet:<name>"). None for a key-less stream (an older agent,
    a script): only a static token, the operator's own secret, lets one in."""
    if binding is None:
        return None
    if binding.via.startswith(TOKEN_VIA_PREFIX):
        return binding.via
    return f"fleet:{binding.fleet}"


@dataclass(frozen=True)
class Presented:
    """What a call presented in its metadata ("" for what it did not)."""

    bearer: str = ""
    agent_id: str = ""
    device_key: str = ""

    @classmethod
    def of(cls, metadata: Iterable[tuple[str, str | bytes]] | None) -> Presented:
        bearer = agent_id = key = ""
        for k, v in metadata or ():
            if isinstance(v, bytes):
                continue
            if k == "authorization" and v.startswith("Bearer "):
                bearer = v[len("Bearer ") :]
            elif k == AGENT_ID_HEADER:
                agent_id = v
            elif k == DEVICE_KEY_HEADER:
                key = v
        return cls(bearer, agent_id, key)

    def callers(self, peer: str) -> tuple[str, ...]:
        """Who is calling, for the throttle of refused calls: its address, and the token it holds
        (an enrolment token by its id, any other by a digest): never the identity it claims."""
        out: tuple[str, ...] = (f"peer:{peer}",)
        if is_enrolment_token(self.bearer):
            out += (f"token:{self.bearer.split('.')[1]}",)
        elif self.bearer:
            out += (f"token:{sha256_hex(self.bearer)[:16]}",)
        return out


class Authenticator:
    """The checks, given the collector's static tokens (None: an open collector)."""

    def __init__(self, engine: Engine, static_tokens: frozenset[str] | None, *, allow_unauthenticated: bool = False) -> None:
        import hmac

        self._engine = engine
        self._static = static_tokens
        self._open = allow_unauthenticated
        self._compare = hmac.compare_digest

    @property
    def open(self) -> bool:
        """Whether a client without any credential may enrol: only when the operator said so."""
        return self._open

    def static_ok(self, bearer: str) -> bool:
        if self._static is None:
            return False
        ok = False
        for t in self._static:  # every token compared, in constant time each
            ok |= self._compare(bearer.encode(), t.encode())
        return ok

    def admits_call(self, p: Presented) -> bool:
        """The check made before any database work: a call that can never pass is refused at once."""
        if p.device_key or is_enrolment_token(p.bearer):
            return True  # decided against the database (registration, stream identity)
        return self.open or self.static_ok(p.bearer)

    def registration_check(self, p: Presented, req: pb.RegisterRequest) -> Callable[[Session], str | None]:
        """The ``authorize`` hook of ``register_device``: raises ``IdentityRefused`` or returns the fleet."""
        requested_fleet = req.labels.get(FLEET_LABEL, "")

        def authorize(session: Session) -> str | None:
            now = time.time_ns()
            if not p.device_key:
                if is_enrolment_token(p.bearer):
                    raise IdentityRefused("unauthenticated", "an enrolment token needs an agent that keeps a device key "
                                                             "(fleetscope agent 0.2 or later)")
                if is_bound(session, req.agent_id):
                    raise IdentityRefused("permission_denied", f"agent {req.agent_id!r} is enrolled: only its own device key may register it")
                return None
            if p.agent_id != req.agent_id:
                raise IdentityRefused("permission_denied", f"the device key presented is for agent {p.agent_id!r}, "
                                                           f"not {req.agent_id!r}")
            binding = check_device_key(session, req.agent_id, p.device_key)
            if binding is not None:
                fleet = binding.fleet
            else:
                # A new agent id: not a device an operator revoked, whatever id it now claims.
                check_not_revoked_device(session, name=req.name or req.hostname, hardware=hardware_ids(req.inventory))
                if is_enrolment_token(p.bearer):
                    token_id, fleet = check_enrolment_token(session, p.bearer, now_ns=now)
                    via = f"token:{token_id}"
                elif self.static_ok(p.bearer):
                    fleet, via = requested_fleet, "static"
                elif self.open:
                    fleet, via = requested_fleet, "open"
                else:
                    raise IdentityRefused("unauthenticated", "missing or wrong token (metadata 'authorization: Bearer <token>')")
                if requested_fleet and requested_fleet != fleet:
                    raise IdentityRefused("permission_denied", f"a token of fleet {fleet!r} cannot enrol into fleet {requested_fleet!r}")
                bind_agent(session, req.agent_id, p.device_key, fleet=fleet, via=via, now_ns=now)
                session.flush()  # a racing enrolment of the same id fails here, on the primary key
            if requested_fleet and fleet and requested_fleet != fleet:
                raise IdentityRefused("permission_denied", f"agent {req.agent_id!r} belongs to fleet {fleet!r}, not {requested_fleet!r}")
            return fleet

        return authorize

    def stream_agent(self, p: Presented) -> Binding | None:
        """The binding a new stream is bound to; None: key-less, bound by its first batch.
        Runs a query: call it off the event loop. Raises ``IdentityRefused``."""
        if not p.device_key:
            if is_enrolment_token(p.bearer):
                raise IdentityRefused("unauthenticated", "an enrolment token only enrols (Register); streams need the device key")
            return None
        with Session(self._engine) as session:
            binding = check_device_key(session, p.agent_id, p.device_key)
        if binding is None:
            raise IdentityRefused("failed_precondition", f"agent {p.agent_id!r} is not enrolled: call Register first")
        return binding

    def keyless_may_write(self, agent_id: str) -> bool:
        """A key-less stream may write as ``agent_id`` only when nobody enrolled it. Runs a query."""
        with Session(self._engine) as session:
            return not is_bound(session, agent_id)
