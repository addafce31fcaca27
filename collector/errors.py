"""The collector's exceptions. Driver and gRPC errors are translated into these at the boundary.

    FleetscopeCollectorError
    ├── StoreUnavailable      the database cannot be reached or written (disk full, server down)
    ├── CannotListen          the collector's address cannot be bound (the port in use, not this host's)
    ├── BatchInvalid          a batch broke the wire contract; ``field`` names where
    ├── UnknownDevice         a query named a device that is not registered
    ├── UnknownIncident       a query named an incident id that does not exist
    └── UnknownIncidentKind   a query named an incident kind that is not in the vocabulary
"""

from __future__ import annotations

__all__ = ["FleetscopeCollectorError", "CannotListen", "StoreUnavailable", "BatchInvalid", "UnknownDevice", "UnknownIncident",
           "UnknownIncidentKind"]


class FleetscopeCollectorError(Exception):
    pass


class StoreUnavailable(FleetscopeCollectorError):
    pass


class CannotListen(FleetscopeCollectorError, OSError):
    """The message is the whole line to show (``listen_problem`` in collector/ingest/server.py)."""


class BatchInvalid(FleetscopeCollectorError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnknownDevice(FleetscopeCollectorError):
    pass


class UnknownIncident(FleetscopeCollectorError, LookupError):
    pass


class UnknownIncidentKind(FleetscopeCollectorError, ValueError):
    """``kinds`` names the unknown ones, ``known`` every kind there is (``vocabulary.INCIDENT_KINDS``)."""

    def __init__(self, kinds: list[str], known: tuple[str, ...]) -> None:
        word = "kind" if len(kinds) == 1 else "kinds"
        super().__init__(f"unknown incident {word} {', '.join(map(repr, kinds))}; known kinds: {', '.join(known)}")
        self.kinds = kinds
        self.known = known
