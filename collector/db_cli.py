"""``fleetscope db``: the database's schema revision, and upgrading it.

``db upgrade`` is what a collector does on start (unless ``--no-db-upgrade``), run on its own:
before a fleet of collectors is restarted, after a backup, or from a deployment script.
Parsers are built without importing SQLAlchemy, as for the other collector commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetscope.collector.cli import DEFAULT_DB

EXIT_UNAVAILABLE = 1  # the database cannot be reached, or is refused
EXIT_USAGE = 2  # the URL itself is wrong


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="the database's schema: show its revision, upgrade it",
                       description="The collector's database schema is versioned by migrations (Alembic revisions). "
                                   "A collector upgrades its database on start; these commands do it on their own.")
    db_sub = p.add_subparsers(dest="db_command", metavar="COMMAND", required=True)

    u = db_sub.add_parser("upgrade", help="upgrade the database's schema to this fleetscope's newest revision",
                          description="Bring the database's schema to this fleetscope's newest revision, in one "
                                      "transaction: it ends at the newest revision or, if a step fails, as it was. "
                                      "Creates the schema in an empty database; adopts a database made before "
                                      "migrations. Prints one line per revision applied.")
    _db_arg(u)
    u.set_defaults(func=_needs_collector(run_upgrade))

    c = db_sub.add_parser("current", help="show the database's schema revision and whether it is the newest",
                          description="Print the database's schema revision and whether it is this fleetscope's "
                                      "newest (head). Reads only; exits 0 whenever the database could be read.")
    _db_arg(c)
    c.set_defaults(func=_needs_collector(run_current))


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, metavar="URL",
                   help="database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (env FLEETSCOPE_DB; default %(default)s)")


def _needs_collector(handler: Any) -> Any:
    """Check for the collector extra before the handler imports SQLAlchemy."""

    def run(args: argparse.Namespace) -> int:
        from fleetscope.cli.extras import require

        require("collector", "sqlalchemy")
        require("collector", "alembic")
        return int(handler(args))

    return run


def _fail(code: int, message: str) -> int:
    print(f"fleetscope db: {message}", file=sys.stderr)
    return code


def _open(url: str) -> Any:
    """An engine for ``url`` that has touched nothing yet; raises ``ValueError`` for a bad URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from fleetscope.collector.storage.engine import make_engine, normalise_url

    try:
        make_url(normalise_url(url))
    except (ArgumentError, ValueError) as exc:  # SQLAlchemy cannot parse it (a port that is not a number, say)
        raise ValueError(f"not a database URL: {url!r} ({exc})") from exc
    try:
        return make_engine(url, create=False)
    except (ArgumentError, ImportError, OSError) as exc:  # no such driver; a SQLite folder that cannot be made
        raise ValueError(f"cannot use {url}: {exc}") from exc


def _missing_sqlite_file(engine: Any) -> str | None:
    from pathlib import Path

    path = engine.url.database if engine.dialect.name == "sqlite" else None
    return path if path and path != ":memory:" and not Path(path).exists() else None


def run_upgrade(args: argparse.Namespace) -> int:
    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.storage import migrations

    try:
        engine = _open(args.db)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    url = migrations.url_of(engine)
    try:
        report = migrations.upgrade(engine)
    except StoreUnavailable as exc:  # unreachable, refused (a newer schema), or a step failed
        return _fail(EXIT_UNAVAILABLE, str(exc))
    finally:
        engine.dispose()
    if not report.steps:
        print(f"{url}: already at {report.before.describe()}; nothing to do")
        return 0
    print(f"{url}: upgrading from {report.before.describe()}")
    for line in report.lines():
        print(f"  {line}")
    print(f"{url}: now at schema revision {report.after} (head)")
    return 0


def run_current(args: argparse.Namespace) -> int:
    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.storage import migrations

    try:
        engine = _open(args.db)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    url = migrations.url_of(engine)
    try:
        missing = _missing_sqlite_file(engine)
        if missing:  # connecting would create it: a command that only reads must not
            return _fail(EXIT_UNAVAILABLE, f"no database at {missing}")
        state = migrations.read_state_of(engine)
    except StoreUnavailable as exc:
        return _fail(EXIT_UNAVAILABLE, str(exc))
    finally:
        engine.dispose()
    print(f"{url}: {state.describe()}")
    if state.known and not state.at_head:
        print(f"run 'fleetscope db upgrade --db {url}' to upgrade it")
    return 0
