"""Ordinary mistakes end in one line, never a traceback: what the ``fleetscope`` command does about them.

* ``Parser``: an unknown flag is reported with the usage of the subcommand it was given to (not the
  top-level one), with the closest flag that command has;
* ``db_problem``: a ``--db`` value of the wrong form is a usage error (exit 2) naming the accepted
  forms, found before anything is opened, for every command that has ``--db``;
* ``failure_line``: a database that cannot be reached is one line (exit 1), whichever command met it;
* ``version``: what ``fleetscope --version`` prints.

Nothing here imports SQLAlchemy or the collector: a drone runs this with ``fleetscope[agent]`` only.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any

from fleetscope.cli.args import DB_URL_FORMS, db_url_problem, hide_url_password

# The parsers that took part in the parse running now, outermost first (argparse hands the rest
# of the command line to a subcommand's parser through its parse_known_args).
_used: list[argparse.ArgumentParser] = []


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose unknown arguments are the innermost subcommand's error."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        _used.append(self)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> Any:  # type: ignore[override]
        start = len(_used)
        try:
            ns, extras = self.parse_known_args(args, namespace)
            used = _used[start:]
        finally:
            del _used[start:]
        if extras:
            target = used[-1] if used else self
            target.error(f"unrecognized arguments: {' '.join(extras)}{_suggestion(target, extras)}")
        return ns


def _suggestion(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    for word in extras:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        v = dist_version("fleetscope")
    except PackageNotFoundError:  # run from a source tree that was never installed
        v = "unknown (not installed)"
    return f"fleetscope {v} (Python {sys.version.split()[0]})"


def db_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the form of the command's ``--db``, if it has one."""
    url = getattr(args, "db", None)
    return db_url_problem(url) if isinstance(url, str) else None


def failure_line(exc: BaseException, args: argparse.Namespace) -> str | None:
    """One line for a failure an ordinary mistake causes (a database that cannot be reached or
    read); None for anything else, which is a bug and keeps its traceback."""
    url = getattr(args, "db", None)
    where = f" {hide_url_password(url)}" if isinstance(url, str) else ""
    store = sys.modules.get("fleetscope.collector.errors")
    if store is not None and isinstance(exc, store.StoreUnavailable):
        return f"cannot use the database{where}: {_one_line(str(exc))}; {DB_URL_FORMS}"
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.ArgumentError)):
        reason = str(getattr(exc, "orig", None) or exc).split("(Background on this error", 1)[0]
        return f"cannot open database{where}: {_one_line(reason)}; {DB_URL_FORMS}"
    if isinstance(exc, ModuleNotFoundError) and exc.name in ("psycopg", "psycopg2"):
        return "the PostgreSQL driver is not installed: pip install 'fleetscope[collector]' (psycopg)"
    return None


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.strip().splitlines() if part.strip()) or "unknown reason"
