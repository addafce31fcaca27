"""Ordinary mistakes end in one clear line, never a traceback (issue 18), for EVERY subcommand.

The subcommands are enumerated from the parser itself, nested ones included, so a command added
later is covered without editing this file. Each gets wrong arguments: an unknown flag (exit 2,
the subcommand's own usage), and where it has them a ``--db`` of the wrong form or one that
cannot be reached, and a ``--since``/``--until`` that is not a time. A few run as real processes,
since what matters is what a user sees.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fleetscope.cli import build_parser
from fleetscope.cli import main as fleetscope

CLI = [sys.executable, "-m", "fleetscope.cli"]
UNREACHABLE = "postgresql+psycopg://nobody@127.0.0.1:5999/x"
BAD_URLS = ["mysql://x", "sqlite://tmp/x.db", "postgresql+psycopg2://u@h/d", "postgresql://u@h:port/d"]
# Commands that serve (or start servers) once their arguments are right: only usage errors here.
LONG_RUNNING = {"agent", "collector", "simulate", "demo", "dashboard"}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command that runs: the leaves, and a command with subcommands that also runs alone (agent)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path and (not subs or parser.get_default("func") is not None):
        yield path, parser
    for a in subs:
        for name, sp in a.choices.items():
            yield from _leaves(sp, (*path, name))


LEAVES = sorted(dict(_leaves(build_parser())).items())


def _flags(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings}


def _required(p: argparse.ArgumentParser) -> list[str]:
    """Values for the arguments a command requires, so that the mistake under test is the one seen."""
    from fleetscope.cli.args import duration_ns, duration_s

    out: list[str] = []
    for a in p._actions:
        value = "1h" if a.type in (duration_ns, duration_s) else (sorted(a.choices)[0] if a.choices else "x")
        if a.option_strings and a.required:
            out += [a.option_strings[-1], value]
            if isinstance(a, argparse._AppendAction):  # compare: two devices
                out += [a.option_strings[-1], value + "2"]
        elif not a.option_strings and a.nargs not in ("?", "*", argparse.SUPPRESS, argparse.REMAINDER) and not isinstance(a, argparse._SubParsersAction):
            out.append(value if a.choices else "1")
    if p.prog == "fleetscope scan":
        out = [__file__, "--device", "x"]  # a file to scan; --db goes with --device
    if p.prog == "fleetscope silence add":
        out += ["--rule", "x"]  # a silence of everything is refused
    return out


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = fleetscope(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_is_enumerated() -> None:
    names = {" ".join(path) for path, _ in LEAVES}
    assert {"devices", "metrics", "logs", "incidents", "compare", "db upgrade", "silence add", "agent"} <= names
    assert len(names) > 25


@pytest.mark.parametrize(("path", "parser"), LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_a_misspelled_flag_prints_the_subcommands_usage(capsys, path: tuple[str, ...], parser) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _run(capsys, [*path, *_required(parser), "--no-such-flag"])
    assert code == 2 and "Traceback" not in out + err
    # `config show COMMAND ...` checks the flags COMMAND would run with: COMMAND's usage.
    assert f"usage: fleetscope {' '.join(path) if path != ('config', 'show') else ''}" in err, err
    assert "unrecognized arguments: --no-such-flag" in err


DB_LEAVES = [(p, sp) for p, sp in LEAVES if "--db" in _flags(sp)]


@pytest.mark.parametrize(("path", "parser"), DB_LEAVES, ids=[" ".join(p) for p, _ in DB_LEAVES])
def test_a_db_url_of_the_wrong_form_is_one_line_naming_the_accepted_forms(capsys, path, parser) -> None:  # type: ignore[no-untyped-def]
    for url in BAD_URLS:
        code, out, err = _run(capsys, [*path, *_required(parser), "--db", url])
        assert (code, out) == (2, ""), (url, out, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "accepted: sqlite:///" in err and "postgresql+psycopg://" in err


@pytest.mark.parametrize(("path", "parser"), [x for x in DB_LEAVES if x[0][0] not in LONG_RUNNING],
                         ids=[" ".join(p) for p, _ in DB_LEAVES if p[0] not in LONG_RUNNING])
def test_an_unreachable_database_is_one_line_and_exit_1(capsys, path, parser) -> None:  # type: ignore[no-untyped-def]
    argv = [*path, *_required(parser), "--db", UNREACHABLE]
    if path == ("alerts",):
        argv.append("--all")
    code, out, err = _run(capsys, argv)
    assert "Traceback" not in out + err
    assert code == 1, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "127.0.0.1" in err and "5999" in err, err


TIME_LEAVES = [(p, sp) for p, sp in LEAVES if {"--since", "--until"} & _flags(sp)]


@pytest.mark.parametrize(("path", "parser"), TIME_LEAVES, ids=[" ".join(p) for p, _ in TIME_LEAVES])
def test_a_time_that_is_no_time_names_the_accepted_forms(capsys, path, parser) -> None:  # type: ignore[no-untyped-def]
    for flag in sorted({"--since", "--until"} & _flags(parser)):
        for text in ("yesterday", "7days", "2026-13-45"):
            code, out, err = _run(capsys, [*path, *_required(parser), flag, text])
            assert code == 2 and "Traceback" not in out + err and "ArgumentTypeError" not in err
            assert f"usage: fleetscope {' '.join(path)}" in err
            assert f"not a time: '{text}'" in err and "accepted: a duration ago" in err and "ISO 8601" in err


# ------------------------------------------------------------------------------ as a user sees it


@pytest.mark.parametrize(("argv", "code", "says"), [
    (["devices", "--db", UNREACHABLE], 1, "fleetscope devices: cannot open database postgresql+psycopg://nobody@127.0.0.1:5999/x: "),
    (["devices", "--db", "mysql://x"], 2, "fleetscope devices: unsupported database 'mysql'"),
    (["devices", "--db", "sqlite://tmp/x.db"], 2, "fleetscope devices: not a database URL: 'sqlite://tmp/x.db': one slash missing"),
    (["metrics", "--device", "x", "--since", "yesterday"], 2, "fleetscope metrics: error: argument --since: not a time: 'yesterday'"),
    (["incidents", "--since", "7days"], 2, "fleetscope incidents: error: argument --since: not a time: '7days'"),
    (["devices", "--lable", "x"], 2, "fleetscope devices: error: unrecognized arguments: --lable x (did you mean --label?)"),
])
@pytest.mark.processes
def test_real_processes_print_one_line(argv: list[str], code: int, says: str) -> None:
    run = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
    assert run.returncode == code and run.stdout == "" and "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if not ln.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith(says), run.stderr
    if argv[0] == "devices" and "--lable" in argv:
        assert run.stderr.startswith("usage: fleetscope devices ")


@pytest.mark.processes
def test_version() -> None:
    run = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("fleetscope ") and "Python" in run.stdout


def test_a_password_in_a_bad_url_is_not_printed(capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = _run(capsys, ["devices", "--db", "mysql://u:s3cret@h/x"])
    assert code == 2 and "s3cret" not in err and "u:***@h" in err


# ------------------------------------------------------------------------------ said once


def test_a_log_file_that_does_not_exist_is_said_once(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    from fleetscope.agent.logs.files import FileFollower

    path = tmp_path / "later.log"
    follower = FileFollower([str(path), str(tmp_path / "*.txt")])
    follower.poll(0)
    follower.poll(1)
    said = [r.getMessage() for r in caplog.records if "--log-file" in r.getMessage()]
    assert said == [f"--log-file {path} does not exist yet: it will be followed from its start when it appears",
                    f"--log-file {tmp_path / '*.txt'} matches no file yet: it will be followed from its start when it appears"]
    path.write_text("hello\n")  # it appears: followed, and nothing more is said
    assert [e.message for e in follower.poll(2)] == ["hello"]
    assert len([r for r in caplog.records if "--log-file" in r.getMessage()]) == 2


@pytest.mark.server
def test_a_refused_token_is_logged_once_per_agent_and_reason_without_the_token(tmp_path, sqlite_url, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging
    import time

    from fleetscope.collector.ingest.server import Collector, CollectorSettings
    from tests.conftest import wait_until
    from tests.helpers import IdleSampler, make_agent

    caplog.set_level(logging.WARNING, logger="fleetscope.collector.ingest.service")
    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=sqlite_url, tokens=frozenset(["right-token"]), grace_s=1.0))
    c.start()
    try:
        agent = make_agent(tmp_path, [f"127.0.0.1:{c.port}"], IdleSampler(), name="wrong-one", token="s3cret-wrong")
        agent.uplink.start()
        try:
            def refusals() -> list[str]:
                return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]

            wait_until(lambda: len(refusals()) >= 1, timeout_s=20, message=f"a refusal logged: {[r.getMessage() for r in caplog.records]}")
            time.sleep(2.0)  # the agent retries (backoff up to 1 s): still one line
        finally:
            agent.uplink.stop()
            agent.spool.close()
    finally:
        c.stop()
    (line,) = refusals()
    assert "wrong token" in line and "s3cret" not in line and "agent " in line


@pytest.mark.parametrize(("path", "parser"), TIME_LEAVES, ids=[" ".join(p) for p, _ in TIME_LEAVES])
def test_a_reversed_range_is_one_line_saying_so(capsys, path, parser, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Before: found nothing and explained it as a gap in the data (issue 27, item 10).
    db = f"sqlite:///{tmp_path / 'none.db'}"  # the range is refused before the database is opened
    code, out, err = _run(capsys, [*path, *_required(parser), "--db", db, "--since", "1h", "--until", "2h"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert err.startswith(f"fleetscope {path[0]}: --since 1h (") and "is after --until 2h (" in err
    assert "the range is reversed" in err
    code, out, err = _run(capsys, [*path, *_required(parser), "--db", db, "--since", "2026-12-01", "--until", "2026-12-01"])
    assert code == 2 and "the range is empty" in err and len(err.strip().splitlines()) == 1
