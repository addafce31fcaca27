"""The test tiers hold themselves: in the fast tier, a test that starts a process or a server
without its marker fails and names the marker (tests/conftest.py), so `make test-fast` cannot
silently grow slow, and a marked test is left to `make test`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = '''
import socket
import subprocess

import pytest


def test_plain_code_runs():
    assert sum([1, 2]) == 3


def test_an_unmarked_process():
    subprocess.run(["true"], check=True)


def test_an_unmarked_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()


@pytest.fixture(scope="module")
def module_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def test_a_module_fixture_starting_a_server(module_server):
    assert module_server


@pytest.mark.processes
def test_a_marked_process():
    subprocess.run(["true"], check=True)
'''


@pytest.mark.processes
def test_the_fast_tier_fails_unmarked_processes_and_servers_and_skips_marked_ones(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    processes\n    server\n    browser\n    postgresql\n")
    env = {**os.environ, "FLEETSCOPE_TEST_TIER": "fast", "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", str(tmp_path / "pytest.ini"), "-q", "-rA",
         "-p", "no:cacheprovider", "-m", "not (processes or server or browser or postgresql)", str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "PASSED test_sample.py::test_plain_code_runs" in text
    assert "test_an_unmarked_process starts a process: mark it @pytest.mark.processes" in text
    assert "test_an_unmarked_server starts a server: mark it @pytest.mark.server" in text
    assert "test_a_module_fixture_starting_a_server starts a server: mark it @pytest.mark.server" in text
    assert "1 deselected" in text
