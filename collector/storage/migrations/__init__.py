"""Schema migrations: Alembic revisions in ``versions/``, driven from code.

Alembic is configured here, with no alembic.ini: ``script_location`` is this folder, and the
environment script (``env.py``) runs the revisions on a connection this module opened. Who
calls what:

* ``fleetscope db upgrade`` and a starting collector call ``upgrade`` (the collector through
  ``engine.ensure_schema``, which first checks without a lock, so that a database at head
  costs a start one read);
* ``fleetscope db current`` and the readers (through ``engine.schema_problem_for_readers``)
  call ``read_state``, which never writes.

A database is in one of four states (``SchemaState``): empty (no fleetscope tables), made
before migrations (``schema_info`` version 1 and no ``alembic_version``: adopted as the
baseline ``0001`` by running it, which creates only the tables such a database lacks), at a
revision this code knows (upgraded to head), or at a revision it does not know: a newer
fleetscope upgraded it, and this code refuses it rather than write to tables it does not know.

An upgrade is one transaction, under a lock, with the state read again inside it:

* PostgreSQL: ``pg_advisory_xact_lock`` in the migration's transaction, so that of two
  collectors starting together one migrates and the other waits, then finds the database at
  head. DDL is transactional, so a failed step leaves the database as it was.
* SQLite: the writers' file lock (``write_lock``) and ``BEGIN IMMEDIATE``, which takes
  SQLite's write lock at once. Python's sqlite3 would run DDL outside any transaction, so the
  connection is switched to autocommit and the transaction is begun and ended explicitly:
  SQLite's DDL is transactional too, and a failed step rolls back the whole upgrade.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, func, inspect, select, text
from sqlalchemy.exc import DBAPIError

from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.storage.schema import schema_info
from fleetscope.collector.storage.write_lock import WriteLock

BASELINE = "0001"
# The schema_info version of a database made before migrations: the one this code adopts.
SCHEMA_INFO_BEFORE_MIGRATIONS = "1"
# Callers log or print each step themselves; Alembic's own INFO lines (plugins set up, dialect
# chosen) would only add noise to every collector start that upgrades. A level set elsewhere wins.
if logging.getLogger("alembic").level == logging.NOTSET:
    logging.getLogger("alembic").setLevel(logging.WARNING)

# Key of the PostgreSQL advisory lock held by an upgrade ("fleetdb" in ASCII): any constant
# works, as long as every fleetscope version uses the same one.
MIGRATION_LOCK_KEY = 0x666C6565746462


class SchemaUnknown(StoreUnavailable):
    """The database is at a revision this code does not know: a newer fleetscope upgraded it."""


class SchemaBehind(StoreUnavailable):
    """The database is at an older revision, and the caller may not upgrade it."""


def alembic_config() -> Any:
    """Alembic's configuration for these migrations, made in code (no alembic.ini)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parent))
    return cfg


@lru_cache(maxsize=1)
def _script() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def revisions() -> tuple[str, ...]:
    """Every revision this code knows, oldest first."""
    return tuple(reversed([r.revision for r in _script().walk_revisions()]))


def head() -> str:
    """The newest revision: the schema this code reads and writes."""
    return str(_script().get_current_head())


def describe(revision: str) -> str:
    """A revision's one-line description: the first line of its docstring."""
    return str(_script().get_revision(revision).doc).splitlines()[0]


@dataclass(frozen=True)
class SchemaState:
    """Where a database's schema stands relative to this code's revisions."""

    revision: str | None  # from alembic_version; None when the database has none
    schema_info_version: str | None  # schema_info's schema_version row; None without one
    head: str

    @property
    def made_before_migrations(self) -> bool:
        return self.revision is None and self.schema_info_version is not None

    @property
    def empty(self) -> bool:
        return self.revision is None and self.schema_info_version is None

    @property
    def known(self) -> bool:
        """Whether this code can bring the database to head (or it is there)."""
        if self.made_before_migrations:
            return self.schema_info_version == SCHEMA_INFO_BEFORE_MIGRATIONS
        return self.revision is None or self.revision in revisions()

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def effective_revision(self) -> str | None:
        """The revision the database's tables are at: a database made before migrations is the baseline's."""
        return BASELINE if self.made_before_migrations and self.known else self.revision

    def describe(self) -> str:
        """The state in a few words, to follow "database URL: "."""
        if self.empty:
            return f"no fleetscope schema yet (this fleetscope's head is {self.head})"
        if self.made_before_migrations and not self.known:
            return f"schema_info version {self.schema_info_version} without alembic_version, unknown to this fleetscope"
        if self.made_before_migrations:
            return f"schema made before migrations (the baseline, {BASELINE}), behind head {self.head}"
        if not self.known:
            return f"schema revision {self.revision}, unknown to this fleetscope (head {self.head})"
        if self.at_head:
            return f"schema revision {self.revision} (head)"
        return f"schema revision {self.revision}, behind head {self.head}"

    def refusal(self, url: str) -> str:
        """Why this code refuses the database, on one line (for a state that is not ``known``)."""
        if self.made_before_migrations:
            return (
                f"database {url} has schema_info version {self.schema_info_version} and no alembic_version: "
                "not a fleetscope schema this version knows"
            )
        return (
            f"database {url} is at schema revision {self.revision}, which this fleetscope does not know "
            f"(its newest is {self.head}): a newer fleetscope upgraded it; upgrade fleetscope to use it"
        )


def read_state(conn: Connection) -> SchemaState:
    """The database's schema state; reads only."""
    tables = inspect(conn)
    revision = None
    if tables.has_table("alembic_version"):
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    info_version = None
    if tables.has_table("schema_info"):
        info_version = conn.execute(
            select(schema_info.c.value).where(schema_info.c.key == "schema_version")
        ).scalar()
    return SchemaState(revision=revision, schema_info_version=info_version, head=head())


def read_state_of(engine: Engine) -> SchemaState:
    """``read_state`` on a connection of its own; ``StoreUnavailable`` when the database cannot be reached."""
    with database_errors(engine, "cannot open"), engine.connect() as conn:
        return read_state(conn)


@dataclass(frozen=True)
class Step:
    """One revision applied."""

    from_revision: str | None
    to_revision: str | None
    description: str


@dataclass(frozen=True)
class MigrationReport:
    """What ``upgrade`` (or ``downgrade``) did: the state found, and the steps taken in order."""

    before: SchemaState
    steps: tuple[Step, ...]
    distributed: tuple[str, ...] = ()  # what Citus spread over its workers (``storage.citus``)

    @property
    def after(self) -> str | None:
        return self.steps[-1].to_revision if self.steps else self.before.effective_revision

    def lines(self) -> list[str]:
        """One line per step, as ``fleetscope db upgrade`` prints them."""
        out = []
        for i, s in enumerate(self.steps):
            if s.from_revision is None and i == 0 and self.before.made_before_migrations:
                source = "made before migrations"
            else:
                source = s.from_revision or "empty"
            out.append(f"{source} -> {s.to_revision or 'empty'}: {s.description}")
        out.extend(f"citus: {line}" for line in self.distributed)
        return out


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def one_line(exc: BaseException) -> str:
    """A driver's message on one line (psycopg's span several)."""
    orig = getattr(exc, "orig", None) or exc
    return " ".join(str(orig).split())


@contextmanager
def database_errors(engine: Engine, doing: str) -> Iterator[None]:
    """Turn driver errors into ``StoreUnavailable`` with one line that names the database."""
    try:
        yield
    except DBAPIError as exc:
        raise StoreUnavailable(f"{doing} database {url_of(engine)}: {one_line(exc)}") from exc


@contextmanager
def _migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the migration lock; committed on success."""
    if engine.dialect.name == "sqlite":
        with WriteLock(engine), engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")  # the driver begins nothing by itself
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
            conn.exec_driver_sql("COMMIT")
    else:
        with engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
            yield conn


def upgrade(engine: Engine, target: str = "head") -> MigrationReport:
    """Bring the database to ``target`` (head by default) in one locked transaction.

    Raises ``SchemaUnknown`` for a database at a revision this code does not know, and
    ``StoreUnavailable`` when the database cannot be reached or a step fails (then nothing
    changed). On a Citus coordinator the tables are then spread over its workers
    (``storage.citus``), in a second locked transaction: Citus distributes a table only in a
    transaction that has not changed it. Only at head: an older revision stays on the coordinator."""
    report = _migrate(engine, target, upgrading=True)
    if engine.dialect.name != "postgresql" or report.after != head():
        return report
    from fleetscope.collector.storage.citus import distribute

    with database_errors(engine, "distributing the tables over Citus failed, nothing was distributed in"), \
            _migration_transaction(engine) as conn:
        done = distribute(conn)
    return dataclasses.replace(report, distributed=tuple(done)) if done else report


def downgrade(engine: Engine, target: str) -> MigrationReport:
    """Take the database back to ``target`` (e.g. the baseline, for collectors from before
    migrations), in one locked transaction. Not below the baseline. On a Citus coordinator the
    tables are first brought back to it (``storage.citus.undistribute``), in a locked transaction
    of their own: the older revisions' steps alter what a distributed table cannot change."""
    if engine.dialect.name == "postgresql":
        from fleetscope.collector.storage.citus import undistribute

        with database_errors(engine, "bringing the tables back from the Citus workers failed, nothing was changed in"), \
                _migration_transaction(engine) as conn:
            undistribute(conn)
    return _migrate(engine, target, upgrading=False)


def _migrate(engine: Engine, target: str, *, upgrading: bool) -> MigrationReport:
    from alembic import command

    steps: list[Step] = []

    def record(*, ctx: Any, step: Any, heads: Any, run_args: Any) -> None:
        source = step.source_revision_ids[0] if step.source_revision_ids else None
        dest = step.destination_revision_ids[0] if step.destination_revision_ids else None
        what = describe(step.up_revision_id)
        steps.append(Step(source, dest, what if step.is_upgrade else f"undone: {what}"))

    with database_errors(engine, "cannot open"), _migration_transaction(engine) as conn:
        before = read_state(conn)
        if not before.known:
            raise SchemaUnknown(before.refusal(url_of(engine)))
        if upgrading and before.at_head and target in ("head", before.head):
            return MigrationReport(before=before, steps=())
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        cfg.attributes["on_version_apply"] = [record]
        with database_errors(engine, "migration failed, nothing was changed in"):
            if upgrading:
                command.upgrade(cfg, target)
            else:
                command.downgrade(cfg, target)
    return MigrationReport(before=before, steps=tuple(steps))
