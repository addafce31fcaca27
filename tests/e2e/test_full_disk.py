"""The spool on a tiny filesystem that fills up while the collector is away: the agent keeps
sampling, evicts the oldest samples first and keeps incidents, counts what it dropped, stays
within its bound, and delivers what it kept exactly once when the collector comes back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent, sample_count

DISK = 4 << 20
BOUND = 2 << 20
# What the spool's files may pass the bound by: one batch (about 30 KB here) and a WAL page or two.
MARGIN = 64 << 10


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    """Take every free byte of the filesystem, as another program filling the disk would."""
    with open(disk / "filler", "wb", buffering=0) as f:  # unbuffered: closing has nothing left to write
        try:
            while True:
                f.write(b"\0" * (64 << 10))
                f.flush()
        except OSError:
            pass


def test_full_disk_agent_survives_evicts_by_priority_and_delivers_what_it_kept(
    tiny_disk: Path, sqlite_url: str, collector_process
) -> None:
    sampler = CountingSampler(total=120_000, per_tick=400, incidents_every=10, incompressible=True)
    c = collector_process(sqlite_url)  # not started: the collector is away
    agent = make_agent(tiny_disk, [c.address], sampler, spool_max_bytes=BOUND, drain_timeout_s=2.0)
    agent.start()
    peak = 0

    def watch() -> bool:
        nonlocal peak
        peak = max(peak, agent.spool.disk_bytes())
        return True

    try:
        wait_until(lambda: watch() and agent.spool.stats().counters["dropped_samples"] > 0, timeout_s=60,
                   interval_s=0.05, message="the bound to be reached")
        _fill(tiny_disk)  # now the disk, not the bound, is the limit
        wait_until(lambda: watch() and sampler.done(), timeout_s=120, interval_s=0.05, message="sampling to go on")
        assert agent._thread is not None and agent._thread.is_alive(), "the sampling loop survived the full disk"
        time.sleep(0.5)  # the last flush
        held = agent.spool.stats()
        c.start()
        wait_until(lambda: agent.spool.stats().batches == 0, timeout_s=60, message="what was kept to be delivered")
        # Each batch carries the totals as of its creation: the batches made after the last
        # eviction (the sampler's incidents go on) bring the final ones.
        time.sleep(1.5)
        wait_until(lambda: agent.spool.stats().batches == 0, timeout_s=30, message="the last batches")
    finally:
        agent.stop()

    assert peak <= BOUND + MARGIN, f"the spool's files reached {peak} bytes over a bound of {BOUND}"
    stored = gpu_sequence_numbers(sqlite_url)
    assert len(stored) == len(set(stored)), "exactly once"
    assert held.counters["dropped_samples"] > 0
    assert held.counters["dropped_incidents"] == 0, "incidents are the last to go"
    # Repeats within the grouping window are one incident with a count: every occurrence counted once.
    incidents = json.loads(subprocess.run([sys.executable, "-m", "fleetscope.cli", "incidents", "--db", sqlite_url, "--json"],
                                          capture_output=True, text=True, check=True).stdout)["incidents"]
    assert sum(i["count"] for i in incidents) == sampler.incidents, "every incident arrived"
    assert 0 not in stored and 119_999 in stored, "the oldest samples were dropped, the newest kept"

    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "devices", "--db", sqlite_url, "--json"],
                         capture_output=True, text=True, check=True)
    counters = json.loads(out.stdout)["devices"][0]["counters"]
    gpu_dropped = 120_000 - len(stored)
    host_dropped = 120_000 // 400 - sample_count(sqlite_url, "host", device="dev-1")  # one host row per tick with GPU rows
    # Every lost sample is counted, and only those: a batch evicted while it was on the wire and
    # acknowledged after all is taken back out of the count.
    assert counters["dropped_samples"] == gpu_dropped + host_dropped, "every dropped sample is counted, once"
    assert counters["dropped_incidents"] == 0
