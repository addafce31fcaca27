"""Per-GPU telemetry, inventory and Xid events from NVML (servers with a discrete NVIDIA driver).

Every NVML call goes through :class:`fleetscope.agent.samplers._nvml.Nvml`, which bounds it with
a timeout and sorts its failures (not supported / GPU lost / library missing); this module only
decides *what* to read and turns the answers into records:

* :meth:`NvmlSampler.inventory` — one :class:`GpuInfo` per GPU and per MIG instance;
* :meth:`NvmlSampler.sample` — one :class:`GpuSample` per GPU and per MIG instance, plus
  ``gpu_lost`` incidents (a GPU NVML reports lost) and ``gpu_xid`` incidents (Xid critical
  error events, collected by an optional background thread).

Indices: physical GPUs keep NVML's index (0..N-1, PCI order); MIG instances follow them
(N, N+1, ... in parent then slot order), each reported as its own GPU with
``GpuInfo.mig_parent_uuid`` set. A MIG instance's sample carries what NVML answers for a MIG
handle (memory, BAR1, processes); temperature, power, clocks and ECC stay on the parent's.

The NVML module is a constructor parameter (``nvml=None`` imports ``pynvml`` lazily), so tests
and benchmarks pass :class:`fleetscope.agent.testing.fake_nvml.FakeNvml`.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetscope.agent.records import GpuInfo, GpuSample, IncidentRecord, ProcessUsage
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.samplers._nvml import (
    SYSTEM,
    Alt,
    Call,
    GpuLost,
    Nvml,
    NvmlCallError,
    NvmlUnavailable,
    call,
    first_of,
)
from fleetscope.agent.samplers._presence import nvml_present
from fleetscope.proto.vocabulary import (
    KIND_GPU_LOST,
    KIND_GPU_XID,
    SEVERITY_CRITICAL,
    SOURCE_NVML,
    XID_CATALOG,
    xid_facts,
    xid_severity,
)

__all__ = [
    "KIND_GPU_LOST",  # defined in the vocabulary; re-exported where it was first defined
    "GpuLost",
    "NvmlSampler",
    "NvmlUnavailable",
    "container_id_from_cgroup",
    "tensor_core_support",
]

log = logging.getLogger(__name__)

# Tensor-core precisions by compute capability, highest first; a device gets the first row whose
# capability it reaches. (FP16, BF16, INT8):
#   7.0       Volta (V100, TITAN V): FP16 only
#   7.2       Volta in Jetson Xavier: FP16 and INT8 (integer MMA arrived with sm_72)
#   7.5       Turing (T4, RTX 20, GTX 16 has none but reports 7.5: see below): FP16 and INT8 (+INT4)
#   8.x       Ampere 8.0/8.6/8.7 (A100, A10, RTX 30, Orin), Ada 8.9: adds BF16 (and TF32; FP8 on 8.9)
#   9.0       Hopper: FP16, BF16, INT8, FP8
#   10.x-12.x Blackwell (B200 10.0, Thor 11.0, RTX 50 / RTX PRO 12.0): FP16, BF16, INT8, FP8, FP4
#   < 7.0     Pascal and older: none
# GTX 16-series and GeForce MX (TU116/TU117) are 7.5 without tensor cores: told apart by name.
_TENSOR_CORES: tuple[tuple[tuple[int, int], tuple[bool, bool, bool]], ...] = (
    ((8, 0), (True, True, True)),
    ((7, 5), (True, False, True)),
    ((7, 2), (True, False, True)),
    ((7, 0), (True, False, False)),
    ((0, 0), (False, False, False)),
)
_NO_TENSOR_CORES_BY_NAME = ("GTX 16", "GeForce MX")

_NO_INSTANCE = 0xFFFFFFFF

# The value-union member to read for each NVML_VALUE_TYPE_*.
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

# A container id is a 64-hex segment of the cgroup path, bare (docker/kubepods cgroupfs) or after
# a runtime prefix: docker-, cri-containerd-, crio-, libpod-, nerdctl-, with an optional .scope.
_CONTAINER_ID = re.compile(r"^(?:[a-z][a-z0-9-]*?[-:])?([0-9a-f]{64})$")


def container_id_from_cgroup(text: str | None) -> str | None:
    """The container id in a ``/proc/PID/cgroup`` file, or ``None`` for a process on the host.

    Handles cgroup v1 (``12:memory:/docker/<id>``, ``/kubepods/burstable/pod<uid>/<id>``) and
    v2 (``0::/system.slice/docker-<id>.scope``,
    ``0::/kubepods.slice/.../cri-containerd-<id>.scope``, ``crio-<id>.scope``). CRI-O's
    ``crio-conmon-<id>`` is the monitor process's cgroup, not the container's.
    """
    if not text:
        return None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for seg in reversed(path.split("/")):
            if seg.endswith(".scope"):
                seg = seg[:-6]
            if len(seg) < 64 or "conmon" in seg:
                continue
            m = _CONTAINER_ID.match(seg)
            if m:
                return m.group(1)
    return None


def _parse_cc(cc: str | tuple[int, int] | None) -> tuple[int, int] | None:
    if cc is None:
        return None
    if isinstance(cc, str):
        try:
            major, _, minor = cc.partition(".")
            return int(major), int(minor or 0)
        except ValueError:
            return None
    return int(cc[0]), int(cc[1])


def tensor_core_support(
    cc: str | tuple[int, int] | None, name: str = ""
) -> tuple[bool | None, bool | None, bool | None]:
    """(FP16, BF16, INT8) tensor-core support for a compute capability ("8.0" or (8, 0));
    all ``None`` when the capability is unknown. See the table above for the rows."""
    parsed = _parse_cc(cc)
    if parsed is None:
        return (None, None, None)
    if any(n in name for n in _NO_TENSOR_CORES_BY_NAME):
        return (False, False, False)
    for floor, support in _TENSOR_CORES:
        if parsed >= floor:
            return support
    return (False, False, False)


def _handle_key(h: Any) -> Any:
    # Real handles are ctypes pointers: an event's device handle is a new pointer object with the
    # same address, so compare addresses. Other handles (a fake's) compare as themselves.
    if isinstance(h, ctypes._Pointer):
        return ctypes.cast(h, ctypes.c_void_p).value
    return h


# --- converters (run on the sampling thread, after the call) --------------------------------------


def _text(v: Any) -> str:
    # Old nvidia-ml-py returned bytes everywhere; new ones still do for struct members (busId).
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _float(v: Any) -> float:
    return float(v)


def _int(v: Any) -> int:
    return int(v)


def _milli(v: Any) -> float:  # mW -> W, mJ -> J
    return v / 1000.0


def _kib(v: Any) -> float:
    # NVML's PCIe throughput is in KB/s of 1024 bytes (nvitop reads it as KiB/s too).
    return float(v) * 1024.0


def _first_float(v: Any) -> float:
    return float(v[0])


def _pstate(v: Any) -> int | None:
    v = int(v)
    return v if 0 <= v <= 15 else None  # 32 is NVML_PSTATE_UNKNOWN


def _util(u: Any) -> tuple[float, float]:
    return float(u.gpu), float(u.memory)


def _memory(m: Any) -> tuple[int, int, int]:
    # v2 (R510+) reports "used" without the driver's reservation, as nvidia-smi does; v1 counts it.
    return int(m.used), int(m.free), int(m.total)


def _bar1(b: Any) -> tuple[int, int]:
    return int(b.bar1Used), int(b.bar1Total)


def _remapped(r: Any) -> int:
    return int(r[0]) + int(r[1])


def _count(pages: Any) -> int:
    return len(pages)


def _pci(p: Any) -> str:
    return _text(p.busId)


def _cc(v: Any) -> str:
    return f"{int(v[0])}.{int(v[1])}"


def _cuda_version(v: Any) -> str:
    v = int(v)
    return f"{v // 1000}.{(v % 1000) // 10}"


def _mig_on(v: Any) -> bool:
    return int(v[0]) == 1


def _true(_: Any) -> bool:
    return True


def _procs(ps: Any) -> tuple[tuple[int, int | None], ...]:
    return tuple((int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in ps)


def _field_value(module: Any) -> Callable[[Any], float]:
    error, success = module.NVMLError, getattr(module, "NVML_SUCCESS", 0)

    def convert(values: Any) -> float:
        fv = values[0]
        ret = int(fv.nvmlReturn)
        if ret != success:
            raise error(ret)  # classified like a call's own error (NotSupported -> once)
        return float(getattr(fv.value, _VALUE_ATTR.get(int(fv.valueType), "uiVal")))

    return convert


class _Device:
    """Mutable per-device state (the records themselves are frozen)."""

    __slots__ = ("index", "key", "handle", "physical", "info", "plan", "static_plan", "static", "is_mig")

    def __init__(
        self,
        index: int,
        key: str,
        handle: Any,
        physical: int,
        info: GpuInfo,
        plan: tuple[Call, ...],
        is_mig: bool,
    ) -> None:
        self.index = index
        self.key = key
        self.handle = handle
        self.physical = physical
        self.info = info
        self.plan = plan
        self.static_plan: tuple[Call, ...] = ()
        self.static: dict[str, Any] = {}
        self.is_mig = is_mig


class NvmlSampler:
    """GPU telemetry through NVML; see the module docstring.

    ``timeout_s`` bounds each NVML call; ``slow_for_s`` is how long a field (then a GPU) that hung
    is left alone. ``proc_root`` is where ``PID/comm`` and ``PID/cgroup`` are read for process
    names and container ids. ``xid_events`` starts a thread waiting for Xid critical errors
    (``xid_poll_ms`` per wait, which also bounds how long :meth:`close` waits for it).
    ``rescan_s`` re-reads the GPU/MIG layout; ``lost_retry_s`` is how often a lost GPU is tried
    again. ``pcie_throughput=False`` skips the PCIe throughput counters (NVML samples them over
    ~20 ms per call on real GPUs). ``clock`` (monotonic seconds) drives those intervals.

    A GPU lost while sampling yields one ``gpu_lost`` incident and no samples until it answers
    again; one lost during discovery is left out of the inventory until the next rescan.
    NVML is initialised by the first :meth:`inventory`/:meth:`sample` (not the constructor),
    which raise :class:`NvmlUnavailable` when NVML cannot work on this device.
    """

    name = "nvml"

    def __init__(
        self,
        *,
        nvml: Any | None = None,
        proc_root: Path | str = Path("/proc"),
        timeout_s: float = 0.5,
        slow_for_s: float = 60.0,
        xid_events: bool = False,
        xid_poll_ms: int = 500,
        rescan_s: float = 300.0,
        lost_retry_s: float = 60.0,
        pcie_throughput: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = Nvml(nvml, timeout_s=timeout_s, slow_for_s=slow_for_s, clock=clock)
        self._proc = str(proc_root)
        self._xid_wanted = xid_events
        self._xid_poll_ms = int(xid_poll_ms)
        self._rescan_s = float(rescan_s)
        self._lost_retry_s = float(lost_retry_s)
        self._pcie_throughput = pcie_throughput
        self._clock = clock
        self._devices: list[_Device] = []
        self._by_handle: dict[Any, _Device] = {}
        self._discovered_at: float | None = None
        self._driver_version: str | None = None
        self._cuda_version: str | None = None
        self._lost: dict[int, float] = {}  # physical index -> when last seen lost
        self._incidents: collections.deque[IncidentRecord] = collections.deque(maxlen=1000)
        self._proc_cache: dict[int, tuple[str, str | None]] = {}
        self._stop = threading.Event()
        self._xid_thread: threading.Thread | None = None
        self._event_set: Any = None
        self._closed = False

    # -- the Sampler protocol -----------------------------------------------------------------

    @classmethod
    def available(cls, proc_root: Path | str = "/proc", dev_root: Path | str = "/dev") -> bool:
        """Cheap and side-effect free: ``pynvml`` is installed (located, not imported) and a
        discrete-GPU driver is present (its /proc entry, its control node, or WSL's GPU node).
        Jetsons have neither and use the tegrastats source instead."""
        return nvml_present(proc_root, dev_root)  # _presence.py: the registry asks it before importing this module

    def inventory(self) -> list[GpuInfo]:
        self._ensure()
        return [d.info for d in self._devices]

    def sample(self, now_ns: int) -> SampleSet:
        self._ensure()
        if self._rescan_s > 0 and self._discovered_at is not None:
            if self._clock() - self._discovered_at >= self._rescan_s:
                self._discover()
        out = SampleSet()
        seen: set[int] = set()
        nv = self._nvml
        lost = self._lost
        for dev in self._devices:
            if lost:
                lost_at = lost.get(dev.physical)
                if lost_at is not None and self._clock() - lost_at < self._lost_retry_s:
                    continue
            else:
                lost_at = None
            calls = dev.plan + dev.static_plan if dev.static_plan else dev.plan
            try:
                v = nv.query_many(dev.key, calls)
            except GpuLost as e:
                self._gpu_lost(dev, e, now_ns)
                continue
            if lost_at is not None:
                del lost[dev.physical]
                nv.forget(dev.key)
                log.warning("nvml: GPU %d (%s) answers again after being lost", dev.physical, dev.info.uuid)
            if dev.static_plan:
                self._keep_static(dev, v)
            out.gpu.append(self._to_sample(dev, v, now_ns, seen))
        incidents = self._incidents
        while incidents:
            out.incidents.append(incidents.popleft())
        if len(self._proc_cache) > len(seen):
            # A pid that left every GPU is forgotten, so a reused pid is read afresh.
            self._proc_cache = {p: m for p, m in self._proc_cache.items() if p in seen}
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        t = self._xid_thread
        if t is not None:
            t.join(timeout=self._xid_poll_ms / 1000.0 + 1.0)
        if self._event_set is not None and (t is None or not t.is_alive()):
            try:
                self._nvml.query(SYSTEM, call("event_set_free", "nvmlEventSetFree", self._event_set))
            except (GpuLost, NvmlUnavailable):
                pass
            self._event_set = None
        if self._nvml.initialised:
            self._nvml.shutdown()

    # -- versions -----------------------------------------------------------------------------

    @property
    def driver_version(self) -> str | None:
        """The kernel driver's version ("535.54.03"), or ``None`` when NVML does not say."""
        self._ensure()
        return self._driver_version

    @property
    def cuda_driver_version(self) -> str | None:
        """The CUDA version the driver supports ("12.2"), or ``None``."""
        self._ensure()
        return self._cuda_version

    # -- discovery ----------------------------------------------------------------------------

    def _ensure(self) -> None:
        if self._closed:
            raise RuntimeError("NvmlSampler is closed")
        if self._discovered_at is None:
            self._discover()
            if self._xid_wanted and self._xid_thread is None:
                self._start_xid()

    def _discover(self) -> None:
        nv = self._nvml
        nv.init()  # NvmlUnavailable propagates: the agent turns the source off
        m = nv.module
        sysv = nv.query_many(
            SYSTEM,
            (
                call("driver_version", "nvmlSystemGetDriverVersion", convert=_text),
                first_of(
                    "cuda_driver_version",
                    Alt("nvmlSystemGetCudaDriverVersion_v2"),
                    Alt("nvmlSystemGetCudaDriverVersion"),
                    convert=_cuda_version,
                ),
                call("count", "nvmlDeviceGetCount", convert=_int),
            ),
        )
        self._driver_version = sysv["driver_version"]
        self._cuda_version = sysv["cuda_driver_version"]
        count = sysv["count"] or 0
        physical: list[_Device] = []
        migs: list[tuple[_Device, int, Any]] = []
        for i in range(count):
            key = f"gpu{i}"
            try:
                h = nv.query(key, call("handle", "nvmlDeviceGetHandleByIndex", i))
                if h is None:
                    continue
                ident = nv.query_many(
                    key,
                    (
                        call("uuid", "nvmlDeviceGetUUID", h, convert=_text),
                        call("name", "nvmlDeviceGetName", h, convert=_text),
                        call("serial", "nvmlDeviceGetSerial", h, convert=_text),
                        first_of(
                            "pci_bus_id",
                            Alt("nvmlDeviceGetPciInfo_v3", (h,)),
                            Alt("nvmlDeviceGetPciInfo", (h,)),
                            convert=_pci,
                        ),
                        call("compute_capability", "nvmlDeviceGetCudaComputeCapability", h, convert=_cc),
                        self._memory_call(m, h),
                        call("mig_mode", "nvmlDeviceGetMigMode", h, convert=_mig_on),
                    ),
                )
            except GpuLost as e:
                self._report_lost(i, None, None, None, e, time.time_ns())
                continue
            name = ident["name"] or "NVIDIA GPU"
            cc = ident["compute_capability"]
            fp16, bf16, int8 = tensor_core_support(cc, name)
            mem = ident["memory"]
            info = GpuInfo(
                index=i,
                name=name,
                uuid=ident["uuid"],
                serial=ident["serial"],
                memory_total_bytes=mem[2] if mem else None,
                compute_capability=cc,
                pci_bus_id=ident["pci_bus_id"],
                fp16_tensor_cores=fp16,
                bf16_tensor_cores=bf16,
                int8_tensor_cores=int8,
            )
            dev = _Device(i, key, h, i, info, self._gpu_plan(m, h), False)
            dev.static_plan = self._static_plan(m, h)
            physical.append(dev)
            if ident["mig_mode"]:
                migs.extend((dev, j, mh) for j, mh in self._mig_handles(dev))
        devices = list(physical)
        for parent, slot, mh in migs:
            key = f"{parent.key}/mig{slot}"
            try:
                ident = nv.query_many(
                    key,
                    (
                        call("uuid", "nvmlDeviceGetUUID", mh, convert=_text),
                        call("name", "nvmlDeviceGetName", mh, convert=_text),
                        self._memory_call(m, mh),
                    ),
                )
            except GpuLost as e:
                self._report_lost(parent.physical, parent.info, None, None, e, time.time_ns())
                continue
            p = parent.info
            mem = ident["memory"]
            info = GpuInfo(
                index=len(devices),
                name=ident["name"] or f"{p.name} MIG {slot}",
                uuid=ident["uuid"],
                serial=None,
                memory_total_bytes=mem[2] if mem else None,
                compute_capability=p.compute_capability,
                pci_bus_id=p.pci_bus_id,
                mig_parent_uuid=p.uuid,
                fp16_tensor_cores=p.fp16_tensor_cores,
                bf16_tensor_cores=p.bf16_tensor_cores,
                int8_tensor_cores=p.int8_tensor_cores,
            )
            devices.append(_Device(info.index, key, mh, parent.physical, info, self._mig_plan(m, mh), True))
        self._devices = devices
        self._by_handle = {_handle_key(d.handle): d for d in physical}
        self._discovered_at = self._clock()
        log.debug("nvml: %d GPUs, %d MIG instances", len(physical), len(devices) - len(physical))

    def _mig_handles(self, dev: _Device) -> list[tuple[int, Any]]:
        nv = self._nvml
        n = (
            nv.query(dev.key, call("mig_max", "nvmlDeviceGetMaxMigDeviceCount", dev.handle, convert=_int))
            or 0
        )
        slots = nv.query_many(
            dev.key,
            tuple(
                call(f"mig_handle{j}", "nvmlDeviceGetMigDeviceHandleByIndex", dev.handle, j) for j in range(n)
            ),
        )
        # An empty slot answers NOT_FOUND, which reads as None.
        return [(j, slots[f"mig_handle{j}"]) for j in range(n) if slots[f"mig_handle{j}"] is not None]

    @staticmethod
    def _memory_call(m: Any, h: Any) -> Call:
        alts = []
        v2 = getattr(m, "nvmlMemory_v2", None)
        if v2 is not None:
            alts.append(Alt("nvmlDeviceGetMemoryInfo", (h,), {"version": v2}))
        alts.append(Alt("nvmlDeviceGetMemoryInfo", (h,)))
        return Call("memory", tuple(alts), _memory)

    def _gpu_plan(self, m: Any, h: Any) -> tuple[Call, ...]:
        def k(name: str, default: int) -> int:
            return int(getattr(m, name, default))

        corrected, uncorrected = (
            k("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0),
            k("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        )
        volatile, aggregate = k("NVML_VOLATILE_ECC", 0), k("NVML_AGGREGATE_ECC", 1)
        plan = [
            call("util", "nvmlDeviceGetUtilizationRates", h, convert=_util),
            call("util_encoder_percent", "nvmlDeviceGetEncoderUtilization", h, convert=_first_float),
            call("util_decoder_percent", "nvmlDeviceGetDecoderUtilization", h, convert=_first_float),
            self._memory_call(m, h),
            call("bar1", "nvmlDeviceGetBAR1MemoryInfo", h, convert=_bar1),
            call("temp_c", "nvmlDeviceGetTemperature", h, k("NVML_TEMPERATURE_GPU", 0), convert=_float),
            call(
                "memory_temp_c",
                "nvmlDeviceGetFieldValues",
                h,
                [k("NVML_FI_DEV_MEMORY_TEMP", 82)],
                convert=_field_value(m),
            ),
            call("power_w", "nvmlDeviceGetPowerUsage", h, convert=_milli),
            call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h, convert=_milli),
            call("energy_j", "nvmlDeviceGetTotalEnergyConsumption", h, convert=_milli),
            call("sm_clock_mhz", "nvmlDeviceGetClockInfo", h, k("NVML_CLOCK_SM", 1), convert=_float),
            call("memory_clock_mhz", "nvmlDeviceGetClockInfo", h, k("NVML_CLOCK_MEM", 2), convert=_float),
            call(
                "graphics_clock_mhz", "nvmlDeviceGetClockInfo", h, k("NVML_CLOCK_GRAPHICS", 0), convert=_float
            ),
            call("pstate", "nvmlDeviceGetPerformanceState", h, convert=_pstate),
            call("fan_percent", "nvmlDeviceGetFanSpeed", h, convert=_float),
            call("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h, convert=_int),
            call("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h, convert=_int),
        ]
        if self._pcie_throughput:
            plan += [
                call(
                    "pcie_tx_bytes_per_s",
                    "nvmlDeviceGetPcieThroughput",
                    h,
                    k("NVML_PCIE_UTIL_TX_BYTES", 0),
                    convert=_kib,
                ),
                call(
                    "pcie_rx_bytes_per_s",
                    "nvmlDeviceGetPcieThroughput",
                    h,
                    k("NVML_PCIE_UTIL_RX_BYTES", 1),
                    convert=_kib,
                ),
            ]
        plan += [
            # "Clocks event reasons" is the R535+ name; older drivers/bindings only have "throttle".
            first_of(
                "throttle_reasons",
                Alt("nvmlDeviceGetCurrentClocksEventReasons", (h,)),
                Alt("nvmlDeviceGetCurrentClocksThrottleReasons", (h,)),
                convert=_int,
            ),
            call(
                "ecc_volatile_corrected", "nvmlDeviceGetTotalEccErrors", h, corrected, volatile, convert=_int
            ),
            call(
                "ecc_volatile_uncorrected",
                "nvmlDeviceGetTotalEccErrors",
                h,
                uncorrected,
                volatile,
                convert=_int,
            ),
            call(
                "ecc_aggregate_corrected",
                "nvmlDeviceGetTotalEccErrors",
                h,
                corrected,
                aggregate,
                convert=_int,
            ),
            call(
                "ecc_aggregate_uncorrected",
                "nvmlDeviceGetTotalEccErrors",
                h,
                uncorrected,
                aggregate,
                convert=_int,
            ),
            call(
                "retired_pages_sbe",
                "nvmlDeviceGetRetiredPages",
                h,
                k("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
                convert=_count,
            ),
            call(
                "retired_pages_dbe",
                "nvmlDeviceGetRetiredPages",
                h,
                k("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
                convert=_count,
            ),
            call("remapped_rows", "nvmlDeviceGetRemappedRows", h, convert=_remapped),
            self._processes_call(h),
        ]
        return tuple(plan)

    @staticmethod
    def _processes_call(h: Any) -> Call:
        # The unversioned name is _v3 in nvidia-ml-py 12+; drivers before R510 only have _v2,
        # where the binding raises NVMLLibraryMismatchError and _v2 is the way left.
        return first_of(
            "processes",
            Alt("nvmlDeviceGetComputeRunningProcesses", (h,)),
            Alt("nvmlDeviceGetComputeRunningProcesses_v2", (h,)),
            convert=_procs,
        )

    @staticmethod
    def _static_plan(m: Any, h: Any) -> tuple[Call, ...]:
        # Maximum clocks do not change while the driver is loaded: read until answered, then kept.
        sm, mem = int(getattr(m, "NVML_CLOCK_SM", 1)), int(getattr(m, "NVML_CLOCK_MEM", 2))
        return (
            call("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", h, sm, convert=_float),
            call("memory_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", h, mem, convert=_float),
        )

    def _mig_plan(self, m: Any, h: Any) -> tuple[Call, ...]:
        return (
            self._memory_call(m, h),
            call("bar1", "nvmlDeviceGetBAR1MemoryInfo", h, convert=_bar1),
            self._processes_call(h),
        )

    def _keep_static(self, dev: _Device, v: dict[str, Any]) -> None:
        left = []
        for c in dev.static_plan:
            val = v.get(c.field)
            if val is not None:
                dev.static[c.field] = val
            elif not self._nvml.unsupported(dev.key, c.field):
                left.append(c)
        dev.static_plan = tuple(left)

    # -- records ------------------------------------------------------------------------------

    def _to_sample(self, dev: _Device, v: dict[str, Any], now_ns: int, seen: set[int]) -> GpuSample:
        mem = v.get("memory")
        bar1 = v.get("bar1")
        procs = v.get("processes")
        processes = self._processes(procs, seen) if procs else ()
        if dev.is_mig:
            return GpuSample(
                ts_ns=now_ns,
                gpu_index=dev.index,
                memory_used_bytes=mem[0] if mem else None,
                memory_free_bytes=mem[1] if mem else None,
                memory_total_bytes=mem[2] if mem else None,
                bar1_used_bytes=bar1[0] if bar1 else None,
                bar1_total_bytes=bar1[1] if bar1 else None,
                processes=processes,
            )
        util = v["util"]
        sbe, dbe = v["retired_pages_sbe"], v["retired_pages_dbe"]
        st = dev.static
        return GpuSample(
            ts_ns=now_ns,
            gpu_index=dev.index,
            util_gpu_percent=util[0] if util else None,
            util_memory_percent=util[1] if util else None,
            util_encoder_percent=v["util_encoder_percent"],
            util_decoder_percent=v["util_decoder_percent"],
            memory_used_bytes=mem[0] if mem else None,
            memory_free_bytes=mem[1] if mem else None,
            memory_total_bytes=mem[2] if mem else None,
            bar1_used_bytes=bar1[0] if bar1 else None,
            bar1_total_bytes=bar1[1] if bar1 else None,
            temp_c=v["temp_c"],
            memory_temp_c=v["memory_temp_c"],
            power_w=v["power_w"],
            power_limit_w=v["power_limit_w"],
            energy_j=v["energy_j"],
            sm_clock_mhz=v["sm_clock_mhz"],
            memory_clock_mhz=v["memory_clock_mhz"],
            graphics_clock_mhz=v["graphics_clock_mhz"],
            sm_clock_max_mhz=st.get("sm_clock_max_mhz"),
            memory_clock_max_mhz=st.get("memory_clock_max_mhz"),
            pstate=v["pstate"],
            fan_percent=v["fan_percent"],
            pcie_gen=v["pcie_gen"],
            pcie_width=v["pcie_width"],
            pcie_tx_bytes_per_s=v.get("pcie_tx_bytes_per_s"),
            pcie_rx_bytes_per_s=v.get("pcie_rx_bytes_per_s"),
            throttle_reasons=v["throttle_reasons"],
            ecc_volatile_corrected=v["ecc_volatile_corrected"],
            ecc_volatile_uncorrected=v["ecc_volatile_uncorrected"],
            ecc_aggregate_corrected=v["ecc_aggregate_corrected"],
            ecc_aggregate_uncorrected=v["ecc_aggregate_uncorrected"],
            retired_pages=None if sbe is None and dbe is None else (sbe or 0) + (dbe or 0),
            remapped_rows=v["remapped_rows"],
            processes=processes,
        )

    def _processes(
        self, pairs: tuple[tuple[int, int | None], ...], seen: set[int]
    ) -> tuple[ProcessUsage, ...]:
        cache = self._proc_cache
        out = []
        for pid, used in pairs:
            seen.add(pid)
            meta = cache.get(pid)
            if meta is None:
                meta = cache[pid] = self._read_proc(pid)
            out.append(
                ProcessUsage(
                    pid=pid,
                    name=meta[0],
                    cpu_percent=None,
                    rss_bytes=None,
                    gpu_memory_bytes=used,
                    container_id=meta[1],
                )
            )
        return tuple(out)

    def _read_proc(self, pid: int) -> tuple[str, str | None]:
        base = f"{self._proc}/{pid}/"
        name = _read(base + "comm")
        cid = container_id_from_cgroup(_read(base + "cgroup"))
        if not name:
            # Not in our pid namespace (agent in a container without hostPID): NVML knows the path.
            name = self._nvml.query(
                SYSTEM, call("process_name", "nvmlSystemGetProcessName", pid, convert=_text)
            )
        return ((name or "").strip() or "unknown", cid)

    # -- GPU lost -----------------------------------------------------------------------------

    def _gpu_lost(self, dev: _Device, e: GpuLost, now_ns: int) -> None:
        info = dev.info
        if dev.is_mig:
            parent = next((d for d in self._devices if d.physical == dev.physical and not d.is_mig), None)
            self._report_lost(dev.physical, parent.info if parent else None, info.uuid, dev.index, e, now_ns)
        else:
            self._report_lost(dev.physical, info, None, None, e, now_ns)

    def _report_lost(
        self,
        physical: int,
        info: GpuInfo | None,
        mig_uuid: str | None,
        mig_index: int | None,
        e: GpuLost,
        ts_ns: int,
    ) -> None:
        first = physical not in self._lost
        self._lost[physical] = self._clock()
        if not first:
            return  # one incident per loss; the GPU is tried again every lost_retry_s
        facts: dict[str, str | int | float | bool] = {
            "gpu_index": physical,
            "nvml_error": e.error,
            "field": e.field,
        }
        if e.code is not None:
            facts["nvml_error_code"] = int(e.code)
        if info is not None:
            if info.uuid:
                facts["gpu_uuid"] = info.uuid
            if info.pci_bus_id:
                facts["pci_bus_id"] = info.pci_bus_id
            facts["gpu_name"] = info.name
        if mig_uuid:
            facts["mig_uuid"] = mig_uuid
        if mig_index is not None:
            facts["mig_index"] = mig_index
        where = f" ({info.pci_bus_id})" if info is not None and info.pci_bus_id else ""
        log.error("nvml: GPU %d%s is lost: %s", physical, where, e.error)
        self._incidents.append(
            IncidentRecord(
                ts_ns=ts_ns,
                kind=KIND_GPU_LOST,
                severity=SEVERITY_CRITICAL,
                title=f"GPU {physical}{where} is lost: NVML reports {e.error}",
                facts=facts,
                source=SOURCE_NVML,
                excerpt=str(e),
            )
        )

    # -- Xid events ---------------------------------------------------------------------------

    def _start_xid(self) -> None:
        nv = self._nvml
        mask = int(getattr(nv.module, "nvmlEventTypeXidCriticalError", 0x8))
        physical = [d for d in self._devices if not d.is_mig]
        if not physical:
            return
        es = nv.query(SYSTEM, call("event_set", "nvmlEventSetCreate"))
        if es is None:
            log.info("nvml: no event set; Xid events are not collected")
            return
        registered = 0
        for d in physical:
            try:
                if nv.query(
                    d.key, call("xid_events", "nvmlDeviceRegisterEvents", d.handle, mask, es, convert=_true)
                ):
                    registered += 1
            except GpuLost as e:
                self._gpu_lost(d, e, time.time_ns())
        if not registered:
            log.info("nvml: no GPU delivers Xid events; not collected")
            nv.query(SYSTEM, call("event_set_free", "nvmlEventSetFree", es))
            return
        self._event_set = es
        self._xid_thread = threading.Thread(
            target=self._xid_loop, args=(es, mask), name="fleetscope-nvml-xid", daemon=True
        )
        self._xid_thread.start()

    def _xid_loop(self, es: Any, mask: int) -> None:
        nv = self._nvml
        timeout_code = nv.code("NVML_ERROR_TIMEOUT")
        stop = self._stop
        while not stop.is_set():
            try:
                data = nv.direct("nvmlEventSetWait", es, self._xid_poll_ms)
            except NvmlCallError as e:
                if e.code != timeout_code:
                    log.debug("nvml: waiting for events: %s", e)
                    stop.wait(1.0)
                continue
            except GpuLost as e:
                # The sampling loop reports which GPU; here only avoid spinning.
                log.debug("nvml: waiting for events: %s", e)
                stop.wait(1.0)
                continue
            except NvmlUnavailable as e:
                log.warning("nvml: Xid event thread stops: %s", e)
                return
            try:
                if int(data.eventType) & mask:
                    self._incidents.append(self._xid_incident(data))
            except Exception:  # a malformed event must not end the thread
                log.exception("nvml: could not read an Xid event")

    def _xid_incident(self, data: Any) -> IncidentRecord:
        xid = int(data.eventData)
        dev = self._by_handle.get(_handle_key(data.device))
        if dev is None:
            try:
                uuid = _text(self._nvml.direct("nvmlDeviceGetUUID", data.device))
                dev = next((d for d in self._devices if d.info.uuid == uuid), None)
            except (NvmlCallError, GpuLost, NvmlUnavailable):
                dev = None
        facts: dict[str, str | int | float | bool] = {"xid": xid}
        where = "unknown GPU"
        if dev is not None:
            facts["gpu_index"] = dev.index
            facts["gpu_name"] = dev.info.name
            if dev.info.uuid:
                facts["gpu_uuid"] = dev.info.uuid
            if dev.info.pci_bus_id:
                facts["pci_bus_id"] = dev.info.pci_bus_id
            where = f"GPU {dev.index}" + (f" ({dev.info.pci_bus_id})" if dev.info.pci_bus_id else "")
        for attr, fact in (
            ("gpuInstanceId", "gpu_instance_id"),
            ("computeInstanceId", "compute_instance_id"),
        ):
            val = getattr(data, attr, _NO_INSTANCE)
            if val is not None and int(val) != _NO_INSTANCE:
                facts[fact] = int(val)
        # Meaning and severity from the catalogue the kernel-log classifier reads too, under the
        # same fact names, so one fault reads the same whichever reporter saw it.
        facts.update(xid_facts(xid))
        info = XID_CATALOG.get(xid)
        return IncidentRecord(
            ts_ns=time.time_ns(),
            kind=KIND_GPU_XID,
            severity=xid_severity(xid),
            title=f"Xid {xid} on {where}" + (f": {info.meaning}" if info else ""),
            facts=facts,
            source=SOURCE_NVML,
            excerpt=f"NVML Xid critical error event: xid={xid} {facts.get('gpu_uuid', '')} {facts.get('pci_bus_id', '')}".strip(),
        )


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(65536).decode("utf-8", "replace")
    except OSError:
        return None
