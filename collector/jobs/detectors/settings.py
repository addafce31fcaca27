"""Detector settings: frozen, with defaults that work with no configuration.

A rules file (``fleetscope.collector.alerting``) builds these from its ``[[slo]]`` tables and its
detector settings; the collector's flags (``--offline-after``, ``--quiet-period``) override two of
them. Every duration is in seconds, every size in bytes. ``__post_init__`` refuses a value that
cannot work and names the setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from fleetscope.collector.query.devices import OFFLINE_INTERVALS, OFFLINE_MIN_S, OfflineRule
from fleetscope.proto.vocabulary import (
    KIND_AGENT_OFFLINE,
    KIND_GPU_STARVED,
    KIND_GPU_THROTTLING,
    KIND_LATENCY_REGRESSION,
    KIND_LATENCY_SLO,
    KIND_MEMORY_GROWTH,
    KIND_REPEATED_OOM,
)

__all__ = ["DETECTOR_NAMES", "DetectorSettings", "SloObjective"]

MIB = 1 << 20

# The detectors a pass runs, in order, each named by the kind it derives (and "lifecycle", the
# step that resolves quiet event incidents); ``DetectorSettings.disabled`` turns some off.
DETECTOR_NAMES: tuple[str, ...] = (
    KIND_AGENT_OFFLINE,
    KIND_LATENCY_SLO,
    KIND_LATENCY_REGRESSION,
    KIND_GPU_THROTTLING,
    KIND_GPU_STARVED,
    KIND_MEMORY_GROWTH,
    KIND_REPEATED_OOM,
    "lifecycle",
)


@dataclass(frozen=True)
class SloObjective:
    """``p99`` of ``operation`` (as named in the SDK's ``latency()``) stays at or under ``p99_ms``,
    judged over each ``window_s``, per device; ``device`` (a name) and ``labels`` (device labels that
    must all match) narrow the devices it applies to."""

    operation: str
    p99_ms: float
    window_s: float = 60.0
    device: str | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=True)
    name: str = ""  # how the rules file named it, for titles and alerts; "" -> the operation

    def __post_init__(self) -> None:
        if not self.operation:
            raise ValueError("slo.operation: must name an operation")
        if not self.p99_ms > 0:
            raise ValueError(f"slo.p99_ms: must be > 0, got {self.p99_ms}")
        if not self.window_s > 0:
            raise ValueError(f"slo.window: must be > 0, got {self.window_s}")

    @property
    def key(self) -> str:
        """The progress key: one objective per operation, window and selector."""
        sel = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"{self.operation}|{self.window_s:g}|{self.device or ''}|{sel}"[:200]

    def matches(self, device_name: str, device_labels: dict[str, Any]) -> bool:
        if self.device is not None and self.device != device_name:
            return False
        return all(str(device_labels.get(k)) == str(v) for k, v in self.labels.items())


@dataclass(frozen=True)
class DetectorSettings:
    # -- agent offline: no data for max(offline_min_s, offline_intervals x the batch interval its
    # agent said at registration); offline_after_s sets the threshold outright. Every reader
    # (`devices`, the dashboard, the exposition) uses the same (query.devices.OfflineRule).
    offline_after_s: float | None = None
    offline_intervals: float = OFFLINE_INTERVALS
    offline_min_s: float = OFFLINE_MIN_S
    # -- event incidents (OOM, Xid, ...) are resolved this long after they were last seen
    quiet_period_s: float = 1800.0
    # -- how long after a window's end its data counts as complete (agents batch every second
    # or so; the SDK flushes every second)
    settle_s: float = 5.0
    # If the rollup job keeps a device's minute rollups, a latency window waits for them (cheaper
    # than raw histograms) at most this long past its end before raw rows are read instead.
    rollup_wait_s: float = 120.0
    # A first pass (or one after a long pause) reads at most this far back.
    lookback_s: float = 900.0
    # A pass spends about this long at most reading first windows (a new database, a new holder,
    # new devices): devices left over are read from the next pass on, in order, nothing skipped.
    catchup_budget_s: float = 0.25
    # -- latency SLOs: from a rules file; none by default
    slos: tuple[SloObjective, ...] = ()
    slo_min_count: int = 20  # calls a window needs before its p99 is judged
    # -- latency regression, no configuration: p99 over a window > factor x the same
    # operation's p99 over the baseline before it, on that device
    regression_factor: float = 2.0
    regression_window_s: float = 300.0
    regression_baseline_s: float = 3600.0
    regression_min_count: int = 100  # calls needed in the window and in the baseline
    # -- throttling sustained this long (samples throttled back to back), with the clock lost
    throttle_min_s: float = 60.0
    throttle_clear_s: float = 30.0  # not throttled this long: resolved
    throttle_clock_loss: float = 0.10  # Jetson: a GR3D clock this far below its maximum is capped
    jetson_hot_c: float = 80.0  # Jetson: capped at or above this GPU temperature is thermal throttling
    throttle_busy_percent: float = 50.0  # Jetson: only while the GPU is this busy (idle clocks drop)
    # -- GPU starved: mean GPU utilisation at or under starved_util_percent over the window
    # (and above zero: a job is there) while the SDK's data-wait share is at least
    # starved_wait_ratio or the host CPU averages at least starved_cpu_percent
    starved_window_s: float = 120.0
    starved_util_percent: float = 40.0
    starved_wait_ratio: float = 0.5
    starved_cpu_percent: float = 90.0
    # -- memory growth: least-squares slope over the window, fit quality R^2 at least
    # growth_min_r2, at least growth_min_rate bytes/min and a total rise of growth_min_rise bytes
    growth_window_s: float = 600.0
    growth_min_r2: float = 0.9
    growth_min_rate: float = 8.0 * MIB  # bytes per minute
    growth_min_rise: float = 64.0 * MIB
    growth_min_points: int = 8
    growth_process_min_bytes: float = 32.0 * MIB  # processes tracked from this RSS up
    growth_max_processes: int = 8  # per device, the largest
    # -- repeated OOM: the same process name OOMing again under another pid within this window
    oom_repeat_window_s: float = 6 * 3600.0
    # -- detectors turned off by name (DETECTOR_NAMES)
    disabled: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("slos", "disabled", "offline_after_s"):
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"{f.name}: must be >= 0, got {v}")
        if self.offline_after_s is not None and not self.offline_after_s > 0:
            raise ValueError(f"offline_after_s: must be > 0, got {self.offline_after_s}")
        for name in ("regression_window_s", "regression_baseline_s", "starved_window_s", "growth_window_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0")
        if not self.regression_factor > 1.0:
            raise ValueError(f"regression_factor: must be > 1, got {self.regression_factor}")
        unknown = set(self.disabled) - set(DETECTOR_NAMES)
        if unknown:
            raise ValueError(f"disabled: unknown detectors {sorted(unknown)}; known: {', '.join(DETECTOR_NAMES)}")
        if not isinstance(self.slos, tuple):
            object.__setattr__(self, "slos", tuple(self.slos))

    def enabled(self, name: str) -> bool:
        return name not in self.disabled

    def offline_rule(self) -> OfflineRule:
        """The offline threshold these settings give, shared with every reader (``query.devices``)."""
        return OfflineRule(after_s=self.offline_after_s, intervals=self.offline_intervals, min_s=self.offline_min_s)
