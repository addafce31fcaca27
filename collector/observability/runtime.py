"""What a running collector starts for observability, and stops with it.

``Collector`` (``collector/ingest/server.py``) builds one ``Observability`` before it serves,
``attach``es it to its gRPC server (the standard health service, ``grpc.health.v1.Health``:
SERVING while the database answers the probe, NOT_SERVING while it does not and while the
collector stops), and ``start``s/``stop``s it with the server. With a metrics address it
serves ``/metrics`` (the collector's own metrics and its process's), ``/metrics/fleet``,
``/healthz`` and ``/readyz``; an address it cannot bind is logged and skipped, never a
reason to stop ingesting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import CollectorRegistry
from sqlalchemy import Engine

from fleetscope.collector.observability.fleet_exposition import CONTENT_TYPE, FleetExposition
from fleetscope.collector.observability.health import DatabaseProbe
from fleetscope.collector.observability.http import TEXT, MetricsHttpServer, Route
from fleetscope.collector.observability.self_metrics import CollectorSelfMetrics

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT = 9464
HEALTH_SERVICES = ("", "fleetscope.v1.Ingest")  # "" is the server as a whole


class Observability:
    def __init__(
        self,
        *,
        engine: Engine,
        writer: Any,
        jobs: Mapping[str, Any],
        max_connections: int | None = None,
        metrics_listen: str | None = None,
        probe_interval_s: float = 2.0,
        fleet_cache_s: float = 1.0,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.probe = DatabaseProbe(engine, interval_s=probe_interval_s)
        self._service: Any = None
        self.self_metrics = CollectorSelfMetrics(
            engine=engine, service=lambda: self._service, writer=writer, jobs=jobs, probe=self.probe,
            max_connections=max_connections, registry=self.registry,
        )  # fmt: skip
        writer.commit_observer = self.self_metrics.commit_seconds.observe
        self.fleet = FleetExposition(engine, cache_s=fleet_cache_s, observe=self.self_metrics.fleet_scrape_seconds.observe)
        self._metrics_listen = metrics_listen
        self.http: MetricsHttpServer | None = None
        self.health: Any = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def metrics_port(self) -> int | None:
        return self.http.port if self.http is not None else None

    def attach(self, server: Any, service: Any) -> None:
        """Add the gRPC health service to ``server`` and read ``service``'s counters."""
        from grpc_health.v1 import health, health_pb2_grpc

        self._service = service
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)

    # -- routes -----------------------------------------------------------------------------

    def _metrics(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)

    def _fleet(self) -> tuple[int, str, list[bytes]]:
        return 200, CONTENT_TYPE, self.fleet.render_chunks()

    @staticmethod
    def _healthz() -> tuple[int, str, bytes]:
        return 200, TEXT, b"ok\n"

    def _readyz(self) -> tuple[int, str, bytes]:
        if self.probe.reachable:
            return 200, TEXT, b"ready: database reachable\n"
        return 503, TEXT, f"not ready: database unreachable: {self.probe.last_error}\n".encode()

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self.probe.start)
        if self.health is not None:
            await self._set_health(self.probe.reachable)
            self._watch = asyncio.create_task(self._follow_probe())
        if self._metrics_listen:
            routes: dict[str, Route] = {"/metrics": self._metrics, "/metrics/fleet": self._fleet, "/healthz": self._healthz, "/readyz": self._readyz}
            try:
                self.http = MetricsHttpServer(self._metrics_listen, routes, default_port=DEFAULT_METRICS_PORT).start()
                log.info("metrics on http://%s:%d/metrics (fleet: /metrics/fleet)", self.http.host, self.http.port)
            except OSError as exc:
                log.warning("metrics listener %s not started: %s", self._metrics_listen, exc)

    async def _set_health(self, ok: bool) -> None:
        from grpc_health.v1 import health_pb2

        status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in HEALTH_SERVICES:
            await self.health.set(name, status)

    async def _follow_probe(self) -> None:
        last = self.probe.reachable
        while True:
            await asyncio.sleep(0.2)
            now = self.probe.reachable
            if now != last:
                await self._set_health(now)
                last = now

    async def begin_shutdown(self) -> None:
        """NOT_SERVING from now on (the collector is stopping)."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self.health is not None:
            await self.health.enter_graceful_shutdown()

    async def stop(self) -> None:
        await self.begin_shutdown()
        if self.http is not None:
            await asyncio.to_thread(self.http.stop)
        await asyncio.to_thread(self.probe.stop)


__all__ = ["DEFAULT_METRICS_PORT", "HEALTH_SERVICES", "Observability"]
