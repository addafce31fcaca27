"""Placing a batch's timestamps on the collector's clock, across steps of the device's clock.

A device stamps rows with its wall clock, which may be off (a Jetson without a real-time clock
before NTP) and may step (when NTP arrives). A batch carries one reading of the wall clock and
of the monotonic clock (CLOCK_BOOTTIME, which never steps) taken at creation, on the clock its
rows were stamped with, and another pair at each send. The monotonic clock is the device's one
steady timeline: a row's monotonic time is ``row - created_ns + created_mono_ns``, and
``received - sent_mono_ns`` maps that boot's monotonic time onto the collector's clock, so

    correction = (received - sent_mono_ns) - (created_ns - created_mono_ns)

is what to add to each of the batch's timestamps: one number per batch, whatever the wall clock
did between creation and send. Without a step it equals ``received - sent_ns``, the send-time
skew that older agents' batches are corrected by.

A batch spooled before a reboot and sent after it has monotonic readings from two boots; it is
placed with the mapping last seen for its own boot (``BootAnchors``), and, when the collector
never saw that boot send, by its send-time skew, as an older agent's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from fleetscope.proto.v1 import telemetry_pb2 as pb


@dataclass(frozen=True)
class Placement:
    """Where a batch's timestamps go on the collector's clock."""

    correction_ns: int  # added to each timestamp when stored (0 within the skew tolerance)
    sent_on_rows_clock_ns: int  # the send time, read on the clock the rows were stamped with
    clock_skew_ns: int  # received - sent_ns: the device clock's offset now, as the device row shows it
    step_ns: int  # how far the rows' clock is from the send-time clock; 0 for an older agent
    reanchored: bool  # placed by the monotonic clock, far from where the send-time skew would put it


class BootAnchors:
    """Per (agent id, kernel boot id): collector time minus monotonic time, from the last batch
    sent during that boot. Kept in memory for the boots' batches sent after a reboot; bounded, oldest first out."""

    def __init__(self, max_boots: int = 100_000) -> None:
        self._offsets: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._max_boots = max_boots

    def remember(self, agent_id: str, boot_id: str, collector_minus_mono_ns: int) -> None:
        key = (agent_id, boot_id)
        self._offsets[key] = collector_minus_mono_ns
        self._offsets.move_to_end(key)
        if len(self._offsets) > self._max_boots:
            self._offsets.popitem(last=False)

    def get(self, agent_id: str, boot_id: str) -> int | None:
        return self._offsets.get((agent_id, boot_id))


def _monotonic_reading_usable(value: int) -> bool:
    return 0 < value < 2**62


def place_batch(batch: pb.Batch, *, received_ns: int, anchors: BootAnchors, skew_tolerance_ns: int) -> Placement:
    """The batch's correction; remembers its boot's monotonic mapping in ``anchors``."""
    sent = batch.sent_ns or batch.created_ns
    skew = received_ns - batch.sent_ns if batch.sent_ns else 0
    collector_minus_mono: int | None = None
    if batch.sent_boot_id and _monotonic_reading_usable(batch.sent_mono_ns):
        anchors.remember(batch.agent_id, batch.sent_boot_id, received_ns - batch.sent_mono_ns)
    if batch.created_boot_id and _monotonic_reading_usable(batch.created_mono_ns) and batch.created_ns:
        if batch.created_boot_id == batch.sent_boot_id:
            # A monotonic clock never runs back within a boot: a batch that says so is placed as an older agent's.
            if batch.sent_mono_ns >= batch.created_mono_ns:
                collector_minus_mono = received_ns - batch.sent_mono_ns
        else:
            collector_minus_mono = anchors.get(batch.agent_id, batch.created_boot_id)
    if collector_minus_mono is None:  # an older agent, or a past boot the collector never heard from
        return Placement(
            correction_ns=skew if abs(skew) > skew_tolerance_ns else 0,
            sent_on_rows_clock_ns=sent,
            clock_skew_ns=skew,
            step_ns=0,
            reanchored=False,
        )
    correction = collector_minus_mono - (batch.created_ns - batch.created_mono_ns)
    step = correction - skew
    return Placement(
        correction_ns=correction if abs(correction) > skew_tolerance_ns else 0,
        # The rows' clock read at send time: the collector's receive time, less the correction.
        sent_on_rows_clock_ns=received_ns - correction,
        clock_skew_ns=skew,
        step_ns=step,
        reanchored=abs(step) > skew_tolerance_ns,
    )
