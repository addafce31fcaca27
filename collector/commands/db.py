"""``fleetscope db``: the database's schema revision, upgrading it, and moving a fleet's database.

``db upgrade`` is what a collector does on start (unless ``--no-db-upgrade``), run on its own:
before a fleet of collectors is restarted, after a backup, or from a deployment script.
``db export``, ``db import`` and ``db copy`` move a fleet from one database to another (SQLite
to PostgreSQL, typically); the work is in ``fleetscope.collector.commands.db_transfer``.
Parsers are built without importing SQLAlchemy, as for the other collector commands.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fleetscope.collector.commands.output import db_url_arg, needs_extra

EXIT_UNAVAILABLE = 1  # the database cannot be reached, or is refused
EXIT_USAGE = 2  # the URL itself is wrong


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="the database: show its schema revision, upgrade it, export, import or copy it",
                       description="The collector's database schema is versioned by migrations (Alembic revisions). "
                                   "A collector upgrades its database on start; these commands do it on their own, and move a "
                                   "fleet's database to another (export, import, copy).")
    db_sub = p.add_subparsers(dest="db_command", metavar="COMMAND", required=True)

    u = db_sub.add_parser("upgrade", help="upgrade the database's schema to this fleetscope's newest revision",
                          description="Bring the database's schema to this fleetscope's newest revision, in one "
                                      "transaction: it ends at the newest revision or, if a step fails, as it was. "
                                      "Creates the schema in an empty database; adopts a database made before "
                                      "migrations. Prints one line per revision applied.")
    db_url_arg(u)
    u.set_defaults(func=needs_extra(run_upgrade, "sqlalchemy", "alembic"))

    c = db_sub.add_parser("current", help="show the database's schema revision and whether it is the newest",
                          description="Print the database's schema revision and whether it is this fleetscope's "
                                      "newest (head). Reads only; exits 0 whenever the database could be read.")
    db_url_arg(c)
    c.set_defaults(func=needs_extra(run_current, "sqlalchemy", "alembic"))

    e = db_sub.add_parser("export", help="write every table of a database to one portable file",
                          description="Write the fleet in a database (every fleetscope table, with its schema revision and "
                                      "row counts) to FILE: gzip-compressed JSON records, binary-safe, streamed. Reads one "
                                      "snapshot, so a running collector may go on writing. Load it with 'fleetscope db "
                                      "import'. Progress (rows per table) on stderr.")
    db_url_arg(e)
    e.add_argument("--out", required=True, type=Path, metavar="FILE", help="the file to write (refused if it exists)")
    e.set_defaults(func=needs_extra(run_export, "sqlalchemy", "alembic"))

    i = db_sub.add_parser("import", help="load an export file into a database (e.g. a SQLite fleet into PostgreSQL)",
                          description="Load FILE, written by 'fleetscope db export', into the database: in one transaction, "
                                      "the schema is brought to the export's revision, every table is loaded with its ids "
                                      "(COPY on PostgreSQL), sequences are moved past them, and the schema is upgraded to "
                                      "this fleetscope's newest. A damaged or truncated file, or any error, leaves the "
                                      "database as it was. A database that already holds a fleet is refused unless "
                                      "--replace.")
    db_url_arg(i)
    i.add_argument("--from", dest="source", required=True, type=Path, metavar="FILE", help="the export file to load")
    i.add_argument("--replace", action="store_true",
                   help="empty a database that already holds data, in the same transaction, before loading")
    i.set_defaults(func=needs_extra(run_import, "sqlalchemy", "alembic"))

    cp = db_sub.add_parser("copy", help="copy one database into another directly (export and import with no file)",
                           description="Copy every fleetscope table from one database into another, as 'db export' then "
                                       "'db import' would, with no file in between: one snapshot of the source, one "
                                       "transaction on the target.")
    cp.add_argument("--from", dest="source", required=True, metavar="URL", help="the database to read")
    cp.add_argument("--to", dest="target", required=True, metavar="URL", help="the database to load")
    cp.add_argument("--replace", action="store_true",
                    help="empty a target that already holds data, in the same transaction, before loading")
    cp.set_defaults(func=needs_extra(run_copy, "sqlalchemy", "alembic"))


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
    if not report.steps and not report.distributed:
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


def _source_engine(url: str) -> Any:
    """An engine for a database to read: ``ValueError`` for a bad URL or a SQLite file that is not there."""
    engine = _open(url)
    missing = _missing_sqlite_file(engine)
    if missing:  # connecting would create it
        engine.dispose()
        raise ValueError(f"no database at {missing}")
    return engine


def _print_result(url: str, result: Any, origin: str) -> None:
    print(f"{url}: {result.total:,} rows in {len(result.rows)} tables loaded from {origin} (schema revision {result.revision})")
    for line in result.upgrade_lines:
        print(f"  {line}")
    if result.upgraded_to:
        print(f"{url}: now at schema revision {result.upgraded_to} (head)")
    for line in result.distributed:
        print(f"  citus: {line}")


def run_export(args: argparse.Namespace) -> int:
    from fleetscope.collector.commands import db_transfer

    try:
        engine = _source_engine(args.db)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        totals = db_transfer.export_database(engine, args.out, progress=db_transfer.Progress())
    except db_transfer.TransferError as exc:
        return _fail(EXIT_UNAVAILABLE, str(exc))
    finally:
        engine.dispose()
    print(f"{args.out}: {totals.get('rows', 0):,} rows in {totals.get('tables', 0)} tables "
          f"({args.out.stat().st_size / 2**20:,.1f} MiB)")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from fleetscope.collector.commands import db_transfer
    from fleetscope.collector.storage import migrations

    try:
        engine = _open(args.db)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    url = migrations.url_of(engine)
    try:
        result = db_transfer.import_file(engine, args.source, replace=args.replace, progress=db_transfer.Progress())
    except db_transfer.TransferError as exc:
        return _fail(EXIT_UNAVAILABLE, f"{exc}; {url} was not changed")
    finally:
        engine.dispose()
    _print_result(url, result, str(args.source))
    return 0


def run_copy(args: argparse.Namespace) -> int:
    from fleetscope.collector.commands import db_transfer
    from fleetscope.collector.storage import migrations

    try:
        source = _source_engine(args.source)
        target = _open(args.target)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    url = migrations.url_of(target)
    try:
        result = db_transfer.copy_database(source, target, replace=args.replace, progress=db_transfer.Progress())
    except db_transfer.TransferError as exc:
        return _fail(EXIT_UNAVAILABLE, f"{exc}; {url} was not changed")
    finally:
        source.dispose()
        target.dispose()
    _print_result(url, result, migrations.url_of(source))
    return 0
