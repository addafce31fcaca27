"""baseline: the collector's tables as fleetscope 0.1 created them, before migrations

Revision ID: 0001
Revises: none

The tables are written out here, frozen, rather than taken from ``schema.py``: the baseline
must stay what databases made before migrations hold while the current schema moves on.

``create_all`` checks for each table first, so that running this revision over a database
made before migrations (``schema_info`` version 1, no ``alembic_version``) is what adopts it
as the baseline: its tables stay as they are, and the rollup tables, which collectors of that
time created only when their rollup job first ran, are created if they are missing.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    select,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _float_columns(*names: str) -> list[Column]:
    return [Column(name, Float) for name in names]


def baseline_metadata() -> MetaData:
    m = MetaData()
    Table(
        "devices",
        m,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("agent_id", String(64), nullable=False, unique=True),
        Column("name", String(200), nullable=False, index=True),
        Column("hostname", String(255), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("boot_id", String(64), nullable=False),
        Column("agent_version", String(64), nullable=False),
        Column("labels", JSON, nullable=False),
        Column("inventory", JSON, nullable=False),
        Column("capabilities", JSON, nullable=False),
        Column("first_seen_ns", BigInteger, nullable=False),
        Column("last_seen_ns", BigInteger, nullable=False),
        Column("clock_skew_ns", BigInteger, nullable=False),
        Column("counters", JSON, nullable=False),
        Column("batches_stored", BigInteger, nullable=False),
        Column("batches_rejected", BigInteger, nullable=False),
        Column("last_rejection", Text, nullable=False),
        Column("simulated", Boolean, nullable=False),
    )
    Table(
        "incidents",
        m,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        Column("device_id", Integer, ForeignKey("devices.id"), nullable=False, index=True),
        Column("ts_ns", BigInteger, nullable=False),
        Column("received_ns", BigInteger, nullable=False),
        Column("kind", String(64), nullable=False),
        Column("severity", String(16), nullable=False),
        Column("title", Text, nullable=False),
        Column("facts", JSON, nullable=False),
        Column("source", Text, nullable=False),
        Column("excerpt", Text, nullable=False),
        Column("context", JSON, nullable=False),
        Index("incidents_kind_ts", "kind", "ts_ns"),
        Index("incidents_ts", "ts_ns"),
    )
    Table(
        "ingested_batches",
        m,
        Column("agent_id", String(64), primary_key=True),
        Column("boot_id", String(64), primary_key=True),
        Column("seq", BigInteger, primary_key=True, autoincrement=False),
        Column("received_ns", BigInteger, nullable=False),
        Column("rows", Integer, nullable=False),
    )
    Table(
        "streams",
        m,
        Column("agent_id", String(64), primary_key=True),
        Column("boot_id", String(64), primary_key=True),
        Column("device_id", Integer, ForeignKey("devices.id"), nullable=False),
        Column("clock_skew_ns", BigInteger, nullable=False),
        Column("correction_ns", BigInteger, nullable=False),
        Column("first_seen_ns", BigInteger, nullable=False),
        Column("last_seen_ns", BigInteger, nullable=False),
    )
    Table(
        "host_samples",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        *_float_columns(
            "cpu_percent", "load1", "load5", "load15", "mem_total_bytes", "mem_used_bytes",
            "mem_available_bytes", "swap_total_bytes", "swap_used_bytes", "disk_total_bytes",
            "disk_used_bytes", "disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes",
        ),
        Column("cpu_cores", Text),
        Column("top_processes", Text),
        Index("host_samples_device_ts", "device_id", "ts_ns"),
    )
    Table(
        "gpu_samples",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("gpu_index", SmallInteger, nullable=False),
        *_float_columns(
            "util_gpu_percent", "util_memory_percent", "util_encoder_percent", "util_decoder_percent",
            "memory_used_bytes", "temp_c", "memory_temp_c", "power_w", "energy_j", "sm_clock_mhz",
            "memory_clock_mhz", "graphics_clock_mhz", "pstate", "fan_percent", "pcie_tx_bytes_per_s",
            "pcie_rx_bytes_per_s", "throttle_reasons",
        ),
        Index("gpu_samples_device_ts", "device_id", "ts_ns"),
    )
    Table(
        "gpu_state",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("gpu_index", SmallInteger, nullable=False),
        *_float_columns(
            "memory_total_bytes", "bar1_used_bytes", "bar1_total_bytes", "power_limit_w", "sm_clock_max_mhz",
            "memory_clock_max_mhz", "pcie_gen", "pcie_width", "ecc_volatile_corrected",
            "ecc_volatile_uncorrected", "ecc_aggregate_corrected", "ecc_aggregate_uncorrected",
            "retired_pages", "remapped_rows",
        ),
        Column("processes", Text),
        Index("gpu_state_device_ts", "device_id", "gpu_index", "ts_ns"),
    )
    Table(
        "latency_histograms",
        m,
        Column("device_id", Integer, nullable=False),
        Column("start_ns", BigInteger, nullable=False),
        Column("end_ns", BigInteger, nullable=False),
        Column("name", String(200), nullable=False),
        Column("labels", Text, nullable=False),
        Column("count", BigInteger, nullable=False),
        Column("sum_ns", BigInteger, nullable=False),
        Column("errors", BigInteger, nullable=False),
        Column("zero_count", BigInteger, nullable=False),
        Column("buckets", Text, nullable=False),
        Index("latency_device_name_ts", "device_id", "name", "start_ns"),
    )
    Table(
        "metric_points",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("name", String(200), nullable=False),
        Column("value", Float, nullable=False),
        Column("labels", Text, nullable=False),
        Index("metric_points_device_name_ts", "device_id", "name", "ts_ns"),
    )
    Table(
        "inventory_records",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("kind", String(64), nullable=False),
        Column("name", String(200), nullable=False),
        Column("facts", Text, nullable=False),
        Index("inventory_records_device_kind", "device_id", "kind", "ts_ns"),
    )
    Table(
        "log_events",
        m,
        Column("device_id", Integer, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("source", Text, nullable=False),
        Column("level", String(16), nullable=False),
        Column("message", Text, nullable=False),
        Index("log_events_device_ts", "device_id", "ts_ns"),
    )
    Table(
        "schema_info",
        m,
        Column("key", String(64), primary_key=True),
        Column("value", String(200), nullable=False),
    )
    # The rollup tables.
    Table(
        "gpu_rollups",
        m,
        Column("device_id", Integer, nullable=False),
        Column("step_s", Integer, nullable=False),
        Column("bucket_ns", BigInteger, nullable=False),
        Column("gpu_index", SmallInteger, nullable=False),
        Column("n", BigInteger, nullable=False),
        Column("span_ns", BigInteger, nullable=False),
        *_float_columns(
            "util_avg", "util_max", "mem_util_avg", "memory_used_avg", "memory_used_max", "temp_avg",
            "temp_max", "power_avg", "power_max", "energy_delta_j", "sm_clock_avg", "sm_clock_min",
            "memory_clock_avg", "fan_avg", "throttle_thermal_n", "throttle_power_n",
        ),
        Index("gpu_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
    )
    Table(
        "host_rollups",
        m,
        Column("device_id", Integer, nullable=False),
        Column("step_s", Integer, nullable=False),
        Column("bucket_ns", BigInteger, nullable=False),
        Column("n", BigInteger, nullable=False),
        Column("span_ns", BigInteger, nullable=False),
        *_float_columns(
            "cpu_avg", "cpu_max", "load1_avg", "mem_used_avg", "mem_used_max", "mem_total_max",
            "swap_used_avg", "swap_used_max", "swap_total_max", "disk_read_delta", "disk_write_delta",
            "net_rx_delta", "net_tx_delta",
        ),
        Index("host_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
    )
    Table(
        "latency_rollups",
        m,
        Column("device_id", Integer, nullable=False),
        Column("step_s", Integer, nullable=False),
        Column("bucket_ns", BigInteger, nullable=False),
        Column("name", String(200), nullable=False),
        Column("labels", Text, nullable=False),
        Column("count", BigInteger, nullable=False),
        Column("sum_ns", BigInteger, nullable=False),
        Column("errors", BigInteger, nullable=False),
        Column("zero_count", BigInteger, nullable=False),
        Column("window_ns", BigInteger, nullable=False),
        Column("buckets", Text, nullable=False),
        Index("latency_rollups_device_step_bucket", "device_id", "step_s", "bucket_ns"),
    )
    Table(
        "rollup_progress",
        m,
        Column("device_id", Integer, primary_key=True, autoincrement=False),
        Column("step_s", Integer, primary_key=True, autoincrement=False),
        Column("rolled_until_ns", BigInteger, nullable=False),
    )
    Table(
        "rollup_leases",
        m,
        Column("name", String(64), primary_key=True),
        Column("owner", String(128), nullable=False),
        Column("expires_ns", BigInteger, nullable=False),
    )
    return m


def upgrade() -> None:
    m = baseline_metadata()
    bind = op.get_bind()
    m.create_all(bind, checkfirst=True)
    info = m.tables["schema_info"]
    if bind.execute(select(info.c.value).where(info.c.key == "schema_version")).first() is None:
        bind.execute(info.insert().values(key="schema_version", value="1"))


def downgrade() -> None:
    raise NotImplementedError("the baseline is not undone by a migration: drop the database instead")
