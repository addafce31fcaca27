"""revocations and token limits: revocations numbered by the database, revoked devices kept out, tokens bounded

Revision ID: 0009
Revises: 0008

``device_revocations``: one row per revoked agent id, numbered by the database (``seq``), with
the device's name and hardware ids. Collectors notice a revocation by the rows' count, whatever
the revoking host's clock said, and a revoked device cannot enrol again under a new agent id
(its state directory wiped, the same token file) until an operator runs ``fleetscope device
allow``. Credentials revoked before this revision get a row each (name and hardware from their
device row, where there is one), so they are kept out too.

``enrolment_tokens.max_devices`` and ``max_enrolments_per_min``: a token enrols at most that many
devices, at most that fast. Tokens made before this revision get the defaults of ``fleetscope
token create`` (10,000 devices, 1,000 a minute), so no existing token stays unbounded.

``device_credentials_via_created``: a token's enrolments of the last minute, found by index.
The names are written out here rather than taken from ``schema.py``.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, Integer, String, Text, text

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

DEFAULT_MAX_DEVICES = 10_000
DEFAULT_MAX_ENROLMENTS_PER_MIN = 1_000


def upgrade() -> None:
    with op.batch_alter_table("enrolment_tokens") as batch:
        batch.add_column(Column("max_devices", Integer, nullable=True))
        batch.add_column(Column("max_enrolments_per_min", Integer, nullable=True))
    op.execute(text(f"UPDATE enrolment_tokens SET max_devices = {DEFAULT_MAX_DEVICES}, "
                    f"max_enrolments_per_min = {DEFAULT_MAX_ENROLMENTS_PER_MIN}"))
    op.create_index("device_credentials_via_created", "device_credentials", ["via", "created_ns"])
    op.create_table(
        "device_revocations",
        Column("seq", Integer, primary_key=True, autoincrement=True),
        Column("agent_id", String(64), nullable=False),
        Column("fleet", String(200), nullable=False),
        Column("name", String(200), nullable=False),
        Column("hardware_ids", Text, nullable=False),
        Column("revoked_ns", BigInteger, nullable=False),
        Column("allowed_ns", BigInteger, nullable=True),
    )
    op.create_index("device_revocations_name", "device_revocations", ["name"])
    # Revocations made before: their names (hardware ids are not recovered here: the inventory is JSON).
    op.execute(text(
        "INSERT INTO device_revocations (agent_id, fleet, name, hardware_ids, revoked_ns, allowed_ns) "
        "SELECT c.agent_id, c.fleet, COALESCE(d.name, ''), '', c.revoked_ns, NULL "
        "FROM device_credentials c LEFT JOIN devices d ON d.agent_id = c.agent_id "
        "WHERE c.revoked_ns IS NOT NULL ORDER BY c.revoked_ns"
    ))


def downgrade() -> None:
    op.drop_index("device_revocations_name", table_name="device_revocations")
    op.drop_table("device_revocations")
    op.drop_index("device_credentials_via_created", table_name="device_credentials")
    with op.batch_alter_table("enrolment_tokens") as batch:
        batch.drop_column("max_enrolments_per_min")
        batch.drop_column("max_devices")
