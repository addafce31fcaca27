"""The test tiers hold themselves: a test that starts a process or a server without its marker
fails and names the marker (tests/conftest.py), in every run, so `make test-fast` cannot silently
grow slow, and a marked test is left to `make test`; and a parallel run keeps a group together."""

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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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


GROUPED = '''
import os

import pytest


@pytest.mark.xdist_group("shared-fixture")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    with open(os.path.join(os.environ["GROUPED_OUT"], f"grouped-{i}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass
'''


@pytest.mark.processes
def test_parallel_runs_keep_a_group_on_one_worker(tmp_path: Path) -> None:
    """`make test` relies on --dist loadgroup to build a shared fixture once and to run builds of
    this tree one at a time; a pytest/pytest-xdist pairing that drops the groups does so silently."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "GROUPED_OUT": str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "-q", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadgroup", str(tmp_path / "test_grouped.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    workers = {p.read_text() for p in tmp_path.glob("grouped-*")}
    assert len(list(tmp_path.glob("grouped-*"))) == 8
    assert len(workers) == 1, f"one group ran on {sorted(workers)}: pytest-xdist ignored --dist loadgroup"
