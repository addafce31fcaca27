"""Running a collector: the gRPC server, the writer, and a graceful stop.

A stop (SIGTERM, SIGINT, or ``Collector.stop``) closes the listening port, lets each stream
acknowledge the batches it already accepted, waits for the writer to commit them, and closes
the database. Agents see their stream end and reconnect, to this collector or another.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from fleetscope.collector.ingest.gc_policy import tune_for_ingest
from fleetscope.collector.ingest.service import IngestService
from fleetscope.collector.ingest.validation import Limits
from fleetscope.collector.storage.engine import ensure_schema, make_engine
from fleetscope.collector.storage.writer import BatchWriter
from fleetscope.proto.v1 import telemetry_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorSettings:
    listen: str = "127.0.0.1:4317"
    db_url: str = "sqlite:///fleetscope.db"
    tokens: frozenset[str] | None = None  # None: no authentication (loopback demos only)
    max_batch_bytes: int = 32 << 20
    grace_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    rollups: bool = True  # maintain the minute/hour rollups the dashboard reads (one collector at a time, by lease)
    # Upgrade a database at an older schema revision on start; False refuses it (SchemaBehind)
    # so that an operator runs `fleetscope db upgrade` when they choose (after a backup, say).
    upgrade_db: bool = True


def read_tokens_file(path: Path) -> frozenset[str]:
    """One token per line; blank lines and ``#`` comments are ignored."""
    tokens = {line.split("#", 1)[0].strip() for line in path.read_text().splitlines()}
    tokens.discard("")
    if not tokens:
        raise ValueError(f"{path}: no tokens in file")
    return frozenset(tokens)


class Collector:
    """A collector in this process; ``serve`` blocks, ``start``/``stop`` run it on a thread."""

    def __init__(self, settings: CollectorSettings) -> None:
        self.settings = settings
        self.engine = make_engine(settings.db_url, create=False)
        try:
            ensure_schema(self.engine, upgrade=settings.upgrade_db)
        except BaseException:
            self.engine.dispose()
            raise
        self.writer = BatchWriter(self.engine)
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._service: IngestService | None = None
        self._error: BaseException | None = None

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self.writer.start()
        rollup_job = None
        if self.settings.rollups:
            from fleetscope.collector.jobs.rollup import RollupJob

            rollup_job = RollupJob(self.engine)
            rollup_job.start()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self.settings.max_batch_bytes),
                ("grpc.max_send_message_length", 4 << 20),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                ("grpc.http2.max_ping_strikes", 0),
                ("grpc.so_reuseport", 1),  # `--workers N` processes share one port
            ]
        )
        self._service = IngestService(
            self.engine,
            self.writer,
            tokens=self.settings.tokens,
            limits=self.settings.limits,
            max_batch_bytes=self.settings.max_batch_bytes,
        )
        pb_grpc.add_IngestServicer_to_server(self._service, server)
        self.port = server.add_insecure_port(self.settings.listen)
        if not self.port:
            raise OSError(f"cannot listen on {self.settings.listen}")
        await server.start()
        log.info("collector listening on %s, storing into %s", self.settings.listen.rsplit(":", 1)[0] + f":{self.port}",
                 self.engine.url.render_as_string(hide_password=True))
        self._ready.set()
        await self._stop_event.wait()
        log.info("collector stopping: acknowledging in-flight batches")
        self._service.begin_shutdown()
        await server.stop(self.settings.grace_s)
        await asyncio.to_thread(self.writer.stop)
        if rollup_job is not None:
            await asyncio.to_thread(rollup_job.stop)
        self.engine.dispose()
        log.info("collector stopped")

    def serve(self, *, handle_signals: bool = True) -> None:
        """Run the collector in this process until a signal (or ``stop``) ends it."""
        tune_for_ingest()

        async def main() -> None:
            if handle_signals:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._request_stop)
            await self._serve()

        asyncio.run(main())

    def _request_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()

    def start(self) -> int:
        """Run on a background thread; returns the bound port once serving."""

        def run() -> None:
            try:
                asyncio.run(self._serve())
            except BaseException as exc:  # surfaced by start() to the caller
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=run, name="fleetscope-collector", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        assert self.port is not None
        return self.port

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._request_stop)
        if self._thread is not None:
            self._thread.join(timeout_s)
