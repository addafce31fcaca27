"""The values more than one subject returns: a device, an incident, a log line, raw sample points.

Frozen dataclasses of plain values (no ORM objects), so callers never depend on the schema and
results can be cached, pickled and turned into JSON (``to_jsonable``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeviceSummary:
    name: str
    agent_id: str
    kind: str
    hostname: str
    labels: dict[str, str]
    online: bool
    first_seen_ns: int
    last_seen_ns: int
    agent_version: str
    clock_skew_ns: int
    gpu_count: int
    gpus: list[str]
    inventory: dict[str, Any]
    batches_stored: int
    batches_rejected: int
    last_rejection: str
    counters: dict[str, Any]
    simulated: bool
    batches_reanchored: int = 0  # placed by the device's monotonic clock after its wall clock stepped
    last_clock_step_ns: int = 0  # the last such step (rows' clock minus send-time clock); 0: none
    stopped: bool = False  # its agent said it stopped cleanly (neither online nor offline)
    offline_after_s: float = 10.0  # silent longer than this: offline (query.devices.OfflineRule)


@dataclass(frozen=True)
class IncidentView:
    id: int
    device: str
    ts_ns: int
    kind: str
    severity: str
    title: str
    facts: dict[str, Any]
    source: str
    excerpt: str
    # The lifecycle (see storage.incidents): ``ts_ns`` is when it started, ``last_seen_ns`` its
    # latest occurrence, ``count`` how many occurrences it groups, ``ended_ns`` when it resolved
    # (None while open). ``state`` is vocabulary.INCIDENT_STATES, ``origin`` INCIDENT_ORIGINS.
    state: str = "open"
    origin: str = "agent"
    count: int = 1
    last_seen_ns: int = 0
    ended_ns: int | None = None
    gpu_index: int | None = None
    pid: int | None = None
    process_name: str = ""
    group_key: str = ""
    hints: list[dict[str, Any]] = field(default_factory=list)  # [{"text": str, "facts": {...}}]
    updated_ns: int = 0  # collector time of the last change


@dataclass(frozen=True)
class LogLine:
    device: str
    ts_ns: int
    source: str
    level: str
    message: str


@dataclass(frozen=True)
class HostPoint:
    ts_ns: int
    values: dict[str, float | None]
    cpu_cores: list | None = None
    top_processes: list | None = None


@dataclass(frozen=True)
class GpuPoint:
    ts_ns: int
    gpu_index: int
    values: dict[str, float | None]


@dataclass(frozen=True)
class GpuStatePoint:
    ts_ns: int
    gpu_index: int
    values: dict[str, float | None]
    processes: list | None = None
