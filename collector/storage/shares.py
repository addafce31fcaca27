"""Job shares: a once-per-fleet job split by device, so that several collectors share its work
instead of one collector doing all of it while the others wait for its lease.

The devices are split into ``JOB_SHARES`` fixed shares by ``device_id % JOB_SHARES``. Each share
is a lease of its own (``<job>/share/NN`` in ``leases``, see ``storage/lease.py``), so everything
a lease promises holds per share: one holder at a time, taken over when its holder dies, and a
job's transaction for a device renews that device's share inside the transaction, so a holder
that stalled past its lease has the transaction rolled back instead of writing beside the new
holder. A share never runs twice at once.

How the shares are spread:

* **Members.** Each collector running the job renews a member row (``<job>/member/<digest>``)
  at the start of each pass. The live members, sorted by owner, each get a fair part:
  ``JOB_SHARES // n``, one more for the first ``JOB_SHARES % n``.
* **Balance.** A member holding more than its part gives the surplus up at the start of a pass;
  a member holding less takes free or expired shares. Member ``rank`` of ``n`` keeps and takes
  the shares ``k % n == rank`` first, so each member's devices are spread over the fleet. A new collector
  therefore gets its part within two passes, and a dead collector's shares are taken over once
  they expire (the lease's TTL).
* **Older collectors.** A collector from before shares runs the job under the whole-job lease
  (``<job>``). Sharing collectors hold that lease too, under the owner ``SHARED_OWNER``, and take
  no share while a collector of the old kind holds it: during a rolling upgrade the job never
  runs both ways at once.

The number of shares is a constant, not a setting: two collectors that split the devices
differently would both run the devices their splits disagree on.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, and_, delete, select

from fleetscope.collector.storage.lease import Lease, default_owner
from fleetscope.collector.storage.schema import leases

NS = 10**9
JOB_SHARES = 16
SHARED_OWNER = "(shared by device)"  # the whole-job lease's owner while collectors share the job
_FORGET_MEMBERS_AFTER_TTLS = 10  # a member row expired this many TTLs ago is deleted


def share_of(device_id: int) -> int:
    """The share a device belongs to."""
    return int(device_id) % JOB_SHARES


def share_lease_name(job: str, share: int) -> str:
    return f"{job}/share/{share:02d}"


def _member_prefix(job: str) -> str:
    return f"{job}/member/"


def fair_part(members: list[str], owner: str, shares: int = JOB_SHARES) -> int:
    """How many shares ``owner`` should hold among the live ``members`` (sorted by owner)."""
    if owner not in members:
        members = sorted([*members, owner])
    n, rank = len(members), members.index(owner)
    return shares // n + (1 if rank < shares % n else 0)


class JobShares:
    """The shares of ``job`` as seen by ``owner``; not thread-safe (one job instance owns one).

    ``acquire`` balances and returns the shares held for this pass; ``holds`` and ``renew_in``
    are asked per device; ``held`` is what this owner holds now (for its metrics)."""

    def __init__(
        self,
        engine: Engine,
        job: str,
        owner: str | None = None,
        *,
        ttl_s: float,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self.job = job
        self.owner = owner or default_owner()
        self.ttl_ns = int(ttl_s * NS)
        self._clock = clock
        self._shares = [Lease(engine, share_lease_name(job, k), self.owner, ttl_s=ttl_s, clock=clock)
                        for k in range(JOB_SHARES)]
        digest = hashlib.sha1(self.owner.encode()).hexdigest()[:16]
        self._member = Lease(engine, _member_prefix(job) + digest, self.owner, ttl_s=ttl_s, clock=clock)
        self._whole_job = Lease(engine, job, SHARED_OWNER, ttl_s=ttl_s, clock=clock)
        self.held: frozenset[int] = frozenset()

    def acquire(self, now_ns: int | None = None) -> frozenset[int]:
        """Balance with the other members and return the shares this owner holds now (empty while
        a collector that runs the job whole holds its lease)."""
        now_ns = self._clock() if now_ns is None else now_ns
        if not self._whole_job.acquire(now_ns):
            self._give_up(sorted(self.held))
            return self.held
        self._member.acquire(now_ns)  # the row's name is this owner's own: always ours
        self._forget_departed(now_ns)
        members, rows = self._read(now_ns)
        part = fair_part(members, self.owner)
        rank = members.index(self.owner) if self.owner in members else 0
        # Member ``rank`` of ``n`` prefers the shares ``k`` with ``k % n == rank`` (there are
        # exactly ``part`` of them), so each member's devices are spread over the id range
        # and a small fleet's low device ids do not all land on one member.
        order = sorted(range(JOB_SHARES), key=lambda k: ((k - rank) % max(len(members), 1) != 0, k))
        mine = [k for k in order if k in rows and rows[k][0] == self.owner and rows[k][1] >= now_ns]
        self._give_up(mine[part:])
        held = {k for k in mine[:part] if self._shares[k].acquire(now_ns)}  # renew what we keep
        for k in order:
            if len(held) >= part:
                break
            free = k not in rows or rows[k][1] < now_ns
            if free and self._shares[k].acquire(now_ns):
                held.add(k)
        self.held = frozenset(held)
        return self.held

    def holds(self, device_id: int) -> bool:
        return share_of(device_id) in self.held

    def renew_in(self, conn: Connection, device_id: int, now_ns: int | None = None) -> None:
        """Renew the device's share inside the caller's transaction; ``LeaseLost`` when another
        owner holds it now (the transaction then rolls back)."""
        self._shares[share_of(device_id)].renew_in(conn, now_ns)

    def renew_held_in(self, conn: Connection, now_ns: int | None = None) -> None:
        """Renew every share held inside the caller's transaction (a write that spans the
        devices of several shares); ``LeaseLost`` when any of them was taken over."""
        for k in sorted(self.held):
            self._shares[k].renew_in(conn, now_ns)

    def lost(self, device_id: int) -> None:
        """The device's share was found taken over: stop working on it until the next pass."""
        self.held = self.held - {share_of(device_id)}

    def holders(self, now_ns: int | None = None) -> dict[int, str]:
        """Who holds each share now (shares nobody holds are left out)."""
        now_ns = self._clock() if now_ns is None else now_ns
        return {k: owner for k, (owner, expires) in self._read(now_ns)[1].items() if expires >= now_ns}

    def release(self) -> None:
        """Give every share and the membership up now, so the other members take them over at
        their next pass instead of after the TTL. Best effort, like ``Lease.release``."""
        self._give_up(sorted(self.held))
        self._member.release()

    def _give_up(self, shares: list[int]) -> None:
        # Forget the shares before giving them up: what this owner says it holds (its metrics)
        # is never a share somebody else may already have taken.
        self.held = self.held - set(shares)
        for k in shares:
            self._shares[k].release()

    def _forget_departed(self, now_ns: int) -> None:
        """Delete the member rows of collectors gone for ``_FORGET_MEMBERS_AFTER_TTLS`` TTLs."""
        c = leases.c
        with self.engine.begin() as conn:
            conn.execute(delete(leases).where(and_(c.name.startswith(_member_prefix(self.job), autoescape=True),
                                                   c.expires_ns < now_ns - _FORGET_MEMBERS_AFTER_TTLS * self.ttl_ns)))

    def _read(self, now_ns: int) -> tuple[list[str], dict[int, tuple[str, int]]]:
        """The live members (sorted) and each share row's (owner, expires_ns)."""
        c = leases.c
        share_prefix = f"{self.job}/share/"
        member_prefix = _member_prefix(self.job)
        with self.engine.connect() as conn:
            members = sorted(conn.execute(
                select(c.owner).where(c.name.startswith(member_prefix, autoescape=True), c.expires_ns >= now_ns)
            ).scalars())
            rows = {}
            for name, owner, expires in conn.execute(
                select(c.name, c.owner, c.expires_ns).where(c.name.startswith(share_prefix, autoescape=True))
            ):
                suffix = name[len(share_prefix):]
                if suffix.isdigit() and int(suffix) < JOB_SHARES:
                    rows[int(suffix)] = (owner, int(expires))
        return members, rows


__all__ = ["JOB_SHARES", "SHARED_OWNER", "JobShares", "fair_part", "share_lease_name", "share_of"]
