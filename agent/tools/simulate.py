"""Simulated devices: GPU servers and Jetson drones with plausible, varying readings.

They run through the real agent code (spool, batcher, uplink, gRPC): only the samplers are
simulated. Every simulated device carries the label ``simulated=true``, which the collector
records, so simulated data is never mistaken for a real fleet's.

A server's GPUs follow a training duty cycle (utilisation, power, temperature and clocks move
together; a hot GPU throttles). A drone's integrated GPU heats up in flight and throttles past
its limit, which is what raises its p99. Now and then a device writes a realistic error line to
its log (a CUDA OOM, an Xid), so incidents flow through the same classifiers as real ones.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from fleetscope.agent.records import GpuInfo, GpuSample, HostSample, LogEvent
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import THROTTLE_REASON_BITS

# What a simulated GPU reports while it is too hot: the software and hardware thermal slowdowns.
_THERMAL_SLOWDOWN = THROTTLE_REASON_BITS["sw_thermal_slowdown"] | THROTTLE_REASON_BITS["hw_thermal_slowdown"]


if TYPE_CHECKING:
    from fleetscope.agent.daemon.log_pipeline import Classify

GIB = 1024**3
SIMULATED_LABEL = "simulated"


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_bytes: int
    tdp_w: float
    sm_max_mhz: float
    mem_max_mhz: float
    compute_capability: str


SERVER_GPUS = (
    GpuModel("NVIDIA A100-SXM4-80GB", 80 * GIB, 400.0, 1410.0, 1593.0, "8.0"),
    GpuModel("NVIDIA H100 80GB HBM3", 80 * GIB, 700.0, 1980.0, 2619.0, "9.0"),
    GpuModel("NVIDIA L4", 24 * GIB, 72.0, 2040.0, 6251.0, "8.9"),
)
JETSON_GPU = GpuModel("Orin (nvgpu)", 8 * GIB, 15.0, 1020.0, 3199.0, "8.7")

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. Of the allocated "
    "memory 75.02 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated."
)
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2841, name=python3, GPU has fallen off the bus."


class SimulatedSampler:
    """Host + GPU readings for one simulated device."""

    def __init__(self, *, kind: str, gpus: int, seed: int, incident_every_s: float = 0.0) -> None:
        self.name = f"simulated-{kind}"
        self.kind = kind
        self._rng = random.Random(seed)
        self._model = JETSON_GPU if kind == "jetson" else SERVER_GPUS[seed % len(SERVER_GPUS)]
        self._gpus = 1 if kind == "jetson" else gpus
        self._cores = 6 if kind == "jetson" else 64
        self._phase = self._rng.uniform(0, 2 * math.pi)
        self._energy = [0.0] * self._gpus
        self._disk = [0, 0]
        self._net = [0, 0]
        self._last_ns: int | None = None
        self._incident_every_s = incident_every_s
        self._next_incident_ns: int | None = None
        self.log_source = "/var/log/train.log" if kind == "server" else "/var/log/inference.log"

    def inventory(self) -> list[GpuInfo]:
        m = self._model
        return [
            GpuInfo(
                index=i, name=m.name, uuid=f"GPU-sim-{id(self):x}-{i}", memory_total_bytes=m.memory_bytes,
                compute_capability=m.compute_capability, pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                fp16_tensor_cores=True, bf16_tensor_cores=True, int8_tensor_cores=True,
            )
            for i in range(self._gpus)
        ]

    def inventory_message(self) -> pb.Inventory:
        inv = pb.Inventory(
            cpu_model="ARMv8 Processor rev 1 (v8l)" if self.kind == "jetson" else "AMD EPYC 7763 64-Core Processor",
            cpu_cores=self._cores,
            memory_total_bytes=(8 if self.kind == "jetson" else 512) * GIB,
            os="Ubuntu 22.04.4 LTS",
            kernel="5.15.136-tegra" if self.kind == "jetson" else "6.8.0-45-generic",
            arch="aarch64" if self.kind == "jetson" else "x86_64",
            driver_version="540.4.0" if self.kind == "jetson" else "550.90.07",
        )
        if self.kind == "jetson":
            inv.board_model = "NVIDIA Jetson Orin Nano Developer Kit"
            inv.l4t_release = "36.4.3"
            inv.jetpack_version = "6.2"
        for g in self.inventory():
            inv.gpus.add(index=g.index, name=g.name, uuid=g.uuid or "", memory_total_bytes=g.memory_total_bytes or 0,
                         compute_capability=g.compute_capability or "", pci_bus_id=g.pci_bus_id or "",
                         fp16_tensor_cores=True, bf16_tensor_cores=True, int8_tensor_cores=True)
        return inv

    def sample(self, now_ns: int) -> SampleSet:
        rng, m = self._rng, self._model
        dt = 1.0 if self._last_ns is None else max(0.0, (now_ns - self._last_ns) / 1e9)
        self._last_ns = now_ns
        t = now_ns / 1e9
        # A training job's duty cycle: minutes of load with short data-loading dips.
        duty = 0.5 + 0.45 * math.sin(t / 90.0 + self._phase)
        gpus = []
        for i in range(self._gpus):
            util = min(100.0, max(0.0, 100 * duty + rng.gauss(0, 6)))
            temp = 35 + 45 * duty + rng.gauss(0, 1.5) + (8 if self.kind == "jetson" else 0)
            throttled = temp > 83
            power = m.tdp_w * (0.15 + 0.85 * util / 100) * (0.8 if throttled else 1.0)
            self._energy[i] += power * dt
            mem_used = int(m.memory_bytes * (0.2 + 0.7 * duty) + rng.uniform(0, GIB))
            gpus.append(
                GpuSample(
                    ts_ns=now_ns, gpu_index=i, util_gpu_percent=round(util, 1),
                    util_memory_percent=round(util * 0.6, 1), util_encoder_percent=0.0, util_decoder_percent=0.0,
                    memory_used_bytes=min(mem_used, m.memory_bytes), memory_free_bytes=max(0, m.memory_bytes - mem_used),
                    memory_total_bytes=m.memory_bytes, temp_c=round(temp, 1), power_w=round(power, 1),
                    power_limit_w=m.tdp_w, energy_j=round(self._energy[i], 1),
                    sm_clock_mhz=round(m.sm_max_mhz * (0.7 if throttled else 0.98)),
                    memory_clock_mhz=m.mem_max_mhz, graphics_clock_mhz=round(m.sm_max_mhz * (0.7 if throttled else 0.98)),
                    sm_clock_max_mhz=m.sm_max_mhz, memory_clock_max_mhz=m.mem_max_mhz,
                    pstate=0 if util > 5 else 8, fan_percent=None if self.kind == "jetson" else round(30 + 50 * duty),
                    pcie_gen=None if self.kind == "jetson" else 4, pcie_width=None if self.kind == "jetson" else 16,
                    throttle_reasons=_THERMAL_SLOWDOWN if throttled else 0,
                    ecc_volatile_uncorrected=None if self.kind == "jetson" else 0,
                )
            )
        for k in range(2):
            self._disk[k] += int(rng.uniform(0, 50e6) * dt)
            self._net[k] += int(rng.uniform(0, 200e6 if self.kind == "server" else 2e6) * dt)
        mem_total = (8 if self.kind == "jetson" else 512) * GIB
        cores = tuple(round(min(100.0, max(0.0, 70 * duty + rng.gauss(0, 10))), 1) for _ in range(self._cores))
        host = HostSample(
            ts_ns=now_ns, cpu_percent=round(sum(cores) / len(cores), 1), cpu_core_percent=cores,
            load1=round(self._cores * duty * 0.8, 2), load5=round(self._cores * duty * 0.7, 2), load15=round(self._cores * duty * 0.6, 2),
            mem_total_bytes=mem_total, mem_used_bytes=int(mem_total * (0.3 + 0.5 * duty)),
            mem_available_bytes=int(mem_total * (0.7 - 0.5 * duty)), swap_total_bytes=4 * GIB, swap_used_bytes=int(0.1 * GIB * duty),
            disk_total_bytes=(64 if self.kind == "jetson" else 3800) * GIB, disk_used_bytes=(30 if self.kind == "jetson" else 1200) * GIB,
            disk_read_bytes=self._disk[0], disk_write_bytes=self._disk[1], net_rx_bytes=self._net[0], net_tx_bytes=self._net[1],
        )
        return SampleSet(host=[host], gpu=gpus, logs=self._logs(now_ns, duty))

    def _logs(self, now_ns: int, duty: float) -> list[LogEvent]:
        logs = []
        if self._rng.random() < 0.2:
            step = int(now_ns / 1e9) % 100000
            logs.append(LogEvent(now_ns, self.log_source, f"step {step} loss {2.5 * (1 - duty) + 0.1:.4f} lr 3.0e-4", "info"))
        if self._incident_every_s > 0:
            if self._next_incident_ns is None:
                self._next_incident_ns = now_ns + int(self._rng.uniform(0.2, 1.0) * self._incident_every_s * 1e9)
            elif now_ns >= self._next_incident_ns:
                self._next_incident_ns = now_ns + int(self._incident_every_s * 1e9)
                if self.kind == "server" and self._rng.random() < 0.3:
                    logs.append(LogEvent(now_ns, "kmsg", XID_LINE, "critical"))
                else:
                    logs.append(LogEvent(now_ns, self.log_source, OOM_LINE, "error"))
        return logs

    def close(self) -> None:
        pass


@dataclass
class SimulatedFleet:
    """N simulated devices, each a real Agent with its own spool and gRPC stream."""

    agents: list

    def start(self) -> None:
        for a in self.agents:
            a.start()

    def stop(self) -> None:
        threads = [threading.Thread(target=a.stop) for a in self.agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def acked(self) -> int:
        return sum(a.uplink.status.acked for a in self.agents)

    def connected(self) -> int:
        return sum(1 for a in self.agents if a.uplink.status.connected)

    def spooled(self) -> int:
        return sum(a.spool.stats().batches for a in self.agents)


def build_fleet(
    *,
    collectors: list[str],
    token: str,
    devices: int,
    state_dir: Path,
    interval_s: float = 1.0,
    jetson_share: float = 0.5,
    gpus_per_server: int = 8,
    incident_every_s: float = 0.0,
    classify: Classify | None = None,
    name_prefix: str = "sim",
) -> SimulatedFleet:
    from fleetscope.agent.daemon.runner import Agent, AgentSettings

    agents = []
    jetsons = round(devices * jetson_share)
    for i in range(devices):
        kind = "jetson" if i < jetsons else "server"
        sampler = SimulatedSampler(kind=kind, gpus=gpus_per_server, seed=i, incident_every_s=incident_every_s)
        name = f"{name_prefix}-drone-{i:03d}" if kind == "jetson" else f"{name_prefix}-gpu-{i - jetsons:03d}"
        labels = {SIMULATED_LABEL: "true", "site": ["lab", "field"][i % 2]}
        labels["fleet"] = "drones" if kind == "jetson" else "training"
        if kind == "jetson":
            labels["drone_id"] = f"D{i:03d}"
        settings = AgentSettings(
            collectors=tuple(collectors), spool_dir=state_dir / name, token=token, name=name, labels=labels,
            interval_s=interval_s, batch_interval_s=max(1.0, interval_s), drain_timeout_s=3.0,
        )
        kind_code = pb.DEVICE_KIND_JETSON if kind == "jetson" else pb.DEVICE_KIND_SERVER
        agents.append(Agent(settings, samplers=[sampler], inventory=sampler.inventory_message(), kind=kind_code,
                            classify=classify))
    return SimulatedFleet(agents)


def wait_progress(fleet: SimulatedFleet, duration_s: float | None, *, out: TextIO | None = None, every_s: float = 5.0) -> None:
    """Block until ``duration_s`` (forever when None), printing progress now and then."""
    import sys

    out = out or sys.stderr
    start = time.monotonic()
    next_print = start + every_s
    while duration_s is None or time.monotonic() - start < duration_s:
        time.sleep(0.2)
        if time.monotonic() >= next_print:
            next_print += every_s
            elapsed = time.monotonic() - start
            total = f"/{duration_s:.0f}s" if duration_s else "s"
            print(f"  [{elapsed:.0f}{total}] {fleet.connected()}/{len(fleet.agents)} streaming, "
                  f"{fleet.acked()} batches acknowledged, {fleet.spooled()} waiting in spools", file=out, flush=True)
