"""Readers of raw samples besides ``query.samples`` read through the chunks too: the Hardware
view's readings (``query.hardware.gpu_hardware``) and the detectors' root-cause hints
(``jobs.detectors.hints``) give the same answer for a moment whose hour was already folded."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from fleetscope.collector.jobs.compaction import CompactionJob
from fleetscope.collector.jobs.detectors.hints import hints_for
from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.query import gpu_hardware, session_scope
from fleetscope.collector.storage.schema import gpu_samples
from tests.collector.test_compaction import HOUR, NOW, NS, T0, assert_same_answers, filled  # noqa: F401

# Moments inside the first folded hour, at a chunk's edge, and past the last row of a folded
# window (the device's newest reading by then sits in a chunk that ended before it).
MOMENTS = (T0 + 20 * 60 * NS + 3 * NS, T0 // HOUR * HOUR + HOUR - 1, T0 // HOUR * HOUR + HOUR + 2 * NS)
# Low thresholds, so that every kind of hint (throttling, CPU, memory growth) fires on the data.
LOW = DetectorSettings(starved_cpu_percent=10.0, growth_min_rate=1024.0, growth_min_r2=0.5)


def hardware_and_hints(engine: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with session_scope(engine) as s:
        for moment in MOMENTS:
            out[f"hardware {moment}"] = gpu_hardware(session=s, device="dev-1", until_ns=moment)
    with engine.connect() as conn:
        for moment in MOMENTS:
            out[f"hints {moment}"] = hints_for(conn, 1, moment, LOW)
    return out


def test_hardware_readings_and_hints_are_the_same_after_their_hour_is_folded(filled: Any) -> None:  # noqa: F811
    engine, _ = filled
    before = hardware_and_hints(engine)
    for moment in MOMENTS:
        gpus = before[f"hardware {moment}"]
        assert [g.gpu_index for g in gpus] == [0, 1] and all(g.power_w is not None for g in gpus), moment
        kinds = {h["facts"].get("kind") or "cpu" for h in before[f"hints {moment}"]}
        assert {"gpu_throttling", "memory_growth", "cpu"} <= kinds, (moment, kinds)
    assert CompactionJob(engine, owner="c1").run_once(now_ns=NOW).rows > 0
    with engine.connect() as conn:  # the moments' rows are gone from the tail
        left = conn.execute(select(func.count()).where(gpu_samples.c.ts_ns <= max(MOMENTS))).scalar_one()
        assert left == 0
    assert_same_answers(before, hardware_and_hints(engine))


@pytest.mark.parametrize("moment", [T0 - 1, NOW + HOUR])
def test_hardware_before_any_sample_and_after_the_last(filled: Any, moment: int) -> None:  # noqa: F811
    engine, _ = filled
    with session_scope(engine) as s:
        before = gpu_hardware(session=s, device="dev-1", until_ns=moment)
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    with session_scope(engine) as s:
        assert_same_answers(before, gpu_hardware(session=s, device="dev-1", until_ns=moment))
    assert all(g.sample_ts_ns is None for g in before) if moment < T0 else all(g.sample_ts_ns for g in before)
