"""claims device: each exactly-once claim (``ingested_batches``) records its batch's device

Revision ID: 0010
Revises: 0009

A claim was keyed by agent id, boot id and sequence only. On a database spread over several
servers by device (Citus: ``fleetscope.collector.storage.citus``) a batch's claim and its rows
must live on the same server, so that storing a batch exactly once stays one local transaction:
that needs the device in the claim. This adds ``device_id``: the device the batch was stored
for (an agent id belongs to one device, so the key stays unique). Both dialects; it adds a
column and changes no row, so it is quick on any size. Claims written before it keep a NULL
device: they only guard against replays of batches that old, and retention prunes them after
the raw tier. The column stays nullable here (SQLite cannot make a column NOT NULL without
copying the table); Citus fills in the old claims' devices and makes it part of the key when it
distributes the table.

Downgrade drops the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingested_batches") as batch:
        batch.add_column(sa.Column("device_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ingested_batches") as batch:
        batch.drop_column("device_id")
