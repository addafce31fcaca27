"""Getting records to the local agent: one daemon thread, a bounded queue, short RPCs.

User threads only append to a deque (atomic in CPython, no lock). The reporting thread wakes
every flush interval (or on ``flush``), takes the latency windows and the queue, and sends one
SdkReport per ``max_records_per_report`` over gRPC to the agent's Unix socket. When no agent
listens, the report is dropped and counted; the count rides in the next report that gets
through (``SdkReport.dropped``). Nothing here ever raises into, or waits on behalf of, the
program, except ``flush``/``shutdown``, whose waits are bounded by their timeouts.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetscope.agent.sdk._config import SdkConfig, socket_path
from fleetscope.proto.v1 import telemetry_pb2 as pb

log = logging.getLogger("fleetscope.agent.sdk")

# A queued metric travels as a tuple, built in ~0.1 us, and becomes a MetricPoint on the
# reporting thread; rarer records (logs, incidents, inventory) are built where they happen.
MetricItem = tuple[str, int, float, tuple[tuple[str, str], ...]]
QueueItem = Any  # MetricItem | pb.LogEvent | pb.Incident | pb.InventoryRecord

# gRPC's default reconnect backoff grows to two minutes; an agent that restarts should be
# reached again within a few seconds.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.enable_http_proxy", 0),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
)
_MAX_REPORTS_PER_CYCLE = 20  # past this the rest waits for the next cycle, so flush stays bounded


@dataclass(frozen=True)
class SdkStats:
    """The SDK's own health, cumulative since the process started."""

    running: bool  # the reporting thread is alive
    target: str
    queued: int  # records waiting for the next report
    reports_sent: int
    reports_failed: int
    records_sent: int
    dropped_total: int  # records dropped: queue full, no agent, failed RPCs, shut down
    dropped_unreported: int  # of those, not yet announced in an SdkReport.dropped
    last_error: str  # the latest failure's reason, "" when none


class Transport:
    def __init__(
        self,
        get_config: Callable[[], SdkConfig],
        collect_latency: Callable[[], list[pb.LatencyHistogram]],
        before_collect: Callable[[], object] | None = None,
    ) -> None:
        self._get_config = get_config
        self._collect_latency = collect_latency
        self._before_collect = before_collect
        self._queue: collections.deque[QueueItem] = collections.deque()
        self._init_state()
        self._atexit_registered = False

    def _init_state(self) -> None:
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._cycle_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._requested = 0  # flush generations asked for
        self._completed = 0  # flush generations done
        self._stopping = False
        self._closed = False  # shut down: no new thread until reopen()
        self._forked = False  # a forked child reports only after configure() in it
        self._channel: Any = None
        self._channel_target: str | None = None
        self._stub: Any = None
        self._reports_sent = 0
        self._reports_failed = 0
        self._records_sent = 0
        self._dropped_total = 0
        self._dropped_unreported = 0
        self._last_error = ""
        self._last_cycle_ok = True

    # ---------------------------------------------------------------- producer side

    def emit(self, item: QueueItem) -> None:
        """Queue one record; drops (and counts) it when the queue is full or reporting is off."""
        if self._thread is None and not self._start_if_allowed():
            self._count_dropped(1)
            return
        # The length check and the append are not one atomic step; a few records over the bound
        # under contention are harmless, a lock on every record would not be.
        if len(self._queue) >= self._get_config().max_queue:
            self._count_dropped(1)
            return
        self._queue.append(item)

    def ensure_started(self) -> None:
        if self._thread is None:
            self._start_if_allowed()

    def _start_if_allowed(self) -> bool:
        config = self._get_config()
        if config.disabled or self._closed or self._forked:
            return False
        with self._cond:
            if self._thread is not None:
                return True
            self._stopping = False
            thread = threading.Thread(target=self._run, name="fleetscope-sdk", daemon=True)
            self._thread = thread
            if not self._atexit_registered:
                atexit.register(self._at_exit)
                self._atexit_registered = True
        try:
            thread.start()
        except RuntimeError:  # e.g. "can't create new thread at interpreter shutdown"
            with self._cond:
                self._thread = None
            return False
        return True

    def _count_dropped(self, n: int) -> None:
        if n <= 0:
            return
        with self._counter_lock:
            self._dropped_total += n
            self._dropped_unreported += n

    # ---------------------------------------------------------------- control

    def flush(self, timeout: float = 2.0) -> bool:
        """Send everything pending now; True when it was sent (or there was nothing to send)."""
        if self._thread is None and not self._start_if_allowed():
            return False
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            self._requested += 1
            target = self._requested
            self._wake.set()
            while self._completed < target:
                remaining = deadline - time.monotonic()
                thread = self._thread
                if remaining <= 0 or thread is None or not thread.is_alive():
                    return False
                self._cond.wait(remaining)
        return self._last_cycle_ok

    def shutdown(self, timeout: float = 2.0) -> None:
        """Send what is pending (bounded by ``timeout``) and stop the thread."""
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._closed = True
            self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(timeout, 0.0))
        with self._cond:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None
        self._close_channel()

    def reopen(self) -> None:
        """Allow reporting again after ``shutdown`` or in a forked child (``configure`` calls this)."""
        with self._cond:
            thread = self._thread
            if thread is not None and not thread.is_alive():
                self._thread = None
            # A thread still finishing its last cycle after shutdown() carries on instead.
            self._stopping = False
            self._closed = False
            self._forked = False

    def reset_after_fork(self) -> None:
        # The parent's thread does not exist here, its locks may be held, and its gRPC channel
        # must not be touched: start over, silent until the child asks for reporting itself.
        self._queue = collections.deque()
        self._init_state()
        self._forked = True

    def _at_exit(self) -> None:
        try:
            self.shutdown(self._get_config().exit_flush_timeout_s)
        except Exception:
            pass

    def stats(self) -> SdkStats:
        thread = self._thread
        return SdkStats(
            running=thread is not None and thread.is_alive(),
            target=self._get_config().socket,
            queued=len(self._queue),
            reports_sent=self._reports_sent,
            reports_failed=self._reports_failed,
            records_sent=self._records_sent,
            dropped_total=self._dropped_total,
            dropped_unreported=self._dropped_unreported,
            last_error=self._last_error,
        )

    # ---------------------------------------------------------------- reporting thread

    def _run(self) -> None:
        while True:
            self._wake.wait(self._get_config().flush_interval_s)
            self._wake.clear()
            with self._cond:
                generation = self._requested
                stopping = self._stopping
            try:
                ok = self._cycle()
            except Exception as exc:  # the thread must outlive any one bad cycle
                ok = False
                self._last_error = f"cycle failed: {exc!r}"
                log.debug("fleetscope sdk: report cycle failed", exc_info=True)
            with self._cond:
                self._last_cycle_ok = ok
                self._completed = max(self._completed, generation)
                self._cond.notify_all()
                if stopping and self._stopping:  # unless reopen() came in meanwhile
                    self._thread = None
                    return

    def _cycle(self) -> bool:
        with self._cycle_lock:
            if self._before_collect is not None:
                try:
                    self._before_collect()
                except Exception:
                    pass
            latency = self._collect_latency()
            ok = True
            for n in range(_MAX_REPORTS_PER_CYCLE):
                items = self._drain(self._get_config().max_records_per_report)
                if n > 0 and not items:
                    break
                if not latency and not items and self._dropped_unreported == 0:
                    break
                ok = self._send(latency, items) and ok
                latency = []
            return ok

    def _drain(self, limit: int) -> list[QueueItem]:
        out: list[QueueItem] = []
        queue = self._queue
        while len(out) < limit:
            try:
                out.append(queue.popleft())
            except IndexError:
                break
        return out

    def _build(self, latency: list[pb.LatencyHistogram], items: list[QueueItem]) -> pb.SdkReport:
        config = self._get_config()
        report = pb.SdkReport(
            process=pb.ProcessRef(pid=os.getpid(), name=config.process_name, labels=dict(config.labels)),
            dropped=self._dropped_unreported,
        )
        report.latency.extend(latency)
        for item in items:
            if type(item) is tuple:
                name, ts_ns, value, labels = item
                m = report.metrics.add(name=name, ts_ns=ts_ns, value=value)
                if labels:
                    m.labels.update(labels)
            elif isinstance(item, pb.LogEvent):
                report.logs.append(item)
            elif isinstance(item, pb.Incident):
                report.incidents.append(item)
            elif isinstance(item, pb.InventoryRecord):
                report.inventory_records.append(item)
        return report

    def _send(self, latency: list[pb.LatencyHistogram], items: list[QueueItem]) -> bool:
        report = self._build(latency, items)
        records = len(latency) + len(items)
        config = self._get_config()
        path = socket_path(config.socket)
        # Without a socket file there is no agent: skip gRPC entirely, which keeps a program that
        # runs without an agent as cheap as one that never reports.
        if path is not None and not os.path.exists(path):
            return self._failed(records, f"no agent socket at {path}")
        try:
            stub = self._stub_for(config.socket)
            stub.Report(report, timeout=config.rpc_timeout_s, wait_for_ready=False)
        except Exception as exc:
            code = getattr(exc, "code", None)
            reason = f"{code().name}: {exc.details()}" if callable(code) else repr(exc)  # type: ignore[attr-defined]
            return self._failed(records, reason)
        with self._counter_lock:
            self._dropped_unreported -= report.dropped
        self._reports_sent += 1
        self._records_sent += records
        self._last_error = ""
        return True

    def _failed(self, records: int, reason: str) -> bool:
        self._reports_failed += 1
        self._count_dropped(records)
        self._last_error = reason
        log.debug("fleetscope sdk: report dropped (%d records): %s", records, reason)
        return False

    def _stub_for(self, target: str) -> Any:
        if self._stub is None or self._channel_target != target:
            self._close_channel()
            # grpc is imported here, not at module import, so `import fleetscope.agent.sdk` stays
            # cheap for programs that never report.
            import grpc

            from fleetscope.proto.v1 import telemetry_pb2_grpc

            self._channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
            self._channel_target = target
            self._stub = telemetry_pb2_grpc.LocalStub(self._channel)
        return self._stub

    def _close_channel(self) -> None:
        channel, self._channel, self._stub, self._channel_target = self._channel, None, None, None
        if channel is not None:
            try:
                channel.close()
            except Exception:
                pass
