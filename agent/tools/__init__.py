"""Offline tools: scan recorded logs, simulate devices, check an environment (doctor)."""
