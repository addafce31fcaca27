"""The records an agent produces, as frozen dataclasses with units in their names.

These are what samplers and log sources hand to the batcher; the batcher turns them into
the wire's columnar messages (``fleetscope.proto.v1``). ``None`` always means "not available
on this device or not read this time", never zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Clock-event (throttle) reasons: the bits and their names are defined in the shared vocabulary
# (the collector names the same bits); re-exported here for the agent's modules.
from fleetscope.proto.vocabulary import THROTTLE_REASON_BITS, throttle_reason_names

__all__ = [
    "THROTTLE_REASON_BITS",
    "FactValue",
    "GpuInfo",
    "GpuSample",
    "HostSample",
    "IncidentRecord",
    "LatencyRecord",
    "LogEvent",
    "ProcessUsage",
    "throttle_reason_names",
]

# A fact extracted from a log line or reported by a program: what incidents carry.
FactValue = str | int | float | bool


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    name: str
    cpu_percent: float | None
    rss_bytes: int | None
    gpu_memory_bytes: int | None = None
    container_id: str | None = None


@dataclass(frozen=True)
class HostSample:
    ts_ns: int
    cpu_percent: float | None = None
    cpu_core_percent: tuple[float, ...] = ()
    cpu_core_freq_mhz: tuple[float, ...] = ()
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    disk_total_bytes: int | None = None
    disk_used_bytes: int | None = None
    disk_read_bytes: int | None = None  # cumulative counters since boot
    disk_write_bytes: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    top_processes: tuple[ProcessUsage, ...] = ()


@dataclass(frozen=True)
class GpuSample:
    """One GPU (or MIG instance, or a Jetson's integrated GPU) at one instant."""

    ts_ns: int
    gpu_index: int
    util_gpu_percent: float | None = None
    util_memory_percent: float | None = None
    util_encoder_percent: float | None = None
    util_decoder_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_total_bytes: int | None = None
    bar1_used_bytes: int | None = None
    bar1_total_bytes: int | None = None
    temp_c: float | None = None
    memory_temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None  # cumulative since driver load
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    graphics_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    pstate: int | None = None
    fan_percent: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    throttle_reasons: int | None = None  # bit mask, see THROTTLE_REASON_BITS
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages: int | None = None
    remapped_rows: int | None = None
    processes: tuple[ProcessUsage, ...] = ()


@dataclass(frozen=True)
class GpuInfo:
    """Inventory of one GPU, sent at registration."""

    index: int
    name: str
    uuid: str | None = None
    serial: str | None = None
    memory_total_bytes: int | None = None
    compute_capability: str | None = None  # "8.0"
    pci_bus_id: str | None = None
    mig_parent_uuid: str | None = None
    fp16_tensor_cores: bool | None = None
    bf16_tensor_cores: bool | None = None
    int8_tensor_cores: bool | None = None


@dataclass(frozen=True)
class LogEvent:
    ts_ns: int
    source: str  # file path, "kmsg", "journal:UNIT", "sdk"
    message: str
    level: str = "info"  # "debug", "info", "warning", "error", "critical"
    parsed_ts_ns: int | None = None  # time printed in the line itself, when there is one


@dataclass(frozen=True)
class IncidentRecord:
    ts_ns: int
    kind: str
    severity: str
    title: str
    facts: Mapping[str, FactValue] = field(default_factory=dict)
    source: str = ""
    excerpt: str = ""


@dataclass(frozen=True)
class LatencyRecord:
    """A mergeable latency histogram over [start_ns, end_ns) for one named operation."""

    name: str
    start_ns: int
    end_ns: int
    count: int
    sum_ns: int
    errors: int
    buckets: Mapping[int, int]  # bucket index -> count (fleetscope.proto.buckets)
    labels: Mapping[str, str] = field(default_factory=dict)
    zero_count: int = 0
