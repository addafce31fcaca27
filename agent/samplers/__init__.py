"""Samplers: the device's readings (host through psutil, NVIDIA GPUs through NVML, Jetson boards
through sysfs or tegrastats), one module per source, each behind the ``Sampler`` interface and
built through the registry from the agent's settings."""

from fleetscope.agent.samplers._base import Sampler, SampleSet, SourceUnavailable
from fleetscope.agent.samplers.registry import SamplerRegistry, SamplerSettings, default_samplers

__all__ = [
    "SampleSet",
    "Sampler",
    "SamplerRegistry",
    "SamplerSettings",
    "SourceUnavailable",
    "default_samplers",
]
