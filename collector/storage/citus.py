"""Citus: the same schema spread over several PostgreSQL servers by device.

A database whose coordinator has the ``citus`` extension is distributed after each upgrade
(``distribute``, idempotent; ``migrations.upgrade`` calls it):

* **By device, co-located** (``DISTRIBUTED``): every table whose rows belong to one device is
  distributed by ``device_id`` into the same shards, so a device's samples, chunks, rollups,
  histograms, logs, incidents, progress marks and its batches' claims sit on one worker. A batch
  is stored in one transaction on one worker (its claim and its rows), so exactly once stays a
  local transaction, and a device's chart is a query routed to one worker.
* **Reference tables** (``REFERENCE``): the small shared tables (devices, leases, alerts and
  their notifications, silences, credentials) are copied to every node, so joins with them stay
  local on every worker. Writing one is a two-phase commit on every node, one at a time, and
  fails while any node is down: so the batches' transactions leave ``devices`` alone (the
  liveness columns are written a second later, ``deferred_liveness``), the writer commits each
  worker's batches apart (``citus_placement``), and an agent that registers again writes no
  reference row when nothing about its device changed.
* **Keys.** Citus needs every unique key of a distributed table to hold ``device_id``: the
  incidents' key becomes (device, id) and a claim's (device, agent, boot, seq). Both were
  unique before without the device, and the device is determined by the rest (an incident id is
  unique; an agent id belongs to one device), so nothing stored before collides.
* **No foreign keys to ``devices``** (``DROPPED_FOREIGN_KEYS``: the incidents' and the
  streams'): Citus writes a transaction that touches a reference table with a foreign key over
  one connection per node, and refuses one that wrote several devices' shards in parallel before
  updating their device rows (every batch group does). Devices are never deleted, and rows are
  only written for a device that has a row, so the keys guarded nothing that can happen.
* **Only at head**: ``distribute`` knows the head schema (the claims' device is revision 0010);
  ``migrations.upgrade`` to an older revision leaves the tables on the coordinator, and
  ``migrations.downgrade`` first brings them back there (``undistribute``: the keys and
  foreign keys as the plain schema has them), since the older revisions' steps alter columns a
  distributed table cannot lose (its ``device_id``).
* Day partitions (``storage.partitions``) stay as they are: a partition created on a distributed
  table is distributed with it.

Plain PostgreSQL and SQLite are not touched: ``distribute`` does nothing where the extension is
not installed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, text

log = logging.getLogger(__name__)

# The table every distributed table is co-located with (its shard count is the cluster's default).
ANCHOR = "gpu_samples"
DISTRIBUTED = (
    ANCHOR, "host_samples", "gpu_chunks", "host_chunks", "latency_histograms", "metric_points", "log_events",
    "gpu_rollups", "host_rollups", "latency_rollups", "rollup_progress", "gpu_state", "inventory_records",
    "detector_progress", "incidents", "incident_gpu_samples", "incident_host_samples", "ingested_batches",
    "gpu_latest", "host_latest",
)
REFERENCE = (
    "devices", "streams", "leases", "alerts", "notifications", "notification_attempts", "silences",
    "enrolment_tokens", "device_credentials", "device_revocations", "schema_info",
)
LOCAL = ("alembic_version",)  # the coordinator's own bookkeeping

# Unique keys that must hold the device on Citus: (table, constraint, columns on Citus, columns elsewhere).
DEVICE_KEYS = (
    ("incidents", "incidents_pkey", ("device_id", "id"), ("id",)),
    ("ingested_batches", "ingested_batches_pkey", ("device_id", "agent_id", "boot_id", "seq"), ("agent_id", "boot_id", "seq")),
)
# Foreign keys to ``devices`` that Citus cannot keep (see the module's note): (table, constraint).
DROPPED_FOREIGN_KEYS = (("incidents", "incidents_device_id_fkey"), ("streams", "streams_device_id_fkey"))


@dataclass(frozen=True)
class CitusState:
    """What a database says about Citus: installed, how many workers, which tables it spreads."""

    installed: bool
    workers: int = 0
    distributed: frozenset[str] = frozenset()
    reference: frozenset[str] = frozenset()


def citus_state(conn: Connection) -> CitusState:
    if conn.dialect.name != "postgresql":
        return CitusState(installed=False)
    if conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first() is None:
        return CitusState(installed=False)
    workers = conn.execute(text("SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0")).scalar()
    rows = conn.execute(text(
        "SELECT p.logicalrelid::regclass::text, p.partmethod FROM pg_dist_partition p"
        " JOIN pg_class c ON c.oid = p.logicalrelid WHERE NOT c.relispartition"  # a day partition goes with its table
    )).all()
    distributed = frozenset(name for name, method in rows if method == "h")
    reference = frozenset(name for name, method in rows if method == "n")
    return CitusState(installed=True, workers=int(workers or 0), distributed=distributed, reference=reference)


def is_citus(conn: Connection) -> bool:
    """Whether ``conn``'s database is a Citus coordinator; asked once per pooled connection (the
    answer is kept in its ``info``), for the few reads whose SQL differs there."""
    if conn.dialect.name != "postgresql":
        return False
    info = conn.connection.info
    if "fleetscope_citus" not in info:
        info["fleetscope_citus"] = conn.execute(
            text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first() is not None
    return bool(info["fleetscope_citus"])


def distribute(conn: Connection) -> list[str]:
    """Spread the schema over the Citus cluster, in the caller's transaction; what it did, a line
    a table (empty when all was done before, or when the database is not Citus)."""
    state = citus_state(conn)
    if not state.installed:
        return []
    done: list[str] = []
    existing = set(conn.execute(text(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    )).scalars())
    # The foreign keys to devices go (see the module's note), also where an earlier fleetscope
    # distributed the tables and kept one (the streams').
    for table, constraint in DROPPED_FOREIGN_KEYS:
        if conn.execute(text("SELECT 1 FROM pg_constraint WHERE conname = :c AND conrelid = to_regclass(:t)"),
                        {"c": constraint, "t": table}).first() is not None:
            conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{constraint}"'))
            done.append(f"{table}: foreign key {constraint} dropped")
    for table in REFERENCE:
        if table in existing and table not in state.reference:
            conn.execute(text("SELECT create_reference_table(:t)"), {"t": table})
            done.append(f"{table}: reference table (copied to every node)")
    todo = [t for t in DISTRIBUTED if t in existing and t not in state.distributed]
    if todo:
        _prepare_device_keys(conn, todo)
    for table in todo:  # the anchor first (DISTRIBUTED's order), the others in its shards
        colocate = "none" if table == ANCHOR else ANCHOR
        conn.execute(text("SELECT create_distributed_table(:t, 'device_id', colocate_with => :c)"),
                     {"t": table, "c": colocate})
        done.append(f"{table}: distributed by device_id")
    return done


def _prepare_device_keys(conn: Connection, tables: list[str]) -> None:
    """Give the unique keys the device (see the module's note), on tables not distributed yet."""
    if "ingested_batches" in tables:
        # Claims made before revision 0010 have no device: take it from the agent's device row. A
        # claim whose agent has no device row guarded nothing that could still arrive: dropped.
        conn.execute(text(
            "UPDATE ingested_batches b SET device_id = d.id FROM devices d"
            " WHERE b.device_id IS NULL AND d.agent_id = b.agent_id"
        ))
        conn.execute(text("DELETE FROM ingested_batches WHERE device_id IS NULL"))
        conn.execute(text("ALTER TABLE ingested_batches ALTER COLUMN device_id SET NOT NULL"))
    for table, constraint, columns, _plain in DEVICE_KEYS:
        if table not in tables:
            continue
        current = conn.execute(text(
            "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_constraint c"
            " CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)"
            " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum"
            " WHERE c.conname = :c AND c.conrelid = CAST(:t AS regclass)"
        ), {"c": constraint, "t": table}).scalar()
        if current is not None and tuple(current) == columns:
            continue
        conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT IF EXISTS "{constraint}"'))
        conn.execute(text(f'ALTER TABLE {table} ADD CONSTRAINT "{constraint}" PRIMARY KEY ({", ".join(columns)})'))


def undistribute(conn: Connection) -> list[str]:
    """Bring every table back to the coordinator, with the keys and foreign keys of the plain
    schema, in the caller's transaction (``migrations.downgrade`` does it first); what it did, a
    line a table (empty when the database is not Citus or nothing is distributed)."""
    state = citus_state(conn)
    if not state.installed:
        return []
    done: list[str] = []
    for table in [*DISTRIBUTED, *REFERENCE]:
        if table in state.distributed or table in state.reference:
            conn.execute(text("SELECT undistribute_table(:t)"), {"t": table})
            done.append(f"{table}: back on the coordinator")
    if not done:  # never distributed (a database below head): its keys are the plain schema's already
        return []
    existing = set(conn.execute(text(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    )).scalars())
    for table, constraint, _citus, columns in DEVICE_KEYS:
        if table in existing:
            conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT IF EXISTS "{constraint}"'))
            conn.execute(text(f'ALTER TABLE {table} ADD CONSTRAINT "{constraint}" PRIMARY KEY ({", ".join(columns)})'))
    if "ingested_batches" in existing:  # NULL again for a claim of before revision 0010, as in the plain schema
        conn.execute(text("ALTER TABLE ingested_batches ALTER COLUMN device_id DROP NOT NULL"))
    for table, constraint in DROPPED_FOREIGN_KEYS:
        if table in existing:
            conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT IF EXISTS "{constraint}"'))
            conn.execute(text(f'ALTER TABLE {table} ADD CONSTRAINT "{constraint}" FOREIGN KEY (device_id) REFERENCES devices (id)'))
    return done


__all__ = [
    "ANCHOR", "DEVICE_KEYS", "DISTRIBUTED", "DROPPED_FOREIGN_KEYS", "LOCAL", "REFERENCE", "CitusState", "citus_state", "distribute",
    "is_citus", "undistribute",
]
