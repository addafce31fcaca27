"""leases: the rollup job's lease table becomes one table of leases for every once-per-fleet job

Revision ID: 0002
Revises: 0001

``rollup_leases`` held one row, the ``rollup`` lease. Detectors need leases of their own, so
the table becomes ``leases`` (``fleetscope.collector.storage.lease``), with the same columns
and meanings: ``name``, the ``owner`` holding it, ``expires_ns``. The rows are copied, so a
rollup lease held during the upgrade is still held by the same collector after it.

The table is created new and the rows copied rather than renamed in place, so that its
primary key carries the name a new database gives it (``leases_pkey`` on PostgreSQL).

``schema_info``'s version goes to 2: collectors from before migrations refuse a database
above their version 1, and one of them would recreate ``rollup_leases`` and roll alongside
the holder of the ``rollup`` lease.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, String, column, table, text

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


# The columns these statements use, named here: a revision must not import ``schema.py``,
# which moves on after it.
_schema_info = table("schema_info", column("key"), column("value"))


def _set_schema_version(value: str) -> None:
    op.execute(_schema_info.update().where(_schema_info.c.key == "schema_version").values(value=value))


def _lease_columns() -> list[Column]:
    return [
        Column("name", String(64), primary_key=True),
        Column("owner", String(128), nullable=False),
        Column("expires_ns", BigInteger, nullable=False),
    ]


def upgrade() -> None:
    op.create_table("leases", *_lease_columns())
    op.execute(text("INSERT INTO leases (name, owner, expires_ns) SELECT name, owner, expires_ns FROM rollup_leases"))
    op.drop_table("rollup_leases")
    _set_schema_version("2")


def downgrade() -> None:
    # Only the rollup job's lease existed before: other jobs' leases are dropped with the table.
    op.create_table("rollup_leases", *_lease_columns())
    op.execute(
        text(
            "INSERT INTO rollup_leases (name, owner, expires_ns) "
            "SELECT name, owner, expires_ns FROM leases WHERE name = 'rollup'"
        )
    )
    op.drop_table("leases")
    _set_schema_version("1")
