"""Shared fixtures: real databases (a SQLite file, a fresh PostgreSQL database per test) and
real collectors on loopback ports, and the test tiers.

Tiers: a test that starts a process (an agent, a collector, a CLI in a subprocess, a peer such
as Alertmanager), a server in its own process (a gRPC collector, an HTTP receiver), drives a
browser, or needs the PostgreSQL server carries the marker ``processes``, ``server``, ``browser``
or ``postgresql``; ``make test-fast`` runs the rest. Most markers come from what a test uses (its
directory, its fixtures); a test that starts a process or a server, or opens a PostgreSQL
connection, without its marker fails (in every run, CI's whole-suite run included) and says
which marker it needs, so the tiers stay honest as tests are added.

Everything here is safe under pytest-xdist: each test gets its own database (SQLite under
``tmp_path``, a PostgreSQL database of its own) and its own ports (``free_port``: a block of
ports per xdist worker, below the kernel's ephemeral range).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Hypothesis: no per-example deadline. Speed is measured by the benchmarks, not asserted here, and
# on a machine running the suite in parallel one example can take a second for reasons of its own.
# No example database either: a CI clone starts from nothing, so a run here must not depend on one.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass
else:
    _hypothesis_settings.register_profile("fleetscope", deadline=None, database=None)
    _hypothesis_settings.load_profile("fleetscope")

# The dashboard shows a fleet summary that took a second to read as last read while the next is
# read (dashboard/served_last.py). Under the whole suite on two cores a small test fleet's read can
# take that long, and a test that has just changed the fleet would be shown the summary from
# before: off here; the tests of that behaviour turn it on.
os.environ.setdefault("FLEETSCOPE_DASHBOARD_SERVE_LAST_AFTER", "inf")
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


@pytest.fixture
def citus_url() -> Iterator[str]:
    """A new, empty database on a real Citus cluster (a coordinator and two workers on loopback,
    ``tests/citus_cluster.py``), dropped after the test."""
    from tests.citus_cluster import citus_installed, ensure_cluster

    missing = citus_installed()
    if missing:
        if os.environ.get("FLEETSCOPE_REQUIRE_CITUS"):  # .ci/run installed it: a missing cluster is a failure
            pytest.fail(f"Citus must be tested for real here: {missing}")
        pytest.skip(missing)
    cluster = ensure_cluster()
    url = cluster.create_database()
    try:
        yield url
    finally:
        cluster.drop_database(url)


DB_KINDS = ["sqlite", "postgresql"]
# The modules whose ``db_url`` tests run on Citus too where CI installed it
# (``FLEETSCOPE_REQUIRE_CITUS=1``, ``.ci/run``): storage and its readers, the query API, the
# migrations, import, the shared jobs' leases and shares, compaction and retention (issue 30). A
# third database for every test would cost CI more than its budget allows;
# ``FLEETSCOPE_TEST_CITUS_ALL=1`` runs every ``db_url`` test there (``docs/scaling.md``).
CITUS_MODULES = frozenset({
    "test_storage.py", "test_latest_tables.py", "test_readers_through_chunks.py",  # storage, readers
    "test_one_read_api.py", "test_query_context.py", "test_query_alerts.py", "test_cli_queries.py",  # the query API
    "test_compare_fast_paths.py",
    "test_migrations.py", "test_chunk_migration.py", "test_partitions.py", "test_db_cli.py",  # migrations
    "test_import.py",  # import
    "test_shares.py", "test_lease.py",  # the shared jobs
    "test_compaction.py", "test_compaction_merge.py", "test_retention.py",
})


def db_kinds(module: str) -> list[str]:
    """The database kinds ``db_url`` takes in test module ``module`` (its file name)."""
    if os.environ.get("FLEETSCOPE_TEST_CITUS_ALL") or (os.environ.get("FLEETSCOPE_REQUIRE_CITUS") and module in CITUS_MODULES):
        return [*DB_KINDS, "citus"]
    return list(DB_KINDS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``db_url``'s kinds, per module (``db_kinds``), unless the test names its own."""
    if "db_url" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "db_url" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return
    metafunc.parametrize("db_url", db_kinds(Path(str(metafunc.definition.fspath)).name), indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleetscope.db'}"
    if request.param == "citus":
        return request.getfixturevalue("citus_url")
    return request.getfixturevalue("pg_url")


# ---------------------------------------------------------------- tiers

SLOW_MARKERS = ("processes", "server", "browser", "postgresql")
# Every test under these directories runs real processes (agents, collectors, installers).
_PROCESS_DIRS = ("e2e", "deploy")
# Fixtures that start processes or servers of other programs for the tests that use them.
_PROCESS_FIXTURES = {"collector_process", "pipeline", "small_fleet"}
# Fixtures that start a server (a gRPC collector) in the test's own process.
_SERVER_FIXTURES = {"collector", "quiet_collector"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        fixtures = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(d in parts for d in _PROCESS_DIRS) or fixtures & _PROCESS_FIXTURES:
            item.add_marker(pytest.mark.processes)
        if fixtures & _SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if "pg_url" in fixtures or params.get("db_url") == "postgresql":
            item.add_marker(pytest.mark.postgresql)
        if "citus_url" in fixtures or params.get("db_url") == "citus":  # the first one makes the cluster
            item.add_marker(pytest.mark.postgresql)
            item.add_marker(pytest.mark.processes)
        # Builds of this source tree share its build/ folder: one worker runs them all, one at a time.
        group = "project-build" if item.get_closest_marker("builds_project") else _shared_fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group that keeps the users of one expensive shared fixture together, so that it is
    built once per group: a module's tests that share a module fixture (a filled fleet database),
    or a session fixture (the dashboard's pipeline, about 70 s) per module using it. One group for
    all of a session fixture's users would build it once, but their chain on one worker (several
    minutes of pages and browsers) would outlast the rest of the suite."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for defs in info.name2fixturedefs.values():
        fixturedef = defs[-1]
        if not getattr(fixturedef.func, "__module__", "").startswith("tests."):
            continue  # pytest's own (tmp_path_factory, ...) cost nothing to build twice
        if fixturedef.scope in ("session", "module", "package"):
            return item.nodeid.split("::")[0]
    return None


_current_test: list[pytest.Item | None] = [None]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current_test[0] = item  # module and session fixtures set up inside it are charged to it
    try:
        yield
    finally:
        _current_test[0] = None


def _guarded(original: Callable[..., Any], what: str, marker: str) -> Callable[..., Any]:
    """``original``, which in the fast tier fails the running test unless it carries ``marker``."""

    def guard(*args: Any, **kwargs: Any) -> Any:
        item = _current_test[0]
        if item is not None and not any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            pytest.fail(f"{item.nodeid} {what}: mark it @pytest.mark.{marker} (it then runs in `make test`, not the fast tier)")
        return original(*args, **kwargs)

    return guard


def pytest_configure(config: pytest.Config) -> None:
    """A test that starts a process or a server, or connects to PostgreSQL, without its marker
    fails at once (fixtures of any scope included), naming the marker, instead of slowing the
    fast tier unseen. In every run, not only the fast tier's: CI runs the whole suite, and that is
    where a new unmarked test must be caught."""
    import grpc
    import grpc.aio

    subprocess.Popen._execute_child = _guarded(subprocess.Popen._execute_child, "starts a process", "processes")  # type: ignore[attr-defined]
    socket.socket.listen = _guarded(socket.socket.listen, "starts a server", "server")  # type: ignore[method-assign]
    grpc.server = _guarded(grpc.server, "starts a server", "server")
    grpc.aio.server = _guarded(grpc.aio.server, "starts a server", "server")
    try:
        import psycopg
    except ImportError:
        return
    psycopg.Connection.connect = classmethod(  # type: ignore[method-assign]
        _guarded(psycopg.Connection.connect.__func__, "connects to PostgreSQL", "postgresql"))  # type: ignore[attr-defined]


# ---------------------------------------------------------------- ports

_PORT_BLOCK = 1500  # ports per xdist worker; 16 workers fit below 32768, where the kernel's ephemeral range starts
_PORT_BASE = 8000
_next_port = [0]


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ...; absent without xdist
    return int(worker[2:]) if worker[2:].isdigit() else 0


def free_port() -> int:
    """A loopback port no other test of this run hands out: each xdist worker takes ports from its
    own block, below the ephemeral range (so no outgoing connection holds one), and each is
    checked free by binding it."""
    start = _PORT_BASE + _worker_index() * _PORT_BLOCK
    for _ in range(_PORT_BLOCK):
        port = start + _next_port[0] % _PORT_BLOCK
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}..{start + _PORT_BLOCK - 1}")


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
                 *(("--token", self.token) if self.token else ()), "--grace", "5s", *self._metrics_flag(), *self.extra_args],
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

    def _metrics_flag(self) -> tuple[str, ...]:
        # The default metrics address is one fixed port: tests running side by side must not share it.
        return () if any(a.startswith("--metrics-listen") for a in self.extra_args) else ("--metrics-listen", "off")

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


@pytest.fixture
def quiet_collector(tmp_path: Path, db_url: str) -> Iterator:
    """An in-process collector whose detectors pass every half second and call a device offline
    only after an hour: for tests whose devices stop sending once their records are in, where the
    default 10 s threshold would open an ``agent_offline`` incident (and flip the device's status)
    at a moment no test controls, between two readers' calls."""
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]),
                                    grace_s=2.0, detectors_interval_s=0.5,
                                    detector_overrides={"offline_after_s": 3600.0}))
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
