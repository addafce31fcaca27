"""Offline tools, apart from the daemon: ``scan`` (find incidents in recorded logs with the
agent's own grouper and classifiers), ``simulate`` (a fleet of simulated devices through real
agents) and ``doctor_args`` (the ``doctor`` command's flags).

Each is imported only by the command that runs it; importing this package imports none of them
(the SDK reads ``doctor_args`` inside training processes, and needs nothing else of these)."""

__all__ = ["doctor_args", "scan", "simulate"]
