"""The collector's exceptions. Driver and gRPC errors are translated into these at the boundary.

    FleetscopeCollectorError
    ├── StoreUnavailable      the database cannot be reached or written (disk full, server down)
    ├── BatchInvalid          a batch broke the wire contract; ``field`` names where
    ├── UnknownDevice         a query named a device that is not registered
    └── UnknownIncident       a query named an incident id that does not exist
"""

from __future__ import annotations

__all__ = ["FleetscopeCollectorError", "StoreUnavailable", "BatchInvalid", "UnknownDevice", "UnknownIncident"]


class FleetscopeCollectorError(Exception):
    pass


class StoreUnavailable(FleetscopeCollectorError):
    pass


class BatchInvalid(FleetscopeCollectorError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnknownDevice(FleetscopeCollectorError):
    pass


class UnknownIncident(FleetscopeCollectorError, LookupError):
    pass
