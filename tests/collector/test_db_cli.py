"""``fleetscope db upgrade`` and ``fleetscope db current`` through the real command line: what
they print for each state of a database, and one clear line (never a traceback) for the
mistakes people make."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from fleetscope.cli import main
from fleetscope.collector.storage import migrations
from fleetscope.collector.storage.citus import DISTRIBUTED, DROPPED_FOREIGN_KEYS, REFERENCE, is_citus
from fleetscope.collector.storage.engine import make_engine
from tests.collector.test_migrations import (
    HEAD,
    STEPS_FROM_EMPTY,
    build_database_made_before_migrations,
    state_of,
)

CLI = [sys.executable, "-m", "fleetscope.cli"]
# What ``db upgrade`` prints for each revision after the baseline, in order.
LATER_STEP_LINES = [f"  {a} -> {b}: {migrations.describe(b)}" for a, b in STEPS_FROM_EMPTY[1:]]
BASELINE_LINE = f"0001: {migrations.describe('0001')}"


def _citus_lines(db_url: str) -> list[str]:
    """What an upgrade to head prints after its steps on a Citus coordinator: a line a table
    spread (``storage.citus``); nothing elsewhere."""
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            if not is_citus(conn):
                return []
    finally:
        engine.dispose()
    return [*(f"  citus: {t}: foreign key {c} dropped" for t, c in DROPPED_FOREIGN_KEYS),
            *(f"  citus: {t}: reference table (copied to every node)" for t in REFERENCE),
            *(f"  citus: {t}: distributed by device_id" for t in DISTRIBUTED)]


def _url(db_url: str) -> str:
    return migrations.url_of(make_engine(db_url, create=False))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.mark.parametrize("argv", [["db"], ["db", "upgrade"], ["db", "current"]])
def test_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: fleetscope {' '.join(argv)}")
    assert ("--db URL" in out) if len(argv) > 1 else ("upgrade" in out and "current" in out)


def test_upgrade_of_an_empty_database_prints_each_step_then_nothing_to_do(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    url = _url(db_url)
    assert _run(capsys, "db", "upgrade", "--db", db_url) == (0, [
        f"{url}: upgrading from no fleetscope schema yet (this fleetscope's head is {HEAD})",
        f"  empty -> {BASELINE_LINE}",
        *LATER_STEP_LINES,
        *_citus_lines(db_url),
        f"{url}: now at schema revision {HEAD} (head)",
    ], [])
    assert _run(capsys, "db", "upgrade", "--db", db_url) == (0, [
        f"{url}: already at schema revision {HEAD} (head); nothing to do",
    ], [])
    assert _run(capsys, "db", "current", "--db", db_url) == (0, [f"{url}: schema revision {HEAD} (head)"], [])


def test_a_database_made_before_migrations_through_current_and_upgrade(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    build_database_made_before_migrations(db_url)
    url = _url(db_url)
    assert _run(capsys, "db", "current", "--db", db_url) == (0, [
        f"{url}: schema made before migrations (the baseline, 0001), behind head {HEAD}",
        f"run 'fleetscope db upgrade --db {url}' to upgrade it",
    ], [])
    assert state_of(db_url).made_before_migrations, "current only reads"
    code, out, err = _run(capsys, "db", "upgrade", "--db", db_url)
    assert (code, err) == (0, [])
    assert out[1:] == [f"  made before migrations -> {BASELINE_LINE}", *LATER_STEP_LINES, *_citus_lines(db_url),
                       f"{url}: now at schema revision {HEAD} (head)"]


def test_current_of_a_database_behind_and_of_one_newer_than_this_code(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    engine = make_engine(db_url, create=False)
    migrations.upgrade(engine, "0001")
    url = migrations.url_of(engine)
    assert _run(capsys, "db", "current", "--db", db_url) == (0, [
        f"{url}: schema revision 0001, behind head {HEAD}", f"run 'fleetscope db upgrade --db {url}' to upgrade it",
    ], [])
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    assert _run(capsys, "db", "current", "--db", db_url) == (0, [
        f"{url}: schema revision 0099, unknown to this fleetscope (head {HEAD})",
    ], [])
    code, out, err = _run(capsys, "db", "upgrade", "--db", db_url)
    assert (code, out) == (1, [])
    assert err == [
        f"fleetscope db: database {url} is at schema revision 0099, which this fleetscope does not know "
        f"(its newest is {HEAD}): a newer fleetscope upgraded it; upgrade fleetscope to use it"
    ]


def test_current_of_a_missing_sqlite_file_says_so_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "nowhere" / "fleet.db"
    assert _run(capsys, "db", "current", "--db", str(path)) == (1, [], [f"fleetscope db: no database at {path}"])
    assert not path.exists()


@pytest.mark.parametrize(("url", "code", "says"), [
    ("postgresql://nobody@127.0.0.1:1/fleet", 1, "cannot open database postgresql+psycopg://nobody@127.0.0.1:1/fleet: "),
    ("postgresql://u@h:port/fleet", 2, "not a database URL: 'postgresql://u@h:port/fleet'"),
    ("mysql://u@h/fleet", 2, "unsupported database 'mysql'"),
    ("postgresql+asyncpg://u@h/fleet", 2, "cannot use postgresql+asyncpg://u@h/fleet: "),
])
@pytest.mark.processes
@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_ordinary_mistakes_give_one_line_and_no_traceback(url: str, code: int, says: str, command: str) -> None:
    run = subprocess.run([*CLI, "db", command, "--db", url], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (code, "")
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"fleetscope db: {says}"), line


@pytest.mark.processes
def test_the_installed_command_upgrades_and_reports(sqlite_url: str) -> None:
    bin_fleetscope = Path(sys.executable).parent / "fleetscope"
    if not bin_fleetscope.exists():
        pytest.skip("no fleetscope script beside this interpreter")
    build_database_made_before_migrations(sqlite_url)
    run = subprocess.run([str(bin_fleetscope), "db", "upgrade", "--db", sqlite_url], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines()[-1] == f"{_url(sqlite_url)}: now at schema revision {HEAD} (head)"
    run = subprocess.run([str(bin_fleetscope), "db", "current", "--db", sqlite_url], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.splitlines() == [f"{_url(sqlite_url)}: schema revision {HEAD} (head)"]
