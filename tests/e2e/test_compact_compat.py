"""compact-v1 against the real code from before it (commit ``BEFORE_COMPACT``, taken from this
repository's history): a new agent whose spool holds compact batches streams to an old collector,
and an old agent streams plain batches to a new collector beside a new agent. Every side stores
each reading exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import time
from io import BytesIO
from pathlib import Path

import pytest

from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.tools.simulate import SimulatedSampler
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import CollectorProcess, free_port, wait_until
from tests.helpers import sample_count, stored_samples

BEFORE_COMPACT = "36ae816"  # main just before compact-v1: its collector and agent speak plain batches only
REPO = Path(__file__).resolve().parents[2]
TICKS = 30  # simulated seconds of one device, sealed into batches of 10


@pytest.fixture(scope="module")
def old_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH entry whose ``fleetscope`` package is the code of ``BEFORE_COMPACT``."""
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE_COMPACT, "proto", "collector", "agent", "cli"],
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # a shallow clone or an export without history
        pytest.skip(f"the code before compact-v1 is not in this checkout's history: {exc}")
    root = tmp_path_factory.mktemp("before-compact")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root / "src", filter="data")
    package = root / "path" / "fleetscope"
    package.mkdir(parents=True)
    for part in ("proto", "collector", "agent", "cli"):
        (package / part).symlink_to(root / "src" / part)
    return root / "path"


def _old_env(old_code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(old_code)}


def _rows(db: Path, device: str) -> tuple[int, int, int]:
    """(GPU rows, distinct GPU times, host rows) stored for a device, wherever they sit (the old
    collector writes tail rows, the new one chunks)."""
    url = f"sqlite:///{db}"
    gpu = stored_samples(url, "gpu", device=device, columns=())
    return len(gpu), len(set(gpu.ts_ns.tolist())), sample_count(url, "host", device=device)


def _new_agent_sends(address: str, spool: Path, name: str) -> Agent:
    """A new agent that spooled TICKS seconds compact, then streams them; returns it drained."""
    sampler = SimulatedSampler(kind="jetson", gpus=1, seed=5, latency=False)
    t0 = time.time_ns() - 120 * 10**9
    agent = Agent(AgentSettings(collectors=(address,), spool_dir=spool, token="test-token", name=name, device_key=False),
                  samplers=[sampler], inventory=sampler.inventory_message(), kind=pb.DEVICE_KIND_JETSON)
    for s in range(TICKS):
        agent.tick(t0 + s * 10**9)
        if s % 10 == 9:
            agent.flush(t0 + s * 10**9)
    spooled = [pb.Batch.FromString(b.payload) for b in agent.spool.after(0, 100)]
    assert spooled and all(b.compact and not b.HasField("gpu") for b in spooled if b.compact), "the spool holds compact batches"
    assert any(b.compact for b in spooled)
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), f"not drained: {agent.uplink.status}"
    finally:
        agent.uplink.stop()
    return agent


def test_a_new_agent_sends_its_compact_spool_to_an_old_collector_expanded(tmp_path: Path, old_code: Path) -> None:
    db = tmp_path / "old.db"
    port = free_port()
    log = open(tmp_path / "old-collector.log", "wb")  # noqa: SIM115 - the child keeps it open
    old = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"127.0.0.1:{port}",
                            "--db", f"sqlite:///{db}", "--token", "test-token", "--metrics-listen", "off"],
                           env=_old_env(old_code), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _listening(port), 30, message="the old collector listens")
        agent = _new_agent_sends(f"127.0.0.1:{port}", tmp_path / "spool", "new-agent")
        assert agent.uplink.status.collector_compact is False, "the old collector does not announce compact-v1"
        assert agent.uplink.status.rejected == 0
        assert _rows(db, "new-agent") == (TICKS, TICKS, TICKS), "every reading stored once by the old collector"
    finally:
        old.kill()
        old.wait(10)
        log.close()


OLD_AGENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.tools.simulate import SimulatedSampler
    from fleetscope.proto.v1 import telemetry_pb2 as pb
    from fleetscope.proto import vocabulary
    assert "compact-v1" not in vocabulary.CAPABILITIES, "this must be the old code"
    address, spool, ticks = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    sampler = SimulatedSampler(kind="server", gpus=2, seed=6, latency=False)
    t0 = time.time_ns() - 120 * 10**9
    agent = Agent(AgentSettings(collectors=(address,), spool_dir=spool, token="test-token", name="old-agent",
                                device_key=False), samplers=[sampler], inventory=sampler.inventory_message(),
                  kind=pb.DEVICE_KIND_SERVER)
    for s in range(ticks):
        agent.tick(t0 + s * 10**9)
        agent.flush(t0 + s * 10**9)
    plain = [pb.Batch.FromString(b.payload) for b in agent.spool.after(0, 1000)]
    assert all(b.HasField("gpu") for b in plain if b.gpu.ts_ns) and any(b.gpu.ts_ns for b in plain)
    agent.uplink.start()
    ok = agent.uplink.drain(30)
    agent.uplink.stop()
    print("drained" if ok else "NOT DRAINED", agent.uplink.status.rejected)
""")


def test_a_mixed_fleet_of_old_and_new_agents_into_a_new_collector(tmp_path: Path, old_code: Path) -> None:
    db = tmp_path / "new.db"
    collector = CollectorProcess(f"sqlite:///{db}", free_port(), "test-token", tmp_path / "collector.log").start()
    try:
        old = subprocess.Popen([sys.executable, "-c", OLD_AGENT, collector.address, str(tmp_path / "old-spool"), str(TICKS)],
                               env=_old_env(old_code), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        agent = _new_agent_sends(collector.address, tmp_path / "new-spool", "new-agent")
        out = old.communicate(timeout=90)[0].decode()
        assert old.returncode == 0 and "drained 0" in out, out
        assert agent.uplink.status.collector_compact is True
        assert agent.uplink.status.rejected == 0
        assert _rows(db, "new-agent") == (TICKS, TICKS, TICKS)
        assert _rows(db, "old-agent") == (2 * TICKS, TICKS, TICKS), "two GPUs a second, once each"
    finally:
        collector.stop()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
