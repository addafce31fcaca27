"""Detectors: incidents derived from the stored telemetry, run by the collector under a lease.

One module per detector (``offline``, ``latency`` for SLOs and regressions, ``throttling``,
``starved``, ``memory``, ``oom`` for repeated OOMs and the lifecycle step), root-cause hints
computed from the data (``hints``), their settings (``settings``) and the job that runs them
once per fleet (``job``). Incidents are opened, refreshed and resolved only through
``fleetscope.collector.storage.incident_lifecycle``.
"""

from fleetscope.collector.jobs.detectors.job import DetectorJob, DetectorReport
from fleetscope.collector.jobs.detectors.settings import DETECTOR_NAMES, DetectorSettings, SloObjective

__all__ = ["DETECTOR_NAMES", "DetectorJob", "DetectorReport", "DetectorSettings", "SloObjective"]
