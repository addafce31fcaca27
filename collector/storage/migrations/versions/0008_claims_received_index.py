"""claims received index: ``ingested_batches`` found by when each batch arrived, so retention can prune it

Revision ID: 0008
Revises: 0007

``ingested_batches`` (the exactly-once claims: one row per agent id, boot id and sequence) was
kept for ever, a row per batch: at a thousand devices sending a batch a second, 86 million rows
a day. The retention job (``fleetscope.collector.jobs.retention``) now deletes the claims older
than the raw tier, in bounded batches; this index on ``received_ns`` lets each batch find its
rows without scanning the table (the primary key leads with the agent id). Both dialects; it
only creates the index, so no row changes, but building it reads every claim kept so far and
blocks ingest's claims meanwhile (not ``CONCURRENTLY``: a migration is one transaction): on a
large database, run it (``fleetscope db upgrade``) in a quiet hour. The names are written out
here rather than taken from ``schema.py``.

Downgrade drops the index (claims already pruned stay gone: they protected only rows older than
the raw tier, which retention deleted too).
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TABLE = "ingested_batches"
_INDEX = "ingested_batches_received"


def upgrade() -> None:
    op.create_index(_INDEX, _TABLE, ["received_ns"])


def downgrade() -> None:
    op.drop_index(_INDEX, table_name=_TABLE)
