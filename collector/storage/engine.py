"""Opening the database: SQLite (a file, WAL mode) by default, PostgreSQL for a larger fleet.

``make_engine`` is the only place that knows dialect settings. SQLite runs in WAL mode with
``synchronous=FULL``: the collector acknowledges a batch only after its commit, and FULL makes
that commit survive a power cut, not just a killed process. Group commit (see ``writer``)
keeps the fsync cost to one per group of batches.

The schema is the migrations' (``storage.migrations``). Whoever writes (a collector, an
import) calls ``ensure_schema``, directly or through ``make_engine(url)``: it creates the
schema in an empty database and upgrades an older one. Readers open with ``create=False``,
which touches nothing, and ask ``schema_problem_for_readers`` whether they can read it.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url

from fleetscope.collector.storage import (
    migrations,
    rollup_schema,  # noqa: F401  (its tables join the metadata)
)

log = logging.getLogger(__name__)

# The oldest schema revision the readers (query commands, dashboard) understand without an
# upgrade. Raise it when a migration changes what they read.
READABLE_SINCE = "0003"  # the incident lifecycle and the devices' clock-step columns

# sqlite3 binds exact int, float, str and bytearray values directly but sends every other parameter, None
# included, through its adapter protocol: a registry lookup that misses, then attribute lookups
# whose AttributeError is formatted and thrown away. Sample rows are full of None (readings a
# device does not have), and that path cost about a quarter of the writer's CPU per row. A
# registered adapter is found by the first lookup; ``{}.get`` is a C callable that maps any
# value to None, which sqlite3 binds as NULL.
sqlite3.register_adapter(type(None), {}.get)  # type: ignore[arg-type]  # typeshed cannot express "maps anything to None"


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
        try:
            ensure_schema(engine)
        except BaseException:
            engine.dispose()
            raise
    return engine


def ensure_schema(engine: Engine, *, upgrade: bool = True) -> migrations.MigrationReport | None:
    """Bring the database to this code's schema, for writing: create it in an empty database,
    upgrade one at an older revision (with ``upgrade=False``, raise ``SchemaBehind`` instead,
    empty databases included), and refuse one at a revision this code does not know
    (``SchemaUnknown``). Returns what was done, None when the database was at head already.

    The state is read once without a lock, so a database at head (every start but the first
    after an upgrade) costs one read; ``migrations.upgrade`` reads it again under its lock."""
    state = migrations.read_state_of(engine)
    url = migrations.url_of(engine)
    if state.at_head:
        return None
    if not state.known:
        raise migrations.SchemaUnknown(state.refusal(url))
    if not upgrade:
        raise migrations.SchemaBehind(
            f"database {url}: {state.describe()}; run 'fleetscope db upgrade --db {url}' first"
        )
    report = migrations.upgrade(engine)
    for line in report.lines():
        if report.before.empty:
            log.info("database %s: schema created: %s", url, line)
        else:  # existing data changed shape: never silently
            log.warning("database %s: schema upgraded: %s", url, line)
    return report


def schema_problem_for_readers(engine: Engine) -> str | None:
    """What keeps this code from reading the database, as one line for the user; None if
    nothing does. Readers understand every revision from ``READABLE_SINCE`` on without an
    upgrade (they never read what later revisions changed), and no revision they do not know."""
    state = migrations.read_state_of(engine)
    url = migrations.url_of(engine)
    if state.empty:
        return None  # nothing to read yet: ``has_schema`` says so
    if not state.known:
        return state.refusal(url)
    known = migrations.revisions()
    if known.index(state.effective_revision or known[0]) < known.index(READABLE_SINCE):
        return f"database {url}: {state.describe()}; run 'fleetscope db upgrade --db {url}' to read it"
    return None


def has_schema(engine: Engine) -> bool:
    return inspect(engine).has_table("devices")
