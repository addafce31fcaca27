"""Moving a fleet's database: ``fleetscope db export``, ``db import`` and ``db copy``.

The usual move is a fleet that outgrew SQLite going to PostgreSQL; any direction works.

**The export file** is one gzip stream of newline-separated JSON records, written to
``FILE.partial`` and renamed when complete, so an interrupted export never leaves a file that
looks whole:

* a header: the format and its version, the source's schema revision, and per table its
  columns (which of them are binary or JSON) and its row count;
* per table, in dependency order (devices before incidents): records of up to ``CHUNK_ROWS``
  rows, then an end record with the table's row count;
* an end record with the totals.

Values are JSON values; a binary column's values are base64 text, a JSON column's are its
stored JSON text (so a NULL stays NULL and the document is byte for byte the same); floats
keep every bit (NaN included). gzip's CRC and the end records make a truncated or damaged file
an error, never a short import.

**Which tables**: every table of the collector's SQLAlchemy metadata (``storage.schema``,
``rollup_schema`` and whatever later modules add to it) that the source database has, with the
columns the source has: a new table or column travels without a change here. Tables outside the
metadata (Alembic's version table, PostgreSQL's partitions, whose rows are read through their
parent) are not copied as such.

**The export** reads one snapshot (a read transaction on SQLite's WAL, REPEATABLE READ on
PostgreSQL), so a collector may keep writing meanwhile; rows are streamed, memory stays
bounded by a chunk.

**The import** is one transaction, under the migrations' lock: the target is brought to the
export's revision (created in an empty database), refused if it already holds rows (unless
``replace``, which empties it in the same transaction), loaded table by table with their ids
(COPY on PostgreSQL, batched inserts on SQLite), its sequences moved past the largest id, and
upgraded to this fleetscope's head. Any failure (a damaged file, a database error) rolls all of
it back: the target is as it was.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import os
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    LargeBinary,
    Table,
    Text,
    cast,
    column,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy import table as table_clause
from sqlalchemy.exc import DBAPIError

from fleetscope.collector.storage import migrations
from fleetscope.collector.storage import rollup_schema as _rollup_schema  # noqa: F401  (its tables join the metadata)
from fleetscope.collector.storage.schema import metadata

FORMAT = "fleetscope-db-export"
FORMAT_VERSION = 1
CHUNK_ROWS = 5_000  # rows per record: bounds the memory of export and import alike
# Tables that say nothing about the fleet: a target holding rows only here counts as empty (a
# collector that started on it took a lease; the migrations wrote schema_info).
BOOKKEEPING_TABLES = frozenset({"leases", "schema_info"})


class TransferError(Exception):
    """An export, import or copy that cannot go on; the message is one line for the user."""


@dataclass(frozen=True)
class TableSpec:
    """One table as the export file describes it."""

    name: str
    columns: tuple[str, ...]
    binary: tuple[str, ...] = ()  # base64 in the file
    json: tuple[str, ...] = ()  # the stored JSON text in the file
    rows: int = 0

    def to_record(self) -> dict[str, Any]:
        return {"name": self.name, "columns": list(self.columns), "binary": list(self.binary), "json": list(self.json),
                "rows": self.rows}

    @staticmethod
    def from_record(r: dict[str, Any]) -> TableSpec:
        return TableSpec(name=str(r["name"]), columns=tuple(map(str, r["columns"])), binary=tuple(map(str, r["binary"])),
                         json=tuple(map(str, r["json"])), rows=int(r["rows"]))


@dataclass
class Result:
    """What an import or copy did, for the closing lines."""

    revision: str
    rows: dict[str, int] = field(default_factory=dict)
    upgraded_to: str | None = None  # the head, when the export was at an older revision
    upgrade_lines: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


# ------------------------------------------------------------------------------------ progress


class Progress:
    """Rows per table on stderr: a line when a table is done, and one every few seconds within a large one."""

    def __init__(self, out: IO[str] | None = None, every_s: float = 5.0) -> None:
        self.out = out if out is not None else sys.stderr
        self.every_s = every_s
        self._table = ""
        self._expected = 0
        self._t0 = self._next = 0.0

    def start(self, table: str, expected: int) -> None:
        self._table, self._expected = table, expected
        self._t0 = time.monotonic()
        self._next = self._t0 + self.every_s

    def rows(self, done: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            share = f" of {self._expected:,} ({done / self._expected:.0%})" if self._expected else ""
            print(f"  {self._table}: {done:,}{share} rows, {done / (now - self._t0):,.0f} rows/s", file=self.out, flush=True)

    def done(self, done: int) -> None:
        elapsed = time.monotonic() - self._t0
        rate = f", {done / elapsed:,.0f} rows/s" if done and elapsed > 0.5 else ""
        print(f"  {self._table}: {done:,} row{'' if done == 1 else 's'}{rate}", file=self.out, flush=True)


# ------------------------------------------------------------------------------------ reading


def tables_in_order() -> list[Table]:
    """The metadata's tables, each after the tables its foreign keys point to."""
    return list(metadata.sorted_tables)


def _spec_for(table: Table, present: set[str]) -> TableSpec:
    cols = [c for c in table.columns if c.name in present]
    return TableSpec(
        name=table.name,
        columns=tuple(c.name for c in cols),
        binary=tuple(c.name for c in cols if isinstance(c.type, LargeBinary)),
        json=tuple(c.name for c in cols if isinstance(c.type, JSON)),
    )


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection that sees one state of the database for all its reads."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # so that BEGIN is ours
            conn.exec_driver_sql("BEGIN")  # WAL: the first read fixes the snapshot for the rest
            try:
                yield conn
            finally:
                conn.exec_driver_sql("ROLLBACK")
        else:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                yield conn


def read_database(engine: Engine, progress: Progress | None = None) -> Iterator[dict[str, Any]]:
    """The records of an export of ``engine``'s database, header first, end record last.

    Raises ``TransferError`` for a database with no fleetscope schema, or one at a revision other
    than this code's head (the metadata describes the head's tables: an older database is
    upgraded first). An import by a later fleetscope loads the file at this revision and
    upgrades it after."""
    url = migrations.url_of(engine)
    with _snapshot(engine) as conn:
        state = migrations.read_state(conn)
        if state.empty:
            raise TransferError(f"database {url} has no fleetscope schema: nothing to export")
        if not state.known:
            raise TransferError(state.refusal(url))
        if not state.at_head:  # the file holds the tables of this code's revision, and nothing older
            raise TransferError(f"database {url}: {state.describe()}; run 'fleetscope db upgrade --db {url}' first, "
                                "then export it")
        revision = state.effective_revision
        names = set(inspect(conn).get_table_names())
        specs = []
        for t in tables_in_order():
            if t.name in names:
                present = {c["name"] for c in inspect(conn).get_columns(t.name)}
                spec = _spec_for(t, present)
                rows = int(conn.execute(select(func.count()).select_from(table_clause(t.name))).scalar_one())
                specs.append(TableSpec(spec.name, spec.columns, spec.binary, spec.json, rows))
        yield {"format": FORMAT, "version": FORMAT_VERSION, "revision": revision, "source_dialect": engine.dialect.name,
               "created_ns": time.time_ns(), "tables": [s.to_record() for s in specs]}
        total = 0
        for spec in specs:
            if progress:
                progress.start(spec.name, spec.rows)
            n = 0
            for chunk in _read_table(conn, spec):
                n += len(chunk)
                yield {"table": spec.name, "rows": chunk}
                if progress:
                    progress.rows(n)
            if progress:
                progress.done(n)
            yield {"table": spec.name, "end": n}
            total += n
        yield {"end": {"tables": len(specs), "rows": total}}


def _read_table(conn: Connection, spec: TableSpec) -> Iterator[list[list[Any]]]:
    # Columns untyped, so values come as the driver gives them (no JSON parsing, no bool
    # conversion); JSON read as its stored text, which is what both databases accept back.
    cols = [cast(column(c), Text).label(c) if c in spec.json else column(c) for c in spec.columns]
    binary = [i for i, c in enumerate(spec.columns) if c in spec.binary]
    result = conn.execution_options(stream_results=True, yield_per=CHUNK_ROWS).execute(
        select(*cols).select_from(table_clause(spec.name))
    )
    for part in result.partitions(CHUNK_ROWS):
        rows = [list(r) for r in part]
        for row in rows:
            for i in binary:
                if row[i] is not None:
                    row[i] = base64.b64encode(bytes(row[i])).decode("ascii")
        yield rows


# ------------------------------------------------------------------------------------ the file


def write_export(engine: Engine, out: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Write ``engine``'s database to ``out``; returns the end record's totals."""
    if out.exists():
        raise TransferError(f"{out} already exists: choose another --out or remove it")
    partial = out.with_name(out.name + ".partial")
    records = read_database(engine, progress)
    header = next(records)  # the database is reached (or refused) before any file is made
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        totals: dict[str, Any] = {}
        with gzip.open(partial, "wb", compresslevel=3) as f:
            for record in itertools.chain([header], records):
                f.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
                if "end" in record and "table" not in record:
                    totals = record["end"]
        os.replace(partial, out)
        return totals
    except OSError as exc:
        raise TransferError(f"cannot write {out}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def read_export(path: Path) -> Iterator[dict[str, Any]]:
    """The records of an export file, checked as they are read: ``TransferError`` for a file
    that is missing, not an export, damaged or cut short."""
    if not path.is_file():
        raise TransferError(f"no export file at {path}" if not path.exists() else f"{path} is not a file")
    where = "its header"
    try:
        with path.open("rb") as raw:
            if raw.read(2) != b"\x1f\x8b":  # gzip's magic number
                raise TransferError(f"{path} is not a fleetscope export (not a gzip file)")
        with gzip.open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    raise ValueError("the last record is cut short")
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"record {number} is not an object")
                if "table" in record:
                    where = f"table {record['table']}"
                yield record
    except TransferError:
        raise
    except (EOFError, zlib.error, OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        detail = "the file ends early" if isinstance(exc, EOFError) else str(exc)
        raise TransferError(f"export file {path} is damaged or truncated (in {where}: {detail})") from exc


# ------------------------------------------------------------------------------------ loading


@dataclass
class _Checked:
    """The records of an export, checked for order and counts while they are consumed."""

    records: Iterator[dict[str, Any]]
    origin: str
    header: dict[str, Any] = field(default_factory=dict)
    specs: list[TableSpec] = field(default_factory=list)

    def open(self) -> None:
        try:
            header = next(self.records)
        except StopIteration:
            raise TransferError(f"{self.origin} is empty: not a fleetscope export") from None
        if header.get("format") != FORMAT:
            raise TransferError(f"{self.origin} is not a fleetscope export")
        if header.get("version") != FORMAT_VERSION:
            raise TransferError(f"{self.origin} is export format version {header.get('version')}, this fleetscope reads "
                                f"version {FORMAT_VERSION}")
        revision = header.get("revision")
        if revision not in migrations.revisions():
            raise TransferError(f"{self.origin} was exported at schema revision {revision}, which this fleetscope does not "
                                f"know (its newest is {migrations.head()}): import it with the fleetscope that exported it")
        known = {t.name: t for t in tables_in_order()}
        self.header = header
        self.specs = [TableSpec.from_record(r) for r in header["tables"]]
        for spec in self.specs:
            if spec.name not in known:
                raise TransferError(f"{self.origin} has a table {spec.name!r} that this fleetscope does not know")

    def chunks(self, spec: TableSpec) -> Iterator[list[list[Any]]]:
        """The rows of ``spec``'s table, chunk by chunk, binary values decoded; checks its end record."""
        binary = [i for i, c in enumerate(spec.columns) if c in spec.binary]
        n = 0
        for record in self.records:
            if record.get("table") != spec.name:
                raise TransferError(f"{self.origin} is damaged: a record of {record.get('table') or 'the end'} inside table "
                                    f"{spec.name}")
            if "end" in record:
                if record["end"] != n or n != spec.rows:
                    raise TransferError(f"{self.origin} is damaged: table {spec.name} has {n:,} rows, its end record says "
                                        f"{record['end']:,} and the header {spec.rows:,}")
                return
            rows = record["rows"]
            width = len(spec.columns)
            for row in rows:
                if len(row) != width:
                    raise TransferError(f"{self.origin} is damaged: a row of {spec.name} has {len(row)} values, not {width}")
                for i in binary:
                    if row[i] is not None:
                        row[i] = base64.b64decode(row[i])
            n += len(rows)
            yield rows
        raise TransferError(f"{self.origin} is truncated: it ends inside table {spec.name}")

    def close(self, loaded: dict[str, int]) -> None:
        try:
            end = next(self.records)
        except StopIteration:
            raise TransferError(f"{self.origin} is truncated: its end record is missing") from None
        totals = end.get("end")
        if "table" in end or not isinstance(totals, dict) or totals.get("rows") != sum(loaded.values()):
            raise TransferError(f"{self.origin} is damaged: its end record does not match the {sum(loaded.values()):,} rows read")
        for extra in self.records:
            raise TransferError(f"{self.origin} is damaged: records after its end ({str(extra)[:60]})")


def import_records(engine: Engine, records: Iterable[dict[str, Any]], *, origin: str, replace: bool = False,
                   progress: Progress | None = None) -> Result:
    """Load an export's records into ``engine``'s database in one transaction (see the module's docstring)."""
    checked = _Checked(iter(records), origin)
    checked.open()
    revision = str(checked.header["revision"])
    url = migrations.url_of(engine)
    result = Result(revision=revision)
    try:
        with migrations._migration_transaction(engine) as conn:
            state = migrations.read_state(conn)
            if not state.known:
                raise TransferError(state.refusal(url))
            if not state.empty:
                holding = _tables_with_rows(conn)
                if holding and not replace:
                    devices = conn.execute(text('SELECT count(*) FROM "devices"')).scalar_one() if "devices" in holding else 0
                    raise TransferError(
                        f"database {url} already holds data ({devices:,} devices; rows in {', '.join(holding[:3])}"
                        f"{', ...' if len(holding) > 3 else ''}): import refused; import into an empty database, or add "
                        "--replace to empty this one first"
                    )
                if holding:
                    _empty_tables(conn)
            _migrate(conn, state.effective_revision, revision)
            present = set(inspect(conn).get_table_names())
            for spec in checked.specs:
                if spec.name not in present:
                    raise TransferError(f"database {url} has no table {spec.name} at revision {revision}")
                missing = set(spec.columns) - {c["name"] for c in inspect(conn).get_columns(spec.name)}
                if missing:
                    raise TransferError(f"database {url}: table {spec.name} lacks column(s) {', '.join(sorted(missing))} "
                                        f"at revision {revision}")
                if spec.name in BOOKKEEPING_TABLES:  # what the migrations just wrote (schema_info) gives way to the export's
                    conn.exec_driver_sql(f'DELETE FROM "{spec.name}"')
                result.rows[spec.name] = _load_table(conn, spec, checked.chunks(spec), progress)
            checked.close(result.rows)
            _reset_sequences(conn)
            if revision != migrations.head():
                result.upgrade_lines = _migrate(conn, revision, migrations.head())
                result.upgraded_to = migrations.head()
    except DBAPIError as exc:
        raise TransferError(f"import into {url} failed, nothing was changed: {migrations.one_line(exc)}") from exc
    except migrations.StoreUnavailable as exc:
        raise TransferError(str(exc)) from exc
    if engine.dialect.name == "postgresql":  # fresh statistics, so the first queries are planned on real sizes
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    return result


def _tables_with_rows(conn: Connection) -> list[str]:
    present = set(inspect(conn).get_table_names())
    out = []
    for t in tables_in_order():
        if t.name in present and t.name not in BOOKKEEPING_TABLES:
            if conn.execute(select(text("1")).select_from(table_clause(t.name)).limit(1)).first() is not None:
                out.append(t.name)
    return out


def _empty_tables(conn: Connection) -> None:
    present = set(inspect(conn).get_table_names())
    names = [t.name for t in reversed(tables_in_order()) if t.name in present and t.name != "schema_info"]
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("TRUNCATE " + ", ".join(f'"{n}"' for n in names))
    else:
        for n in names:
            conn.exec_driver_sql(f'DELETE FROM "{n}"')


def _migrate(conn: Connection, current: str | None, target: str) -> list[str]:
    """Move the schema on ``conn`` (inside its transaction) from ``current`` to ``target``; the steps' lines."""
    from alembic import command

    if current == target:
        return []
    lines: list[str] = []

    def record(*, ctx: Any, step: Any, heads: Any, run_args: Any) -> None:
        src = step.source_revision_ids[0] if step.source_revision_ids else "empty"
        dst = step.destination_revision_ids[0] if step.destination_revision_ids else "empty"
        lines.append(f"{src} -> {dst}: {migrations.describe(step.up_revision_id)}")

    cfg = migrations.alembic_config()
    cfg.attributes["connection"] = conn
    cfg.attributes["on_version_apply"] = [record]
    order = migrations.revisions()
    if current is None or order.index(target) > order.index(current):
        command.upgrade(cfg, target)
    else:  # an empty target at a newer revision: take it back to the export's
        command.downgrade(cfg, target)
    return lines


def _load_table(conn: Connection, spec: TableSpec, chunks: Iterator[list[list[Any]]], progress: Progress | None) -> int:
    if progress:
        progress.start(spec.name, spec.rows)
    names = ", ".join(f'"{c}"' for c in spec.columns)
    raw = conn.connection.driver_connection
    assert raw is not None
    n = 0
    if conn.dialect.name == "postgresql":
        with raw.cursor() as cur, cur.copy(f'COPY "{spec.name}" ({names}) FROM STDIN') as copy:
            for rows in chunks:
                for row in rows:
                    copy.write_row(row)
                n += len(rows)
                if progress:
                    progress.rows(n)
    else:
        sql = f'INSERT INTO "{spec.name}" ({names}) VALUES ({", ".join("?" * len(spec.columns))})'
        cur = raw.cursor()
        try:
            for rows in chunks:
                cur.executemany(sql, rows)
                n += len(rows)
                if progress:
                    progress.rows(n)
        finally:
            cur.close()
    if progress:
        progress.done(n)
    return n


def _reset_sequences(conn: Connection) -> None:
    """Move each id sequence past the largest id loaded, so the next row gets a new one.
    SQLite needs nothing: a rowid table's next id is its largest plus one."""
    if conn.dialect.name != "postgresql":
        return
    present = set(inspect(conn).get_table_names())
    for t in tables_in_order():
        col = t.autoincrement_column
        if col is None or t.name not in present:
            continue
        conn.execute(
            text(f'SELECT setval(pg_get_serial_sequence(:t, :c), COALESCE((SELECT MAX("{col.name}") FROM "{t.name}"), 0) + 1, '
                 "false)"),
            {"t": t.name, "c": col.name},
        )


# ------------------------------------------------------------------------------------ the verbs


def export_database(engine: Engine, out: Path, *, progress: Progress | None = None) -> dict[str, Any]:
    try:
        return write_export(engine, out, progress)
    except DBAPIError as exc:
        raise TransferError(f"cannot read database {migrations.url_of(engine)}: {migrations.one_line(exc)}") from exc
    except migrations.StoreUnavailable as exc:
        raise TransferError(str(exc)) from exc


def import_file(engine: Engine, path: Path, *, replace: bool = False, progress: Progress | None = None) -> Result:
    return import_records(engine, read_export(path), origin=f"export file {path}", replace=replace, progress=progress)


def copy_database(source: Engine, target: Engine, *, replace: bool = False, progress: Progress | None = None) -> Result:
    """Stream ``source`` into ``target`` with no file between (the records an export would write)."""

    def records() -> Iterator[dict[str, Any]]:
        try:
            yield from read_database(source, progress=None)
        except DBAPIError as exc:
            raise TransferError(f"cannot read database {migrations.url_of(source)}: {migrations.one_line(exc)}") from exc

    if migrations.url_of(source) == migrations.url_of(target):
        raise TransferError("--from and --to are the same database")
    return import_records(target, records(), origin=f"database {migrations.url_of(source)}", replace=replace,
                          progress=progress)
