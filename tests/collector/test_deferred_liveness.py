"""The device rows' liveness kept for a later write on Citus (``storage.deferred_liveness``):
what a merge of two updates, and a failed write put back under newer ones, must keep."""

from __future__ import annotations

from fleetscope.collector.storage.deferred_liveness import DeferredLiveness, merge_device_update


def test_two_updates_of_a_device_sum_their_counts_and_keep_the_newer_facts() -> None:
    older = {"stored": 3, "rejected": 1, "last_seen_ns": 50, "last_rejection": "batch 7: bad", "counters": {"reconnects": 1}}
    newer = {"stored": 2, "rejected": 0, "last_seen_ns": 40, "clock_skew_ns": 9, "reanchored": 1, "clock_step_ns": -5}
    merged = merge_device_update(older, newer)
    assert (merged["stored"], merged["rejected"], merged["reanchored"]) == (5, 1, 1)
    assert merged["last_seen_ns"] == 50  # never moves back
    assert merged["last_rejection"] == "batch 7: bad" and merged["counters"] == {"reconnects": 1}  # the newer did not bring them
    assert (merged["clock_skew_ns"], merged["clock_step_ns"]) == (9, -5)


def test_a_failed_write_is_put_back_under_what_arrived_since() -> None:
    live = DeferredLiveness(interval_s=0.0)
    live.add_devices({1: {"stored": 4, "rejected": 0, "last_seen_ns": 100, "counters": {"reconnects": 1}}})
    live.add_stream("agent-1", "boot", 7, 100)
    assert live.due()
    devices, streams = live.take()
    assert live.pending == 0
    # While the write failed, the device stored one more batch and its agent registered again.
    live.add_devices({1: {"stored": 1, "rejected": 0, "last_seen_ns": 200, "counters": {"reconnects": 2}}})
    live.add_stream("agent-1", "boot", 8, 200)
    live.put_back(devices, streams)
    devices, streams = live.take()
    assert devices[1]["stored"] == 5 and devices[1]["last_seen_ns"] == 200
    assert devices[1]["counters"] == {"reconnects": 2}  # the newer counters stand
    assert streams == {("agent-1", "boot"): (8, 200)}


def test_nothing_is_due_when_nothing_waits() -> None:
    live = DeferredLiveness(interval_s=0.0)
    assert not live.due()
    live.add_stream("agent-1", "boot", 0, 5)
    live.add_stream("agent-1", "boot", 3, 4)  # an older registration's answer arriving late
    assert live.take()[1] == {("agent-1", "boot"): (0, 5)}
