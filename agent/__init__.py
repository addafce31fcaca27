"""What runs on a device: samplers, log sources, spool, uplink and the in-process SDK."""

__version__ = "0.1.0"
