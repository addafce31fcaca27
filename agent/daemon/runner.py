"""The agent's main loop: sample at the interval, flush batches to the spool, let the uplink send.

Sampling, spooling and sending are decoupled: the loop only ever writes to the local spool,
and the uplink thread drains it. A collector that is away, slow or refusing never slows the
sampling; a sampler that raises is counted and skipped for that tick.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleetscope.agent import __version__
from fleetscope.agent.daemon.batcher import CLASS_INCIDENTS, CLASS_LOGS, BuiltBatch, Pending, build_batches
from fleetscope.agent.daemon.clocks import boot_clock_ns
from fleetscope.agent.daemon.credentials import ChannelTLS, load_or_create_device_key
from fleetscope.agent.daemon.footprint import release_free_memory
from fleetscope.agent.daemon.identity import (
    detect_kind,
    host_inventory,
    hostname,
    load_or_create_agent_id,
    new_stream_id,
    read_boot_id,
)
from fleetscope.agent.daemon.log_pipeline import Classify, LogPipeline
from fleetscope.agent.daemon.spool import Spool, SpoolError
from fleetscope.agent.daemon.uplink import Backoff, Uplink
from fleetscope.agent.logs.registry import LogSourceSettings, default_log_sources
from fleetscope.agent.records import LogEvent
from fleetscope.agent.samplers._base import Sampler, SampleSet, SourceUnavailable
from fleetscope.proto.compact import compact
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import CAPABILITIES

if TYPE_CHECKING:
    from fleetscope.agent.daemon.local_server import LocalReportServer

log = logging.getLogger(__name__)
_TRIM_INTERVAL_S = 10.0  # how often freed heap pages go back to the kernel (agent/daemon/footprint.py)
# A change of (wall - monotonic) above this between two readings is a step of the wall clock,
# not NTP slewing (at most 500 ppm); below the collector's 2 s skew tolerance.
_CLOCK_STEP_NS = 10**9



@dataclass(frozen=True)
class AgentSettings:
    collectors: tuple[str, ...]
    spool_dir: Path
    token: str = ""
    name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    interval_s: float = 1.0
    # How often the samples gathered meanwhile leave as one batch. Logs, incidents, latency
    # histograms and inventory records leave every sample tick (an incident at once), whatever
    # this is: longer only delays readings, and each batch of readings costs a link less a value
    # (compact-v1: about 1.4 bytes a reading at 10 s against 8 at 1 s, docs/benchmarks.md).
    batch_interval_s: float = 1.0
    # Followed logs are also polled this often between samples, and a batch holding an incident
    # is flushed at once: an OOM line reaches the collector in well under a second. A poll of
    # logs that did not grow is a stat or an empty read.
    log_poll_s: float = 0.25
    spool_max_bytes: int = 256 << 20
    log_files: tuple[str, ...] = ()
    kernel_log: bool = False
    journal_units: tuple[str, ...] = ()
    sdk_socket: str | None = None
    window: int = 16
    drain_timeout_s: float = 5.0
    max_rows_per_batch: int = 5000
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    tls: ChannelTLS | None = None  # None: plaintext (loopback and tests only)
    device_key: bool = True  # make and present a device key (agent/daemon/credentials.py); False: token only
    uplink_rate_bytes_per_s: float = 0.0  # pace the uplink to this (--uplink-rate); 0: unlimited

    @property
    def log_sources(self) -> LogSourceSettings:
        return LogSourceSettings(files=self.log_files, kernel_log=self.kernel_log, journal_units=self.journal_units)


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        samplers: list[Sampler],
        classify: Classify | None = None,
        inventory: pb.Inventory | None = None,
        kind: int | None = None,
        clock: Callable[[], int] = time.time_ns,
        mono_clock: Callable[[], int] = boot_clock_ns,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock  # device wall clock (ns); a parameter so a test can set it an hour off
        self._mono_clock = mono_clock  # never steps: lets the collector place rows after a wall-clock step
        self._tick_clocks: tuple[int, int] | None = None  # (wall, mono) read by the last tick
        self._clock_boot_id = read_boot_id()  # the kernel boot the monotonic clock counts from
        self.agent_id = load_or_create_agent_id(settings.spool_dir)
        self.kernel_boot_id = read_boot_id()
        # Sent as the wire's boot_id: new at every start, so sequence numbers never repeat on the
        # wire whatever happened to the spool (see identity.new_stream_id).
        self.boot_id = new_stream_id(self.kernel_boot_id)
        self.fatal: BaseException | None = None  # why the loop died, if it did
        self._on_fatal = on_fatal
        self._samplers = samplers
        self._logs = LogPipeline(default_log_sources().build(settings.log_sources), classify=classify)
        self.spool = Spool(settings.spool_dir, max_bytes=settings.spool_max_bytes)
        self._pending = Pending()
        self._pending_lock = threading.Lock()
        self._reported_drops: tuple[int, ...] | None = None  # the spool's drop counts in the newest batch
        self._sampler_errors = 0
        self._unspooled = 0
        self._warned: set[str] = set()
        self._inventory = inventory if inventory is not None else self._build_inventory()
        self._kind = kind if kind is not None else detect_kind(has_nvidia_gpu=bool(self._inventory.gpus))
        self.uplink = Uplink(
            self.spool,
            addresses=list(settings.collectors),
            token=settings.token,
            register_request=self.register_request,
            window=settings.window,
            backoff=Backoff(initial_s=settings.backoff_initial_s, maximum_s=settings.backoff_max_s),
            clock=clock,
            mono_clock=mono_clock,
            clock_boot_id=self._clock_boot_id,
            tls=settings.tls,
            agent_id=self.agent_id,
            device_key=load_or_create_device_key(settings.spool_dir) if settings.device_key else "",
            rate_bytes_per_s=settings.uplink_rate_bytes_per_s,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._local_server: LocalReportServer | None = None  # started by run(), when a socket is set

    def _build_inventory(self) -> pb.Inventory:
        inv = host_inventory()
        index = 0
        for s in self._samplers:
            for g in s.inventory():
                inv.gpus.add(
                    index=index, name=g.name, uuid=g.uuid or "", serial=g.serial or "",
                    memory_total_bytes=g.memory_total_bytes or 0, compute_capability=g.compute_capability or "",
                    pci_bus_id=g.pci_bus_id or "", mig_parent_uuid=g.mig_parent_uuid or "",
                    fp16_tensor_cores=bool(g.fp16_tensor_cores), bf16_tensor_cores=bool(g.bf16_tensor_cores),
                    int8_tensor_cores=bool(g.int8_tensor_cores),
                )
                index += 1
            fill = getattr(s, "inventory_fields", None)
            if fill is not None:
                fill(inv)
            driver = getattr(s, "driver_version", None)
            if callable(driver):
                driver = driver()
            if driver:
                inv.driver_version = str(driver)
            cuda = getattr(s, "cuda_driver_version", None)
            if cuda:
                inv.cuda_driver_version = str(cuda)
        return inv

    def register_request(self) -> pb.RegisterRequest:
        req = pb.RegisterRequest(
            agent_id=self.agent_id,
            boot_id=self.boot_id,
            name=self.settings.name or hostname(),
            hostname=hostname(),
            kind=self._kind,  # type: ignore[arg-type]
            agent_version=__version__,
            capabilities=list(CAPABILITIES),
            batch_interval_s=max(self.settings.interval_s, self.settings.batch_interval_s),
        )
        req.inventory.CopyFrom(self._inventory)
        req.labels.update(self.settings.labels)
        return req

    # -- adding records (also used by the SDK's local server) ---------------------------------

    def add(self, records: SampleSet) -> None:
        with self._pending_lock:
            self._pending.add(records)

    def add_sdk_report(self, report: pb.SdkReport) -> None:
        with self._pending_lock:
            p = self._pending
            p.latency.extend(report.latency)
            p.metrics.extend(report.metrics)
            p.inventory_records.extend(report.inventory_records)
            p.sdk_logs.extend(report.logs)
            p.sdk_incidents.extend(report.incidents)

    # -- the loop ---------------------------------------------------------------------------

    def tick(self, now_ns: int | None = None) -> None:
        """Sample every source once."""
        if now_ns is None:
            now_ns = self._read_clocks_flushing_on_step()
        else:
            self._tick_clocks = None  # the caller's time: no monotonic reading pairs with it
        lines: list[LogEvent] = []
        for sampler in list(self._samplers):
            try:
                records = sampler.sample(now_ns)
                # A source's own log lines (a simulated job's output) are classified like followed files'.
                lines.extend(records.logs)
                records.logs = []
                self.add(records)
            except SourceUnavailable as exc:
                log.warning("turning off source %s: %s", sampler.name, exc)
                self._samplers.remove(sampler)
            except Exception as exc:  # one broken source must not stop the others
                self._sampler_errors += 1
                if sampler.name not in self._warned:
                    self._warned.add(sampler.name)
                    log.warning("sampler %s failed: %s (further failures are only counted)", sampler.name, exc)
        # Every tick, even with no lines: that is when held multi-line blocks time out.
        self.add(self._logs.read(now_ns, lines))

    def _read_clocks_flushing_on_step(self) -> int:
        """The wall clock now. When it stepped since the last tick, the rows pending were stamped
        on the old clock: they are flushed first, so that one (wall, monotonic) pair describes
        every row of a batch (the collector places a batch by that pair)."""
        wall, mono = self._clock(), self._mono_clock()
        last = self._tick_clocks
        if last is not None and abs((wall - mono) - (last[0] - last[1])) > _CLOCK_STEP_NS:
            log.info("the wall clock stepped by %.1f s", ((wall - mono) - (last[0] - last[1])) / 1e9)
            self.flush()
        self._tick_clocks = (wall, mono)
        return wall

    def _batch_clocks(self) -> tuple[int, int]:
        """(wall, mono) for the batches of the pending rows: now, unless the wall clock stepped
        since the last tick, whose reading is then the one on the rows' clock."""
        wall, mono = self._clock(), self._mono_clock()
        last = self._tick_clocks
        if last is not None and abs((wall - mono) - (last[0] - last[1])) > _CLOCK_STEP_NS:
            return last
        return wall, mono

    def flush(self, now_ns: int | None = None, *, final: bool = False, samples: bool = True) -> int:
        """Move pending records into the spool as batches; returns how many were written.
        ``final``: the agent is stopping cleanly; its last batch (an empty one when nothing is
        pending) says so, and the collector shows the device as stopped, not offline.
        ``samples=False``: readings (host, GPU, metric points) stay pending for a later batch;
        logs, incidents and the rest leave now."""
        now_mono_ns = 0  # unknown for a caller's time
        if now_ns is None:
            now_ns, now_mono_ns = self._batch_clocks()
        with self._pending_lock:
            pending, self._pending = self._pending, Pending()
            if not samples:
                self._pending.host, self._pending.gpu, self._pending.metrics = pending.host, pending.gpu, pending.metrics
                pending.host, pending.gpu, pending.metrics = [], [], []
        if pending.empty():
            if final or self._drops_unreported():
                # Drops caused by the last batches' own writes are in no batch yet; with nothing
                # else to send (sampling stopped, a quiet device) they would never be reported.
                built = [BuiltBatch(CLASS_INCIDENTS, pb.Batch(created_ns=now_ns, created_mono_ns=now_mono_ns,
                                                               created_boot_id=self._clock_boot_id), 0, 0, 0)]
            else:
                return 0
        else:
            built = build_batches(pending, max_rows=self.settings.max_rows_per_batch, now_ns=now_ns,
                                  now_mono_ns=now_mono_ns, clock_boot_id=self._clock_boot_id)
        counters = self._counters()
        drops_to_report = final or self._drops_unreported()
        self._reported_drops = self.spool.drop_totals()
        written = 0
        for bb in built:
            seq = self.spool.reserve_seq()
            b = bb.batch
            b.agent_id, b.boot_id, b.seq = self.agent_id, self.boot_id, seq
            # A batch of logs alone leaves every second a job prints: the counters ride with the
            # readings (every batch interval), incidents and the last batch, which is often enough.
            if bb.delivery_class != CLASS_LOGS or drops_to_report:
                b.counters.CopyFrom(counters)
            b.final = final and bb is built[-1]
            try:
                # Spooled compact whatever the collector speaks: the uplink expands a batch for
                # one that does not (an older collector), so the spool always holds the most.
                self.spool.put(seq, compact(b).SerializeToString(), delivery_class=bb.delivery_class, samples=bb.samples,
                               logs=bb.logs, incidents=bb.incidents)
                written += 1
            except SpoolError as exc:
                self._unspooled += 1
                log.error("%s", exc)
        if written:
            self.uplink.notify()
        return written

    def _drops_unreported(self) -> bool:
        drops = self.spool.drop_totals()
        if self._reported_drops is None:  # counts carried over from an earlier run went out with it
            self._reported_drops = drops
        return drops != self._reported_drops

    def counters(self) -> pb.AgentCounters:
        """The counters the agent reports in its batches, read now (the self-metrics read them too)."""
        return self._counters()

    def _counters(self) -> pb.AgentCounters:
        st = self.spool.stats()
        c = st.counters
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return pb.AgentCounters(
            spool_batches=st.batches,
            spool_bytes=st.bytes,
            dropped_batches=c["dropped_batches"] + self._unspooled,
            dropped_samples=c["dropped_samples"],
            dropped_logs=c["dropped_logs"],
            dropped_incidents=c["dropped_incidents"],
            reconnects=c["reconnects"],
            rejected_batches=c["rejected_batches"],
            last_rejection=st.last_rejection,
            sampler_errors=self._sampler_errors + self._logs.errors,
            rss_bytes=float(_rss_bytes()),
            cpu_seconds=usage.ru_utime + usage.ru_stime,
        )

    def _incidents_pending(self) -> bool:
        with self._pending_lock:
            return bool(self._pending.incidents or self._pending.sdk_incidents)

    def _wait_polling_logs(self, until_monotonic: float) -> None:
        """Wait for the next sample, reading the logs every ``log_poll_s`` meanwhile and
        flushing at once when they brought an incident."""
        poll = self.settings.log_poll_s
        while not self._stop.is_set():
            remaining = until_monotonic - time.monotonic()
            if remaining <= 0:
                return
            if poll <= 0 or poll >= remaining:
                self._stop.wait(remaining)
                return
            if self._stop.wait(poll):
                return
            records = self._logs.read(self._read_clocks_flushing_on_step())
            if records.logs or records.incidents:
                self.add(records)
            if records.incidents:
                self.flush()

    def run(self) -> None:
        """Sample and flush until ``stop``; then flush, drain the spool for a moment and close."""
        self._start_local_server()
        self.uplink.start()
        interval = self.settings.interval_s
        next_sample = time.monotonic()
        next_seal = next_sample + self.settings.batch_interval_s
        # The first trim comes right after start-up, which leaves the most freed memory behind
        # (imports, registration, the first scans of logs and processes).
        next_trim = next_sample + 3.0
        try:
            while not self._stop.is_set():
                if not self.uplink.alive():
                    raise RuntimeError("the uplink thread died: nothing spooled would be sent")
                self.tick()
                now = time.monotonic()
                # Readings leave once a batch interval; with an incident, at once, so that the
                # memory, clocks and temperatures before it reach the collector with it.
                seal = now >= next_seal or self._incidents_pending()
                # Logs leave every tick while a collector listens. Out of reach they could not
                # leave anyway: they wait for the readings' batch, one spool row instead of one
                # a tick (a day out of coverage holds twice as long in the same spool).
                if seal or self.uplink.status.connected:
                    self.flush(samples=seal)
                if seal:
                    next_seal = now + self.settings.batch_interval_s
                if now >= next_trim:
                    release_free_memory()
                    next_trim = now + _TRIM_INTERVAL_S
                next_sample += interval
                if next_sample < now:  # fell behind (a slow source, a suspended VM): don't burst
                    next_sample = now + interval
                self._wait_polling_logs(next_sample)
        except BaseException as exc:
            # A process whose loop is dead but which stays alive is the worst outcome: no
            # supervisor restarts it and nothing is sampled. Say it in one line and let the
            # owner (the CLI) exit non-zero.
            self.fatal = exc
            log.critical("fleetscope agent: the sampling loop died (%s: %s); exiting so that a supervisor restarts it",
                         type(exc).__name__, exc)
            log.debug("sampling loop failure", exc_info=True)
        finally:
            self._shutdown()
            if self.fatal is not None and self._on_fatal is not None:
                self._on_fatal(self.fatal)

    def _shutdown(self) -> None:
        # Each step on its own: a failing one (the reason for a fatal exit, perhaps) must not
        # keep the spool from being closed cleanly.
        steps: list[tuple[str, Callable[[], object]]] = [
            ("flush logs", lambda: self.add(self._logs.close())),
            # A clean stop says so in its last batch; a dead sampling loop does not (it is an outage).
            ("flush", lambda: self.flush(final=self.fatal is None)),
            ("stop the SDK socket", lambda: self._local_server.stop(1.0) if self._local_server is not None else None),
            ("drain", self._drain_and_stop_uplink),
            *[(f"close {s.name}", s.close) for s in self._samplers],
            ("close the spool", self.spool.close),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # shutting down is best effort, step by step
                log.warning("at shutdown, %s failed: %s", what, exc)

    def _drain_and_stop_uplink(self) -> None:
        drained = self.uplink.drain(self.settings.drain_timeout_s) if self.fatal is None else False
        self.uplink.stop()
        left = self.spool.stats().batches
        if not drained and left:
            log.info("%d batches stay in the spool %s and are sent on the next start", left, self.spool.path)

    def _start_local_server(self) -> None:
        if not self.settings.sdk_socket:
            return
        try:
            from fleetscope.agent.daemon.local_server import LocalReportServer

            self._local_server = LocalReportServer(self.settings.sdk_socket, self.add_sdk_report)
            self._local_server.start()
            log.info("SDK socket at %s", self.settings.sdk_socket)
        except Exception as exc:  # the SDK endpoint is optional; the agent runs without it
            log.warning("cannot serve the SDK socket %s: %s", self.settings.sdk_socket, exc)
            self._local_server = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"fleetscope-agent-{self.settings.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
