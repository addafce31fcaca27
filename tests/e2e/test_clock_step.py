"""A device's clock steps while the collector is away (a Jetson without a real-time clock,
NTP arriving): every batch spooled before the step is stored, none rejected or deleted, and
its rows land at the collector time they were sampled at, not two hours away."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetscope.agent.records import GpuSample
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.engine import normalise_url
from tests.conftest import wait_until
from tests.helpers import make_agent

HOUR_NS = 3600 * 10**9
TOLERANCE_NS = 3 * 10**9


class SteppableClock:
    """The device's wall clock: the true time plus an offset that a test steps, as NTP would."""

    def __init__(self, offset_ns: int) -> None:
        self.offset_ns = offset_ns

    def __call__(self) -> int:
        return time.time_ns() + self.offset_ns


class TrueTimeSampler:
    """One GPU row per tick, numbered in ``energy_j``; remembers the true time of each."""

    name = "true-time"

    def __init__(self) -> None:
        self.true_ns: dict[int, int] = {}
        self.before_step: set[int] = set()
        self.stepped = False
        self.lock = threading.Lock()

    def inventory(self) -> list:
        return []

    def sample(self, now_ns: int) -> SampleSet:
        with self.lock:
            k = len(self.true_ns)
            self.true_ns[k] = time.time_ns()
            if not self.stepped:
                self.before_step.add(k)
        return SampleSet(gpu=[GpuSample(ts_ns=now_ns, gpu_index=0, energy_j=float(k), temp_c=50.0)])

    def close(self) -> None:
        pass


def _stored(db_url: str, device: str) -> tuple[dict[int, int], dict[str, object]]:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            dev = conn.execute(
                text("SELECT id, batches_stored, batches_rejected, batches_reanchored, last_clock_step_ns FROM devices"
                     " WHERE name = :n"), {"n": device}
            ).one()
            rows = read_samples(conn, "gpu", [int(dev[0])], 0, 2**63 - 1, columns=("energy_j",))
        keys = [int(k) for k in rows.values["energy_j"].tolist()]
        assert len(keys) == len(set(keys)), "a sample stored twice"
        return dict(zip(keys, (int(ts) for ts in rows.ts_ns.tolist()))), {
            "batches_stored": dev[1], "batches_rejected": dev[2], "batches_reanchored": dev[3], "last_clock_step_ns": dev[4]}
    finally:
        engine.dispose()


@pytest.mark.parametrize("step", ["forward", "backward"])
def test_batches_spooled_before_a_clock_step_are_stored_at_their_true_time(
    tmp_path: Path, db_url: str, collector_process, step: str
) -> None:
    # Forward: booted at a stale time, 2 h behind, then NTP. Backward: 2 h ahead (a bad RTC), then NTP.
    clock = SteppableClock(-2 * HOUR_NS if step == "forward" else 2 * HOUR_NS)
    collector = collector_process(db_url)  # not started: the agent spools meanwhile
    sampler = TrueTimeSampler()
    agent = make_agent(tmp_path, [collector.address], sampler, name=f"jetson-{step}", clock=clock, interval_s=0.05)
    agent.start()
    try:
        wait_until(lambda: agent.spool.stats().batches >= 8, message="batches spooled before the step")
        with sampler.lock:
            clock.offset_ns = 0  # NTP arrives: the wall clock steps by two hours
            sampler.stepped = True
        wait_until(lambda: len(sampler.true_ns) >= len(sampler.before_step) + 10, message="samples after the step")
        collector.start()
        wait_until(lambda: agent.uplink.status.acked >= 4 and agent.spool.stats().batches == 0, message="spool drained")
    finally:
        agent.stop()
    with sampler.lock:
        true_ns, before_step = dict(sampler.true_ns), set(sampler.before_step)
    stored, device = _stored(db_url, f"jetson-{step}")
    assert device["batches_rejected"] == 0
    assert agent.uplink.status.rejected == 0
    assert sorted(stored) == sorted(true_ns), "every sample is stored exactly once"
    assert before_step and len(before_step) < len(true_ns)
    off = {k: (stored[k] - true_ns[k]) / 1e9 for k in true_ns if abs(stored[k] - true_ns[k]) > TOLERANCE_NS}
    assert not off, f"rows stored away from their true time (seconds): {dict(list(off.items())[:5])}"
    # The collector says it happened: once per step, not once per batch.
    notes = [line for line in collector.log_path.read_text().splitlines() if "placed by its monotonic clock" in line]
    assert len(notes) == 1, notes
    assert ("stepped +7200" if step == "forward" else "stepped -7200") in notes[0]
    # ...and the database keeps it: the batches spooled before the step, and the step itself.
    assert 1 <= device["batches_reanchored"] < device["batches_stored"]
    expected_step = (2 if step == "forward" else -2) * HOUR_NS
    assert abs(device["last_clock_step_ns"] - expected_step) <= TOLERANCE_NS
