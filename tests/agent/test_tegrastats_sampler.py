"""The Jetson source fed from recorded tegrastats lines through a real command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetscope.agent.parsers.tegrastats import parse_tegrastats_line
from fleetscope.agent.samplers._base import SourceUnavailable
from fleetscope.agent.samplers.tegrastats import TegrastatsSampler
from tests.conftest import wait_until
from tests.corpus import sample_files, sample_text
from tests.helpers import sample_count, table_count


def _one_line(path: Path) -> str:
    # One sample is a line wrapped over several in its source; the parser takes it joined.
    return " ".join(sample_text(path).split())


def _drain(sampler: TegrastatsSampler, expect: int):  # type: ignore[no-untyped-def]
    out = None
    deadline = time.monotonic() + 10
    rows = []
    while time.monotonic() < deadline and len(rows) < expect:
        out = sampler.sample(time.time_ns())
        rows.extend(zip(out.host, out.gpu))
        time.sleep(0.05)
    return rows, out


@pytest.mark.processes
@pytest.mark.parametrize("path", sample_files("tegrastats"), ids=lambda p: p.name)
def test_every_recorded_board_becomes_samples(tmp_path: Path, path: Path) -> None:
    line = _one_line(path)
    reading = parse_tegrastats_line(line)
    recorded = tmp_path / "tegrastats.log"
    recorded.write_text(line + "\n" + line + "\n")
    sampler = TegrastatsSampler(f"cat {shlex.quote(str(recorded))}")
    try:
        rows, _ = _drain(sampler, 2)
    finally:
        sampler.close()
    assert len(rows) == 2
    (h1, g1), (h2, g2) = rows
    assert h1.ts_ns < h2.ts_ns, "lines that arrive together keep their order in time"
    assert h1.mem_used_bytes == reading.ram_used_mb * 1024 * 1024
    assert h1.mem_total_bytes == reading.ram_total_mb * 1024 * 1024
    assert len(h1.cpu_core_percent) == len(reading.cpu_cores)
    assert g1.util_gpu_percent == (None if reading.gr3d_load_pct is None else float(reading.gr3d_load_pct))
    if reading.gr3d_freq_mhz:
        assert g1.sm_clock_mhz == max(reading.gr3d_freq_mhz)


@pytest.mark.processes
def test_metrics_carry_rails_and_sensors(tmp_path: Path) -> None:
    path = next(p for p in sample_files("tegrastats") if p.name == "orin-agx-jp7.2-r39.2.txt")
    recorded = tmp_path / "t.log"
    recorded.write_text(_one_line(path) + "\n")
    sampler = TegrastatsSampler(["cat", str(recorded)])
    try:
        time.sleep(0.5)
        out = sampler.sample(time.time_ns())
    finally:
        sampler.close()
    rails = {m.labels["rail"]: m.value for m in out.metrics if m.name == "jetson.power_mw"}
    assert rails == {"VDD_GPU_SOC": 5139.0, "VDD_CPU_CV": 3268.0, "VIN_SYS_5V0": 5500.0}
    temps = {m.labels["sensor"]: m.value for m in out.metrics if m.name == "jetson.temp_c"}
    assert temps["gpu"] == 47.625
    assert out.gpu[0].temp_c == 47.625 and out.gpu[0].power_w == 5.139


@pytest.mark.processes
def test_missing_command_turns_the_source_off() -> None:
    with pytest.raises(SourceUnavailable, match="cannot run"):
        TegrastatsSampler(["/nonexistent/tegrastats"])


def test_agent_replays_a_recording_into_metrics(tmp_path: Path, sqlite_url: str, collector_process) -> None:
    path = next(p for p in sample_files("tegrastats") if p.name == "orin-agx-jp7.2-r39.2.txt")
    recorded = tmp_path / "flight.log"
    recorded.write_text((_one_line(path) + "\n") * 5)
    c = collector_process(sqlite_url).start()
    agent = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "agent", "--collector", c.address, "--token", "test-token",
                              "--name", "drone-7", "--spool", str(tmp_path / "spool"), "--no-host", "--no-gpu",
                              "--tegrastats-cmd", f"cat {recorded}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sample_count(sqlite_url, "gpu", device="drone-7") >= 5, timeout_s=30, message="replayed samples stored")
    finally:
        agent.terminate()
        agent.wait(30)
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "metrics", "--db", sqlite_url, "--device", "drone-7",
                          "--since", "5m", "--json"], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout)
    assert len(m["gpu"]) == 5 and all(p["values"]["util_gpu_percent"] == 12.0 for p in m["gpu"])
    assert len(m["host"]) == 5 and m["host"][0]["values"]["mem_used_bytes"] == 20642 * 1024 * 1024
    assert table_count(sqlite_url, "metric_points") >= 5 * 3
