"""Simulated devices: GPU servers and Jetson drones with plausible, varying readings.

They run through the real agent code (spool, batcher, uplink, gRPC): only the samplers are
simulated. Every simulated device carries the label ``simulated=true``, which the collector
records, so simulated data is never mistaken for a real fleet's.

What a simulated device does, so that what the dashboard shows about it is true to itself:

* **Each GPU has its own work.** A server's GPUs run jobs of their own (training, an inference
  service, idle stretches between jobs) with their own duty cycle, memory and processes;
  temperature follows load with thermal lag, and only a GPU in a rare hot spell throttles.
* **A drone flies**: inference while airborne (GPU, EMC, DLA, VIC and NVENC busy), idle on the
  ground; its rails, sensors, engines and nvpmodel are reported as metric points like the Jetson
  samplers' (``jetson.power_mw``, ``jetson.engine_mhz``, ...). Its GPU memory is the board's RAM.
* **The SDK's latency**: each device times an ``infer`` operation (a drone ~25 ms, a server
  ~4 ms; a throttled drone is slower) and hands histograms to its agent as the SDK would; now
  and then a device regresses (p99 ~2.5x) for about ten minutes.
* **Incidents are rare and true to the device**: a few an hour across a small fleet (each
  device's mean interval is ``incident_every_s``). A CUDA OOM names the device's real capacity,
  and the GPU's memory climbs to exactly what the message says in the half minute before it;
  an Xid names the GPU's own PCI address.
* **Collected extras**: per-GPU compute processes with their memory, ECC counts and remapped
  rows, PCIe link and throughput, fan (where the board has one) and power limits.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from fleetscope.agent.records import GpuInfo, GpuSample, HostSample, LogEvent, ProcessUsage
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.proto import buckets as latency_buckets
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import THROTTLE_REASON_BITS

# What a simulated GPU reports while it is too hot: the software and hardware thermal slowdowns.
_THERMAL_SLOWDOWN = THROTTLE_REASON_BITS["sw_thermal_slowdown"] | THROTTLE_REASON_BITS["hw_thermal_slowdown"]


if TYPE_CHECKING:
    from fleetscope.agent.daemon.credentials import ChannelTLS
    from fleetscope.agent.daemon.log_pipeline import Classify

MIB = 1024**2
GIB = 1024**3
NS = 10**9
SIMULATED_LABEL = "simulated"
LATENCY_OPERATION = "infer"
_LATENCY_WINDOW_NS = 10 * NS  # the SDK's flush interval: one histogram per window


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_bytes: int  # what NVML reports as the total (and CUDA as the capacity)
    tdp_w: float
    sm_max_mhz: float
    mem_max_mhz: float
    compute_capability: str
    pcie_gen: int | None = 4
    has_fan: bool = False  # SXM boards are cooled by the chassis: NVML reports no fan
    row_remapping: bool = True  # Ampere and later remap rows; retired pages are not reported


SERVER_GPUS = (
    GpuModel("NVIDIA A100-SXM4-80GB", 81920 * MIB, 400.0, 1410.0, 1593.0, "8.0"),
    GpuModel("NVIDIA H100 80GB HBM3", 81559 * MIB, 700.0, 1980.0, 2619.0, "9.0", pcie_gen=5),
    GpuModel("NVIDIA RTX 6000 Ada Generation", 49140 * MIB, 300.0, 2505.0, 10001.0, "8.9", has_fan=True),
)
# An Orin NX 8GB: the integrated GPU allocates from the board's 7.44 GiB of RAM.
JETSON_GPU = GpuModel("Orin (nvgpu)", 7620 * MIB, 15.0, 918.0, 3199.0, "8.7", pcie_gen=None, row_remapping=False)
JETSON_BOARD = "NVIDIA Jetson Orin NX Engineering Reference Developer Kit"
JETSON_RAILS = ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
JETSON_SENSORS = ("cpu", "gpu", "soc0", "soc1", "soc2", "tj")
JETSON_ENGINES = ("NVENC", "NVDEC", "NVJPG", "VIC", "NVDLA0")
JETSON_NVPMODEL = (2, "15W")

# Fixed lines kept for tests that need one exact text (the simulator writes its own, per device).
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. Of the allocated "
    "memory 75.02 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated."
)
XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2841, name=python3, GPU has fallen off the bus."


def torch_size(n_bytes: float) -> str:
    """A size as PyTorch's OOM message prints it (MiB below a GiB, else GiB; two decimals)."""
    return f"{n_bytes / MIB:.2f} MiB" if n_bytes < GIB else f"{n_bytes / GIB:.2f} GiB"


def oom_line(*, gpu_index: int, total_bytes: int, free_bytes: int, process_bytes: int, requested_bytes: int,
             reserved_unallocated_bytes: int) -> str:
    """A PyTorch CUDA OOM message whose figures are the given device's."""
    allocated = max(0, process_bytes - reserved_unallocated_bytes - 512 * MIB)  # the CUDA context is not PyTorch's
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {torch_size(requested_bytes)}. "
        f"GPU {gpu_index} has a total capacity of {torch_size(total_bytes)} of which {torch_size(free_bytes)} is free. "
        f"Including non-PyTorch memory, this process has {torch_size(process_bytes)} memory in use. Of the allocated "
        f"memory {torch_size(allocated)} is allocated by PyTorch, and {torch_size(reserved_unallocated_bytes)} is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def _pci_bus(i: int) -> int:
    return 0x18 + 0x10 * i


@dataclass
class _Job:
    """What one GPU is doing: a training run, an inference service, a flight, or nothing."""

    kind: str  # "train" | "serve" | "fly" | "idle"
    until_s: float
    level: float  # typical utilisation, 0..1
    memory_bytes: int  # the job's processes' GPU memory
    procs: tuple[tuple[int, str, float], ...] = ()  # (pid, name, share of memory_bytes)


@dataclass
class _GpuState:
    job: _Job
    phase: float
    period_s: float
    offset_c: float  # where it sits in the chassis: some run warmer
    temp_c: float = 35.0
    energy_j: float = 0.0
    hot_until_s: float = 0.0
    weak_cell: bool = False
    ecc_corrected: int = 0
    ecc_aggregate_base: int = 0
    remapped_rows: int = 0
    oom_at_s: float | None = None  # a CUDA OOM is coming: memory climbs to the figure it will report
    oom_free_bytes: int = 0
    oom_requested_bytes: int = 0
    oom_start_bytes: int = 0


@dataclass
class _PendingIncident:
    at_s: float
    kind: str  # "oom" | "xid"
    gpu: int


class SimulatedSampler:
    """Host + GPU readings (and, when ``latency``, SDK latency) for one simulated device."""

    def __init__(self, *, kind: str, gpus: int, seed: int, incident_every_s: float = 0.0,
                 first_incident_s: float | None = None, latency: bool = True) -> None:
        self.name = f"simulated-{kind}"
        self.kind = kind
        self._seed = seed
        self._rng = random.Random(seed)
        self._model = JETSON_GPU if kind == "jetson" else SERVER_GPUS[seed % len(SERVER_GPUS)]
        self._gpus = 1 if kind == "jetson" else gpus
        self._cores = 8 if kind == "jetson" else 64
        self._mem_total = JETSON_GPU.memory_bytes if kind == "jetson" else 512 * GIB
        # One power cap now and then (an operator's `nvidia-smi -pl`): the limit the GPU reports.
        self._power_limit_w = self._model.tdp_w * (0.875 if kind == "server" and seed % 4 == 1 else 1.0)
        self._ambient_c = self._rng.uniform(0.0, 6.0)
        self._disk = [0, 0]
        self._net = [0, 0]
        self._last_ns: int | None = None
        self._start_s: float | None = None
        self._incident_every_s = incident_every_s
        self._first_incident_s = first_incident_s
        self._pending: _PendingIncident | None = None
        self._latency = latency
        self._report_sink: Callable[[pb.SdkReport], None] | None = None
        self._lat_window_start: int | None = None
        self._lat_buckets: dict[int, int] = {}
        self._lat_count = 0
        self._lat_sum_ns = 0
        self._lat_errors = 0
        self._regressed_until_s = 0.0
        self._next_pid = 2000 + 1000 * (seed % 7)
        self._states: list[_GpuState] = []
        self.log_source = "/var/log/train.log" if kind == "server" else "/var/log/inference.log"

    # -- wiring ------------------------------------------------------------------------------

    def report_to(self, sink: Callable[[pb.SdkReport], None]) -> None:
        """Where SDK reports (latency histograms) go: the agent's ``add_sdk_report``."""
        self._report_sink = sink

    def inventory(self) -> list[GpuInfo]:
        m = self._model
        return [
            GpuInfo(
                index=i, name=m.name, uuid=f"GPU-sim{self._seed:04d}-{i:02d}-{self.kind}", memory_total_bytes=m.memory_bytes,
                compute_capability=m.compute_capability, pci_bus_id=f"00000000:{_pci_bus(i):02X}:00.0",
                fp16_tensor_cores=True, bf16_tensor_cores=True, int8_tensor_cores=True,
            )
            for i in range(self._gpus)
        ]

    def inventory_message(self) -> pb.Inventory:
        inv = pb.Inventory(
            cpu_model="ARMv8 Processor rev 1 (v8l)" if self.kind == "jetson" else "AMD EPYC 7763 64-Core Processor",
            cpu_cores=self._cores,
            memory_total_bytes=self._mem_total,
            os="Ubuntu 22.04.4 LTS",
            kernel="5.15.136-tegra" if self.kind == "jetson" else "6.8.0-45-generic",
            arch="aarch64" if self.kind == "jetson" else "x86_64",
            driver_version="540.4.0" if self.kind == "jetson" else "550.90.07",
        )
        if self.kind == "jetson":
            inv.board_model = JETSON_BOARD
            inv.l4t_release = "36.4.3"
            inv.jetpack_version = "6.2"
        for g in self.inventory():
            inv.gpus.add(index=g.index, name=g.name, uuid=g.uuid or "", memory_total_bytes=g.memory_total_bytes or 0,
                         compute_capability=g.compute_capability or "", pci_bus_id=g.pci_bus_id or "",
                         fp16_tensor_cores=True, bf16_tensor_cores=True, int8_tensor_cores=True)
        return inv

    # -- jobs --------------------------------------------------------------------------------

    def _pid(self) -> int:
        self._next_pid += self._rng.randint(3, 400)
        return self._next_pid

    def _new_job(self, now_s: float, *, after_crash: bool = False) -> _Job:
        rng, total = self._rng, self._model.memory_bytes
        if self.kind == "jetson":
            if after_crash or rng.random() < 0.3:  # on the ground: charging, or restarting the pipeline
                return _Job("idle", now_s + rng.uniform(120, 420), 0.03, 900 * MIB, ((self._pid(), "nvargus-daemon", 1.0),))
            mem = int(rng.uniform(2.2, 3.0) * GIB)
            return _Job("fly", now_s + rng.uniform(600, 1500), rng.uniform(0.55, 0.8), mem,
                        ((self._pid(), "python3", 0.85), (self._pid(), "nvargus-daemon", 0.15)))
        if after_crash or rng.random() < 0.12:
            return _Job("idle", now_s + rng.uniform(60, 400), 0.0, 0)
        if rng.random() < 0.7:
            mem = int(total * rng.uniform(0.55, 0.85))
            return _Job("train", now_s + rng.uniform(900, 3600), rng.uniform(0.85, 0.97), mem,
                        ((self._pid(), "python3", 1.0),))
        mem = int(total * rng.uniform(0.2, 0.45))
        return _Job("serve", now_s + rng.uniform(1200, 3600), rng.uniform(0.3, 0.6), mem,
                    ((self._pid(), "tritonserver", 0.9), (self._pid(), "python3", 0.1)))

    def _init_states(self, now_s: float) -> None:
        rng = self._rng
        weak = rng.randrange(self._gpus) if self.kind == "server" and rng.random() < 0.7 else -1
        for i in range(self._gpus):
            job = self._new_job(now_s)
            job.until_s = now_s + rng.uniform(60, job.until_s - now_s)  # jobs started before the agent did
            st = _GpuState(job=job, phase=rng.uniform(0, 2 * math.pi), period_s=rng.uniform(40, 160),
                           offset_c=rng.uniform(-3.0, 4.0), weak_cell=(i == weak))
            st.temp_c = 32 + st.offset_c + 45 * job.level
            if st.weak_cell:
                st.ecc_aggregate_base = rng.randint(3, 40)
                st.remapped_rows = rng.randint(1, 3) if self._model.row_remapping else 0
            self._states.append(st)

    def _schedule_incident(self, now_s: float) -> None:
        if self._incident_every_s <= 0:
            return
        if self._first_incident_s is not None:
            # Asked for: when it was asked, even before a whole memory ramp fits in front of it.
            at, self._first_incident_s = now_s + self._first_incident_s, None
        else:
            # Room for the 30 s climb of memory that leads up to an OOM (see _gpu_memory).
            at = now_s + max(45.0, self._rng.expovariate(1.0 / self._incident_every_s))
        if self.kind == "server" and self._rng.random() < 0.25:
            self._pending = _PendingIncident(at, "xid", self._rng.randrange(self._gpus))
            return
        busy = [i for i, s in enumerate(self._states) if s.job.kind in ("train", "fly")] or [0]
        gpu = self._rng.choice(busy)
        self._pending = _PendingIncident(at, "oom", gpu)
        st = self._states[gpu]
        st.oom_at_s = at
        requested = self._rng.choice([256, 512, 1024, 2048] if self.kind == "server" else [128, 256, 512]) * MIB
        st.oom_requested_bytes = requested
        st.oom_free_bytes = int(self._rng.uniform(0.05, 0.8) * requested)

    # -- sampling ----------------------------------------------------------------------------

    def sample(self, now_ns: int) -> SampleSet:
        rng, m = self._rng, self._model
        dt = 1.0 if self._last_ns is None else max(0.0, (now_ns - self._last_ns) / 1e9)
        self._last_ns = now_ns
        t = now_ns / 1e9
        if not self._states:
            self._start_s = t
            self._init_states(t)
            self._schedule_incident(t)
        logs: list[LogEvent] = []
        if self._pending is not None and t >= self._pending.at_s:
            logs.append(self._incident_line(now_ns, self._pending))
            self._pending = None
            self._schedule_incident(t)

        gpus: list[GpuSample] = []
        throttled_any = False
        for i, st in enumerate(self._states):
            if t >= st.job.until_s and st.oom_at_s is None:
                st.job = self._new_job(t)
            job = st.job
            if self.kind == "server" and st.hot_until_s < t and rng.random() < 1 / (3 * 3600 * self._gpus):
                st.hot_until_s = t + rng.uniform(150, 300)  # a failing fan or a blocked inlet
            if job.kind == "idle":
                util = max(0.0, rng.gauss(job.level * 100, 1.0))
            else:
                wave = 0.08 * math.sin(2 * math.pi * t / st.period_s + st.phase)
                dip = 0.5 if job.kind == "train" and (t + st.phase * 10) % st.period_s < 4 else 0.0  # data loading
                util = 100 * min(1.0, max(0.0, job.level + wave - dip + rng.gauss(0, 0.03)))
            target_c = (38 if self.kind == "jetson" else 32) + st.offset_c + self._ambient_c + (
                0.42 if self.kind == "jetson" else 0.45) * util
            if st.hot_until_s > t:
                target_c += 18
            st.temp_c += (target_c - st.temp_c) * min(1.0, dt / 30.0)
            temp = st.temp_c + rng.gauss(0, 0.3)
            throttled = temp > 85
            throttled_any = throttled_any or throttled
            power = m.tdp_w * (0.12 + 0.83 * util / 100) * (0.8 if throttled else 1.0)
            power = min(power, self._power_limit_w)
            st.energy_j += power * dt
            mem_used = self._gpu_memory(st, t)
            sm = round(m.sm_max_mhz * (0.72 if throttled else (0.98 if util > 5 else 0.3)))
            procs = self._gpu_processes(st, mem_used)
            if st.weak_cell and rng.random() < dt / 600:
                st.ecc_corrected += 1
            server = self.kind == "server"
            gpus.append(
                GpuSample(
                    ts_ns=now_ns, gpu_index=i, util_gpu_percent=round(util, 1),
                    util_memory_percent=round(util * (0.7 if self.kind == "jetson" else 0.55), 1),
                    util_encoder_percent=0.0, util_decoder_percent=0.0,
                    memory_used_bytes=mem_used, memory_free_bytes=max(0, m.memory_bytes - mem_used),
                    memory_total_bytes=m.memory_bytes, temp_c=round(temp, 1), power_w=round(power, 1),
                    power_limit_w=self._power_limit_w, energy_j=round(st.energy_j, 1),
                    sm_clock_mhz=sm, memory_clock_mhz=m.mem_max_mhz, graphics_clock_mhz=sm,
                    sm_clock_max_mhz=m.sm_max_mhz, memory_clock_max_mhz=m.mem_max_mhz,
                    pstate=(0 if util > 5 else 8) if server else None,
                    fan_percent=round(30 + 0.5 * util + (25 if st.hot_until_s > t else 0)) if m.has_fan else None,
                    pcie_gen=m.pcie_gen if server else None, pcie_width=16 if server else None,
                    pcie_rx_bytes_per_s=round(util / 100 * rng.uniform(1.5e9, 6e9)) if server else None,
                    pcie_tx_bytes_per_s=round(util / 100 * rng.uniform(0.2e9, 1e9)) if server else None,
                    throttle_reasons=_THERMAL_SLOWDOWN if throttled else 0,
                    ecc_volatile_corrected=st.ecc_corrected if server else None,
                    ecc_volatile_uncorrected=0 if server else None,
                    ecc_aggregate_corrected=st.ecc_aggregate_base + st.ecc_corrected if server else None,
                    ecc_aggregate_uncorrected=0 if server else None,
                    retired_pages=None if (m.row_remapping or not server) else 0,
                    remapped_rows=st.remapped_rows if (server and m.row_remapping) else None,
                    processes=procs,
                )
            )
        load = sum(s.job.level for s in self._states) / len(self._states)
        for k in range(2):
            self._disk[k] += int(rng.uniform(0, 50e6) * dt) // 512 * 512  # whole sectors, as the kernel counts
            self._net[k] += int(rng.uniform(0, 200e6 if self.kind == "server" else 2e6) * dt * max(0.05, load))
        cores = tuple(round(min(100.0, max(0.0, 100 * (0.1 + 0.5 * load) + rng.gauss(0, 10))), 1) for _ in range(self._cores))
        if self.kind == "jetson":  # unified memory: the GPU's memory is the board's RAM
            mem_used = gpus[0].memory_used_bytes or 0
        else:
            # Whole 4 KiB pages, as /proc/meminfo counts them.
            mem_used = (int(self._mem_total * (0.08 + 0.5 * load)) + int(rng.uniform(0, 2 * GIB))) // 4096 * 4096
        cpu = round(sum(cores) / len(cores), 1)
        host = HostSample(
            ts_ns=now_ns, cpu_percent=cpu, cpu_core_percent=cores,
            load1=round(self._cores * cpu / 100, 2), load5=round(self._cores * cpu / 100 * 0.95, 2),
            load15=round(self._cores * cpu / 100 * 0.9, 2),
            mem_total_bytes=self._mem_total, mem_used_bytes=mem_used,
            mem_available_bytes=self._mem_total - mem_used, swap_total_bytes=4 * GIB, swap_used_bytes=int(0.05 * GIB * load),
            disk_total_bytes=(64 if self.kind == "jetson" else 3800) * GIB, disk_used_bytes=(30 if self.kind == "jetson" else 1200) * GIB,
            disk_read_bytes=self._disk[0], disk_write_bytes=self._disk[1], net_rx_bytes=self._net[0], net_tx_bytes=self._net[1],
            top_processes=self._top_processes(cpu),
        )
        out = SampleSet(host=[host], gpu=gpus, logs=logs + self._job_logs(now_ns))
        if self.kind == "jetson":
            out.metrics = self._jetson_points(now_ns, gpus[0], throttled_any)
        if self._latency:
            self._time_inferences(now_ns, dt, throttled_any)
        return out

    def _gpu_memory(self, st: _GpuState, t: float) -> int:
        total = self._model.memory_bytes
        base = (1200 * MIB if self.kind == "jetson" else 0) + st.job.memory_bytes
        # Whole 2 MiB pages, the unit the driver's allocations come in.
        used = base + (int(self._rng.uniform(-24, 24)) * 2 * MIB if st.job.memory_bytes else 0)
        if st.oom_at_s is not None:
            ramp_s = 30.0
            if t < st.oom_at_s - ramp_s:
                st.oom_start_bytes = used
            elif t < st.oom_at_s:
                start = st.oom_start_bytes or used
                frac = (t - (st.oom_at_s - ramp_s)) / ramp_s
                used = int(start + frac * (total - st.oom_free_bytes - start))
            else:  # the moment of the OOM: exactly what the message says; then the process is gone
                used = total - st.oom_free_bytes
                st.oom_at_s = None
                st.job = self._new_job(t, after_crash=True)
        return max(0, min(total, used))

    def _gpu_processes(self, st: _GpuState, mem_used: int) -> tuple[ProcessUsage, ...]:
        if self.kind == "jetson" or not st.job.procs:  # NVML on a Jetson lists no processes
            return ()
        usable = max(0, mem_used - 300 * MIB)  # the driver's own reservation
        return tuple(
            ProcessUsage(pid=pid, name=name, cpu_percent=None, rss_bytes=None, gpu_memory_bytes=int(usable * share))
            for pid, name, share in st.job.procs
        )

    def _top_processes(self, cpu: float) -> tuple[ProcessUsage, ...]:
        seen: dict[int, ProcessUsage] = {}
        for st in self._states:
            for pid, name, share in st.job.procs:
                if pid not in seen:
                    seen[pid] = ProcessUsage(pid=pid, name=name, cpu_percent=round(cpu * share * 2, 1),
                                             rss_bytes=int((3 if self.kind == "server" else 0.6) * GIB * share))
        return tuple(sorted(seen.values(), key=lambda p: -(p.cpu_percent or 0))[:5])

    def _incident_line(self, now_ns: int, inc: _PendingIncident) -> LogEvent:
        st = self._states[inc.gpu]
        if inc.kind == "xid":
            xid, text = self._rng.choice([
                (13, "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address"),
                (31, "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_1c000000. "
                     "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
                (43, "Ch 00000010"),
            ])
            pid = st.job.procs[0][0] if st.job.procs else self._pid()
            return LogEvent(now_ns, "kmsg", f"NVRM: Xid (PCI:0000:{_pci_bus(inc.gpu):02x}:00): {xid}, pid={pid}, "
                                            f"name=python3, {text}", "critical")
        total = self._model.memory_bytes
        others = sum(int(max(0, total - st.oom_free_bytes - 300 * MIB) * share) for _pid, _n, share in st.job.procs[1:])
        if self.kind == "jetson":
            others += 1200 * MIB  # the OS and the camera stack share the board's RAM
        process = max(0, total - st.oom_free_bytes - others)
        requested = st.oom_requested_bytes
        line = oom_line(gpu_index=inc.gpu, total_bytes=total, free_bytes=st.oom_free_bytes, process_bytes=process,
                        requested_bytes=requested, reserved_unallocated_bytes=int(self._rng.uniform(0.05, 0.2) * process))
        return LogEvent(now_ns, self.log_source, line, "error")

    def _job_logs(self, now_ns: int) -> list[LogEvent]:
        if self._rng.random() >= 0.2:
            return []
        st = self._states[0]
        step = int(now_ns / 1e9) % 100000
        if st.job.kind == "train":
            return [LogEvent(now_ns, self.log_source, f"step {step} loss {0.2 + 2.0 * self._rng.random() ** 3:.4f} lr 3.0e-4", "info")]
        if st.job.kind == "fly":
            return [LogEvent(now_ns, self.log_source, f"frame {step} detections {self._rng.randint(0, 12)}", "info")]
        return []

    def _jetson_points(self, now_ns: int, gpu: GpuSample, throttled: bool) -> list[pb.MetricPoint]:
        rng = self._rng
        util = (gpu.util_gpu_percent or 0) / 100
        flying = self._states[0].job.kind == "fly"
        points: list[pb.MetricPoint] = []

        def point(name: str, value: float, **labels: str) -> None:
            p = pb.MetricPoint(name=name, ts_ns=now_ns, value=float(value))
            p.labels.update(labels)
            points.append(p)

        gpu_mw = (gpu.power_w or 0) * 1000
        cpu_mw = 600 + 1800 * util + rng.gauss(0, 40)
        soc_mw = 900 + 900 * util + rng.gauss(0, 30)
        vin = 2200 + gpu_mw * 0.6 + cpu_mw + soc_mw
        for rail, mw in zip(JETSON_RAILS, (vin, cpu_mw + gpu_mw * 0.6, soc_mw)):
            point("jetson.power_mw", round(mw), rail=rail)
            point("jetson.power_avg_mw", round(mw * 0.97), rail=rail)
        temp = gpu.temp_c or 40.0
        for k, sensor in enumerate(JETSON_SENSORS):
            point("jetson.temp_c", round(temp - 2.5 + 0.8 * k + rng.gauss(0, 0.2), 1), sensor=sensor)
        point("jetson.fan_percent", round(min(100.0, max(0.0, (temp - 35) * 2.2))))
        point("jetson.emc_load_percent", round(min(100.0, 8 + 45 * util + rng.gauss(0, 2)), 1))
        point("jetson.emc_mhz", 3199 if flying else 2133)
        engines = {"NVENC": 704 if flying else 0, "NVDEC": 0, "NVJPG": 0,
                   "VIC": 729 if flying else 0, "NVDLA0": (1600 if not throttled else 1100) if flying else 0}
        for engine, mhz in engines.items():
            point("jetson.engine_mhz", mhz, engine=engine)
        point("jetson.jetson_clocks", 0.0)
        point("jetson.nvpmodel_id", JETSON_NVPMODEL[0], mode=JETSON_NVPMODEL[1])
        return points

    # -- the SDK's latency -------------------------------------------------------------------

    def _time_inferences(self, now_ns: int, dt: float, throttled: bool) -> None:
        rng = self._rng
        t = now_ns / 1e9
        if self._lat_window_start is None:
            self._lat_window_start = now_ns
        if self._regressed_until_s < t and rng.random() < dt / 5400:  # about every 90 min
            self._regressed_until_s = t + rng.uniform(480, 720)
        busy = any(s.job.kind in ("fly", "serve", "train") for s in self._states)
        if self.kind == "jetson":
            rate, median_ms = (15.0 if busy else 0.0), 24.0 * (1.35 if throttled else 1.0)
        else:
            rate, median_ms = 40.0, 3.8 + 0.4 * (self._seed % 3)
        if self._regressed_until_s > t:
            median_ms *= 2.5
        calls = int(rate * dt + rng.random())
        for _ in range(calls):
            ms = median_ms * rng.lognormvariate(0.0, 0.12)
            if rng.random() < 0.02:  # a slow tail: a GC pause, a cold cache
                ms *= rng.uniform(1.4, 1.9)
            ns = int(ms * 1e6)
            idx = latency_buckets.bucket_index(ns)
            self._lat_buckets[idx] = self._lat_buckets.get(idx, 0) + 1
            self._lat_count += 1
            self._lat_sum_ns += ns
            if rng.random() < 0.001:
                self._lat_errors += 1
        if now_ns - self._lat_window_start >= _LATENCY_WINDOW_NS:
            self._flush_latency(now_ns)

    def _flush_latency(self, now_ns: int) -> None:
        start = self._lat_window_start or now_ns
        self._lat_window_start = now_ns
        if not self._lat_count or self._report_sink is None:
            self._lat_buckets, self._lat_count, self._lat_sum_ns, self._lat_errors = {}, 0, 0, 0
            return
        indexes = sorted(self._lat_buckets)
        model = "yolov8n-fp16" if self.kind == "jetson" else "resnet50-trt"
        hist = pb.LatencyHistogram(
            name=LATENCY_OPERATION, labels={"model": model}, start_ns=start, end_ns=now_ns, count=self._lat_count,
            sum_ns=self._lat_sum_ns, errors=self._lat_errors, bucket_index=indexes,
            bucket_count=[self._lat_buckets[i] for i in indexes],
        )
        self._lat_buckets, self._lat_count, self._lat_sum_ns, self._lat_errors = {}, 0, 0, 0
        self._report_sink(pb.SdkReport(latency=[hist]))

    def close(self) -> None:
        pass


@dataclass
class SimulatedFleet:
    """N simulated devices, each a real Agent with its own spool and gRPC stream."""

    agents: list = field(default_factory=list)

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
    tls: ChannelTLS | None = None,
    latency: bool = True,
    first_incident_s: float | None = None,
) -> SimulatedFleet:
    """``incident_every_s`` is each device's mean time between logged incidents (0: none);
    ``first_incident_s``, when set, brings the fleet's first one early (on its first server, or
    its first device), so a short demo shows one."""
    from fleetscope.agent.daemon.runner import Agent, AgentSettings

    agents = []
    jetsons = round(devices * jetson_share)
    first = jetsons if jetsons < devices else 0
    for i in range(devices):
        kind = "jetson" if i < jetsons else "server"
        sampler = SimulatedSampler(kind=kind, gpus=gpus_per_server, seed=i, incident_every_s=incident_every_s,
                                   first_incident_s=first_incident_s if i == first else None, latency=latency)
        name = f"{name_prefix}-drone-{i:03d}" if kind == "jetson" else f"{name_prefix}-gpu-{i - jetsons:03d}"
        labels = {SIMULATED_LABEL: "true", "site": ["lab", "field"][i % 2]}
        labels["fleet"] = "drones" if kind == "jetson" else "training"
        if kind == "jetson":
            labels["drone_id"] = f"D{i:03d}"
        settings = AgentSettings(
            collectors=tuple(collectors), spool_dir=state_dir / name, token=token, name=name, labels=labels,
            interval_s=interval_s, batch_interval_s=max(1.0, interval_s), drain_timeout_s=3.0, tls=tls,
        )
        kind_code = pb.DEVICE_KIND_JETSON if kind == "jetson" else pb.DEVICE_KIND_SERVER
        agent = Agent(settings, samplers=[sampler], inventory=sampler.inventory_message(), kind=kind_code,
                      classify=classify)
        sampler.report_to(agent.add_sdk_report)
        agents.append(agent)
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
