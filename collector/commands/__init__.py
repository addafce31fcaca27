"""The collector's commands: one module per command group, all on top of the collector's rooms.

``serve`` (``fleetscope collector``), the queries (``devices``, ``metrics``, ``logs``,
``latency``, ``incidents``/``incident``, ``compare``, ``alerts``/``silence``, ``status``), the
security commands (``certs``, ``token``, ``device``) and ``db``. ``output`` holds what the query
commands print alike. Nothing below this package (storage, ingest, jobs, alerting, query,
observability) imports it: ``pyproject.toml``'s import contracts hold that.

Parsers are built without importing SQLAlchemy, so ``fleetscope --help`` works on a drone.
"""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Every collector command on ``sub`` (argparse's subparsers), in the order ``--help`` lists them."""
    from fleetscope.collector.commands import (
        alerts,
        compare,
        db,
        devices,
        incidents,
        latency,
        logs,
        metrics,
        security,
        serve,
        status,
    )

    for group in (serve, devices, metrics, logs, latency, incidents, alerts, compare, status, security, db):
        group.register(sub)

