"""latency scheme: each stored latency histogram says what its bucket indexes mean

Revision ID: 0005
Revises: 0004

``latency_histograms.scheme`` and ``latency_rollups.scheme`` (``fleetscope.proto.exponential``):
0 is the legacy base-1.04 scheme every histogram stored so far uses, so existing rows get 0 (the
column's default) and are read exactly as before; 1..8 are OpenTelemetry exponential scales,
which agents send from the SDK's scale-4 scheme on. Rollups keep one row per scheme: counts of
different schemes are never added together. The columns are written out here rather than taken
from ``schema.py``.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, SmallInteger

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TABLES = ("latency_histograms", "latency_rollups")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, Column("scheme", SmallInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    # Histograms of an exponential scheme would be misread as legacy ones: drop them with it.
    for table in _TABLES:
        op.execute(f"DELETE FROM {table} WHERE scheme <> 0")
        with op.batch_alter_table(table) as batch:
            batch.drop_column("scheme")
