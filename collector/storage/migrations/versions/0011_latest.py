"""latest readings: the newest host and GPU reading of each device (``host_latest``, ``gpu_latest``)

Revision ID: 0011
Revises: 0010

From this revision the collector stores a batch's samples as chunks, column by column, in the
batch's transaction, instead of a row per sample in ``host_samples`` / ``gpu_samples``. What a
device reads now is kept apart, one row per device (and GPU), upserted with each batch, so the
Fleet page, ``/metrics/fleet`` and alert rules read a row instead of decoding chunks.

The tables are filled from the tail tables' newest rows (a device heard from within the last
hour or so has them there; older devices are not "now" anywhere), so a collector upgraded in
place shows its fleet at once. Both dialects.

Downgrade drops the tables (the samples themselves are in the chunks).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The reading columns as of this revision (a migration does not follow later schema changes).
GPU_SAMPLE_COLUMNS = (
    "util_gpu_percent",
    "util_memory_percent",
    "util_encoder_percent",
    "util_decoder_percent",
    "memory_used_bytes",
    "temp_c",
    "memory_temp_c",
    "power_w",
    "energy_j",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "graphics_clock_mhz",
    "pstate",
    "fan_percent",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "throttle_reasons",
)
HOST_VALUE_COLUMNS = (
    "cpu_percent",
    "load1",
    "load5",
    "load15",
    "mem_total_bytes",
    "mem_used_bytes",
    "mem_available_bytes",
    "swap_total_bytes",
    "swap_used_bytes",
    "disk_total_bytes",
    "disk_used_bytes",
    "disk_read_bytes",
    "disk_write_bytes",
    "net_rx_bytes",
    "net_tx_bytes",
)

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_latest",
        sa.Column("device_id", sa.Integer(), primary_key=True),
        sa.Column("gpu_index", sa.SmallInteger(), primary_key=True),
        sa.Column("ts_ns", sa.BigInteger(), nullable=False),
        *[sa.Column(name, sa.Float()) for name in GPU_SAMPLE_COLUMNS],
    )
    op.create_table(
        "host_latest",
        sa.Column("device_id", sa.Integer(), primary_key=True),
        sa.Column("ts_ns", sa.BigInteger(), nullable=False),
        *[sa.Column(name, sa.Float()) for name in HOST_VALUE_COLUMNS],
        sa.Column("cpu_cores", sa.Text()),
        sa.Column("top_processes", sa.Text()),
    )
    gpu_cols = ", ".join(("device_id", "gpu_index", "ts_ns", *GPU_SAMPLE_COLUMNS))
    op.execute(
        f"INSERT INTO gpu_latest ({gpu_cols}) SELECT {', '.join('s.' + c for c in gpu_cols.split(', '))} FROM gpu_samples s"
        " JOIN (SELECT device_id, gpu_index, max(ts_ns) AS newest FROM gpu_samples GROUP BY device_id, gpu_index) n"
        " ON s.device_id = n.device_id AND s.gpu_index = n.gpu_index AND s.ts_ns = n.newest WHERE true"
        " ON CONFLICT DO NOTHING"
    )
    host_cols = ", ".join(("device_id", "ts_ns", *HOST_VALUE_COLUMNS, "cpu_cores", "top_processes"))
    op.execute(
        f"INSERT INTO host_latest ({host_cols}) SELECT {', '.join('s.' + c for c in host_cols.split(', '))} FROM host_samples s"
        " JOIN (SELECT device_id, max(ts_ns) AS newest FROM host_samples GROUP BY device_id) n"
        " ON s.device_id = n.device_id AND s.ts_ns = n.newest WHERE true"
        " ON CONFLICT DO NOTHING"
    )


def downgrade() -> None:
    op.drop_table("host_latest")
    op.drop_table("gpu_latest")
