"""How a reader opens the database: read-only, without creating anything.

The CLI's query commands and the dashboard open the database here, so neither needs the
storage layer (whose ``make_engine`` also creates the schema, which only a collector should).
Connections are read-only: SQLite's get ``PRAGMA query_only``, PostgreSQL's
``default_transaction_read_only``, so no bug in a reader can write to the fleet's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.storage.engine import (
    has_schema,
    make_engine,
    normalise_url,
    schema_problem_for_readers,
)

__all__ = [
    "Engine",
    "Session",
    "has_schema",
    "hide_password",
    "missing_sqlite_file",
    "normalise_url",
    "open_database",
    "schema_problem",
    "session_scope",
]


def open_database(url: str) -> Engine:
    """An engine on an existing database whose connections can only read."""
    engine = make_engine(url, create=False)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _read_only(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA query_only = ON")
            cur.close()

    elif engine.dialect.name == "postgresql":

        @event.listens_for(engine, "connect")
        def _read_only_pg(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            cur.close()
            dbapi_conn.commit()

    return engine


def schema_problem(engine: Engine) -> str | None:
    """Why this code cannot read the database (a revision newer than it knows, or one older
    than it reads), as one line for the user; None when it can. Readers never migrate."""
    return schema_problem_for_readers(engine)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session for the query functions; a database that cannot be read raises ``StoreUnavailable``
    with the driver's reason as its message."""
    try:
        with Session(engine) as session:
            yield session
    except OperationalError as exc:
        raise StoreUnavailable(str(exc.orig)) from exc


def missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite URL's file when it does not exist (opening it would create it)."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return None if Path(parsed.database).exists() else parsed.database


def hide_password(url: str) -> str:
    """The URL as it may be shown to a person: the password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: show it as given
        return url
