"""identity: enrolment tokens and per-device credentials

Revision ID: 0004
Revises: 0003

``enrolment_tokens``: what ``fleetscope token create --fleet NAME`` makes (the SHA-256 of each
token's secret, its fleet, expiry and revocation). ``device_credentials``: one row per agent id
that has an identity, holding the SHA-256 of the device key it enrolled with and its fleet, so
that no other client can register, write or claim sequence numbers as that agent id. Both tables
start empty: devices registered before this revision get a row the first time they register
with a device key. The tables are written out here rather than taken from ``schema.py``.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, Integer, String, Text

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "enrolment_tokens",
        Column("id", String(32), primary_key=True),
        Column("fleet", String(200), nullable=False),
        Column("secret_sha256", String(64), nullable=False),
        Column("created_ns", BigInteger, nullable=False),
        Column("expires_ns", BigInteger, nullable=True),
        Column("revoked_ns", BigInteger, nullable=True),
        Column("uses", Integer, nullable=False),
        Column("last_used_ns", BigInteger, nullable=True),
        Column("comment", Text, nullable=False),
    )
    op.create_table(
        "device_credentials",
        Column("agent_id", String(64), primary_key=True),
        Column("key_sha256", String(64), nullable=False),
        Column("fleet", String(200), nullable=False),
        Column("via", String(64), nullable=False),
        Column("created_ns", BigInteger, nullable=False),
        Column("revoked_ns", BigInteger, nullable=True),
    )
    op.create_index("device_credentials_revoked", "device_credentials", ["revoked_ns"])


def downgrade() -> None:
    op.drop_index("device_credentials_revoked", table_name="device_credentials")
    op.drop_table("device_credentials")
    op.drop_table("enrolment_tokens")
