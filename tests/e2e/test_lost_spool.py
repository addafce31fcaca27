"""A user deletes the spool to free a full disk and keeps the agent id: nothing sent afterwards
may be taken for a duplicate and dropped (docs/design.md, Delivery)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fleetscope.agent.daemon.spool import SPOOL_FILE, SPOOL_FILE_SUFFIXES
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent


def _record_acks(agent) -> list[int]:  # type: ignore[no-untyped-def]
    """Every acknowledgement status the agent's uplink receives."""
    statuses: list[int] = []
    on_ack = agent.uplink._on_ack

    def spy(session, ack: pb.Ack) -> None:  # type: ignore[no-untyped-def]
        statuses.append(ack.status)
        on_ack(session, ack)

    agent.uplink._on_ack = spy
    return statuses


def test_deleted_spool_with_kept_identity_loses_nothing(tmp_path: Path, db_url: str, collector_process) -> None:
    c = collector_process(db_url).start()
    first = CountingSampler(total=2_000, per_tick=50)
    agent = make_agent(tmp_path, [c.address], first)
    agent.start()
    try:
        wait_until(first.done, message="the first run's samples")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 2_000, message="the first run stored")
    finally:
        agent.stop()
    agent_id, first_stream = agent.agent_id, agent.boot_id

    spool_dir = agent.settings.spool_dir
    for suffix in SPOOL_FILE_SUFFIXES:  # what a user deletes to free the disk; agent_id stays
        (spool_dir / f"{SPOOL_FILE}{suffix}").unlink(missing_ok=True)
    assert (spool_dir / "agent_id").exists()

    second = CountingSampler(total=4_000, per_tick=50)
    second.produced = 2_000  # carries on numbering the samples where the first run stopped
    again = make_agent(tmp_path, [c.address], second)
    acks = _record_acks(again)
    again.start()
    try:
        wait_until(second.done, message="the second run's samples")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 4_000, timeout_s=30, message="the second run stored")
        wait_until(lambda: again.spool.stats().batches == 0, message="the spool drained")
    finally:
        again.stop()

    assert again.agent_id == agent_id and again.boot_id != first_stream, "same agent, new stream"
    assert acks and all(s == pb.Ack.STATUS_STORED for s in acks), "no batch of the new spool is a 'duplicate'"
    assert sorted(gpu_sequence_numbers(db_url)) == list(range(4_000)), "every sample of both runs, once"

    env = {**os.environ, "FLEETSCOPE_DB": ""}
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "devices", "--db", db_url, "--json"],
                         capture_output=True, text=True, check=True, env=env)
    assert [d["name"] for d in json.loads(out.stdout)["devices"]] == ["dev-1"], "one device, not two"


def test_sampling_loop_failure_exits_non_zero(tmp_path: Path) -> None:
    """The process must never stay alive with a dead loop: a supervisor restarts only what exits."""
    script = (
        "import sys\n"
        "from fleetscope.agent.daemon import runner\n"
        "def broken_tick(self, now_ns=None):\n"
        "    raise RuntimeError('injected sampler-loop failure')\n"
        "runner.Agent.tick = broken_tick\n"
        "from fleetscope.cli import main\n"
        f"sys.exit(main(['agent', '--collector', '127.0.0.1:9', '--spool', {str(tmp_path / 'spool')!r},"
        " '--no-gpu', '--no-kernel-log', '--interval', '0.1']))\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert time.monotonic() - started < 30, "it exits promptly instead of lingering"
    died = [line for line in proc.stderr.splitlines() if "sampling loop died" in line]
    assert len(died) == 1 and "injected sampler-loop failure" in died[0], proc.stderr[-2000:]
