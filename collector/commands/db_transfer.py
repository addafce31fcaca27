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
an error, never a short import. A record's line is at most ``RECORD_BYTES`` (a chunk is split
past it), unless one row alone is longer.

**A hostile file** (a damaged disk, an edited or crafted file) is read as untrusted: a line is
read with a bound (``MAX_LINE_BYTES``) before it is parsed, so memory stays bounded whatever the
file unpacks to; JSON nested too deep, a record of the wrong shape, and each value against its
column in the target (its type, a text column's length, int64's range, base64 and JSON that
parse, nesting in a JSON value) are checked before anything is inserted; a database error on
insert (a duplicate id) is caught. Each is one ``TransferError`` naming the record (its line in
the file) and, where it can, the table, row and column; the transaction is rolled back.

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
import binascii
import gzip
import itertools
import json
import os
import re
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
    Boolean,
    Connection,
    Engine,
    Integer,
    LargeBinary,
    Numeric,
    String,
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
RECORD_BYTES = 4 << 20  # the export splits a chunk whose record would be longer
# The longest line an import reads; a longer one is refused before it is parsed (what it would
# take in memory is the line and its parsed values, a few times the line). Far above any
# record an export writes: RECORD_BYTES, or one row, whose text the ingest caps (65,536
# characters for a log line).
MAX_LINE_BYTES = 32 << 20
MAX_JSON_DEPTH = 64  # nesting of a value in a JSON column (the collector writes a few levels)
INT64 = (-(2**63), 2**63 - 1)
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
    def from_record(r: Any) -> TableSpec:
        """The header's entry for a table; ``ValueError`` saying what is wrong with it."""
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise ValueError("a table entry is not an object with a name")
        name = r["name"]
        lists = {}
        for key in ("columns", "binary", "json"):
            value = r.get(key)
            if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                raise ValueError(f"table {name!r}: {key!r} is not a list of names")
            lists[key] = tuple(value)
        rows = r.get("rows")
        if type(rows) is not int or rows < 0:
            raise ValueError(f"table {name!r}: 'rows' is not a count")
        if len(set(lists["columns"])) != len(lists["columns"]) or not set(lists["binary"]) | set(lists["json"]) <= set(lists["columns"]):
            raise ValueError(f"table {name!r}: its columns repeat, or its binary or JSON columns are not among them")
        return TableSpec(name=name, columns=lists["columns"], binary=lists["binary"], json=lists["json"], rows=rows)


@dataclass
class Result:
    """What an import or copy did, for the closing lines."""

    revision: str
    rows: dict[str, int] = field(default_factory=dict)
    upgraded_to: str | None = None  # the head, when the export was at an older revision
    upgrade_lines: list[str] = field(default_factory=list)
    distributed: list[str] = field(default_factory=list)  # what Citus spread after the load (``storage.citus``)

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
                for line in _lines(record):
                    f.write(line)
                if "end" in record and "table" not in record:
                    totals = record["end"]
        os.replace(partial, out)
        return totals
    except OSError as exc:
        raise TransferError(f"cannot write {out}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def _lines(record: dict[str, Any]) -> Iterator[bytes]:
    """``record`` as its line, or a rows record longer than ``RECORD_BYTES`` as several, halving
    its rows until each fits (or holds one row): an import reads lines with a bound."""
    line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    rows = record.get("rows")
    if len(line) <= RECORD_BYTES or not isinstance(rows, list) or len(rows) < 2:
        yield line
        return
    half = len(rows) // 2
    yield from _lines({"table": record["table"], "rows": rows[:half]})
    yield from _lines({"table": record["table"], "rows": rows[half:]})


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
            number = 0
            while line := f.readline(MAX_LINE_BYTES + 1):  # never more than the bound, however long the line
                number += 1
                if len(line) > MAX_LINE_BYTES:
                    raise TransferError(f"export file {path} is damaged: record {number} is longer than "
                                        f"{MAX_LINE_BYTES >> 20} MiB (an export's records are at most {RECORD_BYTES >> 20} MiB)")
                if not line.endswith(b"\n"):
                    raise ValueError("the last record is cut short")
                try:
                    record = json.loads(line)
                except RecursionError:  # the JSON decoder's own bound: no stack is at risk
                    raise TransferError(f"export file {path} is damaged: record {number} is nested too deep") from None
                if not isinstance(record, dict):
                    raise ValueError(f"record {number} is not an object")
                if isinstance(record.get("table"), str):
                    where = f"table {record['table']}"
                yield record
    except TransferError:
        raise
    except (EOFError, zlib.error, OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        detail = "the file ends early" if isinstance(exc, EOFError) else str(exc)
        raise TransferError(f"export file {path} is damaged or truncated (in {where}: {detail})") from exc


# ------------------------------------------------------------------------------------ loading


class _Column:
    """What a column of the target accepts, from the database's own description of it."""

    def __init__(self, name: str, column_type: Any, nullable: bool, *, binary: bool, json_text: bool, dialect: str) -> None:
        self.name = name
        self.nullable = nullable
        self.postgresql = dialect == "postgresql"
        self.length: int | None = None
        self.allowed: set[type]
        if binary:
            self.kind, self.allowed, self.what = "binary", {str}, "base64 text"
        elif json_text:
            self.kind, self.allowed, self.what = "json", {str}, "JSON text"
        elif isinstance(column_type, Boolean):
            self.kind, self.allowed, self.what = "bool", {bool, int}, "true or false"
        elif isinstance(column_type, Integer):
            self.kind, self.allowed, self.what = "int", {int}, "integers"
        elif isinstance(column_type, Numeric):
            self.kind, self.allowed, self.what = "float", {int, float}, "numbers"
        elif isinstance(column_type, String):
            self.kind, self.allowed, self.what = "text", {str}, "text"
            self.length = column_type.length
        else:
            self.kind, self.allowed, self.what = "any", {str, int, float, bool}, "a value"
        if nullable:
            self.allowed = self.allowed | {type(None)}

    def check(self, values: list[Any]) -> tuple[int, str] | None:
        """The first of ``values`` (a column of one record) the column cannot take, as (index,
        reason); None when all can. Column-wide checks first (C loops), a value at a time only
        for base64 and JSON. Binary values are decoded in place."""
        types = set(map(type, values))
        if not types <= self.allowed:
            i, v = next((i, v) for i, v in enumerate(values) if type(v) not in self.allowed)
            return i, ("is null, and the column may not be" if v is None
                       else f"is {_json_kind(v)}, and the column holds {self.what}")
        present = [v for v in values if v is not None] if type(None) in types else values
        if not present:
            return None
        if self.kind in ("int", "bool"):
            lo, hi = (0, 1) if self.kind == "bool" else INT64
            if min(present) < lo or max(present) > hi:
                return next((i, f"{v} is out of range") for i, v in enumerate(values) if v is not None and not lo <= v <= hi)
        elif self.kind == "float" and int in types:
            for i, v in enumerate(values):
                if type(v) is int and not -(2**1023) < v < 2**1023:
                    return i, "is too large for a float"
        elif self.kind == "text":
            return self._check_text(values, present)
        elif self.kind == "binary":
            for i, v in enumerate(values):
                if v is not None:
                    try:
                        values[i] = base64.b64decode(v, validate=True)
                    except (binascii.Error, ValueError):
                        return i, "is not base64"
        elif self.kind == "json":
            for i, v in enumerate(values):
                if v is not None:
                    reason = _json_text_problem(v, allow_nan=not self.postgresql)
                    if reason:
                        return i, reason
        return None

    def _check_text(self, values: list[Any], present: list[str]) -> tuple[int, str] | None:
        if self.length is not None and max(map(len, present)) > self.length:
            return next((i, f"is {len(v):,} characters, and the column holds at most {self.length:,}")
                        for i, v in enumerate(values) if v is not None and len(v) > self.length)
        joined = "".join(present)
        if self.postgresql and "\x00" in joined:  # PostgreSQL's text cannot hold NUL (the ingest never stores one)
            return next((i, "holds a NUL character") for i, v in enumerate(values) if v is not None and "\x00" in v)
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800 in the JSON): no driver can send it
            return next((i, "is not valid Unicode (a lone surrogate)") for i, v in enumerate(values)
                        if v is not None and not _encodes(v))
        return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object",
            bytes: "bytes"}.get(type(value), type(value).__name__)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON PostgreSQL takes")


def _json_text_problem(text: str, *, allow_nan: bool) -> str | None:
    """Why ``text`` cannot be a JSON column's stored text, or None."""
    try:
        value = json.loads(text) if allow_nan else json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        return "is JSON nested too deep"
    except ValueError as exc:
        return f"is not JSON ({' '.join(str(exc).split())[:100]})"
    stack = [(value, 1)]
    while stack:  # the depth, without recursion
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth > MAX_JSON_DEPTH:
                return f"is JSON nested deeper than {MAX_JSON_DEPTH} levels"
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return None


@dataclass
class _Checked:
    """The records of an export, checked for shape, order and counts while they are consumed;
    ``number`` is the record last read (its line in a file: the header is record 1)."""

    records: Iterator[Any]
    origin: str
    header: dict[str, Any] = field(default_factory=dict)
    specs: list[TableSpec] = field(default_factory=list)
    number: int = 0

    def _next(self) -> Any:
        record = next(self.records)
        self.number += 1
        return record

    def damaged(self, reason: str) -> TransferError:
        return TransferError(f"{self.origin} is damaged: record {self.number}{reason}")

    def open(self) -> None:
        try:
            header = self._next()
        except StopIteration:
            raise TransferError(f"{self.origin} is empty: not a fleetscope export") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise TransferError(f"{self.origin} is not a fleetscope export")
        if header.get("version") != FORMAT_VERSION:
            raise TransferError(f"{self.origin} is export format version {str(header.get('version'))[:20]}, this fleetscope "
                                f"reads version {FORMAT_VERSION}")
        revision = header.get("revision")
        if not isinstance(revision, str) or revision not in migrations.revisions():
            raise TransferError(f"{self.origin} was exported at schema revision {str(revision)[:40]}, which this fleetscope "
                                f"does not know (its newest is {migrations.head()}): import it with the fleetscope that "
                                "exported it")
        known = {t.name: t for t in tables_in_order()}
        self.header = header
        tables = header.get("tables")
        if not isinstance(tables, list):
            raise self.damaged(" (the header): its 'tables' is not a list")
        try:
            self.specs = [TableSpec.from_record(r) for r in tables]
        except ValueError as exc:
            raise self.damaged(f" (the header): {exc}") from None
        for spec in self.specs:
            if spec.name not in known:
                raise TransferError(f"{self.origin} has a table {spec.name[:100]!r} that this fleetscope does not know")
        if len({s.name for s in self.specs}) != len(self.specs):
            raise self.damaged(" (the header): a table is listed twice")

    def chunks(self, spec: TableSpec, columns: list[_Column]) -> Iterator[tuple[int, list[list[Any]]]]:
        """The rows of ``spec``'s table, record by record as (record number, rows), each value
        checked against ``columns`` (the target's, in the file's order) and binary values decoded;
        checks its end record."""
        n = 0
        width = len(spec.columns)
        for record in iter(self._next, None):
            table = record.get("table") if isinstance(record, dict) else None
            if table != spec.name:
                what = f"table {table}" if isinstance(table, str) else "the end" if isinstance(record, dict) else "no table"
                raise self.damaged(f": a record of {what[:100]} inside table {spec.name}")
            if set(record) == {"table", "end"}:
                end = record["end"]
                if type(end) is not int or end != n or n != spec.rows:
                    says = f"{end:,}" if type(end) is int else f"{_json_kind(end)}, not a count"
                    raise TransferError(f"{self.origin} is damaged: table {spec.name} has {n:,} rows, its end record "
                                        f"(record {self.number}) says {says} and the header {spec.rows:,}")
                return
            rows = record.get("rows")
            if set(record) != {"table", "rows"} or not isinstance(rows, list):
                raise self.damaged(f" (table {spec.name}) has no list of rows and is not the table's end record")
            for i, row in enumerate(rows):
                if not isinstance(row, list) or len(row) != width:
                    got = f"{len(row)} values, not {width}" if isinstance(row, list) else f"{_json_kind(row)}, not a list"
                    raise self.damaged(f" (table {spec.name}, its row {n + i + 1:,}) is {got}")
            for j, col in enumerate(columns):
                values = [row[j] for row in rows]
                problem = col.check(values)
                if problem is not None:
                    i, reason = problem
                    raise self.damaged(f" (table {spec.name}, its row {n + i + 1:,}), column {col.name}: {reason}")
                if col.kind == "binary":
                    for row, value in zip(rows, values):
                        row[j] = value
            n += len(rows)
            yield self.number, rows
        raise TransferError(f"{self.origin} is truncated: it ends inside table {spec.name}")

    def close(self, loaded: dict[str, int]) -> None:
        try:
            end = self._next()
        except StopIteration:
            raise TransferError(f"{self.origin} is truncated: its end record is missing") from None
        totals = end.get("end") if isinstance(end, dict) else None
        if (not isinstance(end, dict) or set(end) != {"end"} or not isinstance(totals, dict)
                or totals.get("rows") != sum(loaded.values())):
            raise self.damaged(f": the end record does not match the {sum(loaded.values()):,} rows read")
        for extra in iter(self._next, None):
            keys = ", ".join(sorted(map(str, extra))[:4])[:60] if isinstance(extra, dict) else _json_kind(extra)
            raise self.damaged(f" comes after the end record ({keys})")


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
                described = {c["name"]: c for c in inspect(conn).get_columns(spec.name)}
                missing = set(spec.columns) - set(described)
                if missing:
                    raise TransferError(f"database {url}: table {spec.name} lacks column(s) "
                                        f"{', '.join(sorted(missing))[:200]} at revision {revision}")
                columns = [_Column(c, described[c]["type"], bool(described[c]["nullable"]), binary=c in spec.binary,
                                   json_text=c in spec.json, dialect=conn.dialect.name) for c in spec.columns]
                if spec.name in BOOKKEEPING_TABLES:  # what the migrations just wrote (schema_info) gives way to the export's
                    conn.exec_driver_sql(f'DELETE FROM "{spec.name}"')
                result.rows[spec.name] = _load_table(conn, spec, checked.chunks(spec, columns), progress, origin)
            checked.close(result.rows)
            _reset_sequences(conn)
            if revision != migrations.head():
                result.upgrade_lines = _migrate(conn, revision, migrations.head())
                result.upgraded_to = migrations.head()
    except DBAPIError as exc:
        raise TransferError(f"import into {url} failed, nothing was changed: {migrations.one_line(exc)}") from exc
    except migrations.StoreUnavailable as exc:
        raise TransferError(str(exc)) from exc
    if engine.dialect.name == "postgresql":
        # A Citus coordinator spreads what was loaded, as ``db upgrade`` does, in a transaction of
        # its own (Citus distributes a table only in one that has not changed it). Should it fail,
        # the rows are loaded and the next upgrade (a collector's start) spreads them.
        from fleetscope.collector.storage.citus import distribute

        try:
            with migrations._migration_transaction(engine) as conn:
                result.distributed = distribute(conn)
        except DBAPIError as exc:
            raise TransferError(f"{url}: the rows are loaded but spreading them over the Citus workers failed "
                                f"(run 'fleetscope db upgrade --db {url}'): {migrations.one_line(exc)}") from exc
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


def _load_table(conn: Connection, spec: TableSpec, chunks: Iterator[tuple[int, list[list[Any]]]],
                progress: Progress | None, origin: str) -> int:
    if progress:
        progress.start(spec.name, spec.rows)
    names = ", ".join(f'"{c}"' for c in spec.columns)
    raw = conn.connection.driver_connection
    assert raw is not None
    n = 0
    starts: list[tuple[int, int]] = []  # (the table's row each record starts at, the record's number)
    # The driver's own errors: the connection is the driver's, not SQLAlchemy's, so nothing wraps them.
    driver_errors = (conn.dialect.dbapi.Error,) if conn.dialect.dbapi is not None else ()
    try:
        if conn.dialect.name == "postgresql":
            with raw.cursor() as cur, cur.copy(f'COPY "{spec.name}" ({names}) FROM STDIN') as copy:
                for number, rows in chunks:
                    starts.append((n + 1, number))
                    for row in rows:
                        copy.write_row(row)
                    n += len(rows)
                    if progress:
                        progress.rows(n)
        else:
            sql = f'INSERT INTO "{spec.name}" ({names}) VALUES ({", ".join("?" * len(spec.columns))})'
            cur = raw.cursor()
            try:
                for number, rows in chunks:
                    starts.append((n + 1, number))
                    cur.executemany(sql, rows)
                    n += len(rows)
                    if progress:
                        progress.rows(n)
            finally:
                cur.close()
    except (*driver_errors, OverflowError, UnicodeError) as exc:  # a duplicate id, a value the checks let through
        raise TransferError(f"{origin}: record {_record_of(exc, starts)} (table {spec.name}) cannot be stored: "
                            f"{migrations.one_line(exc)[:300]}") from exc
    if progress:
        progress.done(n)
    return n


def _record_of(exc: BaseException, starts: list[tuple[int, int]]) -> int:
    """The record a failed insert came from: the last one sent, or on PostgreSQL the one that
    holds the row its COPY names ("COPY devices, line 7")."""
    number = starts[-1][1] if starts else 0
    context = getattr(getattr(exc, "diag", None), "context", None) or ""
    m = re.search(r"\bline (\d+)", context)
    if m:
        row = int(m.group(1))
        number = next((record for first, record in reversed(starts) if first <= row), number)
    return number


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
