"""The daemon: the sampling loop (``runner``), the log path (``log_pipeline``), the on-disk spool,
the uplink to the collectors and the local SDK endpoint. It never imports the offline tools or
the recorded-hardware fakes."""

from fleetscope.agent.daemon.log_pipeline import LogPipeline
from fleetscope.agent.daemon.runner import Agent, AgentSettings

__all__ = ["Agent", "AgentSettings", "LogPipeline"]
