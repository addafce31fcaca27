"""The SDK inside a real torch program, through a real agent's Unix socket, into the collector."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent, table_count

pytest.importorskip("torch")

PROGRAM = textwrap.dedent(
    """
    import sys, torch
    from fleetscope.agent import sdk

    sdk.configure(socket=sys.argv[1], flush_interval_s=0.2)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    x = torch.randn(16, 32)
    for _ in range(200):
        with sdk.latency("forward", model="mlp"):
            model(x)
    sdk.metric("train.loss", 0.25)
    try:
        with sdk.oom_guard("allocate"):
            torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError:
        pass  # re-raised unchanged by the guard; the incident is already on its way
    sdk.check_environment(models=[model], cuda_available=True)
    assert sdk.flush(5.0)
    """
)


def test_sdk_reports_reach_the_collector(tmp_path: Path, db_url: str, collector) -> None:
    socket_path = tmp_path / "run" / "agent.sock"
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], CountingSampler(total=100, per_tick=10),
                       name="trainer", sdk_socket=str(socket_path))
    agent.start()
    try:
        wait_until(socket_path.exists, message="the agent's SDK socket")
        script = tmp_path / "train.py"
        script.write_text(PROGRAM)
        run = subprocess.run([sys.executable, str(script), str(socket_path)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        wait_until(lambda: table_count(db_url, "incidents") >= 2 and table_count(db_url, "latency_histograms") >= 1,
                   timeout_s=30, message="SDK records stored")
    finally:
        agent.stop()

    def cli(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "fleetscope.cli", *args, "--db", db_url, "--json"],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    incidents = {i["kind"]: i for i in cli("incidents", "--device", "trainer")["incidents"]}
    assert incidents["host_oom"]["facts"]["requested_bytes"] == 2**62, "the CPU allocator failure with its size"
    assert "model_on_cpu" in incidents, "a model on the CPU while a GPU is present"
    (lat,) = cli("latency", "--device", "trainer", "--name", "forward")["latency"]
    assert lat["count"] == 200 and lat["labels"] == {"model": "mlp"} and lat["errors"] == 0
    assert 0 < lat["p50_ms"] <= lat["p99_ms"]
    assert table_count(db_url, "metric_points") >= 1
