"""The SQL the writer runs inside a group's transaction, on the fastest path each driver has.

Sample rows go in as multi-row ``INSERT ... VALUES`` statements through sqlite3's
``executemany`` and as binary ``COPY`` through psycopg 3: SQLAlchemy's generic insert reaches
well under half of either (see ``docs/benchmarks.md``). On PostgreSQL the sample tables are
partitioned by day (``storage.partitions``): COPY goes to the parent, which routes each row to its
day's partition (or the default one), in the same transaction as the batch's claim, so
exactly-once is unchanged and the writer never needs to know a partition. Everything here takes a DB-API cursor
of the writer's own connection and runs inside a transaction the writer opened. Incidents are
written by ``storage.incidents``, the one way every writer of incidents shares.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fleetscope.collector.storage.batch_chunks import (
    CHUNK_COLUMNS,
    GPU_LATEST_COLUMNS,
    HOST_CHUNK_COLUMNS,
    HOST_LATEST_COLUMNS,
)
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "host_samples": ("device_id", "ts_ns", *HOST_VALUE_COLUMNS, "cpu_cores", "top_processes"),
    "gpu_samples": ("device_id", "ts_ns", "gpu_index", *GPU_SAMPLE_COLUMNS),
    "gpu_state": ("device_id", "ts_ns", "gpu_index", *GPU_STATE_COLUMNS, "processes"),
    "latency_histograms": ("device_id", "start_ns", "end_ns", "name", "labels", "count", "sum_ns", "errors", "zero_count", "buckets", "scheme"),
    "metric_points": ("device_id", "ts_ns", "name", "value", "labels"),
    "inventory_records": ("device_id", "ts_ns", "kind", "name", "facts"),
    "log_events": ("device_id", "ts_ns", "source", "level", "message"),
    "host_chunks": HOST_CHUNK_COLUMNS,
    "gpu_chunks": CHUNK_COLUMNS,
}
# The newest reading per key (``storage.batch_chunks``): upserted, never older over newer.
LATEST_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "host_latest": (HOST_LATEST_COLUMNS, ("device_id",)),
    "gpu_latest": (GPU_LATEST_COLUMNS, ("device_id", "gpu_index")),
}
SQLITE_ROWS_PER_STATEMENT = 50
_SQLITE_MAX_PARAMS = 32_000  # SQLite's default limit is 32,766 bound parameters per statement
_PG_MAX_PARAMS = 30_000  # PostgreSQL's limit is 65,535 bound parameters per statement
_ON_CITUS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per driver connection


def on_citus(cur) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``cur``'s PostgreSQL database is a Citus coordinator (asked once per connection).
    There the writer's per-row statements become one statement per group: each statement costs
    Citus' coordinator a plan and a round trip to a worker (1-2 ms under load, against the
    worker's 40 µs). Plain PostgreSQL keeps the per-row statements (pipelined and prepared by
    psycopg's ``executemany``): one long statement, planned afresh every group, was not shown
    to be faster there (``benchmarks/bench_ingest.py compare``)."""
    conn = cur.connection
    found = _ON_CITUS.get(conn)
    if found is None:
        cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        found = _ON_CITUS[conn] = cur.fetchone() is not None
    return found


# PostgreSQL binary COPY needs each column's type.
_PG_TYPES = {
    "device_id": "int4",
    "ts_ns": "int8",
    "start_ns": "int8",
    "end_ns": "int8",
    "gpu_index": "int2",
    "count": "int8",
    "sum_ns": "int8",
    "errors": "int8",
    "zero_count": "int8",
    "scheme": "int2",
    "value": "float8",
    "rows": "int4",
    "codec": "int2",
    "data": "bytea",
}
_PG_TEXT = {"cpu_cores", "top_processes", "processes", "name", "labels", "buckets", "kind", "facts", "source", "level", "message"}


@dataclass(frozen=True)
class Claim:
    """A batch's key in ``ingested_batches``, and what its row records."""

    agent_id: str
    boot_id: str
    seq: int
    received_ns: int
    sample_rows: int
    device_id: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.agent_id, self.boot_id, self.seq)


def claim_batches(cur, claims: list[Claim], sqlite: bool) -> list[bool]:  # type: ignore[no-untyped-def]
    """Record each batch's key; False for a batch stored before (a replay), or claimed earlier
    in the same list (an agent that reconnected and resent a batch still queued here).

    SQLite runs one lookup and one insert for the whole group. Every statement step releases
    the GIL, and taking it back waits for the gRPC thread, so one statement per batch and one
    per device cost the writer about a tenth of its time under load. The lookup is enough
    there because the writer holds the database's only write lock. PostgreSQL may have several collectors
    claiming at once, so each key is claimed with ``ON CONFLICT DO NOTHING``, which waits
    for a concurrent claim of the same key to commit or roll back. On Citus (``on_citus``) the
    group's keys go in one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (each key once; a
    key is claimed when it comes back), with the same waits.
    """
    if not sqlite:
        if on_citus(cur):
            return _pg_claims(cur, claims)
        return [_pg_claim(cur, c) for c in claims]
    stored: set[tuple] = set()
    for part in _chunks(claims, _SQLITE_MAX_PARAMS // 3):
        lookup = ", ".join(["(?,?,?)"] * len(part))
        cur.execute(
            f"SELECT b.agent_id, b.boot_id, b.seq FROM (VALUES {lookup}) AS k CROSS JOIN ingested_batches AS b"
            " ON b.agent_id = k.column1 AND b.boot_id = k.column2 AND b.seq = k.column3",
            [v for c in part for v in c.key],
        )
        stored.update(cur.fetchall())
    fresh: list[Claim] = []
    claimed: list[bool] = []
    for c in claims:
        new = c.key not in stored
        if new:
            stored.add(c.key)
            fresh.append(c)
        claimed.append(new)
    for part in _chunks(fresh, _SQLITE_MAX_PARAMS // 6):
        rows = ", ".join(["(?,?,?,?,?,?)"] * len(part))
        cur.execute(
            f"INSERT INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows, device_id) VALUES {rows}",
            [v for c in part for v in (c.agent_id, c.boot_id, c.seq, c.received_ns, c.sample_rows, c.device_id)],
        )
    return claimed


def _pg_claim(cur, c: Claim) -> bool:  # type: ignore[no-untyped-def]
    cur.execute(
        "INSERT INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows, device_id) VALUES (%s,%s,%s,%s,%s,%s)"
        " ON CONFLICT DO NOTHING",
        (c.agent_id, c.boot_id, c.seq, c.received_ns, c.sample_rows, c.device_id),
    )
    return bool(cur.rowcount == 1)


def _pg_claims(cur, claims: list[Claim]) -> list[bool]:  # type: ignore[no-untyped-def]
    first: dict[tuple[str, str, int], int] = {}  # each key's first place in the list: only it may claim
    for i, c in enumerate(claims):
        first.setdefault(c.key, i)
    unique = [claims[i] for i in first.values()]
    claimed: set[tuple[str, str, int]] = set()
    for part in _chunks(unique, _PG_MAX_PARAMS // 6):
        cur.execute(
            "INSERT INTO ingested_batches (agent_id, boot_id, seq, received_ns, rows, device_id) VALUES "
            + ", ".join(["(%s,%s,%s,%s,%s,%s)"] * len(part))
            + " ON CONFLICT DO NOTHING RETURNING agent_id, boot_id, seq",
            [v for c in part for v in (c.agent_id, c.boot_id, c.seq, c.received_ns, c.sample_rows, c.device_id)],
        )
        claimed.update((a, b, int(q)) for a, b, q in cur.fetchall())
    return [first[c.key] == i and c.key in claimed for i, c in enumerate(claims)]


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def sqlite_insert(cur, table: str, flat: list) -> None:  # type: ignore[no-untyped-def]
    """Insert rows given as one flat row-major list, as multi-row ``VALUES`` statements of
    ``SQLITE_ROWS_PER_STATEMENT`` rows (one VM step per chunk instead of one per row, about 1.5x
    faster than plain ``executemany`` here) and one for the remainder, in order: rows keep the
    order their batches arrived in."""
    width = len(TABLE_COLUMNS[table])
    per = max(1, min(SQLITE_ROWS_PER_STATEMENT, _SQLITE_MAX_PARAMS // width))
    n = len(flat) // width
    full = n // per * per
    if full:
        step = per * width
        # A generator keeps one chunk alive at a time: a list of the group's ~2,000 chunk lists
        # set off young-generation GC runs that walked the whole parameter list each time.
        cur.executemany(_sqlite_insert_sql(table, per), (flat[i : i + step] for i in range(0, full * width, step)))
    if full < n:
        cur.execute(_sqlite_insert_sql(table, n - full), flat[full * width :])


@functools.lru_cache(maxsize=512)
def _sqlite_insert_sql(table: str, rows: int) -> str:
    cols = TABLE_COLUMNS[table]
    one = "(" + ", ".join("?" * len(cols)) + ")"
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES " + ", ".join([one] * rows)


def pg_copy(cur, table: str, rows: Iterable[tuple]) -> None:  # type: ignore[no-untyped-def]
    cols = TABLE_COLUMNS[table]
    types = [_PG_TYPES.get(c, "text" if c in _PG_TEXT else "float8") for c in cols]
    with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        write = copy.write_row
        for row in rows:
            write(row)


def upsert_latest(cur, table: str, rows: list[tuple], sqlite: bool) -> None:  # type: ignore[no-untyped-def]
    """Each row replaces its key's row only when it is newer (``ts_ns``): a replayed backlog
    never hides a newer reading. ``rows`` hold at most one row per key (the writer keeps each
    key's newest of a group), as PostgreSQL refuses to update one row twice in a statement.
    On Citus (``on_citus``) all the rows go in one multi-row statement (a statement a row cost
    the coordinator a plan and a round trip each: 9 a server device per group)."""
    if sqlite or not on_citus(cur):
        cur.executemany(_latest_sql(table, sqlite), rows)
        return
    width = len(LATEST_COLUMNS[table][0])
    for part in _chunks(rows, _PG_MAX_PARAMS // width):
        cur.execute(_latest_sql(table, sqlite, len(part)), [v for row in part for v in row])


@functools.lru_cache(maxsize=1024)
def _latest_sql(table: str, sqlite: bool, rows: int = 1) -> str:
    cols, key = LATEST_COLUMNS[table]
    mark = "?" if sqlite else "%s"
    rest = [c for c in cols if c not in key]
    one = f"({', '.join([mark] * len(cols))})"
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join([one] * rows)}"
        f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in rest)}"
        f" WHERE excluded.ts_ns > {table}.ts_ns"
    )


def update_devices(cur, updates: dict[int, dict], sqlite: bool) -> None:  # type: ignore[no-untyped-def]
    """Each device's registry row after a group: last seen, batch counts, skew, the agent's
    counters and its last rejection (the last three only when the group brought them), and the
    batches re-anchored after a step of the device's clock with the last step.

    SQLite and Citus (``on_citus``) update every device of the group in one ``UPDATE ... FROM
    (VALUES ...)``, for the same reasons ``claim_batches`` claims in one statement there (on
    Citus ``devices`` is a reference table: a statement a device was a plan and a write on
    every node each; there the devices are updated in id order). Plain PostgreSQL runs a
    statement a device."""
    if not sqlite:
        if on_citus(cur):
            _pg_update_devices(cur, updates)
        else:
            for device_id, upd in updates.items():
                _pg_update_device(cur, device_id, upd)
        return
    items = list(updates.items())
    # The re-anchoring columns only when a batch of the group was re-anchored (rare: a clock
    # step), so the common statement stays as short as it was.
    reanchored = any("reanchored" in upd for _, upd in items)
    width = 9 if reanchored else 7
    for part in _chunks(items, _SQLITE_MAX_PARAMS // width):
        rows = ", ".join(["(" + ",".join("?" * width) + ")"] * len(part))
        params = [v for device_id, upd in part for v in _device_values(device_id, upd, reanchored)]
        cur.execute(
            "UPDATE devices SET last_seen_ns = u.column2, batches_stored = batches_stored + u.column3,"
            " batches_rejected = batches_rejected + u.column4, clock_skew_ns = COALESCE(u.column5, clock_skew_ns),"
            " counters = COALESCE(u.column6, counters), last_rejection = COALESCE(u.column7, last_rejection)"
            + (", batches_reanchored = batches_reanchored + u.column8,"
               " last_clock_step_ns = COALESCE(u.column9, last_clock_step_ns)" if reanchored else "")
            + f" FROM (VALUES {rows}) AS u WHERE devices.id = u.column1",
            params,
        )


def _device_values(device_id: int, upd: dict, reanchored: bool) -> list[object]:
    """One device's row of the multi-row ``UPDATE devices ... FROM (VALUES ...)`` (SQLite, Citus)."""
    counters = upd.get("counters")
    values: list[object] = [device_id, upd["last_seen_ns"], upd["stored"], upd["rejected"], upd.get("clock_skew_ns"),
                            None if counters is None else json.dumps(counters), upd.get("last_rejection")]
    if reanchored:
        values += [upd.get("reanchored", 0), upd.get("clock_step_ns")]
    return values


def _pg_update_devices(cur, updates: dict[int, dict]) -> None:  # type: ignore[no-untyped-def]
    items = sorted(updates.items())
    reanchored = any("reanchored" in upd for _, upd in items)
    one = ("(%s::integer, %s::bigint, %s::bigint, %s::bigint, %s::bigint, %s::json, %s::text"
           + (", %s::bigint, %s::bigint)" if reanchored else ")"))
    width = one.count("%s")
    for part in _chunks(items, _PG_MAX_PARAMS // width):
        params = [v for device_id, upd in part for v in _device_values(device_id, upd, reanchored)]
        cur.execute(
            # GREATEST: on Citus these updates are merged and written a second later, by any
            # collector (``deferred_liveness``), so one may land after a newer one.
            "UPDATE devices SET last_seen_ns = GREATEST(devices.last_seen_ns, u.last_seen_ns), batches_stored = batches_stored + u.stored,"
            " batches_rejected = batches_rejected + u.rejected, clock_skew_ns = COALESCE(u.skew, devices.clock_skew_ns),"
            " counters = COALESCE(u.counters, devices.counters), last_rejection = COALESCE(u.rejection, devices.last_rejection)"
            + (", batches_reanchored = batches_reanchored + u.reanchored,"
               " last_clock_step_ns = COALESCE(u.step, devices.last_clock_step_ns)" if reanchored else "")
            + f" FROM (VALUES {', '.join([one] * len(part))})"
            + " AS u(id, last_seen_ns, stored, rejected, skew, counters, rejection"
            + (", reanchored, step)" if reanchored else ")")
            + " WHERE devices.id = u.id",
            params,
        )


# The advisory-lock class of a device's incident merge on Citus (``lock_devices``): "fs".
_DEVICE_LOCK_CLASS = 0x6673


def lock_devices(cur, device_ids: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Hold the coordinator's transaction-scoped advisory lock of each device (in id order, so
    two writers never wait on each other in a circle): on Citus, where the device rows are not
    written in the batch's transaction, what serialises two writers' incident merges."""
    cur.execute("SELECT pg_advisory_xact_lock(%s, d) FROM unnest(%s::integer[]) AS d ORDER BY d",
                (_DEVICE_LOCK_CLASS, device_ids))


def update_streams(cur, streams: dict[tuple[str, str], tuple[int, int]]) -> None:  # type: ignore[no-untyped-def]
    """Streams' clock skew and last seen, (agent, boot) -> (skew ns, last seen ns), in one
    statement per 30,000 parameters (PostgreSQL; on Citus from ``deferred_liveness``)."""
    items = sorted(streams.items())
    for part in _chunks(items, _PG_MAX_PARAMS // 4):
        cur.execute(
            "UPDATE streams SET clock_skew_ns = u.skew, last_seen_ns = GREATEST(streams.last_seen_ns, u.seen)"
            f" FROM (VALUES {', '.join(['(%s::text, %s::text, %s::bigint, %s::bigint)'] * len(part))})"
            " AS u(agent, boot, skew, seen) WHERE streams.agent_id = u.agent AND streams.boot_id = u.boot",
            [v for (agent, boot), (skew, seen) in part for v in (agent, boot, skew, seen)],
        )


def _pg_update_device(cur, device_id: int, upd: dict) -> None:  # type: ignore[no-untyped-def]
    sets = ["last_seen_ns = %s", "batches_stored = batches_stored + %s", "batches_rejected = batches_rejected + %s"]
    params: list[object] = [upd["last_seen_ns"], upd["stored"], upd["rejected"]]
    if "clock_skew_ns" in upd:
        sets.append("clock_skew_ns = %s")
        params.append(upd["clock_skew_ns"])
    if "counters" in upd:
        sets.append("counters = CAST(%s AS JSON)")
        params.append(json.dumps(upd["counters"]))
    if "last_rejection" in upd:
        sets.append("last_rejection = %s")
        params.append(upd["last_rejection"])
    if "reanchored" in upd:
        sets.append("batches_reanchored = batches_reanchored + %s")
        params.append(upd["reanchored"])
        sets.append("last_clock_step_ns = %s")
        params.append(upd["clock_step_ns"])
    params.append(device_id)
    cur.execute(f"UPDATE devices SET {', '.join(sets)} WHERE id = %s", params)
