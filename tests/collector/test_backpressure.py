"""Backpressure: a database slower than the fleet slows the streams, it does not grow the
collector or refuse batches.

A real collector (in this process, so that its byte budget can be read) over a real SQLite
file, real agents with on-disk spools over gRPC on loopback; the database is made slow for real
by another connection holding SQLite's write lock (BEGIN IMMEDIATE) for several seconds, less
than the collector's busy timeout. While it is held: the bytes the collector read and has not
stored stay under its cap (``--max-unacked``), its readers wait instead of reading, the agents'
spools grow, no stream breaks and no batch is rejected. Once released: every sample stored
exactly once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.ingest.service import IngestBudget
from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

CAP = 24 << 10  # small enough that a handful of agents' windows fill it
AGENTS = 4
ROWS = 3_000


@pytest.mark.server
def test_a_locked_database_slows_the_streams_and_loses_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "fleetscope.db"
    db_url = f"sqlite:///{db_path}"
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]), grace_s=2.0,
                                            max_unacked_bytes=CAP, rollups=False, detectors=None))
    port = collector.start()
    service = collector._service
    assert service is not None
    budget = service.budget
    samplers = [CountingSampler(total=ROWS, per_tick=20) for _ in range(AGENTS)]
    agents = [make_agent(tmp_path, [f"127.0.0.1:{port}"], s, name=f"dev-{i}", interval_s=0.02, batch_interval_s=0.05)
              for i, s in enumerate(samplers)]
    held: list[int] = []
    waiting: list[int] = []
    watching = threading.Event()

    def watch() -> None:  # the collector's state, read from its own loop's thread-safe ints
        while not watching.is_set():
            held.append(budget.held)
            waiting.append(budget.waiting)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    for a in agents:
        a.start()
    try:
        wait_until(lambda: all(a.uplink.status.acked >= 3 for a in agents), message="first acknowledgements")
        watcher.start()
        lock = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # SQLite's write lock: the collector's writer waits for it
        try:
            spooled_at_lock = sum(a.spool.stats().batches for a in agents)
            # Acknowledgements of batches committed before the lock may still be on their way (a
            # busy machine delivered 14 of them after it was taken): count them from a moment later.
            time.sleep(1.5)
            acked_at_lock = [a.uplink.status.acked for a in agents]
            time.sleep(6.0)  # well under the collector's 30 s busy timeout: slow, not failed
            spooled_under_lock = sum(a.spool.stats().batches for a in agents)
            acked_under_lock = [a.uplink.status.acked for a in agents]
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        wait_until(lambda: all(s.done() for s in samplers), timeout_s=60, message="all samples produced")
        wait_until(lambda: all(len(gpu_sequence_numbers(db_url, f"dev-{i}")) >= ROWS for i in range(AGENTS)),
                   timeout_s=90, message="every sample stored")
        errors = [a.uplink.status.last_error for a in agents]  # before stop(), which cancels the streams
    finally:
        watching.set()
        for a in agents:
            a.stop()
        collector.stop()
    # The writer was stuck, so what was read stayed read: the budget was full and readers queued.
    assert max(waiting) > 0, "readers must wait for room while the database is locked"
    # Held bytes stay under the cap but for the batches admitted last (each estimated by the
    # stream's previous batch): a few kilobytes, not a window per stream.
    assert budget.peak <= CAP + 16 << 10, f"held {budget.peak} bytes against a cap of {CAP}"
    assert max(held) <= CAP + 16 << 10
    # The agents kept sampling into their spools; the streams stayed open and nothing was refused.
    assert acked_under_lock == acked_at_lock or sum(acked_under_lock) - sum(acked_at_lock) < AGENTS * 2
    assert spooled_under_lock > spooled_at_lock + AGENTS * 16, (spooled_at_lock, spooled_under_lock)
    for a in agents:
        assert a.uplink.status.rejected == 0
        assert a.spool.stats().counters.get("reconnects", 0) == 0
        assert a.spool.stats().counters.get("dropped_batches", 0) == 0
    assert service.acks["rejected"] == 0
    assert errors == [""] * AGENTS, errors
    for i in range(AGENTS):
        stored = gpu_sequence_numbers(db_url, f"dev-{i}")
        assert sorted(stored) == list(range(ROWS)), f"dev-{i}: every sample exactly once"


def test_the_budget_admits_readers_in_turn_and_forgets_cancelled_ones() -> None:
    """IngestBudget alone: under the cap a reader goes at once; over it readers queue in arrival
    order and each release admits only as many as fit; a reader cancelled while queued (its
    stream ended) takes nothing with it."""

    async def scenario() -> None:
        budget = IngestBudget(100)
        first = await budget.admit(60)  # room: at once
        release_first = budget.hold(60, first)
        assert (budget.held, budget.reserved) == (60, 0)
        second = await budget.admit(50)  # 60 < 100: admitted, may pass the cap by its misjudged part
        release_second = budget.hold(50, second)
        assert budget.held == 110 and budget.peak == 110
        order: list[str] = []

        async def reader(name: str, estimate: int) -> None:
            reservation = await budget.admit(estimate)
            order.append(name)
            budget.hold(estimate, reservation)

        waiting = [asyncio.create_task(reader(n, 40)) for n in ("a", "b", "c")]
        cancelled = asyncio.create_task(reader("gone", 40))
        await asyncio.sleep(0)
        assert budget.waiting == 4 and order == []
        cancelled.cancel()
        await asyncio.sleep(0)
        assert budget.waiting == 3
        release_first()  # 50 held: a (50 + 40 < 100) and b (90 < 100) are admitted, c is not (130)
        await asyncio.sleep(0)
        assert order == ["a", "b"] and budget.held == 130, (order, budget.held)
        release_first()  # idempotent: a second call releases nothing
        assert budget.held == 130
        release_second()  # 80 held: room for c
        await asyncio.gather(*waiting)
        assert order == ["a", "b", "c"] and budget.held == 120 and budget.reserved == 0 and budget.waiting == 0

    asyncio.run(scenario())
