"""alerting: the incident lifecycle, detector progress, alerts, notifications and silences

Revision ID: 0003
Revises: 0002

Devices gain ``batches_reanchored`` and ``last_clock_step_ns``: the batches the collector placed
by the device's monotonic clock after its wall clock stepped, and the last step.

Incidents gain a lifecycle: the GPU and process they concern, a grouping key, a state (open or
resolved), who raised them (agent, detector, import), a count of occurrences, when they were
last seen and ended, when they last changed, and hints computed from the data. Existing rows
are filled in: ``last_seen_ns`` and ``updated_ns`` from their own times, the GPU index from
their facts where those name one, and the state:

* rows of the ``scan`` import (their facts hold an ``import_key``) are ``origin = 'import'``
  and resolved: they are history from old files;
* every other row stays open, and the collector's lifecycle job resolves the event kinds among
  them after their quiet period, as it would have done had the rows arrived today.

New tables: ``detector_progress``, ``alerts``, ``notifications`` (one row per transition and
notifier, unique, so several collectors never notify twice), ``notification_attempts`` and
``silences``. The tables are written out here rather than taken from ``schema.py``, which moves
on after this revision. ``schema_info``'s version stays 2: that already makes collectors from
before migrations refuse the database.
"""

from __future__ import annotations

import json

from alembic import op
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    column,
    select,
    table,
)

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_incidents = table(
    "incidents",
    column("id"),
    column("ts_ns"),
    column("received_ns"),
    column("facts"),
    column("source"),
    column("gpu_index"),
    column("state"),
    column("origin"),
    column("last_seen_ns"),
    column("updated_ns"),
    column("ended_ns"),
    column("hints", JSON),
)


def _pk() -> Column:
    return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(Column("batches_reanchored", BigInteger, nullable=False, server_default="0"))
        batch.add_column(Column("last_clock_step_ns", BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(Column("gpu_index", SmallInteger, nullable=True))
        batch.add_column(Column("pid", BigInteger, nullable=True))
        batch.add_column(Column("process_name", String(255), nullable=False, server_default=""))
        batch.add_column(Column("group_key", String(200), nullable=False, server_default=""))
        batch.add_column(Column("state", String(16), nullable=False, server_default="open"))
        batch.add_column(Column("origin", String(16), nullable=False, server_default="agent"))
        batch.add_column(Column("count", Integer, nullable=False, server_default="1"))
        batch.add_column(Column("last_seen_ns", BigInteger, nullable=True))
        batch.add_column(Column("ended_ns", BigInteger, nullable=True))
        batch.add_column(Column("updated_ns", BigInteger, nullable=True))
        batch.add_column(Column("hints", JSON, nullable=True))
    _backfill_incidents()
    with op.batch_alter_table("incidents") as batch:
        batch.alter_column("last_seen_ns", existing_type=BigInteger, nullable=False)
        batch.alter_column("updated_ns", existing_type=BigInteger, nullable=False)
        batch.alter_column("hints", existing_type=JSON, nullable=False)
        batch.create_index("incidents_open", ["state", "device_id", "kind"])

    op.create_table(
        "detector_progress",
        Column("detector", String(64), primary_key=True),
        Column("device_id", Integer, primary_key=True, autoincrement=False),
        Column("key", String(200), primary_key=True),
        Column("until_ns", BigInteger, nullable=False),
        Column("state", JSON, nullable=False),
    )
    op.create_table(
        "alerts",
        _pk(),
        Column("rule", String(200), nullable=False),
        Column("fingerprint", String(64), nullable=False),
        Column("state", String(16), nullable=False),
        Column("device_id", Integer, nullable=True),
        Column("incident_id", BigInteger, nullable=True),
        Column("kind", String(64), nullable=False),
        Column("severity", String(16), nullable=False),
        Column("summary", Text, nullable=False),
        Column("labels", JSON, nullable=False),
        Column("facts", JSON, nullable=False),
        Column("pending_ns", BigInteger, nullable=False),
        Column("firing_ns", BigInteger, nullable=True),
        Column("resolved_ns", BigInteger, nullable=True),
        Column("last_eval_ns", BigInteger, nullable=False),
        Column("silenced_by", BigInteger, nullable=True),
    )
    op.create_index("alerts_state", "alerts", ["state", "rule"])
    op.create_index("alerts_fingerprint", "alerts", ["fingerprint", "state"])
    op.create_index("alerts_device", "alerts", ["device_id", "pending_ns"])
    op.create_table(
        "notifications",
        _pk(),
        Column("alert_id", BigInteger, nullable=False),
        Column("transition", String(16), nullable=False),
        Column("notifier", String(200), nullable=False),
        Column("payload", JSON, nullable=False),
        Column("state", String(16), nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("created_ns", BigInteger, nullable=False),
        Column("next_attempt_ns", BigInteger, nullable=False),
        Column("delivered_ns", BigInteger, nullable=True),
        Column("last_error", Text, nullable=False),
        UniqueConstraint("alert_id", "transition", "notifier", name="notifications_once"),
    )
    op.create_index("notifications_due", "notifications", ["state", "next_attempt_ns"])
    op.create_table(
        "notification_attempts",
        _pk(),
        Column("notification_id", BigInteger, nullable=False),
        Column("ts_ns", BigInteger, nullable=False),
        Column("ok", Boolean, nullable=False),
        Column("status", Integer, nullable=True),
        Column("error", Text, nullable=False),
        Column("duration_ms", Float, nullable=False),
    )
    op.create_index("ix_notification_attempts_notification_id", "notification_attempts", ["notification_id"])
    op.create_table(
        "silences",
        _pk(),
        Column("rule", String(200), nullable=True),
        Column("device", String(200), nullable=True),
        Column("labels", JSON, nullable=False),
        Column("created_ns", BigInteger, nullable=False),
        Column("expires_ns", BigInteger, nullable=False),
        Column("created_by", String(200), nullable=False),
        Column("comment", Text, nullable=False),
    )
    op.create_index("silences_expires", "silences", ["expires_ns"])


def _backfill_incidents() -> None:
    conn = op.get_bind()
    rows = conn.execute(select(_incidents.c.id, _incidents.c.ts_ns, _incidents.c.received_ns, _incidents.c.facts)).all()
    for incident_id, ts_ns, received_ns, facts in rows:
        facts = json.loads(facts) if isinstance(facts, (str, bytes)) else (facts or {})
        gpu = facts.get("gpu_index", facts.get("device_index")) if isinstance(facts, dict) else None
        gpu_index = gpu if isinstance(gpu, int) and not isinstance(gpu, bool) and 0 <= gpu < 32768 else None
        imported = isinstance(facts, dict) and "import_key" in facts
        conn.execute(
            _incidents.update()
            .where(_incidents.c.id == incident_id)
            .values(
                gpu_index=gpu_index,
                last_seen_ns=ts_ns,
                updated_ns=received_ns,
                state="resolved" if imported else "open",
                origin="import" if imported else "agent",
                ended_ns=ts_ns if imported else None,
                hints=[],
            )
        )


def downgrade() -> None:
    for name in ("silences", "notification_attempts", "notifications", "alerts", "detector_progress"):
        op.drop_table(name)
    with op.batch_alter_table("incidents") as batch:
        batch.drop_index("incidents_open")
        for name in ("hints", "updated_ns", "ended_ns", "last_seen_ns", "count", "origin", "state", "group_key",
                     "process_name", "pid", "gpu_index"):
            batch.drop_column(name)
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("last_clock_step_ns")
        batch.drop_column("batches_reanchored")
