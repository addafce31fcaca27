"""Detectors on real pipelines: a SIGKILLed agent process goes offline and comes back; latency
injected through the SDK into a real agent breaks an SLO and regresses; a recorded tegrastats
episode with rising temperatures is throttling; a real leaking process is memory growth.

Each uses small windows (seconds) through DetectorSettings so it runs in seconds."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.samplers.host import HostSampler
from fleetscope.agent.samplers.tegrastats import TegrastatsSampler
from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.jobs.detectors import DetectorSettings, SloObjective
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.alert_receiver import Receiver
from tests.conftest import wait_until
from tests.corpus import require_corpus
from tests.helpers import IdleSampler, make_agent, sample_count

CLI = [sys.executable, "-m", "fleetscope.cli"]
IC = Incident.__table__.c


def _incidents(db_url: str, kind: str) -> list:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(Incident.__table__).where(IC.kind == kind).order_by(IC.id)))
    finally:
        engine.dispose()


@pytest.fixture
def detecting_collector(db_url: str) -> Iterator:
    """An in-process collector whose detectors run every 0.3 s with the settings a test gives."""
    made: list[Collector] = []

    def make(settings: DetectorSettings) -> Collector:
        c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]),
                                        grace_s=2.0, rollups=False, detectors=settings, detectors_interval_s=0.3))
        c.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def test_sigkilled_agent_is_offline_until_restarted_and_notified(tmp_path: Path, db_url: str, collector_process) -> None:
    receiver = Receiver()
    rules = tmp_path / "rules.toml"
    rules.write_text(f"""
[[notifier]]
name = "ops"
type = "webhook"
url = "{receiver.url()}"

[[rule]]
name = "offline"
incident = ["agent_offline"]
notify = ["ops"]
""")
    c = collector_process(db_url, extra_args=("--offline-after", "3s", "--alerts", str(rules))).start()
    spool = tmp_path / "agent-state"
    argv = [*CLI, "agent", "--collector", c.address, "--token", "test-token", "--name", "killed", "--spool", str(spool),
            "--interval", "200ms", "--batch-interval", "1s"]
    agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sample_count(db_url, "host", device="killed") >= 3, timeout_s=30, message="samples")
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        killed_at = time.monotonic()
        wait_until(lambda: [i for i in _incidents(db_url, "agent_offline") if i.state == "open"], timeout_s=20,
                   message="an open agent_offline incident")
        assert time.monotonic() - killed_at >= 3.0 - 0.5, "not before the threshold"
        (inc,) = _incidents(db_url, "agent_offline")
        assert inc.origin == "detector" and inc.facts["threshold_s"] == 3.0
        wait_until(lambda: [b["state"] for b in receiver.bodies()] == ["firing"], timeout_s=15,
                   message="a firing notification")
        time.sleep(1.0)
        agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _incidents(db_url, "agent_offline")[0].state == "resolved", timeout_s=30,
                   message="resolved once data is back")
        wait_until(lambda: [b["state"] for b in receiver.bodies()] == ["firing", "resolved"], timeout_s=15,
                   message="a resolved notification")
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(30)
        receiver.stop()
    (inc,) = _incidents(db_url, "agent_offline")
    assert inc.facts["gap_s"] >= 4.0 and inc.ended_ns > inc.ts_ns and "replayed_rows" in inc.facts
    assert inc.ended_ns - inc.ts_ns == pytest.approx(inc.facts["gap_s"] * 1e9, abs=1e6)
    firing, resolved = receiver.bodies()
    assert firing["rule"] == resolved["rule"] == "offline"
    assert firing["device"] == resolved["device"] == "killed" and firing["kind"] == "agent_offline"


SDK_PROGRAM = textwrap.dedent(
    """
    import sys, time
    from fleetscope.agent import sdk

    sdk.configure(socket=sys.argv[1], flush_interval_s=0.2)
    def phase(seconds, ms):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(40):
                sdk.record_duration("infer", int(ms * 1e6))
            time.sleep(0.05)
        assert sdk.flush(5.0)
    phase(float(sys.argv[2]), 10.0)   # the baseline: 10 ms
    phase(float(sys.argv[3]), 30.0)   # the breach: 30 ms, 3x
    """
)


def test_latency_breach_through_the_sdk_is_an_slo_incident_and_a_regression(tmp_path: Path, db_url: str,
                                                                         detecting_collector) -> None:
    settings = DetectorSettings(
        settle_s=1.0, slos=(SloObjective(operation="infer", p99_ms=20.0, window_s=2.0),), slo_min_count=50,
        regression_window_s=2.0, regression_baseline_s=8.0, regression_min_count=100, offline_min_s=60.0,
    )
    collector = detecting_collector(settings)
    socket_path = tmp_path / "run" / "agent.sock"
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], IdleSampler(), name="infer-box",
                       sdk_socket=str(socket_path))
    agent.start()
    try:
        wait_until(socket_path.exists, message="the agent's SDK socket")
        script = tmp_path / "serve.py"
        script.write_text(SDK_PROGRAM)
        run = subprocess.run([sys.executable, str(script), str(socket_path), "7", "5"], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        wait_until(lambda: _incidents(db_url, "latency_slo") and _incidents(db_url, "latency_regression"),
                   timeout_s=20, message="latency incidents")
    finally:
        agent.stop()
    (slo,) = _incidents(db_url, "latency_slo")
    assert slo.group_key == "infer" and slo.facts["p99_ms"] > 20.0 and slo.facts["objective_p99_ms"] == 20.0
    reg = _incidents(db_url, "latency_regression")[0]
    assert reg.group_key == "infer" and reg.facts["ratio"] > 2.0 and reg.facts["baseline_p99_ms"] < 12.0


def _tegrastats_episode(path: Path) -> None:
    """A recorded Xavier NX line (JetPack 5.1.2), replayed with the GPU busy: cool at full clock,
    then heating from 70 to 97 °C while its GR3D clock is capped down to 510 MHz."""
    line = (require_corpus("tegrastats") / "xavier-nx-jp5.1.2-waggle.txt").read_text().strip()
    lines = []
    for k in range(60):
        temp, mhz = (55.0, 1100) if k < 15 else (70.0 + (k - 15) * 0.6, max(510, 1100 - (k - 15) * 20))
        lines.append(line.replace("GR3D_FREQ 0%@[114]", f"GR3D_FREQ 99%@[{mhz}]").replace("GPU@45.5C", f"GPU@{temp:.1f}C"))
    path.write_text("\n".join(lines) + "\n")


def test_replayed_tegrastats_throttling_episode_with_its_hint(tmp_path: Path, db_url: str, detecting_collector) -> None:
    collector = detecting_collector(DetectorSettings(settle_s=0.0, throttle_min_s=1.0, offline_min_s=60.0))
    recording = tmp_path / "tegrastats.txt"
    _tegrastats_episode(recording)
    sampler = TegrastatsSampler(["cat", str(recording)], interval_s=0.1)
    settings = AgentSettings(collectors=(f"127.0.0.1:{collector.port}",), spool_dir=tmp_path / "spool", token="test-token",
                             name="drone-7", interval_s=0.5, batch_interval_s=0.1, backoff_initial_s=0.1, backoff_max_s=1.0)
    agent = Agent(settings, samplers=[sampler], inventory=pb.Inventory(board_model="Jetson Xavier NX"),
                  kind=pb.DEVICE_KIND_JETSON)
    agent.start()
    try:
        wait_until(lambda: _incidents(db_url, "gpu_throttling"), timeout_s=20, message="a throttling incident")
    finally:
        agent.stop()
    (inc,) = _incidents(db_url, "gpu_throttling")
    assert inc.gpu_index == 0 and inc.facts["cause"] == "thermal" and inc.facts["sm_clock_max_mhz"] == 1100.0
    assert inc.facts["peak_temp_c"] >= 80.0 and inc.facts["clock_loss_percent"] >= 10.0
    text = inc.hints[0]["text"]
    assert text.startswith("throttled at ") and "°C with SM clock" in text and "% below max" in text, text


LEAK = textwrap.dedent(
    """
    import sys, time
    chunks = []
    print("ready", flush=True)
    while True:
        chunks.append(b"x" * (1 << 20))   # 1 MiB, touched
        time.sleep(0.05)
    """
)


def test_a_leaking_process_is_memory_growth_with_its_slope(tmp_path: Path, db_url: str, detecting_collector) -> None:
    mib = 1 << 20
    collector = detecting_collector(DetectorSettings(
        settle_s=0.0, growth_window_s=4.0, growth_min_points=6, growth_process_min_bytes=16 * mib,
        growth_min_rise=24 * mib, growth_min_r2=0.9, offline_min_s=60.0))
    script = tmp_path / "leak.py"
    script.write_text(LEAK)
    leak = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], HostSampler(top_processes=40, process_every=1),
                       name="leaky-box", interval_s=0.2)
    try:
        assert leak.stdout is not None and leak.stdout.readline().strip() == "ready"
        agent.start()

        def found() -> list:
            return [i for i in _incidents(db_url, "memory_growth") if i.pid == leak.pid]

        wait_until(found, timeout_s=30, message="memory growth of the leaking process")
    finally:
        agent.stop()
        leak.kill()
        leak.wait(10)
        leak.stdout.close()  # type: ignore[union-attr]
    (inc,) = found()
    assert inc.group_key == f"proc:{leak.pid}" and inc.process_name.startswith("python")
    # 1 MiB every 50 ms plus the loop's own time: about 20 MiB/s, 1,200 MiB/min.
    assert 300 < inc.facts["slope_mib_per_min"] < 1500 and inc.facts["r2"] >= 0.9
    assert inc.facts["time_to_exhaustion_s"] is not None and inc.facts["time_to_exhaustion_s"] > 0
