"""The collector's placement of a batch on its own clock (collector/ingest/clocks.py), across a
step of the device's wall clock between the batch's creation and its send."""

from __future__ import annotations

import pytest

from fleetscope.collector.errors import BatchInvalid
from fleetscope.collector.ingest.clocks import BootAnchors, Placement, place_batch
from fleetscope.collector.ingest.validation import Limits, validate_batch
from fleetscope.collector.storage.rows import batch_rows
from fleetscope.proto.v1 import telemetry_pb2 as pb

S = 10**9
HOUR = 3600 * S
TOLERANCE = 2 * S
T0 = 1_700_000_000 * S  # true (collector) time when the batch was created
BOOT_MONO = 50 * S  # the device's monotonic clock at T0
DELAY = 30 * 10**6  # network delay of the send


def _batch(*, created_wall: int, sent_wall: int, sent_after_s: int, boot: str = "boot-a", sent_boot: str = "boot-a",
           mono: bool = True) -> pb.Batch:
    """A batch created at true time T0 (wall clock ``created_wall``) and sent ``sent_after_s``
    later, when the wall clock read ``sent_wall``; one row per second of the 5 s before creation."""
    b = pb.Batch(agent_id="agent", boot_id=f"{boot}/stream", seq=1, created_ns=created_wall, sent_ns=sent_wall)
    if mono:
        b.created_mono_ns = BOOT_MONO
        b.sent_mono_ns = BOOT_MONO + sent_after_s * S
        b.created_boot_id = boot
        b.sent_boot_id = sent_boot
    b.gpu.ts_ns.extend(created_wall - i * S for i in range(5, 0, -1))
    b.gpu.gpu_index.extend([0] * 5)
    return b


def _received(sent_after_s: int) -> int:
    return T0 + sent_after_s * S + DELAY


def _stored_ts(batch: pb.Batch, placement: Placement) -> list[int]:
    """The gpu rows' timestamps as the writer stores them."""
    decoded = validate_batch(batch, Limits(), sent_on_rows_clock_ns=placement.sent_on_rows_clock_ns)
    rows = batch_rows(batch, decoded, device_id=1, correction_ns=placement.correction_ns, received_ns=0)
    return list(rows.gpu.columns[1])


def test_no_step_is_the_send_time_skew() -> None:
    # 2 h behind the whole time: the correction is the skew, as for an older agent, and no flag.
    b = _batch(created_wall=T0 - 2 * HOUR, sent_wall=T0 - 2 * HOUR + 600 * S, sent_after_s=600)
    p = place_batch(b, received_ns=_received(600), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == p.clock_skew_ns == 2 * HOUR + DELAY
    assert not p.reanchored and p.step_ns == 0


@pytest.mark.parametrize("step", [2 * HOUR, -2 * HOUR, 37 * S])
def test_a_step_between_creation_and_send_is_undone_by_the_monotonic_clock(step: int) -> None:
    # Created on a clock ``step`` off, sent after NTP fixed it: the send-time skew is ~0.
    b = _batch(created_wall=T0 - step, sent_wall=T0 + 900 * S, sent_after_s=900)
    p = place_batch(b, received_ns=_received(900), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.clock_skew_ns == DELAY
    assert p.correction_ns == step + DELAY
    assert p.step_ns == step and p.reanchored
    # Each row lands at its true time (within the network delay), one per second before T0.
    # The rows are checked against the send time on their own clock: no rejection for the step.
    assert _stored_ts(b, p) == [T0 - i * S + DELAY for i in range(5, 0, -1)]
    assert p.sent_on_rows_clock_ns == T0 - step + 900 * S


def test_backward_step_was_a_rejection_when_checked_against_sent_ns() -> None:
    b = _batch(created_wall=T0 + 2 * HOUR, sent_wall=T0 + 60 * S, sent_after_s=60)
    with pytest.raises(BatchInvalid, match="after the batch was sent"):
        validate_batch(b, Limits())
    p = place_batch(b, received_ns=_received(60), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    validate_batch(b, Limits(), sent_on_rows_clock_ns=p.sent_on_rows_clock_ns)


def test_small_offsets_stay_uncorrected() -> None:
    b = _batch(created_wall=T0 + S, sent_wall=T0 + 11 * S, sent_after_s=10)
    p = place_batch(b, received_ns=_received(10), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == 0 and not p.reanchored


def test_an_older_agent_is_corrected_by_its_send_time_skew() -> None:
    b = _batch(created_wall=T0 - 2 * HOUR, sent_wall=T0 + 60 * S, sent_after_s=60, mono=False)
    p = place_batch(b, received_ns=_received(60), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == 0 and p.clock_skew_ns == DELAY and not p.reanchored
    assert p.sent_on_rows_clock_ns == b.sent_ns


def test_a_batch_sent_after_a_reboot_uses_its_own_boots_mapping() -> None:
    anchors = BootAnchors()
    # While boot A was up and stepped forward by 2 h, one of its batches got through.
    live = _batch(created_wall=T0 + 100 * S, sent_wall=T0 + 101 * S, sent_after_s=101)
    live.created_mono_ns = BOOT_MONO + 100 * S
    place_batch(live, received_ns=_received(101), anchors=anchors, skew_tolerance_ns=TOLERANCE)
    # A batch of boot A created before its step, sent after a reboot: boot B's monotonic clock says nothing about it.
    old = _batch(created_wall=T0 - 2 * HOUR, sent_wall=T0 + 3600 * S, sent_after_s=10, sent_boot="boot-b")
    p = place_batch(old, received_ns=_received(3600), anchors=anchors, skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == 2 * HOUR + DELAY and p.reanchored
    # A collector that never heard from boot A places it by the send-time skew, as before.
    p = place_batch(old, received_ns=_received(3600), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == 0 and not p.reanchored


def test_a_monotonic_clock_that_ran_back_is_ignored() -> None:
    b = _batch(created_wall=T0 - 2 * HOUR, sent_wall=T0 + 60 * S, sent_after_s=60)
    b.sent_mono_ns = BOOT_MONO - S
    p = place_batch(b, received_ns=_received(60), anchors=BootAnchors(), skew_tolerance_ns=TOLERANCE)
    assert p.correction_ns == 0 and not p.reanchored
