"""Opening the database: SQLite (a file, WAL mode) by default, PostgreSQL for a larger fleet.

``make_engine`` is the only place that knows dialect settings. SQLite runs in WAL mode with
``synchronous=FULL``: the collector acknowledges a batch only after its commit, and FULL makes
that commit survive a power cut, not just a killed process. Group commit (see ``writer``)
keeps the fsync cost to one per group of batches.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, select
from sqlalchemy.engine import make_url

from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.storage import rollup_schema  # noqa: F401  (its tables join the metadata)
from fleetscope.collector.storage.schema import SCHEMA_VERSION, metadata, schema_info

log = logging.getLogger(__name__)

# sqlite3 binds exact int, float, str and bytearray values directly but sends every other parameter, None
# included, through its adapter protocol: a registry lookup that misses, then attribute lookups
# whose AttributeError is formatted and thrown away. Sample rows are full of None (readings a
# device does not have), and that path cost about a quarter of the writer's CPU per row. A
# registered adapter is found by the first lookup; ``{}.get`` is a C callable that maps any
# value to None, which sqlite3 binds as NULL.
sqlite3.register_adapter(type(None), {}.get)


def normalise_url(url: str) -> str:
    """Accept a bare path as a SQLite file and ``postgresql://`` as psycopg 3."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str, *, create: bool = True) -> Engine:
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA busy_timeout=30000")
            # 64 MiB of page cache keeps the hot index pages (one insertion point per device) in memory.
            cur.execute("PRAGMA cache_size=-65536")
            cur.close()

    elif parsed.get_backend_name() == "postgresql":
        engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)
    else:
        raise ValueError(f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql+psycopg://")
    if create:
        create_schema(engine)
    return engine


def create_schema(engine: Engine) -> None:
    from sqlalchemy.exc import OperationalError

    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            row = conn.execute(select(schema_info.c.value).where(schema_info.c.key == "schema_version")).first()
            if row is None:
                conn.execute(schema_info.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"database schema version {row[0]} is newer than this collector's {SCHEMA_VERSION}: upgrade fleetscope"
                )
    except OperationalError as exc:
        raise StoreUnavailable(f"cannot open database {engine.url.render_as_string(hide_password=True)}: {exc.orig}") from exc


def has_schema(engine: Engine) -> bool:
    return inspect(engine).has_table("devices")
