"""Leases: one holder at a time for a job that any number of collectors run (the rollup job,
detectors), so that every collector can be identical and the job survives any of them dying.

A lease is a row in ``leases``: its ``name``, the ``owner`` holding it and ``expires_ns``.
``acquire`` takes it with one conditional UPDATE (held by nobody, or expired, or already
ours) or, for a lease never taken, the INSERT of its row; both SQLite and PostgreSQL make each
atomic, so two owners never both succeed. A holder that dies stops renewing, and after
``ttl_s`` another owner takes the lease over.

Expiry alone does not stop a holder that stalled (a long pause, a slow disk) from writing
after another owner took over. So a job that writes in transactions calls ``renew_in`` in
each one: the renewal and the job's writes commit together, and when the lease was lost the
renewal raises ``LeaseLost`` and the job's transaction rolls back with it. On PostgreSQL the
renewal also locks the lease row until that commit, so a takeover waits for it and then sees
the renewed expiry.

Times are nanoseconds since the epoch from ``clock``; ``now_ns`` arguments let a caller (or a
test) use its own notion of now.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from sqlalchemy import Connection, Engine, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from fleetscope.collector.storage.schema import leases

log = logging.getLogger(__name__)

NS = 10**9


class LeaseLost(Exception):
    """The lease is held by another owner now: raised inside a transaction so that it rolls back."""


def default_owner() -> str:
    """An owner name unique to this process and this job instance: host, pid, and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """The lease ``name`` as seen by ``owner``; not thread-safe (one job owns one)."""

    def __init__(
        self,
        engine: Engine,
        name: str,
        owner: str | None = None,
        *,
        ttl_s: float,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self.name = name
        self.owner = owner or default_owner()
        self.ttl_ns = int(ttl_s * NS)
        self._clock = clock

    def acquire(self, now_ns: int | None = None) -> bool:
        """Take the lease, or renew it if already ours; False while another owner holds it."""
        now_ns = self._clock() if now_ns is None else now_ns
        c = leases.c
        with self.engine.begin() as conn:
            taken = conn.execute(
                update(leases)
                .where(c.name == self.name, or_(c.owner == self.owner, c.expires_ns < now_ns))
                .values(owner=self.owner, expires_ns=now_ns + self.ttl_ns)
            )
            if taken.rowcount == 1:
                return True
            exists = conn.execute(select(c.name).where(c.name == self.name)).first() is not None
        if exists:
            return False
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(leases).values(name=self.name, owner=self.owner, expires_ns=now_ns + self.ttl_ns))
        except IntegrityError:  # another owner inserted the first lease in between
            return False
        return True

    def holder(self, now_ns: int | None = None) -> str | None:
        """The owner holding the lease at ``now_ns``; None when nobody does (never taken, expired, released)."""
        now_ns = self._clock() if now_ns is None else now_ns
        c = leases.c
        with self.engine.connect() as conn:
            owner: str | None = conn.execute(
                select(c.owner).where(c.name == self.name, c.expires_ns >= now_ns)
            ).scalar()
        return owner

    def renew_in(self, conn: Connection, now_ns: int | None = None) -> None:
        """Extend the lease inside the caller's transaction ``conn``; ``LeaseLost`` if it is not ours.

        The new expiry counts from the later of ``now_ns`` and the clock: a job that passes the
        time its run started must not shorten a lease it has been holding since."""
        clock_ns = self._clock()
        now_ns = clock_ns if now_ns is None else max(now_ns, clock_ns)
        c = leases.c
        renewed = conn.execute(
            update(leases)
            .where(c.name == self.name, c.owner == self.owner)
            .values(expires_ns=now_ns + self.ttl_ns)
        )
        if renewed.rowcount != 1:
            raise LeaseLost(f"lease {self.name!r} is no longer held by {self.owner}")

    def renew(self, now_ns: int | None = None) -> bool:
        """Extend the lease in a transaction of its own; False if another owner took it over."""
        try:
            with self.engine.begin() as conn:
                self.renew_in(conn, now_ns)
        except LeaseLost:
            return False
        return True

    def release(self) -> None:
        """Give the lease up now, so that another owner need not wait for it to expire.

        Best effort: on failure (database gone) the lease expires by itself."""
        c = leases.c
        try:
            with self.engine.begin() as conn:
                conn.execute(update(leases).where(c.name == self.name, c.owner == self.owner).values(expires_ns=0))
        except Exception as exc:
            log.debug("could not release the %s lease: %s", self.name, exc)
