"""Which samplers a device gets: each registered by name, built from the agent's settings.

The registry is filled explicitly by :func:`default_samplers` (no discovery by folder scan) and
refuses a second sampler with a name already taken. Building asks each factory in the order
registered; a factory looks at the device only then (nothing is probed at import), imports its
sampler's module only then (pynvml stays inside the NVML code), and returns ``None`` when the
settings or the device leave its source out. What a device gets:

* ``host`` (psutil): everywhere, unless turned off;
* ``nvml``: where an NVIDIA driver is (servers, workstations);
* ``tegrastats``: on a Jetson when asked for and installed, or anywhere a command is given;
* ``jetson-sysfs``: on a Jetson otherwise.

A source that exists but cannot work (``SourceUnavailable``: NVML refuses to start, tegrastats
cannot be run) is said once in the log and skipped; the agent runs with the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetscope.agent.samplers._base import Sampler, SourceUnavailable
from fleetscope.agent.samplers._presence import maybe_jetson, nvml_present

__all__ = ["JETSON_SOURCES", "SamplerFactory", "SamplerRegistry", "SamplerSettings", "default_samplers"]

log = logging.getLogger(__name__)

JETSON_SOURCES = ("sysfs", "tegrastats")


@dataclass(frozen=True)
class SamplerSettings:
    """What to sample. The roots are where the device's files are read (a container's host
    mounts, a recorded tree in a test)."""

    host: bool = True  # the host through psutil
    nvml: bool = True  # NVIDIA GPUs through NVML
    jetson_source: str = "sysfs"  # on a Jetson: "sysfs" (cheaper) or "tegrastats" (EMC load, engines)
    tegrastats_cmd: str | None = None  # read tegrastats lines from this command instead, on any device
    interval_s: float = 1.0  # the sampling interval, which tegrastats is asked to print at
    proc_root: Path = Path("/proc")
    dev_root: Path = Path("/dev")
    sysfs_root: Path = Path("/")

    def __post_init__(self) -> None:
        if self.jetson_source not in JETSON_SOURCES:
            raise ValueError(f"jetson_source must be one of {', '.join(JETSON_SOURCES)}, not {self.jetson_source!r}")


# Builds the sampler for this device, or returns None when the settings or the device leave it
# out; raises SourceUnavailable when the source is here but cannot work.
SamplerFactory = Callable[[SamplerSettings], Sampler | None]


class SamplerRegistry:
    """Sampler factories by unique name, built in the order registered."""

    def __init__(self) -> None:
        self._factories: dict[str, SamplerFactory] = {}

    def register(self, name: str, factory: SamplerFactory) -> None:
        if name in self._factories:
            raise ValueError(f"a sampler named {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return list(self._factories)

    def build(self, settings: SamplerSettings) -> list[Sampler]:
        """The samplers this device gets with ``settings``; one that cannot work is said and skipped."""
        samplers: list[Sampler] = []
        for name, factory in self._factories.items():
            try:
                sampler = factory(settings)
            except SourceUnavailable as exc:
                log.warning("sampler %s is off: %s", name, exc)
                continue
            if sampler is not None:
                samplers.append(sampler)
        return samplers


def _host(settings: SamplerSettings) -> Sampler | None:
    if not settings.host:
        return None
    from fleetscope.agent.samplers.host import HostSampler

    return HostSampler()


def _nvml(settings: SamplerSettings) -> Sampler | None:
    if not settings.nvml:
        return None
    if not nvml_present(settings.proc_root, settings.dev_root):  # NvmlSampler.available, without importing it
        log.info("no NVIDIA driver here: GPU sampling through NVML is off")
        return None
    from fleetscope.agent.samplers.nvml import NvmlSampler

    sampler = NvmlSampler(proc_root=settings.proc_root, xid_events=True)
    try:
        gpus = sampler.inventory()  # starts NVML: a driver that cannot work says so here
    except SourceUnavailable:
        sampler.close()
        raise
    log.info("NVML: %d GPU(s), driver %s", len(gpus), sampler.driver_version)
    return sampler


def _tegrastats_on_this_jetson(settings: SamplerSettings) -> bool:
    """The settings ask for tegrastats, it is installed, and this is a Jetson."""
    if settings.jetson_source != "tegrastats" or not maybe_jetson(settings.sysfs_root):
        return False
    import shutil

    if shutil.which("tegrastats") is None:
        return False
    from fleetscope.agent.samplers.jetson import JetsonSampler

    return JetsonSampler.available(settings.sysfs_root)


def _tegrastats(settings: SamplerSettings) -> Sampler | None:
    if not settings.tegrastats_cmd and not _tegrastats_on_this_jetson(settings):
        return None
    from fleetscope.agent.samplers.tegrastats import TegrastatsSampler

    return TegrastatsSampler(settings.tegrastats_cmd, interval_s=settings.interval_s)


def _jetson_sysfs(settings: SamplerSettings) -> Sampler | None:
    if settings.tegrastats_cmd or _tegrastats_on_this_jetson(settings):
        return None  # the tegrastats sampler reads this board (even if it could not start)
    if not maybe_jetson(settings.sysfs_root):  # no board here: the Jetson code stays unimported
        return None
    from fleetscope.agent.samplers.jetson import JetsonSampler

    if not JetsonSampler.available(settings.sysfs_root):
        return None
    sampler = JetsonSampler(sysfs_root=settings.sysfs_root)
    board = sampler.board
    log.info("Jetson %s (L4T %s, JetPack %s): reading sysfs", board.model, board.l4t_release, board.jetpack_version)
    return sampler


def default_samplers() -> SamplerRegistry:
    """The agent's samplers, in the order their GPUs are numbered in the inventory."""
    registry = SamplerRegistry()
    registry.register("host", _host)
    registry.register("nvml", _nvml)
    registry.register("tegrastats", _tegrastats)
    registry.register("jetson-sysfs", _jetson_sysfs)
    return registry
