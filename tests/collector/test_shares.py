"""Job shares on SQLite and PostgreSQL: several collectors split a job's devices, each share has
one holder at a time, a newcomer gets its part, a dead member's shares are taken over only once
they expire, a collector of the old kind (whole-job lease) never runs beside sharing ones, and
the rollup and compaction jobs run by two collectors write what one would have."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, delete, func, select

from fleetscope.collector.jobs.compaction import CompactionJob
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.lease import Lease
from fleetscope.collector.storage.rollup_schema import (
    gpu_rollups,
    host_rollups,
    latency_rollups,
    rollup_progress,
)
from fleetscope.collector.storage.schema import gpu_chunks, gpu_samples, host_samples
from fleetscope.collector.storage.shares import JOB_SHARES, SHARED_OWNER, JobShares, fair_part, share_of
from tests.dashboard.test_rollup import NS, T0, _device, _samples

TTL_S = 60
ALL = frozenset(range(JOB_SHARES))


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _shares(engine: Engine, owner: str, job: str = "job") -> JobShares:
    return JobShares(engine, job, owner, ttl_s=TTL_S, clock=lambda: T0)


def _assert_disjoint(*members: JobShares) -> None:
    seen: dict[int, str] = {}
    for m in members:
        for k in m.held:
            assert k not in seen, f"share {k} held by {seen[k]} and {m.owner}"
            seen[k] = m.owner


def test_fair_parts_add_up_to_every_share() -> None:
    for n in range(1, 40):
        members = [f"c{i:02d}" for i in range(n)]
        parts = [fair_part(members, m) for m in members]
        assert sum(parts) == JOB_SHARES and max(parts) - min(parts) <= 1


def test_alone_a_collector_holds_every_share_and_a_newcomer_gets_its_half_within_two_passes(engine: Engine) -> None:
    a, b = _shares(engine, "a"), _shares(engine, "b")
    assert a.acquire(T0) == ALL
    assert b.acquire(T0 + 1) == frozenset(), "nothing is free yet: a holds every share"
    assert len(a.acquire(T0 + 2)) == JOB_SHARES // 2, "a sees b and gives its surplus up"
    _assert_disjoint(a, b)
    assert len(b.acquire(T0 + 3)) == JOB_SHARES // 2, "b takes what a gave up"
    _assert_disjoint(a, b)
    assert a.held | b.held == ALL
    assert a.holders(T0 + 4) == {k: ("a" if k in a.held else "b") for k in ALL}, "the table says what each holds"
    for t in range(5, 10):  # further passes keep the balance: nothing moves
        before = (a.held, b.held)
        a.acquire(T0 + t)
        b.acquire(T0 + t)
        assert (a.held, b.held) == before


def test_three_collectors_balance_and_a_departed_ones_shares_go_to_the_others(engine: Engine) -> None:
    members = [_shares(engine, o) for o in ("a", "b", "c")]
    for t in range(4):
        for m in members:
            m.acquire(T0 + t)
            _assert_disjoint(*members)
    assert sorted(len(m.held) for m in members) == [5, 5, 6]
    members[1].release()  # stopped cleanly: its shares and membership are free at once
    for t in range(4, 6):
        for m in (members[0], members[2]):
            m.acquire(T0 + t)
            _assert_disjoint(members[0], members[2])
    assert sorted(len(m.held) for m in (members[0], members[2])) == [8, 8]
    assert members[0].held | members[2].held == ALL


def test_a_dead_members_shares_are_taken_over_when_they_expire_and_not_before(engine: Engine) -> None:
    a, b = _shares(engine, "a"), _shares(engine, "b")
    a.acquire(T0)
    b.acquire(T0)
    a.acquire(T0 + 1)
    b.acquire(T0 + 2)
    dead = set(a.held)
    assert len(dead) == JOB_SHARES // 2  # a now dies: it renews nothing from here
    assert b.acquire(T0 + TTL_S * NS) == ALL - dead, "a's shares are still a's up to their expiry"
    assert b.acquire(T0 + TTL_S * NS + 2) == ALL, "then b takes them over"
    late = a.acquire(T0 + TTL_S * NS + 3)  # a wakes up: it is a member again, and gets its part back in turn
    _assert_disjoint(a, b)
    assert late == frozenset()


def test_a_transaction_for_a_device_whose_share_was_taken_over_rolls_back(engine: Engine) -> None:
    from fleetscope.collector.storage.lease import LeaseLost

    a, b = _shares(engine, "a"), _shares(engine, "b")
    a.acquire(T0)
    assert b.acquire(T0 + TTL_S * NS + 1) == ALL, "a stalled past its expiry"
    with pytest.raises(LeaseLost), engine.begin() as conn:
        a.renew_in(conn, device_id=5, now_ns=T0 + TTL_S * NS + 2)
    assert b.holders(T0 + TTL_S * NS + 2)[share_of(5)] == "b"


def test_a_collector_of_the_old_kind_and_sharing_collectors_never_run_the_job_at_once(engine: Engine) -> None:
    old = Lease(engine, "job", "old-collector", ttl_s=TTL_S, clock=lambda: T0)
    new = _shares(engine, "new")
    assert old.acquire(T0)
    assert new.acquire(T0 + 1) == frozenset(), "the old kind runs the job whole: the sharer takes nothing"
    old.release()
    assert new.acquire(T0 + 2) == ALL
    assert not old.acquire(T0 + 3), "and now the old kind finds the job's lease held"
    assert old.holder(T0 + 3) == SHARED_OWNER


def test_members_racing_for_shares_never_hold_one_twice(engine: Engine) -> None:
    members = [JobShares(engine, "race", f"owner-{i}", ttl_s=TTL_S, clock=lambda: T0) for i in range(4)]
    go = threading.Barrier(len(members))
    errors: list[BaseException] = []

    def run(m: JobShares) -> None:
        try:
            go.wait()
            for t in range(8):
                m.acquire(T0 + t)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m,)) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    _assert_disjoint(*members)
    holders = members[0].holders(T0 + 8)
    for m in members:
        assert all(holders[k] == m.owner for k in m.held), "what a member says it holds is what the table says"


def _fleet(engine: Engine, devices: int, seconds: int = 1800) -> list[int]:
    ids = [_device(engine, f"srv-{i}") for i in range(devices)]
    for i, d in enumerate(ids):
        _samples(engine, d, T0 - seconds * NS, T0, seed=i, every_s=10)
    return ids


def _rollup_rows(engine: Engine) -> list[tuple]:
    with engine.connect() as conn:
        gpu = conn.execute(select(gpu_rollups).order_by(gpu_rollups.c.device_id, gpu_rollups.c.gpu_index,
                                                        gpu_rollups.c.step_s, gpu_rollups.c.bucket_ns)).all()
        host = conn.execute(select(host_rollups).order_by(host_rollups.c.device_id, host_rollups.c.step_s,
                                                          host_rollups.c.bucket_ns)).all()
    # Floats to 12 significant digits: a sum's last bits depend on the order its rows were
    # added in, which Citus' parallel plans do not fix.
    return [tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in r) for r in (*gpu, *host)]


def test_two_collectors_roll_up_the_fleet_between_them_as_one_would(engine: Engine) -> None:
    ids = _fleet(engine, 6)
    a = RollupJob(engine, owner="a", settle_s=0, lease_s=TTL_S, clock=lambda: T0)
    b = RollupJob(engine, owner="b", settle_s=0, lease_s=TTL_S, clock=lambda: T0)
    a.shares.acquire(T0)
    b.shares.acquire(T0)
    a.shares.acquire(T0)  # balanced: each holds half the shares
    ra, rb = a.run_once(T0), b.run_once(T0)
    assert ra.ran and rb.ran and ra.shares.isdisjoint(rb.shares)
    assert ra.devices + rb.devices == len(ids), "every device rolled, by one of the two"
    assert {share_of(d) for d in ids} & ra.shares and {share_of(d) for d in ids} & rb.shares, "both did some"
    with engine.connect() as conn:
        rolled = {r.device_id for r in conn.execute(select(rollup_progress.c.device_id))}
    assert rolled == set(ids)
    # Rolled again from scratch by one collector alone, the fleet gives the same rows.
    shared = _rollup_rows(engine)
    with engine.begin() as conn:
        for t in (gpu_rollups, host_rollups, latency_rollups, rollup_progress):
            conn.execute(delete(t))
    a.release()
    b.release()
    alone = RollupJob(engine, owner="alone", settle_s=0, lease_s=TTL_S, clock=lambda: T0).run_once(T0)
    assert alone.devices == len(ids) and alone.shares == ALL
    assert _rollup_rows(engine) == shared


def test_two_collectors_compact_the_fleet_between_them_each_row_once(engine: Engine) -> None:
    ids = _fleet(engine, 6, seconds=5400)  # the hour before T0 is whole and rolled up: it can be folded
    now = T0 + 3 * 3600 * NS
    RollupJob(engine, owner="roller", settle_s=0, lease_s=TTL_S, clock=lambda: now).run_once(now)
    hour_before = gpu_samples.c.ts_ns < T0 - 3600 * NS
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).where(hour_before)).scalar_one()
        newer = conn.execute(select(func.count()).where(~hour_before)).scalar_one()
        host_rows = conn.execute(select(func.count()).where(host_samples.c.ts_ns < T0 - 3600 * NS)).scalar_one()
    a = CompactionJob(engine, owner="a", fold_after_s=0, keep_raw_s=0, lease_s=TTL_S, clock=lambda: now)
    b = CompactionJob(engine, owner="b", fold_after_s=0, keep_raw_s=0, lease_s=TTL_S, clock=lambda: now)
    a.shares.acquire(now)
    b.shares.acquire(now)
    a.shares.acquire(now)
    ra, rb = a.run_once(now), b.run_once(now)
    assert ra.ran and rb.ran and ra.shares.isdisjoint(rb.shares) and ra.rows and rb.rows
    assert ra.rows + rb.rows == rows + host_rows, "every tail row folded once"
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(gpu_samples)).scalar_one() == newer, "the rest stays in the tail"
        assert conn.execute(select(func.coalesce(func.sum(gpu_chunks.c.rows), 0))).scalar_one() == rows
        by_device = dict(conn.execute(select(gpu_chunks.c.device_id, func.count()).group_by(gpu_chunks.c.device_id)).all())
    assert set(by_device) == set(ids)


def test_two_collectors_detect_the_fleet_between_them_each_device_once_and_the_lag_is_the_oldest_shares(
    engine: Engine,
) -> None:
    from sqlalchemy.orm import Session

    from fleetscope.collector.query.latest import job_lags
    from tests.collector.test_detectors import _device as _detector_device
    from tests.collector.test_detectors import _incidents, _job

    silent = [_detector_device(engine, f"drone-{i}", last_seen=T0) for i in range(6)]
    a, b = _job(engine, "a"), _job(engine, "b")
    a.shares.acquire(T0)
    b.shares.acquire(T0)
    a.shares.acquire(T0)  # balanced: each holds half the shares
    ra, rb = a.run_once(T0 + 20 * NS), b.run_once(T0 + 20 * NS)
    assert ra.ran and rb.ran and ra.shares.isdisjoint(rb.shares)
    assert ra.opened and rb.opened and ra.opened + rb.opened == len(silent), "each silent device reported once"
    assert sorted(i.device_id for i in _incidents(engine, "agent_offline")) == sorted(silent)
    fleet_wide = [r for r in (ra, rb) if 0 in r.shares]
    assert [("lifecycle" in r.per_detector_s) for r in (ra, rb)] == [0 in ra.shares, 0 in rb.shares]
    assert len(fleet_wide) == 1, "the fleet-wide detectors run on share 0's holder only"
    assert a.run_once(T0 + 21 * NS).opened == 0 and b.run_once(T0 + 21 * NS).opened == 0, "and never twice"

    def lag(now_ns: int) -> float:
        with Session(engine) as s:
            return next(j.lag_s for j in job_lags(session=s, now_ns=now_ns) if j.job == "detector:agent_offline")

    assert lag(T0 + 22 * NS) == 1.0
    for t in range(22, 60, 10):  # b stops passing: its shares' marks age, and so does the detector's lag
        a.run_once(T0 + t * NS)
    assert lag(T0 + 60 * NS) == 39.0
