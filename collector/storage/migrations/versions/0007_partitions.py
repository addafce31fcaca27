"""partitions: PostgreSQL's time-series tables partitioned by day; incident sample keep tables

Revision ID: 0007
Revises: 0006

PostgreSQL only, the partitioning (``fleetscope.collector.storage.partitions``): each table of
``PARTITIONED`` that exists becomes a parent ``PARTITION BY RANGE`` of its time key, with a
partition for every UTC day that holds rows and a default partition, and the rows move into it.
Per table: the old table and its indexes are renamed aside, the parent is made ``LIKE`` it (same
columns, order, defaults, NOT NULLs), its indexes are created on the parent under their old
names (each partition gets its own copy), the rows are copied and the old table dropped. One
transaction, so a failure leaves the tables as they were. It reads and writes every row once:
on a large database, run it (``fleetscope db upgrade``) in a quiet hour.

Both dialects: ``incident_host_samples`` and ``incident_gpu_samples``, where retention keeps
the samples around incidents (columns written out here, frozen, as in the earlier revisions).

Downgrade turns each parent back into a plain table with the same rows and indexes, and drops
the keep tables (their rows are copies of samples that retention has since deleted: gone).
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, Float, Index, Integer, SmallInteger, Text, inspect, text

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

DAY_NS = 86_400 * 10**9
# Frozen copy of ``partitions.PARTITIONED`` as of this revision.
_PARTITIONED = {
    "gpu_samples": "ts_ns",
    "host_samples": "ts_ns",
    "metric_points": "ts_ns",
    "latency_histograms": "start_ns",
    "log_events": "ts_ns",
    "gpu_chunks": "start_ns",
    "host_chunks": "start_ns",
}
_HOST = (
    "cpu_percent", "load1", "load5", "load15", "mem_total_bytes", "mem_used_bytes", "mem_available_bytes",
    "swap_total_bytes", "swap_used_bytes", "disk_total_bytes", "disk_used_bytes", "disk_read_bytes",
    "disk_write_bytes", "net_rx_bytes", "net_tx_bytes",
)
_GPU = (
    "util_gpu_percent", "util_memory_percent", "util_encoder_percent", "util_decoder_percent", "memory_used_bytes",
    "temp_c", "memory_temp_c", "power_w", "energy_j", "sm_clock_mhz", "memory_clock_mhz", "graphics_clock_mhz",
    "pstate", "fan_percent", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "throttle_reasons",
)


def _day_name(table: str, start_ns: int) -> str:
    import datetime as dt

    day = dt.datetime.fromtimestamp(start_ns // 10**9, tz=dt.timezone.utc)
    return f"{table}_p{day:%Y%m%d}"


def upgrade() -> None:
    op.create_table(
        "incident_host_samples",
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        *[Column(n, Float) for n in _HOST],
        Column("cpu_cores", Text),
        Column("top_processes", Text),
        Index("incident_host_samples_device_ts", "device_id", "ts_ns"),
    )
    op.create_table(
        "incident_gpu_samples",
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("gpu_index", SmallInteger, nullable=False),
        *[Column(n, Float) for n in _GPU],
        Index("incident_gpu_samples_device_ts", "device_id", "ts_ns"),
    )
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    existing = set(inspect(bind).get_table_names())
    for table, key in _PARTITIONED.items():
        if table in existing:
            _partition(bind, table, key)


def _partition(bind, table: str, key: str) -> None:  # type: ignore[no-untyped-def]
    indexes = inspect(bind).get_indexes(table)
    old = f"{table}_unpartitioned"
    bind.execute(text(f"ALTER TABLE {table} RENAME TO {old}"))
    for ix in indexes:
        bind.execute(text(f'ALTER INDEX "{ix["name"]}" RENAME TO "{ix["name"]}_unpartitioned"'))
    bind.execute(text(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE ({key})"))
    for ix in indexes:
        cols = ", ".join(ix["column_names"])
        bind.execute(text(f'CREATE INDEX "{ix["name"]}" ON {table} ({cols})'))
    bind.execute(text(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT"))
    days = bind.execute(text(f"SELECT DISTINCT {key} / {DAY_NS} FROM {old}")).scalars().all()
    for day in sorted(int(d) for d in days):
        start = day * DAY_NS
        bind.execute(text(
            f"CREATE TABLE {_day_name(table, start)} PARTITION OF {table} FOR VALUES FROM ({start}) TO ({start + DAY_NS})"
        ))
    bind.execute(text(f"INSERT INTO {table} SELECT * FROM {old}"))
    bind.execute(text(f"DROP TABLE {old}"))


def _unpartition(bind, table: str) -> None:  # type: ignore[no-untyped-def]
    indexes = inspect(bind).get_indexes(table)
    plain = f"{table}_plain"
    bind.execute(text(f"CREATE TABLE {plain} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    bind.execute(text(f"INSERT INTO {plain} SELECT * FROM {table}"))
    bind.execute(text(f"DROP TABLE {table} CASCADE"))  # its partitions with it
    bind.execute(text(f"ALTER TABLE {plain} RENAME TO {table}"))
    for ix in indexes:
        cols = ", ".join(ix["column_names"])
        bind.execute(text(f'CREATE INDEX "{ix["name"]}" ON {table} ({cols})'))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for table in _PARTITIONED:
            kind = bind.execute(text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"), {"t": table}).scalar()
            if kind == "p":
                _unpartition(bind, table)
    op.drop_table("incident_gpu_samples")
    op.drop_table("incident_host_samples")
