"""The host through psutil: CPU, load, memory, swap, disk, network, top processes.

Every device has this source. Process iteration is the costly part (a /proc walk), so the
top-process table is refreshed every ``process_every`` samples rather than every sample: at a
1 s interval that keeps the agent near its 1 % CPU budget.
"""

from __future__ import annotations

import os

from fleetscope.agent.records import GpuInfo, HostSample, ProcessUsage
from fleetscope.agent.samplers._base import SampleSet


class HostSampler:
    name = "host"

    def __init__(self, *, disk_path: str = "/", top_processes: int = 5, process_every: int = 10) -> None:
        import psutil

        self._psutil = psutil
        self._disk_path = disk_path
        self._top = top_processes
        self._process_every = max(1, process_every)
        self._count = 0
        # The first cpu_percent() call only primes psutil's counters.
        psutil.cpu_percent(percpu=True)
        self._has_freq = hasattr(psutil, "cpu_freq")

    @staticmethod
    def available() -> bool:
        try:
            import psutil  # noqa: F401
        except ImportError:
            return False
        return True

    def inventory(self) -> list[GpuInfo]:
        return []

    def sample(self, now_ns: int) -> SampleSet:
        ps = self._psutil
        per_core = tuple(float(v) for v in ps.cpu_percent(percpu=True))
        total = sum(per_core) / len(per_core) if per_core else None
        freqs: tuple[float, ...] = ()
        if self._has_freq:
            try:
                freqs = tuple(float(f.current) for f in ps.cpu_freq(percpu=True) or ())
            except (OSError, NotImplementedError, AttributeError):
                self._has_freq = False
        try:
            load1, load5, load15 = os.getloadavg()
        except OSError:
            load1 = load5 = load15 = None  # type: ignore[assignment]
        vm = ps.virtual_memory()
        sw = ps.swap_memory()
        disk_total = disk_used = None
        try:
            du = ps.disk_usage(self._disk_path)
            disk_total, disk_used = du.total, du.used
        except OSError:
            pass
        io = ps.disk_io_counters() if hasattr(ps, "disk_io_counters") else None
        net = ps.net_io_counters()
        procs: tuple[ProcessUsage, ...] = ()
        if self._top and self._count % self._process_every == 0:
            procs = self._top_processes()
        self._count += 1
        sample = HostSample(
            ts_ns=now_ns,
            cpu_percent=total,
            cpu_core_percent=per_core,
            cpu_core_freq_mhz=freqs if len(freqs) == len(per_core) else (),
            load1=load1,
            load5=load5,
            load15=load15,
            mem_total_bytes=vm.total,
            mem_used_bytes=vm.total - vm.available,
            mem_available_bytes=vm.available,
            swap_total_bytes=sw.total,
            swap_used_bytes=sw.used,
            disk_total_bytes=disk_total,
            disk_used_bytes=disk_used,
            disk_read_bytes=io.read_bytes if io else None,
            disk_write_bytes=io.write_bytes if io else None,
            net_rx_bytes=net.bytes_recv if net else None,
            net_tx_bytes=net.bytes_sent if net else None,
            top_processes=procs,
        )
        return SampleSet(host=[sample])

    def _top_processes(self) -> tuple[ProcessUsage, ...]:
        rows = []
        for p in self._psutil.process_iter(["pid", "name", "cpu_percent", "memory_info"]):
            info = p.info
            mem = info.get("memory_info")
            rows.append(
                ProcessUsage(
                    pid=info["pid"],
                    name=info.get("name") or "",
                    cpu_percent=info.get("cpu_percent"),
                    rss_bytes=mem.rss if mem else None,
                )
            )
        by_mem = sorted(rows, key=lambda r: r.rss_bytes or 0, reverse=True)[: self._top]
        by_cpu = sorted(rows, key=lambda r: r.cpu_percent or 0.0, reverse=True)[: self._top]
        seen: dict[int, ProcessUsage] = {}
        for r in by_mem + by_cpu:
            seen.setdefault(r.pid, r)
        return tuple(seen.values())

    def close(self) -> None:
        pass
