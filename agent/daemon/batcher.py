"""Records in, wire batches out.

The agent collects records between flushes; ``build_batches`` turns them into up to three
batches by delivery class, because the spool drops by class when it is full: samples
(host, GPU, latency, metrics) go first, logs next, incidents last. Splitting by class at
build time keeps that eviction a simple ``DELETE`` of whole batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetscope.agent.records import (
    GpuSample,
    HostSample,
    IncidentRecord,
    LogEvent,
    ProcessUsage,
)
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.proto.columns import GPU_COLUMNS, HOST_COLUMNS, PROCESS_COLUMNS, fill_column
from fleetscope.proto.v1 import telemetry_pb2 as pb

CLASS_SAMPLES = 0
CLASS_LOGS = 1
CLASS_INCIDENTS = 2

LEVELS = {
    "debug": pb.LEVEL_DEBUG,
    "info": pb.LEVEL_INFO,
    "warning": pb.LEVEL_WARNING,
    "error": pb.LEVEL_ERROR,
    "critical": pb.LEVEL_CRITICAL,
}


@dataclass
class Pending:
    """Records gathered since the last flush."""

    host: list[HostSample] = field(default_factory=list)
    gpu: list[GpuSample] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    incidents: list[IncidentRecord] = field(default_factory=list)
    # From the in-process SDK, already in wire form.
    latency: list[pb.LatencyHistogram] = field(default_factory=list)
    metrics: list[pb.MetricPoint] = field(default_factory=list)
    inventory_records: list[pb.InventoryRecord] = field(default_factory=list)
    sdk_logs: list[pb.LogEvent] = field(default_factory=list)
    sdk_incidents: list[pb.Incident] = field(default_factory=list)

    def add(self, records: SampleSet) -> None:
        """What one sampler call produced."""
        self.host.extend(records.host)
        self.gpu.extend(records.gpu)
        self.logs.extend(records.logs)
        self.incidents.extend(records.incidents)
        self.metrics.extend(records.metrics)

    def empty(self) -> bool:
        return not (
            self.host or self.gpu or self.latency or self.metrics or self.inventory_records or self.logs
            or self.incidents or self.sdk_logs or self.sdk_incidents
        )


@dataclass(frozen=True)
class BuiltBatch:
    delivery_class: int
    batch: pb.Batch
    samples: int
    logs: int
    incidents: int


def _fill_processes(table: pb.ProcessTable, procs: Sequence[ProcessUsage]) -> None:
    table.pid.extend(p.pid for p in procs)
    table.name.extend(p.name for p in procs)
    table.container_id.extend(p.container_id or "" for p in procs)
    for name in PROCESS_COLUMNS:
        fill_column(getattr(table, name), [getattr(p, name) for p in procs])


def fill_host(msg: pb.HostSamples, samples: Sequence[HostSample]) -> None:
    msg.ts_ns.extend(s.ts_ns for s in samples)
    for name in HOST_COLUMNS:
        fill_column(getattr(msg, name), [getattr(s, name) for s in samples])
    msg.core_count.extend(len(s.cpu_core_percent) for s in samples)
    for s in samples:
        msg.cpu_core_percent.extend(s.cpu_core_percent)
    # Frequencies are all-or-nothing per batch so that the flattening stays aligned.
    if all(len(s.cpu_core_freq_mhz) == len(s.cpu_core_percent) for s in samples):
        for s in samples:
            msg.cpu_core_freq_mhz.extend(s.cpu_core_freq_mhz)
    if any(s.top_processes for s in samples):
        msg.process_count.extend(len(s.top_processes) for s in samples)
        _fill_processes(msg.processes, [p for s in samples for p in s.top_processes])


def fill_gpu(msg: pb.GpuSamples, samples: Sequence[GpuSample]) -> None:
    msg.ts_ns.extend(s.ts_ns for s in samples)
    msg.gpu_index.extend(s.gpu_index for s in samples)
    for name in GPU_COLUMNS:
        fill_column(getattr(msg, name), [getattr(s, name) for s in samples])
    if any(s.processes for s in samples):
        msg.process_count.extend(len(s.processes) for s in samples)
        _fill_processes(msg.processes, [p for s in samples for p in s.processes])


def fill_facts(target: object, facts: Mapping[str, object]) -> None:
    """Typed fact values into a proto ``map<string, FactValue>``."""
    for key, value in facts.items():
        fv = target[key]  # type: ignore[index]
        if isinstance(value, bool):
            fv.flag = value
        elif isinstance(value, int):
            fv.integer = value
        elif isinstance(value, float):
            fv.real = value
        else:
            fv.text = str(value)


def log_message(ev: LogEvent) -> pb.LogEvent:
    return pb.LogEvent(
        ts_ns=ev.ts_ns,
        source=ev.source,
        level=LEVELS.get(ev.level, pb.LEVEL_INFO),
        message=ev.message,
        parsed_ts_ns=ev.parsed_ts_ns or 0,
    )


def incident_message(rec: IncidentRecord) -> pb.Incident:
    msg = pb.Incident(
        ts_ns=rec.ts_ns,
        kind=rec.kind,
        severity=LEVELS.get(rec.severity, pb.LEVEL_ERROR),
        title=rec.title,
        source=rec.source,
        excerpt=rec.excerpt,
    )
    fill_facts(msg.facts, rec.facts)
    return msg


def _chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def build_batches(
    pending: Pending, *, max_rows: int = 5000, now_ns: int, now_mono_ns: int = 0, clock_boot_id: str = ""
) -> list[BuiltBatch]:
    """Batches (without agent id, seq or counters: the spool stamps those) for ``pending``.

    ``now_ns`` and ``now_mono_ns`` are one reading of the wall and monotonic clocks, taken on
    the wall clock the records were stamped with; ``clock_boot_id`` is the kernel boot the
    monotonic clock counts from. The monotonic reading is 0 when unknown.
    """
    out: list[BuiltBatch] = []
    host_chunks = list(_chunks(pending.host, max_rows)) or [[]]
    gpu_chunks = list(_chunks(pending.gpu, max_rows)) or [[]]
    for i in range(max(len(host_chunks), len(gpu_chunks))):
        hosts = host_chunks[i] if i < len(host_chunks) else []
        gpus = gpu_chunks[i] if i < len(gpu_chunks) else []
        first = i == 0
        if not (hosts or gpus or (first and (pending.latency or pending.metrics or pending.inventory_records))):
            continue
        b = pb.Batch(created_ns=now_ns, created_mono_ns=now_mono_ns, created_boot_id=clock_boot_id)
        if hosts:
            fill_host(b.host, hosts)
        if gpus:
            fill_gpu(b.gpu, gpus)
        if first:
            b.latency.extend(pending.latency)
            b.metrics.extend(pending.metrics)
            b.inventory_records.extend(pending.inventory_records)
        out.append(BuiltBatch(CLASS_SAMPLES, b, len(hosts) + len(gpus), 0, 0))
    logs = [log_message(e) for e in pending.logs] + list(pending.sdk_logs)
    for part in _chunks(logs, max_rows):
        b = pb.Batch(created_ns=now_ns, created_mono_ns=now_mono_ns, created_boot_id=clock_boot_id)
        b.logs.extend(part)
        out.append(BuiltBatch(CLASS_LOGS, b, 0, len(part), 0))
    incidents = [incident_message(r) for r in pending.incidents] + list(pending.sdk_incidents)
    if incidents:
        b = pb.Batch(created_ns=now_ns, created_mono_ns=now_mono_ns, created_boot_id=clock_boot_id)
        b.incidents.extend(incidents)
        out.append(BuiltBatch(CLASS_INCIDENTS, b, 0, 0, len(incidents)))
    return out
