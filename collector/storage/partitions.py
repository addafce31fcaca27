"""PostgreSQL: the time-series tables partitioned by time (declarative RANGE partitioning).

Why: retention then drops a day of samples as one ``DROP TABLE`` (no row-by-row delete, no
vacuum debt, no bloat), and a query for a time range reads only the partitions that overlap it
(partition pruning). SQLite has no partitioning: there the same tables stay plain, and every
function here is a no-op (retention deletes in small batches instead, see ``jobs.retention``).

Layout (revision 0007 converts existing tables; ``schema.py`` declares the same for
``create_all``): each table in ``PARTITIONED`` is a parent ``PARTITION BY RANGE (key)`` with

* one partition per day (``PARTITION_WIDTH_S``), named ``<table>_pYYYYMMDD`` after the UTC day it
  starts, bounds ``[day start, next day start)`` in nanoseconds, and
* a ``<table>_default`` partition that catches any row no day partition covers: a device whose
  clock is far in the future, a late row from long ago, a day nobody created yet. Ingest never
  fails for a missing partition, and the writer never creates one (no DDL on the hot path).

``ensure_partitions_ahead`` creates today's and the next ``days_ahead`` days' partitions (and
``days_behind`` past days: the collector passes the raw tier's length). It is
idempotent and safe with several collectors at once: a cheap catalog read first (nothing to do is
the common case), then, per missing partition, one transaction under a transaction-level advisory
lock. PostgreSQL refuses a new partition while the default partition holds rows of its range, so
that transaction moves those rows: it locks the parent (a short ``lock_timeout``, so a long
dashboard query delays the creation to the next pass instead of stalling ingest behind the
lock queue), deletes the range's rows from the default partition into a temporary table,
creates the partition and inserts them back through the parent, where they now land in the new
partition. Rows of days that are never created (the past) stay in the default partition;
retention deletes them there in batches.

Indexes are declared on the parent, so each partition gets them (PostgreSQL names a partition's
copy ``<partition>_<columns>_idx``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

log = logging.getLogger(__name__)

NS = 10**9
DAY_S = 86_400
PARTITION_WIDTH_S = DAY_S  # one partition per UTC day; the naming below assumes whole days

# Partitioned tables and their partition key. gpu_state (a row only when a GPU's slow-changing
# state changes) and inventory_records stay plain: they are small, and their newest row must
# survive retention whatever its age. The chunk tables (revision 0006) are partitioned by the
# start of their time range.
PARTITIONED: dict[str, str] = {
    "gpu_samples": "ts_ns",
    "host_samples": "ts_ns",
    "metric_points": "ts_ns",
    "latency_histograms": "start_ns",
    "log_events": "ts_ns",
    "gpu_chunks": "start_ns",
    "host_chunks": "start_ns",
}

# Key of the advisory lock that serialises partition creation across collectors ("fleetprt").
PARTITION_LOCK_KEY = 0x666C656574707274
# How long creating or dropping a partition waits for the parent's lock before giving up until
# the next pass: while it waits, PostgreSQL queues ingest's COPY behind it.
LOCK_TIMEOUT = "2s"

_PART_NAME = re.compile(r"^(?P<table>.+)_p(?P<day>\d{8})$")
_BOUNDS = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


def partition_name(table: str, start_ns: int) -> str:
    day = dt.datetime.fromtimestamp(start_ns // NS, tz=dt.timezone.utc)
    return f"{table}_p{day:%Y%m%d}"


def default_partition_name(table: str) -> str:
    return f"{table}_default"


def day_start_ns(ts_ns: int, width_s: int = PARTITION_WIDTH_S) -> int:
    width = width_s * NS
    return ts_ns // width * width


def is_partition_name(name: str) -> bool:
    """Whether a table name is one of our partitions (a day's, or a default)."""
    m = _PART_NAME.match(name)
    if m is not None and m.group("table") in PARTITIONED:
        return True
    return name.endswith("_default") and name[: -len("_default")] in PARTITIONED


def is_partitioned(conn: Connection, table: str) -> bool:
    """Whether ``table`` is a partitioned parent (always False on SQLite)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(:t)"), {"t": table}
    ).scalar()
    return kind == "p"


@dataclass(frozen=True)
class Partition:
    name: str
    start_ns: int | None  # None for the default partition
    end_ns: int | None  # exclusive

    @property
    def is_default(self) -> bool:
        return self.start_ns is None


def partitions_of(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table`` with their bounds, oldest first, the default last."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table},
    ).all()
    out = []
    for name, bound in rows:
        m = _BOUNDS.search(bound or "")
        if m is None:  # "DEFAULT"
            out.append(Partition(name, None, None))
        else:
            out.append(Partition(name, int(m.group(1)), int(m.group(2))))
    return sorted(out, key=lambda p: (p.start_ns is None, p.start_ns or 0))


def partitioned_tables(conn: Connection) -> list[str]:
    """The tables of ``PARTITIONED`` that are partitioned in this database (none on SQLite)."""
    return [t for t in PARTITIONED if is_partitioned(conn, t)]


def ensure_partitions_ahead(
    engine: Engine, now_ns: int, days_ahead: int = 2, *, days_behind: int = 0, tables: Iterable[str] | None = None
) -> list[str]:
    """Create the partitions of today (UTC, by ``now_ns``) and the next ``days_ahead`` days for
    every partitioned table; returns the names created (empty when they all existed, and on
    SQLite). A partition whose creation waited too long for its lock is left to the next call.

    ``days_behind``: also the past days (the collector passes the raw tier's length), so that an
    agent uploading a spooled backlog fills day partitions, which retention drops whole, rather
    than the default partition, which it must delete from row by row."""
    if engine.dialect.name != "postgresql":
        return []
    first = day_start_ns(now_ns)
    wanted = [first + d * PARTITION_WIDTH_S * NS for d in range(-days_behind, days_ahead + 1)]
    with engine.connect() as conn:
        todo = []
        for table in tables if tables is not None else partitioned_tables(conn):
            have = {p.start_ns for p in partitions_of(conn, table)}
            todo += [(table, start) for start in wanted if start not in have]
    created = []
    for table, start in todo:
        try:
            with engine.begin() as conn:
                if create_partition(conn, table, start):
                    created.append(partition_name(table, start))
        except Exception as exc:  # a lock timeout, mostly: the next pass tries again
            if "lock timeout" not in str(exc).lower():
                raise
            log.info("partition %s not created this time (its table was busy): %s", partition_name(table, start), exc)
    if created:
        log.info("partitions created: %s", ", ".join(created))
    return created


def create_partition(conn: Connection, table: str, start_ns: int, width_s: int = PARTITION_WIDTH_S) -> bool:
    """Create the partition of ``table`` for [start_ns, start_ns + width) in the caller's
    transaction, moving the default partition's rows of that range into it; False if it existed."""
    end_ns = start_ns + width_s * NS
    name = partition_name(table, start_ns)
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PARTITION_LOCK_KEY})
    if conn.execute(text("SELECT to_regclass(:n)"), {"n": name}).scalar() is not None:
        return False  # another collector created it while we waited for the lock
    key = PARTITIONED[table]
    default = default_partition_name(table)
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    # The parent first, then the default partition: the order every COPY into the parent takes
    # them in, so no deadlock with ingest.
    conn.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
    has_default = conn.execute(text("SELECT to_regclass(:n)"), {"n": default}).scalar() is not None
    stray = 0
    if has_default:
        stray = int(conn.execute(
            text(f"SELECT count(*) FROM {default} WHERE {key} >= :a AND {key} < :b"), {"a": start_ns, "b": end_ns}
        ).scalar_one())
    if stray:
        conn.execute(text(f"CREATE TEMPORARY TABLE _moving (LIKE {table}) ON COMMIT DROP"))
        conn.execute(
            text(
                f"WITH moved AS (DELETE FROM {default} WHERE {key} >= :a AND {key} < :b RETURNING *)"
                " INSERT INTO _moving SELECT * FROM moved"
            ),
            {"a": start_ns, "b": end_ns},
        )
    conn.execute(text(f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM ({start_ns}) TO ({end_ns})"))
    if stray:
        conn.execute(text(f"INSERT INTO {table} SELECT * FROM _moving"))
        conn.execute(text("DROP TABLE _moving"))
        log.info("partition %s: %d rows moved in from %s", name, stray, default)
    return True


def create_default_partition(conn: Connection, table: str) -> None:
    conn.execute(text(f"CREATE TABLE IF NOT EXISTS {default_partition_name(table)} PARTITION OF {table} DEFAULT"))


def drop_partitions_before(conn: Connection, table: str, ts_ns: int) -> int:
    """Drop the day partitions of ``table`` that end at or before ``ts_ns`` (every row in them is
    older); returns how many. Never the default partition, and never one that only begins
    before ``ts_ns``. Runs in the caller's transaction; 0 on SQLite or a table not partitioned."""
    if not is_partitioned(conn, table):
        return 0
    dropped = 0
    for p in partitions_of(conn, table):
        if p.is_default or p.end_ns is None or p.end_ns > ts_ns:
            continue
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        conn.execute(text(f"DROP TABLE {p.name}"))
        dropped += 1
    return dropped
