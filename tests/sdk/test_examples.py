"""The PyTorch examples run (on the CPU, with short settings) and report to a real local agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.agent.daemon.local_server import LocalReportServer

from .conftest import Sink

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def local_agent(tmp_path_factory: pytest.TempPathFactory):
    sink = Sink()
    server = LocalReportServer(os.path.join(str(tmp_path_factory.mktemp("ex")), "agent.sock"), sink)
    server.start()
    try:
        yield server, sink
    finally:
        server.stop(0.5)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=240, env=dict(os.environ)
    )


@pytest.mark.processes
def test_pytorch_training_example(local_agent) -> None:
    server, sink = local_agent
    proc = _run(
        ["examples/pytorch_training.py", "--epochs", "1", "--samples", "512", "--socket", server.socket_path]
    )
    assert proc.returncode == 0, proc.stderr
    assert "reported to the agent" in proc.stdout
    assert sink.wait_for(lambda s: s.merged("train.step").count == 8)
    assert sink.metrics("val.accuracy") and sink.metrics("train.lr") and sink.inventory("environment")
    assert {r.process.name for r in sink.reports} == {"example-train"}


@pytest.mark.processes
def test_pytorch_inference_example(local_agent) -> None:
    server, sink = local_agent
    proc = _run(["examples/pytorch_inference.py", "--requests", "40", "--socket", server.socket_path])
    assert proc.returncode == 0, proc.stderr
    assert "infer.forward" in proc.stdout and "reported to the agent" in proc.stdout
    assert sink.wait_for(lambda s: sum(h.count for h in s.histograms("infer.forward")) == 40)
    assert {h.labels["batch"] for h in sink.histograms("infer.forward")} <= {"1", "8", "32"}


@pytest.mark.parametrize(
    "script",
    ["pytorch_training.py", "pytorch_inference.py", "tensorrt_inference.py", "onnxruntime_inference.py"],
)
@pytest.mark.processes
def test_every_example_has_help(script: str) -> None:
    proc = _run([f"examples/{script}", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


@pytest.mark.processes
def test_benchmark_has_help() -> None:
    proc = _run(["benchmarks/bench_sdk.py", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout
