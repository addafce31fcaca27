"""Alembic's environment script: runs the revisions on the connection that
``fleetscope.collector.storage.migrations`` opened, inside its transaction and lock.

There is no alembic.ini and no URL here: the migrations are driven from code only
(``fleetscope db upgrade``, a collector's start), which puts the connection into
``config.attributes``.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("fleetscope's migrations run through 'fleetscope db upgrade', not the alembic command")
context.configure(
    connection=connection,
    on_version_apply=context.config.attributes.get("on_version_apply", ()),
)
with context.begin_transaction():  # the caller's transaction: the whole upgrade commits or rolls back at once
    context.run_migrations()
