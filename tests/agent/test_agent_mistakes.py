"""The agent's ordinary mistakes as a user meets them, each one line on stderr and exit 2, never a
traceback or a silent guess (issue 27, items 9 and 10): a state directory that cannot be made, a
collector address without a port (gRPC would use 443 without a word), a sampling interval of 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "fleetscope.cli"]
pytestmark = pytest.mark.processes  # every mistake is made on the real command line


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)


def _one_line(run: subprocess.CompletedProcess[str], line: str) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines()[-1] == line


def test_a_spool_that_cannot_be_made_is_one_line() -> None:
    run = _run("agent", "--collector", "127.0.0.1:1", "--spool", "/proc/nope", "--no-gpu", "--duration", "1s")
    _one_line(run, "fleetscope agent: --spool /proc/nope: cannot create the state directory: No such file or directory")
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_spool_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    run = _run("agent", "--collector", "127.0.0.1:1", "--spool", str(tmp_path / "f"), "--no-gpu", "--duration", "1s")
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith(f"fleetscope agent: --spool {tmp_path / 'f'}: ")


@pytest.mark.parametrize(("address", "line"), [
    ("collector.example.org",
     "--collector 'collector.example.org' has no port: write HOST:PORT, e.g. collector.example.org:4317 (the collector's default)"),
    ("10.0.0.5", "--collector '10.0.0.5' has no port: write HOST:PORT, e.g. 10.0.0.5:4317 (the collector's default)"),
    ("::1", "--collector '::1' has no port: write HOST:PORT, e.g. HOST:4317 (the collector's default)"),
    ("host:http", "--collector 'host:http': expected HOST:PORT, e.g. collector.example.org:4317"),
])
def test_a_collector_without_a_port_is_refused_not_sent_to_443(tmp_path: Path, address: str, line: str) -> None:
    run = _run("agent", "--collector", address, "--spool", str(tmp_path / "s"), "--no-gpu", "--duration", "1s")
    _one_line(run, f"fleetscope agent: {line}")
    assert not (tmp_path / "s").exists(), "refused before anything was made"
    run = _run("simulate", "--collector", address, "--devices", "1", "--duration", "1s")
    _one_line(run, f"fleetscope simulate: {line}")


def test_a_collector_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    import os

    run = subprocess.run([*CLI, "agent", "--spool", str(tmp_path / "s"), "--no-gpu", "--duration", "1s"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "FLEETSCOPE_COLLECTOR": "127.0.0.1:4317,collector"})
    _one_line(run, "fleetscope agent: --collector 'collector' has no port: write HOST:PORT, e.g. collector:4317 "
                   "(the collector's default)")


@pytest.mark.parametrize("argv", [["agent", "--collector", "127.0.0.1:1"], ["simulate", "--collector", "127.0.0.1:1"]])
@pytest.mark.parametrize(("flag", "value"), [("--interval", "0"), ("--interval", "0s"), ("--interval=-1s", None),
                                             ("--batch-interval", "0ms")])
def test_an_interval_of_nothing_is_refused(argv: list[str], flag: str, value: str | None) -> None:
    if flag == "--batch-interval" and argv[0] == "simulate":
        pytest.skip("simulate has no --batch-interval")
    run = _run(*argv, flag, *([value] if value is not None else []), "--duration", "1s")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    name = flag.split("=")[0]
    assert run.stderr.strip().splitlines()[-1].startswith(f"fleetscope {argv[0]}: error: argument {name}: ")
    if value is not None:
        assert run.stderr.strip().endswith(f"{value!r}: must be more than 0 (examples: 500ms, 1s, 15m)")


def test_status_refuses_a_collector_without_a_port_too() -> None:
    run = _run("status", "--collector", "myhost")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == ("fleetscope status: error: argument --collector: 'myhost' has no port: "
                                                  "write HOST:PORT, e.g. myhost:4317 (the collector's default)")
