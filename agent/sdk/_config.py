"""The SDK's settings: one frozen value, replaced whole by ``configure``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_SOCKET = "unix:///run/fleetscope/agent.sock"
SOCKET_ENV = "FLEETSCOPE_SDK_SOCKET"
DISABLED_ENV = "FLEETSCOPE_SDK_DISABLED"


def _default_process_name() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return os.path.basename(argv0) or "python"


@dataclass(frozen=True)
class SdkConfig:
    """How the SDK reports. Every field has a default that needs no agent to be running."""

    socket: str = DEFAULT_SOCKET  # gRPC target ("unix:///path") or a plain socket path
    flush_interval_s: float = 1.0
    rpc_timeout_s: float = 1.0  # a local agent answers in milliseconds; more means it is stuck
    max_queue: int = 20_000  # pending metrics/logs/incidents; past it records are dropped and counted
    max_records_per_report: int = 5_000  # keeps one SdkReport well under gRPC's 4 MiB default
    exit_flush_timeout_s: float = 2.0  # the most atexit waits for the last report
    oom_flush_timeout_s: float = 1.0  # the most an OOM guard waits before re-raising
    process_name: str = field(default_factory=_default_process_name)
    labels: Mapping[str, str] = field(default_factory=dict)  # sent as ProcessRef.labels
    disabled: bool = False  # no thread, no socket: every record is discarded

    def __post_init__(self) -> None:
        if self.flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {self.flush_interval_s}")
        if self.rpc_timeout_s <= 0:
            raise ValueError(f"rpc_timeout_s must be > 0, got {self.rpc_timeout_s}")
        if self.max_queue < 1 or self.max_records_per_report < 1:
            raise ValueError("max_queue and max_records_per_report must be >= 1")


def config_from_env() -> SdkConfig:
    disabled = os.environ.get(DISABLED_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return SdkConfig(socket=normalize_target(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET), disabled=disabled)


def normalize_target(socket: str) -> str:
    """A plain path becomes a ``unix:`` target; a gRPC target is kept as given."""
    if socket.startswith(("unix:", "unix-abstract:")):
        return socket
    return "unix:" + os.path.abspath(socket)


def socket_path(target: str) -> str | None:
    """The filesystem path behind a ``unix:`` target; None for targets with no file (abstract)."""
    if target.startswith("unix://"):
        return target[len("unix://") :]
    if target.startswith("unix:"):
        return target[len("unix:") :]
    return None
