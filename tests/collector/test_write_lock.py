"""Writers of one SQLite file take turns through ``WriteLock``: the rollup job waits for the
ingest writer's transaction and then goes on, instead of polling in SQLite's busy handler."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import gpu_rollups
from fleetscope.collector.storage.write_lock import WriteLock
from tests.dashboard.test_rollup import NS, T0, _device, _samples


def test_the_rollup_job_waits_for_the_write_lock_and_rolls_once_it_is_free(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    device_id = _device(engine, "node-1")
    _samples(engine, device_id, T0 - 30 * 60 * NS, T0, seed=1)
    job = RollupJob(engine)
    held = WriteLock(engine)
    try:
        with held:
            roller = threading.Thread(target=job.run_once, kwargs={"now_ns": T0})
            roller.start()
            roller.join(1.0)
            assert roller.is_alive(), "the rollup wrote while another writer held the lock"
            with engine.connect() as conn:
                assert conn.execute(select(func.count()).select_from(gpu_rollups)).scalar_one() == 0
        roller.join(30)
        assert not roller.is_alive()
        assert job.last_report is not None and job.last_report.chunks > 0
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(gpu_rollups)).scalar_one() > 0
    finally:
        engine.dispose()


def _hold_both(first: WriteLock, second: WriteLock) -> None:
    with first, second:
        pass


def test_the_lock_is_a_no_op_without_a_database_file(pg_url: str) -> None:
    """PostgreSQL and an in-memory SQLite database have their own locking: two holders at
    once must not wait for each other (with a real file lock, the second would wait forever)."""
    for url in (pg_url, "sqlite://"):
        engine = make_engine(url)
        first, second = WriteLock(engine), WriteLock(engine)

        t = threading.Thread(target=_hold_both, args=(first, second), daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), url
        engine.dispose()
