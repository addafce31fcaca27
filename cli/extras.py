"""Optional dependencies ("extras"): a subcommand whose extra is not installed says which to install.

A leaf module with no imports of its own, so that every component's CLI can use it without
importing the router (``fleetscope.cli``), which imports every component.
"""

from __future__ import annotations

import importlib.util

__all__ = ["MissingExtra", "require"]


class MissingExtra(RuntimeError):
    """A subcommand's optional dependencies are not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(f"needs the '{extra}' extra ({module} is not installed): pip install 'fleetscope[{extra}]'")


def require(extra: str, module: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtra(extra, module)
