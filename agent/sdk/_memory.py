"""Memory figures at a point in time: the CUDA caching allocator's, and the host's.

Reading torch's allocator statistics needs CUDA to be initialised already; the SDK never
initialises it (that would grab a device and its memory on the program's behalf).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CudaMemory:
    """One device's allocator state, from ``torch.cuda.memory_stats``."""

    device: int
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    inactive_split_bytes: int
    num_alloc_retries: int  # cudaMalloc retried after freeing the cache: memory pressure
    num_ooms: int

    @property
    def fragmentation(self) -> float:
        """Share of reserved memory not holding tensors (0..1): what the cache holds but cannot give."""
        if self.reserved_bytes <= 0:
            return 0.0
        return max(0.0, (self.reserved_bytes - self.allocated_bytes) / self.reserved_bytes)

    def facts(self, prefix: str = "") -> dict[str, int | float]:
        return {
            f"{prefix}device_index": self.device,
            f"{prefix}allocated_bytes": self.allocated_bytes,
            f"{prefix}reserved_bytes": self.reserved_bytes,
            f"{prefix}peak_allocated_bytes": self.peak_allocated_bytes,
            f"{prefix}peak_reserved_bytes": self.peak_reserved_bytes,
            f"{prefix}inactive_split_bytes": self.inactive_split_bytes,
            f"{prefix}fragmentation_ratio": round(self.fragmentation, 6),
            f"{prefix}num_alloc_retries": self.num_alloc_retries,
            f"{prefix}num_ooms": self.num_ooms,
        }


def cuda_torch() -> Any | None:
    """torch, when it is imported and has initialised CUDA; None otherwise."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch if torch.cuda.is_initialized() else None
    except Exception:
        return None


def device_index(device: object = None) -> int | None:
    torch = cuda_torch()
    if torch is None:
        return None
    try:
        if isinstance(device, int):
            return device
        if device is not None:
            d = torch.device(device)
            if d.type != "cuda":
                return None
            if d.index is not None:
                return int(d.index)
        return int(torch.cuda.current_device())
    except Exception:
        return None


def cuda_memory(device: object = None) -> CudaMemory | None:
    """The allocator's state for ``device`` (default: the current one); None without CUDA."""
    torch = cuda_torch()
    index = device_index(device)
    if torch is None or index is None:
        return None
    try:
        stats = torch.cuda.memory_stats(index)
    except Exception:
        return None

    def get(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    return CudaMemory(
        device=index,
        allocated_bytes=get("allocated_bytes.all.current"),
        reserved_bytes=get("reserved_bytes.all.current"),
        peak_allocated_bytes=get("allocated_bytes.all.peak"),
        peak_reserved_bytes=get("reserved_bytes.all.peak"),
        inactive_split_bytes=get("inactive_split_bytes.all.current"),
        num_alloc_retries=get("num_alloc_retries"),
        num_ooms=get("num_ooms"),
    )


def host_memory() -> dict[str, int]:
    """This process's resident size and the machine's available memory, where Linux tells."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key = "rss_bytes" if line.startswith("VmRSS") else "peak_rss_bytes"
                    out[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("MemAvailable:", "MemTotal:")):
                    key = "mem_available_bytes" if line.startswith("MemAvailable") else "mem_total_bytes"
                    out[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if not out:
        try:
            import resource

            out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (
                1 if sys.platform == "darwin" else 1024
            )
        except Exception:
            pass
    return out
