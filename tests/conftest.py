"""Shared fixtures: real databases (a SQLite file, a fresh PostgreSQL database per test) and
real collectors on loopback ports chosen by the OS."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("FLEETSCOPE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_admin():  # type: ignore[no-untyped-def]
    import psycopg

    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise  # CI must test PostgreSQL for real: a missing server is a failure there
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped after the test."""
    admin = _pg_admin()
    name = "fleetscope_test_" + secrets.token_hex(6)
    admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fleetscope.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleetscope.db'}"
    return request.getfixturevalue("pg_url")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CollectorProcess:
    """``fleetscope collector`` in a subprocess, so a test can SIGKILL it for real."""

    def __init__(self, db_url: str, port: int, token: str, log_path: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.db_url, self.port, self.token, self.log_path = db_url, port, token, log_path
        self.extra_args = extra_args  # more collector flags (--alerts FILE, ...)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> CollectorProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", self.address, "--db", self.db_url,
                 *(("--token", self.token) if self.token else ()), "--grace", "5s", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("collector did not start listening within 30 s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def collector_process(tmp_path: Path) -> Iterator:
    made: list[CollectorProcess] = []

    def make(db_url: str, *, port: int | None = None, token: str = "test-token", extra_args: tuple[str, ...] = ()) -> CollectorProcess:
        """A collector process; ``token=""`` starts it without ``--token``."""
        c = CollectorProcess(db_url, port or free_port(), token, tmp_path / f"collector-{len(made)}.log", extra_args)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def collector(tmp_path: Path, db_url: str) -> Iterator:
    """An in-process collector on a free port, over ``db_url``."""
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]), grace_s=2.0))
    c.start()
    yield c
    c.stop()


def wait_until(predicate, timeout_s: float = 30.0, interval_s: float = 0.1, message: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {message}")
