"""Leases on SQLite and PostgreSQL: one holder at a time, taken over when it expires, kept by
renewing, given up by release, and a job's transaction rolled back when the lease was lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, func, insert, select

from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.lease import Lease, LeaseLost
from fleetscope.collector.storage.rollup_schema import gpu_rollups, rollup_progress
from tests.dashboard.test_rollup import NS, T0, _device, _samples

TTL_S = 60


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _lease(engine: Engine, owner: str, name: str = "job") -> Lease:
    return Lease(engine, name, owner, ttl_s=TTL_S, clock=lambda: T0)


def test_one_owner_at_a_time_until_the_lease_expires(engine: Engine) -> None:
    a, b = _lease(engine, "a"), _lease(engine, "b")
    assert a.holder(T0) is None, "a lease never taken has no holder"
    assert a.acquire(T0)
    assert not b.acquire(T0 + 1) and b.holder(T0 + 1) == "a"
    assert not b.acquire(T0 + TTL_S * NS), "held up to its expiry, inclusive"
    assert b.acquire(T0 + TTL_S * NS + 1), "taken over once expired"
    assert b.holder(T0 + TTL_S * NS + 1) == "b"
    assert not a.acquire(T0 + TTL_S * NS + 2), "the old holder waits in its turn"
    assert not a.renew(T0 + TTL_S * NS + 2), "and cannot renew what it lost"


def test_leases_of_different_names_are_independent(engine: Engine) -> None:
    assert _lease(engine, "a", "rollup").acquire(T0)
    assert _lease(engine, "b", "detector:xid").acquire(T0)
    assert _lease(engine, "c", "rollup").holder(T0) == "a"


def test_acquiring_again_renews_and_renewing_keeps_the_lease(engine: Engine) -> None:
    a, b = _lease(engine, "a"), _lease(engine, "b")
    assert a.acquire(T0)
    assert a.acquire(T0 + 50 * NS), "the holder acquiring again renews"
    assert not b.acquire(T0 + 61 * NS), "the renewal moved the expiry to 110 s"
    assert a.renew(T0 + 100 * NS)
    assert not b.acquire(T0 + 150 * NS), "and renew() moved it to 160 s"
    assert b.acquire(T0 + 161 * NS)


def test_renewal_never_shortens_the_lease(engine: Engine) -> None:
    """``renew_in`` counts from the later of the caller's time and the clock: a job that passes
    the time its run started must not move the expiry back."""
    clock = [T0 + 30 * NS]
    a = Lease(engine, "job", "a", ttl_s=TTL_S, clock=lambda: clock[0])
    b = _lease(engine, "b")
    assert a.acquire()  # expires at 90 s
    clock[0] = T0 + 40 * NS
    assert a.renew(T0)  # the run's start, older than the clock: the expiry goes to 100 s, not 60
    assert not b.acquire(T0 + 95 * NS)
    assert b.acquire(T0 + 101 * NS)


def test_release_frees_the_lease_at_once(engine: Engine) -> None:
    a, b = _lease(engine, "a"), _lease(engine, "b")
    assert a.acquire(T0)
    b.release()  # not the holder: changes nothing
    assert not b.acquire(T0 + 1)
    a.release()
    assert a.holder(T0 + 1) is None
    assert b.acquire(T0 + 2)


def test_the_first_acquisition_has_one_winner_among_many(engine: Engine) -> None:
    """A lease never taken is created by an INSERT: owners racing for it get one winner per name."""
    names = [f"job-{i}" for i in range(10)]
    owners = [f"owner-{i}" for i in range(6)]
    won: dict[str, list[str]] = {n: [] for n in names}
    start = threading.Barrier(len(owners))

    def race(owner: str) -> None:
        start.wait()
        for n in names:
            if Lease(engine, n, owner, ttl_s=TTL_S, clock=lambda: T0).acquire():
                won[n].append(owner)

    threads = [threading.Thread(target=race, args=(o,)) for o in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(len(w) == 1 for w in won.values()), won


def test_a_transaction_that_finds_the_lease_lost_rolls_back(engine: Engine) -> None:
    a, b = _lease(engine, "a"), _lease(engine, "b")
    assert a.acquire(T0)
    with engine.begin() as conn:  # while a holds it, its writes commit with the renewal
        conn.execute(insert(rollup_progress).values(device_id=1, step_s=60, rolled_until_ns=1))
        a.renew_in(conn, T0 + 10 * NS)
    assert b.acquire(T0 + 71 * NS + 1), "a stalled past its expiry: b takes over"
    with pytest.raises(LeaseLost), engine.begin() as conn:
        conn.execute(insert(rollup_progress).values(device_id=2, step_s=60, rolled_until_ns=2))
        a.renew_in(conn, T0 + 72 * NS)
    with engine.connect() as conn:
        assert conn.execute(select(rollup_progress.c.device_id)).scalars().all() == [1], "the second write rolled back"
    assert b.holder(T0 + 72 * NS) == "b", "and the new holder keeps the lease"


def test_the_rollup_job_leaves_and_rolls_back_the_chunk_in_which_it_lost_the_share(engine: Engine) -> None:
    d = _device(engine, "srv")
    _samples(engine, d, T0 - 3 * 3600 * NS, T0, seed=7)
    first = RollupJob(engine, owner="first", settle_s=0, lease_s=TTL_S, minute_chunk_s=3600, clock=lambda: T0)
    second = RollupJob(engine, owner="second", settle_s=0, lease_s=TTL_S, minute_chunk_s=3600, clock=lambda: T0)
    chunks = []
    roll_chunk = first._chunk

    def stall_after_the_first_chunk(device_id: int, step_s: int, start: int, end: int, now_ns: int, report) -> bool:  # type: ignore[no-untyped-def]
        if chunks:  # first stalled past its lease: second took it over meanwhile
            assert second.shares.acquire(T0 + 10 * TTL_S * NS)
        chunks.append((step_s, start, end))
        return roll_chunk(device_id, step_s, start, end, now_ns, report)

    first._chunk = stall_after_the_first_chunk  # type: ignore[method-assign]
    report = first.run_once(T0)
    assert report.ran and report.chunks == 1 and len(chunks) == 2, "stopped at the chunk that found the lease lost"
    (step_s, _, first_end), _ = chunks
    with engine.connect() as conn:
        progress = conn.execute(select(rollup_progress.c.rolled_until_ns).where(rollup_progress.c.step_s == 60)).scalar()
        newest = conn.execute(select(func.max(gpu_rollups.c.bucket_ns))).scalar()
    assert step_s == 60 and progress == first_end and newest < first_end, "only the first chunk is in the tables"
    assert not first.run_once(T0 + 10 * TTL_S * NS).ran
    assert second.run_once(T0 + 10 * TTL_S * NS).ran
    with engine.connect() as conn:
        assert conn.execute(select(rollup_progress.c.rolled_until_ns).where(rollup_progress.c.step_s == 60)).scalar() == (
            T0 - 60 * NS
        ), "the new holder rolls on from where the first stopped"
