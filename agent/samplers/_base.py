"""The one interface every sampler has.

A sampler is built only when its source exists on the device (its factory in
:mod:`fleetscope.agent.samplers.registry` decides, without side effects), returns records on
each ``sample`` and is closed once. It must never block the agent's loop for long: a source
that can hang (NVML on a lost GPU, a stuck sysfs read) bounds its own calls with a timeout and
returns what it has. A source that turns out not to work raises :class:`SourceUnavailable`,
when built or while sampling, and the agent turns it off with one log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fleetscope.agent.records import GpuInfo, GpuSample, HostSample, IncidentRecord, LogEvent
from fleetscope.proto.v1 import telemetry_pb2 as pb

__all__ = ["SampleSet", "Sampler", "SourceUnavailable"]


class SourceUnavailable(RuntimeError):
    """The source cannot work on this device (library or driver missing): the agent turns it
    off with one log line instead of counting an error every tick."""


@dataclass
class SampleSet:
    """What one ``sample`` call produced; any list may be empty."""

    host: list[HostSample] = field(default_factory=list)
    gpu: list[GpuSample] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    incidents: list[IncidentRecord] = field(default_factory=list)
    metrics: list[pb.MetricPoint] = field(default_factory=list)  # device scalars without a column (Jetson rails)


class Sampler(Protocol):
    name: str

    def sample(self, now_ns: int) -> SampleSet: ...

    def inventory(self) -> list[GpuInfo]:
        """The GPUs this sampler knows of (empty for host-only sources)."""
        ...

    def close(self) -> None: ...
