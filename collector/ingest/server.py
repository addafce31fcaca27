"""Running a collector: the gRPC server, the writer, and a graceful stop.

A stop (SIGTERM, SIGINT, or ``Collector.stop``) closes the listening port, lets each stream
acknowledge the batches it already accepted, waits for the writer to commit them, and closes
the database. Agents see their stream end and reconnect, to this collector or another.

Connections are bounded so that no number of clients can exhaust the collector: a cap on
connections (kept below the open-file limit, which the collector raises to its hard limit, so
that the database, the rollup job and new agents always find a descriptor), a deadline for
the HTTP/2 handshake, an idle timeout, keepalive pings that drop a peer that stopped
answering, a cap on streams per connection (gRPC lets each stream buffer one whole message,
so streams x the largest batch bounds a connection's in-flight bytes), and in the service a
cap on the bytes a stream has accepted but not yet acknowledged.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from fleetscope.collector.errors import CannotListen
from fleetscope.collector.ingest.agent_limits import AgentLimits
from fleetscope.collector.ingest.gc_policy import tune_for_ingest
from fleetscope.collector.ingest.memory import MemoryTrimmer
from fleetscope.collector.ingest.service import IngestService, add_ingest_service
from fleetscope.collector.ingest.tls import ServerTLS
from fleetscope.collector.ingest.validation import Limits
from fleetscope.collector.ingest.worker_balance import StreamBalancer, WorkerLoads
from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.jobs.retention import RetentionSettings
from fleetscope.collector.storage.engine import ensure_schema, make_engine
from fleetscope.collector.storage.writer import BatchWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorSettings:
    listen: str = "127.0.0.1:4317"
    # Share ``listen`` with other processes that set it too (SO_REUSEPORT): only the workers of one
    # ``--workers N`` collector do. Off, a port in use is an error (CannotListen): with it on, a
    # second collector on a busy port took some agents into its own database without a word.
    reuse_port: bool = False
    # The workers of one ``--workers N`` collector: the file their agent counts are shared in
    # (ingest.worker_balance.WorkerLoads) and this worker's slot in it. None: a lone collector.
    worker_loads: str | None = None
    worker_index: int = 0
    db_url: str = "sqlite:///fleetscope.db"
    # Static tokens (--token, --tokens-file); None: none, so agents enrol with enrolment tokens
    # ("fleetscope token create") or not at all. Never an open door by itself: see below.
    tokens: frozenset[str] | None = None
    # Agents with no credential at all may enrol (--allow-unauthenticated): loopback demos only.
    allow_unauthenticated: bool = False
    max_batch_bytes: int = 32 << 20
    grace_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    rollups: bool = True  # maintain the minute/hour rollups the dashboard reads (one collector at a time, by lease)
    # Fold raw samples older than ``fold_after_s`` (and already rolled up) into compressed chunks
    # (fleetscope.collector.jobs.compaction; one collector at a time, by lease).
    compaction: bool = True
    fold_after_s: float = 3600.0
    # Retention tiers (fleetscope.collector.jobs.retention; one collector at a time, by lease);
    # None: keep everything. PostgreSQL's partitions ahead are created at start either way.
    retention: RetentionSettings | None = field(default_factory=RetentionSettings)
    # Upgrade a database at an older schema revision on start; False refuses it (SchemaBehind)
    # so that an operator runs `fleetscope db upgrade` when they choose (after a backup, say).
    upgrade_db: bool = True
    # Connections at once; None: DEFAULT_MAX_CONNECTIONS, lowered to leave RESERVED_FILES of the
    # open-file limit to the database, the logs and the rollup job.
    max_connections: int | None = None
    handshake_timeout_s: float = 20.0  # a connection that has not spoken HTTP/2 by then is closed
    idle_timeout_s: float = 300.0  # a connection without a call for this long is closed (GOAWAY)
    keepalive_time_s: float = 60.0  # ping each connection after this long without traffic...
    keepalive_timeout_s: float = 20.0  # ...and drop it when the ping is not answered by then
    # A connection is closed after this long, its calls given the grace to end: the last bound
    # on a client that answers pings but never finishes its batch. The agent reconnects and
    # resends what was not acknowledged, which the exactly-once claim makes harmless.
    max_connection_age_s: float = 3600.0
    max_connection_age_grace_s: float = 60.0
    # An agent uses one stream and a registration, but a gRPC-aware proxy (Envoy, an ingress)
    # carries many agents' streams over one connection: a small cap refused their streams
    # (REFUSED_STREAM) and made them look like an outage.
    max_streams_per_connection: int = 256
    # Bytes of batches a stream has accepted but not yet acknowledged; reading from the stream
    # pauses above it, so a client that outruns the writer is held back by HTTP/2 flow control.
    max_unacked_bytes_per_stream: int = 64 << 20
    # The same across all streams (IngestBudget in ingest/service.py): the writer's backlog in
    # bytes. A database slower than the fleet fills it; then no stream is read, flow control
    # slows the agents and their spools keep the difference: nothing is refused or dropped.
    max_unacked_bytes: int = 64 << 20
    # Alert rules: a TOML file, reloaded when it changes (fleetscope.collector.alerting.rules);
    # None: no alerts. Evaluated every ``alerts_interval_s`` by one collector at a time (lease);
    # ``dashboard_url`` (else the file's) makes the links in notifications.
    alerts_file: Path | None = None
    alerts_interval_s: float = 1.0
    dashboard_url: str | None = None
    # Detectors (fleetscope.collector.jobs.detectors): the settings, or a callable returning them
    # (read each pass); None turns them off. A rules file's [detectors] and [[slo]] replace the
    # defaults; ``detector_overrides`` (the collector's flags, e.g. {"offline_after_s": 10.0})
    # win over both. One collector at a time runs them (lease), every ``detectors_interval_s``.
    detectors: DetectorSettings | Callable[[], DetectorSettings] | None = field(default_factory=DetectorSettings)
    detector_overrides: Mapping[str, Any] = field(default_factory=dict)
    detectors_interval_s: float = 10.0
    # Observability (fleetscope.collector.observability): the metrics listener ("HOST:PORT" for
    # /metrics, /metrics/fleet, /healthz, /readyz; None: none), and how often the database is
    # probed for the gRPC health service and /readyz.
    metrics_listen: str | None = None
    health_probe_interval_s: float = 2.0
    # TLS (collector/ingest/tls.py): set, the port speaks only TLS (mutual TLS with a client CA).
    tls: ServerTLS | None = None
    # Limits per agent (collector/ingest/agent_limits.py); how often revocations are looked for.
    agent_limits: AgentLimits = field(default_factory=AgentLimits)
    revocation_poll_s: float = 1.0
    # Registrations written at once; more wait until their deadline (ingest/registration_gate.py).
    max_registrations_in_flight: int = 8
    # Freed memory given back to the system this often (malloc_trim: collector/ingest/memory.py),
    # so a closed connection flood does not leave RSS high; 0 turns it off.
    trim_interval_s: float = 10.0


DEFAULT_MAX_CONNECTIONS = 10_000
RESERVED_FILES = 128  # descriptors kept from connections: the database pool, log files, gRPC's own


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; returns the soft limit now.

    Each connection holds a descriptor; at a distribution's default soft limit (1,024, while the
    hard limit is often far higher) a flood of connections left none for the database.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open-file limit raised from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("open-file limit stays at %d (hard %d): %s", soft, hard, exc)
    return soft


def connection_cap(settings: CollectorSettings, open_file_limit: int) -> int:
    """The most connections at once: the setting, or the default within the open-file limit."""
    if settings.max_connections is not None:
        return settings.max_connections
    return max(1, min(DEFAULT_MAX_CONNECTIONS, open_file_limit - RESERVED_FILES))


def server_options(settings: CollectorSettings, max_connections: int) -> list[tuple[str, int]]:
    """gRPC's own limits, from the settings (names as declared in grpc_types.h)."""
    return [
        ("grpc.max_receive_message_length", settings.max_batch_bytes),
        ("grpc.max_send_message_length", 4 << 20),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.server_handshake_timeout_ms", int(settings.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(settings.idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", int(settings.keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout_s * 1000)),
        # gRPC stops pinging a peer after two pings with no data sent, and a stalled client is
        # sent no data: without this it would never be pinged, so never dropped.
        ("grpc.http2.max_pings_without_data", 0),
        # Any unanswered ping, not only the keepalive's, ends the connection by the keepalive's
        # timeout: a flow-control (BDP) ping sent just before the client stalled would otherwise
        # stand in for the keepalive and wait gRPC's default minute.
        ("grpc.http2.ping_timeout_ms", int(settings.keepalive_timeout_s * 1000)),
        ("grpc.max_connection_age_ms", int(settings.max_connection_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", int(settings.max_connection_age_grace_s * 1000)),
        ("grpc.max_concurrent_streams", settings.max_streams_per_connection),
        # Agents ping every 20 s, with or without a call (agent/daemon/uplink.py); a peer that
        # pings more often than every 5 s gets a GOAWAY after two strikes, as gRPC's default.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.so_reuseport", 1 if settings.reuse_port else 0),  # gRPC's default is on: see CollectorSettings.reuse_port
    ]


def read_tokens_file(path: Path) -> frozenset[str]:
    """One token per line; blank lines and ``#`` comments are ignored."""
    tokens = {line.split("#", 1)[0].strip() for line in path.read_text().splitlines()}
    tokens.discard("")
    if not tokens:
        raise ValueError(f"{path}: no tokens in file")
    return frozenset(tokens)


def listen_problem(listen: str) -> str | None:
    """Why ``listen`` cannot be bound by a process of its own (the port in use, an address not on
    this machine, a privileged port), or None. A plain bind of each address the host resolves to,
    without SO_REUSEPORT, so that a port any other process listens on counts as in use."""
    import socket

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return f"not an address: {listen!r} (examples: 127.0.0.1:4317, 0.0.0.0:4317, [::1]:4317)"
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"cannot listen on {listen}: {exc.strerror}"
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is not "in use"
            # IPv6 sockets stay dual-stack, as gRPC's: [::]:PORT is in use when 0.0.0.0:PORT is.
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return (f"cannot listen on {listen}: the port is in use (another collector?); stop it or give "
                            "another --listen port (one collector runs several processes on one port with --workers N)")
                return f"cannot listen on {listen}: {exc.strerror or exc}"
    return None


class Collector:
    """A collector in this process; ``serve`` blocks, ``start``/``stop`` run it on a thread."""

    def __init__(self, settings: CollectorSettings) -> None:
        self.settings = settings
        self.rules = None  # the alert rules in force (a RuleSet), when a rules file was given
        if settings.alerts_file is not None:
            from fleetscope.collector.alerting.rules import RuleSet

            self.rules = RuleSet(settings.alerts_file)  # RulesError: refused before anything starts
        self.max_connections = connection_cap(settings, raise_open_file_limit())
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
        self.jobs: dict[str, Any] = {}  # the jobs this collector runs, by name (read by the self-metrics)
        self.observability: Any = None  # fleetscope.collector.observability.Observability, once serving

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        server = grpc.aio.server(
            options=server_options(self.settings, self.max_connections),
            # Each agent holds one stream; the rest of the calls are registrations in passing.
            maximum_concurrent_rpcs=2 * self.max_connections,
        )
        # The port first, before any job or thread starts: a port that cannot be had ends the start
        # with nothing to undo.
        try:
            if self.settings.tls is not None:  # no plaintext port at all
                self.port = server.add_secure_port(self.settings.listen, self.settings.tls.credentials())
            else:
                self.port = server.add_insecure_port(self.settings.listen)
        except RuntimeError:  # gRPC says only "Failed to bind"; a plain bind says why
            self.port = 0
        if not self.port:
            raise CannotListen(listen_problem(self.settings.listen) or f"cannot listen on {self.settings.listen}")
        self.writer.start()
        trimmer = MemoryTrimmer(self.settings.trim_interval_s)
        trimmer.start()
        rollup_job = None
        if self.settings.rollups:
            from fleetscope.collector.jobs.rollup import RollupJob

            rollup_job = RollupJob(self.engine)
            rollup_job.start()
        alert_job = sender = None
        if self.rules is not None:
            from fleetscope.collector.alerting.engine import AlertJob
            from fleetscope.collector.alerting.notifiers import Sender

            sender = Sender(self.engine, self.rules)
            alert_job = AlertJob(self.engine, self.rules, interval_s=self.settings.alerts_interval_s,
                                 dashboard_url=self.settings.dashboard_url, on_notify=sender.wake)
            sender.start()
            alert_job.start()
        detector_job = None
        if self.settings.detectors is not None:
            from fleetscope.collector.jobs.detectors import DetectorJob

            detector_job = DetectorJob(self.engine, settings=self._detector_settings,
                                       interval_s=self.settings.detectors_interval_s)
            detector_job.start()
        from fleetscope.collector.storage.partitions import ensure_partitions_ahead

        # Before the first batch: today's partitions (PostgreSQL) exist, so rows do not start out in
        # the default partition. Idempotent; the retention job repeats it every pass.
        try:
            tiers = self.settings.retention or RetentionSettings()
            await asyncio.to_thread(lambda: ensure_partitions_ahead(self.engine, time.time_ns(), tiers.days_ahead,
                                                                    days_behind=tiers.days_behind))
        except Exception as exc:  # ingest works without them (the default partition takes the rows)
            log.warning("could not create the partitions ahead: %s", exc)
        retention_job = None
        if self.settings.retention is not None:
            from fleetscope.collector.jobs.retention import RetentionJob

            retention_job = RetentionJob(self.engine, self.settings.retention)
            retention_job.start()
        compaction_job = None
        if self.settings.compaction:
            from fleetscope.collector.jobs.compaction import CompactionJob

            compaction_job = CompactionJob(self.engine, fold_after_s=self.settings.fold_after_s,
                                           keep_raw_s=self._detector_settings().lookback_s if self.settings.detectors else 0.0)
            compaction_job.start()
        self.jobs = {k: j for k, j in (("rollup", rollup_job), ("detectors", detector_job), ("alerts", alert_job),
                                        ("retention", retention_job), ("compaction", compaction_job)) if j is not None}
        self._service = IngestService(
            self.engine,
            self.writer,
            tokens=self.settings.tokens,
            limits=self.settings.limits,
            max_batch_bytes=self.settings.max_batch_bytes,
            max_unacked_bytes_per_stream=self.settings.max_unacked_bytes_per_stream,
            max_unacked_bytes=self.settings.max_unacked_bytes,
            agent_limits=self.settings.agent_limits,
            revocation_poll_s=self.settings.revocation_poll_s,
            allow_unauthenticated=self.settings.allow_unauthenticated,
            max_registrations_in_flight=self.settings.max_registrations_in_flight,
            balancer=self._balancer(),
        )
        add_ingest_service(self._service, server)  # its deserialisers turn bad bytes into INVALID_ARGUMENT
        from fleetscope.collector.observability import Observability

        self.observability = Observability(engine=self.engine, writer=self.writer, jobs=self.jobs, max_connections=self.max_connections,
                                           metrics_listen=self.settings.metrics_listen, probe_interval_s=self.settings.health_probe_interval_s)
        self.observability.attach(server, self._service)  # grpc.health.v1.Health
        await server.start()
        self._service.start_balancing()
        await self.observability.start()
        log.info("collector listening on %s, storing into %s, at most %d connections", self.settings.listen.rsplit(":", 1)[0] + f":{self.port}",
                 self.engine.url.render_as_string(hide_password=True), self.max_connections)
        self._ready.set()
        await self._stop_event.wait()
        log.info("collector stopping: acknowledging in-flight batches")
        self._service.begin_shutdown()
        await self.observability.begin_shutdown()  # health: NOT_SERVING
        await server.stop(self.settings.grace_s)
        await asyncio.to_thread(self.writer.stop)
        if rollup_job is not None:
            await asyncio.to_thread(rollup_job.stop)
        if detector_job is not None:
            await asyncio.to_thread(detector_job.stop)
        if retention_job is not None:
            await asyncio.to_thread(retention_job.stop)
        if compaction_job is not None:
            await asyncio.to_thread(compaction_job.stop)
        if alert_job is not None and sender is not None:
            await asyncio.to_thread(alert_job.stop)
            await asyncio.to_thread(sender.stop)
        await self.observability.stop()
        await asyncio.to_thread(trimmer.stop)
        self.engine.dispose()
        log.info("collector stopped")

    def _balancer(self) -> StreamBalancer | None:
        if self.settings.worker_loads is None:
            return None
        return StreamBalancer(WorkerLoads(self.settings.worker_loads, self.settings.worker_index))

    def _detector_settings(self) -> DetectorSettings:
        """The detectors' settings for this pass: the rules file's (reloaded) or the given ones,
        with the collector's flags on top."""
        given = self.settings.detectors
        base = given() if callable(given) else (given or DetectorSettings())
        if self.rules is not None:
            base = self.rules.current().detector_settings()
        overrides = dict(self.settings.detector_overrides)
        return replace(base, **overrides) if overrides else base

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
