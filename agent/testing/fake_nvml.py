"""A stand-in for the ``pynvml`` module (nvidia-ml-py) that replays readings recorded from real GPUs.

``NvmlSampler`` takes the NVML module as a constructor parameter, so tests, benchmarks and
demos hand it a :class:`FakeNvml` instead of the real binding: the hardware boundary is a
parameter and production code has no test switches. The fake exposes the function names,
signatures, return shapes (struct field names such as ``bar1Used`` or ``usedGpuMemory``),
constants and ``NVMLError_*`` classes of nvidia-ml-py 12/13 for the calls the agent makes, and
it behaves like the real library where that matters to the caller: calls before ``nvmlInit``
raise ``NVMLError_Uninitialized``, bus ids come back as ``bytes``, field values carry their
own ``nvmlReturn``, and parent-only readings raise NotSupported on MIG handles.

A *recording* is a JSON-able dict per GPU. Every key is optional: a reading that is missing
or ``None`` makes the matching call raise ``NVMLError_NotSupported``, which is how "N/A" and
"Not Supported" in a capture replay::

    {
      "name": "Tesla T4", "uuid": "GPU-...", "serial": "0324...", "pci_bus_id": "00000000:00:1E.0",
      "architecture": "Turing", "compute_capability": [7, 5],
      "driver_version": "515.105.01", "cuda_driver_version": 11070,     # system-wide; first GPU's wins
      "memory": {"total": B, "used": B, "free": B, "reserved": B},      # bytes; used excludes reserved (v2)
      "bar1": {"total": B, "used": B, "free": B},
      "utilization": {"gpu": %, "memory": %, "encoder": %, "decoder": %},
      "temperature": {"gpu": C, "memory": C},
      "power": {"usage_mw": mW, "limit_mw": mW},
      "energy_mj": mJ,
      "clocks": {"graphics": MHz, "sm": MHz, "mem": MHz, "max_graphics": MHz, "max_sm": MHz, "max_mem": MHz},
      "pstate": 8, "fan_percent": 30,
      "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "tx_kbps": KB/s, "rx_kbps": KB/s},
      "throttle_reasons": 0x1,                                          # clocks event reasons bit mask
      "ecc": {"volatile_corrected": n, "volatile_uncorrected": n, "aggregate_corrected": n, "aggregate_uncorrected": n},
      "retired_pages": {"single_bit": n, "double_bit": n},             # page counts
      "remapped_rows": {"corrected": n, "uncorrected": n, "pending": false, "failure": false},
      "processes": [{"pid": 5762, "name": "python", "type": "C", "used_memory": B,
                     "gpu_instance_id": null, "compute_instance_id": null}],
      "mig_mode": {"current": 1, "pending": 1},
      "mig_devices": [{"uuid": "MIG-...", "name": "...", "gpu_instance_id": 3, "compute_instance_id": 0,
                       "memory": {...}, "bar1": {...}}],
      "not_supported": ["nvmlDeviceGetFanSpeed"],                     # NVML functions that raise NotSupported
      "missing_functions": ["nvmlDeviceGetCurrentClocksEventReasons"], # raise FunctionNotFound (old driver)
    }

:func:`recording_from_nvidia_smi_xml` builds recordings from a real ``nvidia-smi -q -x``
capture. The fake can also be told to make readings drift (:class:`FakeNvml` ``vary=True``: a
small deterministic sequence), to hang a call (:meth:`FakeNvml.hang`), to lose a GPU
(:meth:`FakeNvml.lose_gpu`), to fail a call with any NVML code (:meth:`FakeNvml.fail`), to be a
machine without the library (``library_missing=True``) and to deliver Xid events
(:meth:`FakeNvml.inject_xid`). Standard library only.
"""

from __future__ import annotations

import copy
import hashlib
import queue
import re
import string
import threading
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetscope.proto.vocabulary import CLOCK_EVENT_REASONS

# --- constants, with the names and values nvidia-ml-py uses -------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_PSTATE_UNKNOWN = 32
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
nvmlMemory_v2 = 0x02000028
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypeNone = 0x0000000000000000
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
# What NVML puts in gpuInstanceId/computeInstanceId when a process or event is not in a MIG instance.
_NO_INSTANCE = 0xFFFFFFFF


# --- errors, built the way nvidia-ml-py builds them ----------------------------------------------


class NVMLError(Exception):
    """``NVMLError(code)`` returns the matching ``NVMLError_*`` subclass, as in nvidia-ml-py."""

    _valClassMapping: dict[int, type[NVMLError]] = {}
    _errcode_to_string: dict[int, str] = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")


def _error_classes() -> dict[str, type[NVMLError]]:
    # Same naming rule as nvidia-ml-py: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost.
    out: dict[str, type[NVMLError]] = {}
    for const, val in list(globals().items()):
        if not const.startswith("NVML_ERROR_"):
            continue
        name = "NVMLError_" + string.capwords(const.replace("NVML_ERROR_", ""), "_").replace("_", "")

        def new(cls: type, *args: Any, _val: int = val) -> NVMLError:
            return NVMLError.__new__(cls, _val)

        klass = type(name, (NVMLError,), {"__new__": new, "__module__": __name__})
        NVMLError._valClassMapping[val] = klass
        out[name] = klass
    return out


_ERRORS = _error_classes()
globals().update(_ERRORS)
NVMLError_NotSupported: type[NVMLError] = _ERRORS["NVMLError_NotSupported"]
NVMLError_GpuIsLost: type[NVMLError] = _ERRORS["NVMLError_GpuIsLost"]
NVMLError_Unknown: type[NVMLError] = _ERRORS["NVMLError_Unknown"]
NVMLError_Uninitialized: type[NVMLError] = _ERRORS["NVMLError_Uninitialized"]
NVMLError_LibraryNotFound: type[NVMLError] = _ERRORS["NVMLError_LibraryNotFound"]
NVMLError_DriverNotLoaded: type[NVMLError] = _ERRORS["NVMLError_DriverNotLoaded"]
NVMLError_FunctionNotFound: type[NVMLError] = _ERRORS["NVMLError_FunctionNotFound"]
NVMLError_NotFound: type[NVMLError] = _ERRORS["NVMLError_NotFound"]
NVMLError_Timeout: type[NVMLError] = _ERRORS["NVMLError_Timeout"]
NVMLError_InvalidArgument: type[NVMLError] = _ERRORS["NVMLError_InvalidArgument"]
# nvidia-ml-py spells this one NVMLError_GpuIsLost; the "GPUIsLost" spelling is kept as an alias
# because older documentation and blog posts use it.
NVMLError_GPUIsLost = NVMLError_GpuIsLost


class NVMLLibraryMismatchError(Exception):
    """What nvidia-ml-py raises when an unversioned call maps to a function the driver lacks."""


# --- return shapes -------------------------------------------------------------------------------
# Class, function and argument names below are nvidia-ml-py's (camelCase included), on purpose.


class _Struct:
    """Attribute bag standing in for the ctypes structures nvidia-ml-py returns."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


class c_nvmlMemory_t(_Struct):
    pass


class c_nvmlMemory_v2_t(_Struct):
    pass


class c_nvmlBAR1Memory_t(_Struct):
    pass


class c_nvmlUtilization_t(_Struct):
    pass


class nvmlPciInfo_t(_Struct):
    pass


class c_nvmlFieldValue_t(_Struct):
    pass


class c_nvmlValue_t(_Struct):
    pass


class c_nvmlEventData_t(_Struct):
    pass


class nvmlFriendlyObject(_Struct):
    pass


@dataclass(frozen=True)
class FakeHandle:
    """A device handle: the physical GPU's index, plus the MIG slot for a MIG device."""

    gpu: int
    mig: int | None = None


@dataclass(frozen=True)
class FakeEventSet:
    id: int


# --- replay state ---------------------------------------------------------------------------------

# Offsets applied to drifting readings, in order, per (GPU, function): deterministic so a test
# can predict the n-th reading, small so values stay plausible.
DRIFT = (0, 1, 2, 1, 0, -1, -2, -1)

# Calls that NVML answers for a MIG device handle; anything else is a parent-level reading and
# raises NotSupported there, as on a real A100/H100 in MIG mode.
_MIG_CALLS = frozenset(
    {
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetIndex",
    }
)


def _get(rec: Mapping[str, Any], *path: str) -> Any:
    cur: Any = rec
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


class FakeNvml:
    """An object with the ``pynvml`` module's functions and constants, replaying recordings.

    ``recordings`` is one dict per physical GPU (see the module docstring). With ``vary`` the
    dynamic readings (utilisation, temperature, power, SM/graphics clocks) step through
    :data:`DRIFT` on each read and the energy counter grows by one second of the current power
    draw per read; without it every read returns the recording exactly.
    """

    def __init__(
        self,
        recordings: Iterable[Mapping[str, Any]],
        *,
        vary: bool = False,
        library_missing: bool = False,
        driver_not_loaded: bool = False,
    ) -> None:
        self._recs: list[dict[str, Any]] = [copy.deepcopy(dict(r)) for r in recordings]
        self._vary = vary
        self._init_error = (
            NVML_ERROR_LIBRARY_NOT_FOUND
            if library_missing
            else NVML_ERROR_DRIVER_NOT_LOADED
            if driver_not_loaded
            else None
        )
        self._initialised = 0
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()  # function name -> times called, for tests
        self._reads: Counter[tuple[int, str]] = Counter()
        self._energy: dict[int, float] = {}
        self._hangs: dict[tuple[str, int | None], float] = {}
        self._release = threading.Event()
        self._fails: dict[tuple[str, int | None], int] = {}
        self._fail_codes: dict[tuple[str, int | None], int] = {}
        self._lost: set[int] = set()
        self._event_sets: dict[int, tuple[queue.Queue[c_nvmlEventData_t], dict[int, int]]] = {}
        self._next_set = 1
        self._not_supported = [frozenset(r.get("not_supported") or ()) for r in self._recs]
        self._missing = [frozenset(r.get("missing_functions") or ()) for r in self._recs]
        self._handles = [FakeHandle(i) for i in range(len(self._recs))]
        self._mig_handles = [
            [FakeHandle(i, j) for j in range(len(r.get("mig_devices") or ()))]
            for i, r in enumerate(self._recs)
        ]

    # -- test controls ------------------------------------------------------------------------

    def hang(self, function: str, seconds: float = 3600.0, *, gpu: int | None = None) -> None:
        """Make ``function`` (``"*"`` for every device call) block for ``seconds`` on ``gpu``
        (``None``: every GPU) until :meth:`release` is called."""
        self._release.clear()
        self._hangs[(function, gpu)] = seconds

    def release(self) -> None:
        """End every hang now and stop hanging."""
        self._hangs.clear()
        self._release.set()

    def fail(self, function: str, code: int, *, gpu: int | None = None, times: int = -1) -> None:
        """Make ``function`` raise ``NVMLError(code)`` (``times`` calls; -1 for always)."""
        self._fails[(function, gpu)] = times
        self._fail_codes[(function, gpu)] = code

    def lose_gpu(self, gpu: int) -> None:
        """From now on every call on ``gpu`` (and its MIG devices) raises GPU is lost."""
        self._lost.add(gpu)

    def recover_gpu(self, gpu: int) -> None:
        self._lost.discard(gpu)

    def inject_xid(self, gpu: int, xid: int, *, gpu_instance_id: int | None = None) -> bool:
        """Deliver an Xid critical error for ``gpu`` to every event set that registered for it.
        Returns whether any set was waiting for it."""
        delivered = False
        for events, registered in self._event_sets.values():
            if registered.get(gpu, 0) & nvmlEventTypeXidCriticalError:
                gi = _NO_INSTANCE if gpu_instance_id is None else gpu_instance_id
                events.put(
                    c_nvmlEventData_t(
                        device=self._handles[gpu],
                        eventType=nvmlEventTypeXidCriticalError,
                        eventData=xid,
                        gpuInstanceId=gi,
                        computeInstanceId=_NO_INSTANCE,
                    )
                )
                delivered = True
        return delivered

    @property
    def initialised(self) -> bool:
        return self._initialised > 0

    # -- the plumbing every call goes through -------------------------------------------------

    def _enter_system(self, function: str) -> None:
        """Count a call that is not about one GPU and apply hangs/failures to it."""
        self.calls[function] += 1
        if not self._initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if self._hangs or self._fails:
            self._inject(function, None)

    def _enter(self, function: str, handle: FakeHandle) -> dict[str, Any]:
        """Count the call, apply hangs/failures/loss/NotSupported; return the GPU's recording
        (the MIG device's for a MIG handle)."""
        self.calls[function] += 1
        if not self._initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        gpu = handle.gpu
        if self._hangs or self._fails:
            self._inject(function, gpu)
        if not 0 <= gpu < len(self._recs):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if gpu in self._lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if function in self._missing[gpu]:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        if function in self._not_supported[gpu]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        rec = self._recs[gpu]
        if handle.mig is not None:
            if function not in _MIG_CALLS:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            migs = rec.get("mig_devices") or ()
            if handle.mig >= len(migs):
                raise NVMLError(NVML_ERROR_NOT_FOUND)
            return migs[handle.mig]
        return rec

    def _inject(self, function: str, gpu: int | None) -> None:
        if self._hangs:
            secs = self._hangs.get((function, gpu)) or self._hangs.get((function, None))
            if secs is None and gpu is not None:
                secs = self._hangs.get(("*", gpu)) or self._hangs.get(("*", None))
            if secs:
                self._release.wait(secs)
        if self._fails:
            for key in ((function, gpu), (function, None)):
                left = self._fails.get(key)
                if left is not None and left != 0:
                    self._fails[key] = left - 1 if left > 0 else left
                    raise NVMLError(self._fail_codes[key])

    def _value(self, v: Any) -> Any:
        if v is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return v

    def _drift(self, handle: FakeHandle, function: str, v: Any, step: float, lo: float, hi: float) -> Any:
        if not self._vary:
            return v
        key = (handle.gpu, function)
        n = self._reads[key]
        self._reads[key] = n + 1
        return type(v)(min(hi, max(lo, v + DRIFT[n % len(DRIFT)] * step)))

    # -- init / system ------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.calls["nvmlInit"] += 1
        if self._init_error is not None:
            raise NVMLError(self._init_error)
        if self._hangs.get(("nvmlInit", None)):
            self._release.wait(self._hangs[("nvmlInit", None)])
        with self._lock:
            self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter_system("nvmlShutdown")
        with self._lock:
            self._initialised -= 1

    def nvmlErrorString(self, result: int) -> str:
        return str(NVMLError(result))

    def _system(self, key: str) -> Any:
        for r in self._recs:
            if r.get(key) is not None:
                return r[key]
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter_system("nvmlSystemGetDriverVersion")
        return str(self._system("driver_version"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter_system("nvmlSystemGetCudaDriverVersion")
        return int(self._system("cuda_driver_version"))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter_system("nvmlSystemGetCudaDriverVersion_v2")
        return int(self._system("cuda_driver_version"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter_system("nvmlSystemGetNVMLVersion")
        drv = str(self._system("driver_version"))
        return f"{drv.split('.')[0]}.{drv}"

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._enter_system("nvmlSystemGetProcessName")
        for r in self._recs:
            for p in r.get("processes") or ():
                if p.get("pid") == pid and p.get("name"):
                    return str(p["name"])
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    # -- enumeration --------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter_system("nvmlDeviceGetCount")
        return len(self._recs)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter_system("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._handles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index in self._lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return self._handles[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeHandle:
        self._enter_system("nvmlDeviceGetHandleByUUID")
        for i, r in enumerate(self._recs):
            if r.get("uuid") == uuid:
                return self._handles[i]
            for j, m in enumerate(r.get("mig_devices") or ()):
                if m.get("uuid") == uuid:
                    return self._mig_handles[i][j]
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.gpu

    # -- identity -----------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return str(self._value(self._enter("nvmlDeviceGetName", handle).get("name")))

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return str(self._value(self._enter("nvmlDeviceGetUUID", handle).get("uuid")))

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        return str(self._value(self._enter("nvmlDeviceGetSerial", handle).get("serial")))

    def nvmlDeviceGetPciInfo_v3(self, handle: FakeHandle) -> nvmlPciInfo_t:
        rec = self._enter("nvmlDeviceGetPciInfo_v3", handle)
        bus = str(self._value(rec.get("pci_bus_id")))
        # The real struct's busId is a c_char array, so it reads back as bytes.
        return nvmlPciInfo_t(
            busId=bus.encode(), busIdLegacy=bus[-12:].encode(), domain=int(bus[:-8] or "0", 16)
        )

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:
        rec = self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        if handle.mig is not None:
            rec = self._recs[handle.gpu]
        cc = self._value(rec.get("compute_capability"))
        return (int(cc[0]), int(cc[1]))

    # -- memory -------------------------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        rec = self._enter("nvmlDeviceGetMemoryInfo", handle)
        if version and "nvmlDeviceGetMemoryInfo_v2" in self._missing[handle.gpu]:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        mem = self._value(rec.get("memory"))
        total, used, free = int(mem["total"]), int(mem["used"]), int(mem["free"])
        reserved = int(mem.get("reserved") or 0)
        if self._vary:
            used = self._drift(handle, "nvmlDeviceGetMemoryInfo", used, 1 << 20, 0, total - reserved)
            free = max(0, total - reserved - used)
        if version:
            return c_nvmlMemory_v2_t(version=version, total=total, reserved=reserved, free=free, used=used)
        # v1 counts the driver's reservation as used.
        return c_nvmlMemory_t(total=total, free=free, used=used + reserved)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: FakeHandle) -> c_nvmlBAR1Memory_t:
        bar1 = self._value(self._enter("nvmlDeviceGetBAR1MemoryInfo", handle).get("bar1"))
        return c_nvmlBAR1Memory_t(
            bar1Total=int(bar1["total"]), bar1Free=int(bar1.get("free") or 0), bar1Used=int(bar1["used"])
        )

    # -- utilisation --------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> c_nvmlUtilization_t:
        u = self._enter("nvmlDeviceGetUtilizationRates", handle).get("utilization") or {}
        gpu, mem = self._value(u.get("gpu")), self._value(u.get("memory"))
        gpu = self._drift(handle, "nvmlDeviceGetUtilizationRates", gpu, 5, 0, 100)
        return c_nvmlUtilization_t(gpu=gpu, memory=mem)

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeHandle) -> list[int]:
        u = self._enter("nvmlDeviceGetEncoderUtilization", handle).get("utilization") or {}
        return [int(self._value(u.get("encoder"))), 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeHandle) -> list[int]:
        u = self._enter("nvmlDeviceGetDecoderUtilization", handle).get("utilization") or {}
        return [int(self._value(u.get("decoder"))), 167000]

    # -- thermal / power ----------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        rec = self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        t = self._value(_get(rec, "temperature", "gpu"))
        return int(self._drift(handle, "nvmlDeviceGetTemperature", t, 1, 0, 125))

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[Any]) -> list[c_nvmlFieldValue_t]:
        rec = self._enter("nvmlDeviceGetFieldValues", handle)
        out = []
        for fid in fieldIds:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            v: Any = None
            vtype = NVML_VALUE_TYPE_UNSIGNED_INT
            if fid == NVML_FI_DEV_MEMORY_TEMP:
                v = _get(rec, "temperature", "memory")
            elif fid == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
                v = rec.get("energy_mj")
                vtype = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            ret = NVML_SUCCESS if v is not None else NVML_ERROR_NOT_SUPPORTED
            iv = int(v or 0)
            value = c_nvmlValue_t(
                dVal=float(iv), uiVal=iv, ulVal=iv, ullVal=iv, sllVal=iv, siVal=iv, usVal=iv
            )
            out.append(
                c_nvmlFieldValue_t(
                    fieldId=fid,
                    scopeId=scope,
                    timestamp=0,
                    latencyUsec=0,
                    valueType=vtype,
                    nvmlReturn=ret,
                    value=value,
                )
            )
        return out

    def _power_mw(self, handle: FakeHandle, function: str) -> int:
        rec = self._enter(function, handle)
        p = self._value(_get(rec, "power", "usage_mw"))
        limit = _get(rec, "power", "limit_mw") or 10**7
        return int(self._drift(handle, "nvmlDeviceGetPowerUsage", p, 1000, 0, limit))

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._power_mw(handle, "nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return int(self._value(_get(rec, "power", "limit_mw")))

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetPowerManagementLimit", handle)
        return int(self._value(_get(rec, "power", "limit_mw")))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        e = float(self._value(rec.get("energy_mj")))
        if not self._vary:
            return int(e)
        # A monotonic counter: each read adds one second of the current (drifting) draw.
        acc = self._energy.get(handle.gpu, e)
        power = _get(rec, "power", "usage_mw") or 0
        self._energy[handle.gpu] = acc + power
        return int(acc)

    # -- clocks / performance -----------------------------------------------------------------

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        rec = self._enter("nvmlDeviceGetClockInfo", handle)
        key = {NVML_CLOCK_GRAPHICS: "graphics", NVML_CLOCK_SM: "sm", NVML_CLOCK_MEM: "mem"}.get(type)
        v = self._value(_get(rec, "clocks", key) if key else None)
        if type == NVML_CLOCK_MEM:
            return int(v)
        hi = (_get(rec, "clocks", "max_" + key) if key else None) or 10**5
        return int(self._drift(handle, f"nvmlDeviceGetClockInfo/{type}", v, 15, 0, hi))

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, type: int) -> int:
        rec = self._enter("nvmlDeviceGetMaxClockInfo", handle)
        key = {NVML_CLOCK_GRAPHICS: "max_graphics", NVML_CLOCK_SM: "max_sm", NVML_CLOCK_MEM: "max_mem"}.get(
            type
        )
        return int(self._value(_get(rec, "clocks", key) if key else None))

    def nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        return int(self._value(self._enter("nvmlDeviceGetPerformanceState", handle).get("pstate")))

    def nvmlDeviceGetPowerState(self, handle: FakeHandle) -> int:
        return int(self._value(self._enter("nvmlDeviceGetPowerState", handle).get("pstate")))

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        return int(self._value(self._enter("nvmlDeviceGetFanSpeed", handle).get("fan_percent")))

    def nvmlDeviceGetFanSpeed_v2(self, handle: FakeHandle, fan: int) -> int:
        v = int(self._value(self._enter("nvmlDeviceGetFanSpeed_v2", handle).get("fan_percent")))
        if fan != 0:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return v

    def nvmlDeviceGetNumFans(self, device: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetNumFans", device)
        return 0 if rec.get("fan_percent") is None else 1

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return int(self._value(rec.get("throttle_reasons")))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return int(self._value(rec.get("throttle_reasons")))

    # -- PCIe ---------------------------------------------------------------------------------

    def _pcie(self, function: str, handle: FakeHandle, key: str) -> int:
        rec = self._enter(function, handle)
        return int(self._value(_get(rec, "pcie", key)))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, "width")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeHandle) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, "max_gen")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeHandle) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, "max_width")

    def nvmlDeviceGetPcieThroughput(self, device: FakeHandle, counter: int) -> int:
        key = {NVML_PCIE_UTIL_TX_BYTES: "tx_kbps", NVML_PCIE_UTIL_RX_BYTES: "rx_kbps"}.get(counter, "")
        return self._pcie("nvmlDeviceGetPcieThroughput", device, key)

    # -- ECC / retirement ---------------------------------------------------------------------

    def nvmlDeviceGetEccMode(self, handle: FakeHandle) -> list[int]:
        rec = self._enter("nvmlDeviceGetEccMode", handle)
        mode = self._value(rec.get("ecc_mode"))
        return [int(mode), int(mode)]

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, errorType: int, counterType: int) -> int:
        rec = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        scope = "volatile" if counterType == NVML_VOLATILE_ECC else "aggregate"
        kind = "corrected" if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return int(self._value(_get(rec, "ecc", f"{scope}_{kind}")))

    def nvmlDeviceGetRetiredPages(self, device: FakeHandle, sourceFilter: int) -> list[int]:
        rec = self._enter("nvmlDeviceGetRetiredPages", device)
        key = (
            "single_bit"
            if sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            else "double_bit"
        )
        n = int(self._value(_get(rec, "retired_pages", key)))
        # Page addresses are not in a capture; any distinct values stand in for them.
        return [0x1000 * (i + 1) for i in range(n)]

    def nvmlDeviceGetRemappedRows(self, device: FakeHandle) -> tuple[int, int, int, int]:
        rows = self._value(self._enter("nvmlDeviceGetRemappedRows", device).get("remapped_rows"))
        return (
            int(rows["corrected"]),
            int(rows["uncorrected"]),
            int(bool(rows.get("pending"))),
            int(bool(rows.get("failure"))),
        )

    # -- processes ----------------------------------------------------------------------------

    def _processes(self, function: str, handle: FakeHandle, kinds: str) -> list[nvmlFriendlyObject]:
        self._enter(function, handle)
        rec = self._recs[handle.gpu]
        procs = rec.get("processes")
        if procs is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mig = None if handle.mig is None else (rec.get("mig_devices") or ())[handle.mig]
        out = []
        for p in procs:
            if not any(k in (p.get("type") or "C") for k in kinds):
                continue
            gi, ci = p.get("gpu_instance_id"), p.get("compute_instance_id")
            if mig is not None and (gi != mig.get("gpu_instance_id") or ci != mig.get("compute_instance_id")):
                continue
            out.append(
                nvmlFriendlyObject(
                    pid=int(p["pid"]),
                    usedGpuMemory=None if p.get("used_memory") is None else int(p["used_memory"]),
                    gpuInstanceId=_NO_INSTANCE if gi is None else int(gi),
                    computeInstanceId=_NO_INSTANCE if ci is None else int(ci),
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[nvmlFriendlyObject]:
        # nvidia-ml-py maps the unversioned name to _v3 and turns a missing _v3 into this error.
        if (
            0 <= handle.gpu < len(self._missing)
            and "nvmlDeviceGetComputeRunningProcesses_v3" in self._missing[handle.gpu]
        ):
            self.calls["nvmlDeviceGetComputeRunningProcesses"] += 1
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            )
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle, "C")

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle, "C")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle, "C")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", handle, "G")

    # -- MIG ----------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: FakeHandle) -> list[int]:
        rec = self._enter("nvmlDeviceGetMigMode", device)
        mode = self._value(rec.get("mig_mode"))
        return [int(mode["current"]), int(mode.get("pending", mode["current"]))]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetMaxMigDeviceCount", device)
        self._value(rec.get("mig_mode"))
        return max(7, len(rec.get("mig_devices") or ()))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeHandle, index: int) -> FakeHandle:
        rec = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if index >= len(rec.get("mig_devices") or ()):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self._mig_handles[device.gpu][index]

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: FakeHandle) -> FakeHandle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        return self._handles[migDevice.gpu]

    def nvmlDeviceIsMigDeviceHandle(self, device: FakeHandle) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle", device)
        return int(device.mig is not None)

    def nvmlDeviceGetGpuInstanceId(self, device: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetGpuInstanceId", device)
        if device.mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._value(rec.get("gpu_instance_id")))

    def nvmlDeviceGetComputeInstanceId(self, device: FakeHandle) -> int:
        rec = self._enter("nvmlDeviceGetComputeInstanceId", device)
        if device.mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._value(rec.get("compute_instance_id")))

    # -- events -------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter_system("nvmlEventSetCreate")
        with self._lock:
            es = FakeEventSet(self._next_set)
            self._next_set += 1
            self._event_sets[es.id] = (queue.Queue(), {})
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, eventTypes: int, eventSet: FakeEventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        if handle.mig is not None or eventSet.id not in self._event_sets:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        registered = self._event_sets[eventSet.id][1]
        registered[handle.gpu] = registered.get(handle.gpu, 0) | int(eventTypes)

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> c_nvmlEventData_t:
        self._enter_system("nvmlEventSetWait")
        entry = self._event_sets.get(eventSet.id)
        if entry is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        try:
            return entry[0].get(timeout=max(0, timeoutms) / 1000.0)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> c_nvmlEventData_t:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        self._enter_system("nvmlEventSetFree")
        if self._event_sets.pop(eventSet.id, None) is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


# The module-level constants and error classes become class attributes too, so an instance reads
# like the module (``fake.NVML_CLOCK_SM``, ``fake.NVMLError_NotSupported``).
for _name, _val in list(globals().items()):
    if (
        _name.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason", "NVMLError", "NVMLLibrary"))
        or _name == "nvmlMemory_v2"
    ):
        setattr(FakeNvml, _name, _val)
del _name, _val


# --- recordings from `nvidia-smi -q -x` ----------------------------------------------------------

# What nvidia-smi prints where a reading is unavailable; each becomes NotSupported in the replay.
_UNAVAILABLE = {
    "",
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "unknown error",
    "[unknown error]",
    "err!",
    "requested functionality has been deprecated",
    "none",
}
_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z/%]*)\s*$")
_MIB = 1 << 20

# Compute capability is not in the XML: it is inferred from the product name (most specific
# first), then from <product_architecture>. Names are nvidia-smi's product names.
_CC_BY_NAME: tuple[tuple[str, tuple[int, int]], ...] = (
    ("A100", (8, 0)),
    ("A800", (8, 0)),
    ("A30", (8, 0)),
    ("H100", (9, 0)),
    ("H200", (9, 0)),
    ("H800", (9, 0)),
    ("GH200", (9, 0)),
    ("B200", (10, 0)),
    ("B100", (10, 0)),
    ("GB200", (10, 0)),
    ("B300", (10, 3)),
    ("P100", (6, 0)),
    ("V100", (7, 0)),
    ("TITAN V", (7, 0)),
    ("T4", (7, 5)),
    ("GTX 16", (7, 5)),
    ("RTX 20", (7, 5)),
    ("Quadro RTX", (7, 5)),
    ("RTX 30", (8, 6)),
    ("RTX 40", (8, 9)),
    ("RTX 50", (12, 0)),
    ("GTX 10", (6, 1)),
    ("TITAN X", (6, 1)),
    ("Quadro P", (6, 1)),
    ("Tesla P4", (6, 1)),
    ("Tesla P40", (6, 1)),
)
_CC_BY_ARCH = {
    "Kepler": (3, 5),
    "Maxwell": (5, 2),
    "Pascal": (6, 1),
    "Volta": (7, 0),
    "Turing": (7, 5),
    "Ampere": (8, 6),
    "Ada Lovelace": (8, 9),
    "Hopper": (9, 0),
    "Blackwell": (12, 0),
}
# nvidia-smi's clock-event reason elements (after their prefix) -> NVML's bit.
_THROTTLE_TAGS = {r.smi_tag: r.bit for r in CLOCK_EVENT_REASONS}


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    node = el.find(path)
    if node is None or node.text is None:
        return None
    t = node.text.strip()
    return None if t.lower() in _UNAVAILABLE else t


def _number(el: ET.Element | None, path: str) -> float | None:
    t = _text(el, path)
    if t is None:
        return None
    m = _NUM.match(t.rstrip("x"))
    return float(m.group(1)) if m else None


def _int(el: ET.Element | None, path: str) -> int | None:
    v = _number(el, path)
    return None if v is None else int(round(v))


def _mib(el: ET.Element | None, path: str) -> int | None:
    v = _number(el, path)
    return None if v is None else int(v * _MIB)


def _mw(el: ET.Element | None, *paths: str) -> int | None:
    for p in paths:
        v = _number(el, p)
        if v is not None:
            return int(round(v * 1000))
    return None


def _first_int(el: ET.Element | None, *paths: str) -> int | None:
    for p in paths:
        v = _int(el, p)
        if v is not None:
            return v
    return None


def _sum(el: ET.Element | None, *paths: str) -> int | None:
    vals = [_int(el, p) for p in paths]
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


def _memory(el: ET.Element | None) -> dict[str, int] | None:
    total, used, free = _mib(el, "total"), _mib(el, "used"), _mib(el, "free")
    if total is None or used is None or free is None:
        return None
    reserved = _mib(el, "reserved")
    if reserved is None:
        reserved = max(0, total - used - free)
    return {"total": total, "used": used, "free": free, "reserved": reserved}


def _bar1(el: ET.Element | None) -> dict[str, int] | None:
    total, used = _mib(el, "total"), _mib(el, "used")
    if total is None or used is None:
        return None
    free = _mib(el, "free")
    return {"total": total, "used": used, "free": total - used if free is None else free}


def _compute_capability(name: str, arch: str | None) -> list[int] | None:
    for needle, cc in _CC_BY_NAME:
        if needle.lower() in name.lower():
            return list(cc)
    if arch and arch in _CC_BY_ARCH:
        return list(_CC_BY_ARCH[arch])
    return None


def _throttle(gpu: ET.Element) -> int | None:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if block is None:
        return None
    mask = 0
    seen = False
    for child in block:
        bit = _THROTTLE_TAGS.get(child.tag.removeprefix(prefix))
        text = (child.text or "").strip()
        if bit is None or text.lower() in _UNAVAILABLE:
            continue
        seen = True
        if text == "Active":
            mask |= bit
    return mask if seen else None


def _ecc(gpu: ET.Element) -> dict[str, int | None] | None:
    errors = gpu.find("ecc_errors")
    if errors is None:
        return None
    out: dict[str, int | None] = {}
    for scope in ("volatile", "aggregate"):
        s = errors.find(scope)
        # Pre-Ampere layout: single_bit/double_bit totals; later: sram/dram split (v13 splits
        # uncorrectable SRAM further into parity and SEC-DED).
        out[f"{scope}_corrected"] = _first_int(s, "single_bit/total") if s is not None else None
        out[f"{scope}_uncorrected"] = _first_int(s, "double_bit/total") if s is not None else None
        if out[f"{scope}_corrected"] is None:
            out[f"{scope}_corrected"] = _sum(s, "sram_correctable", "dram_correctable")
        if out[f"{scope}_uncorrected"] is None:
            out[f"{scope}_uncorrected"] = _sum(
                s,
                "sram_uncorrectable",
                "sram_uncorrectable_parity",
                "sram_uncorrectable_secded",
                "dram_uncorrectable",
            )
    return out if any(v is not None for v in out.values()) else None


def _remapped(gpu: ET.Element) -> dict[str, Any] | None:
    rows = gpu.find("remapped_rows")
    corr, unc = _int(rows, "remapped_row_corr"), _int(rows, "remapped_row_unc")
    if corr is None or unc is None:
        return None
    return {
        "corrected": corr,
        "uncorrected": unc,
        "pending": _text(rows, "remapped_row_pending") == "Yes",
        "failure": _text(rows, "remapped_row_failure") == "Yes",
    }


def _retired(gpu: ET.Element) -> dict[str, int] | None:
    rp = gpu.find("retired_pages")
    sbe = _int(rp, "multiple_single_bit_retirement/retired_count")
    dbe = _int(rp, "double_bit_retirement/retired_count")
    if sbe is None and dbe is None:
        return None
    return {"single_bit": sbe or 0, "double_bit": dbe or 0}


def _mig_uuid(parent_uuid: str, gi: int | None, ci: int | None) -> str:
    # The XML does not print MIG UUIDs; derive a stable one in NVML's MIG-<uuid> form.
    h = hashlib.sha1(f"{parent_uuid}/{gi}/{ci}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _processes(gpu: ET.Element) -> list[dict[str, Any]]:
    out = []
    for p in gpu.findall("processes/process_info"):
        pid = _int(p, "pid")
        if pid is None:
            continue
        out.append(
            {
                "pid": pid,
                "name": _text(p, "process_name"),
                "type": _text(p, "type") or "C",
                "used_memory": _mib(p, "used_memory"),
                "gpu_instance_id": _int(p, "gpu_instance_id"),
                "compute_instance_id": _int(p, "compute_instance_id"),
            }
        )
    return out


# Functions the sampler may call, keyed by the recording values that feed them; when all of them
# are None the function is listed under "not_supported", so the recording says explicitly what
# that GPU did not report (a None value alone already makes the matching call NotSupported).
_FUNCTION_SOURCES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("nvmlDeviceGetSerial", (("serial",),)),
    ("nvmlDeviceGetFanSpeed", (("fan_percent",),)),
    ("nvmlDeviceGetPowerUsage", (("power", "usage_mw"),)),
    ("nvmlDeviceGetEnforcedPowerLimit", (("power", "limit_mw"),)),
    ("nvmlDeviceGetTotalEnergyConsumption", (("energy_mj",),)),
    ("nvmlDeviceGetBAR1MemoryInfo", (("bar1",),)),
    ("nvmlDeviceGetEncoderUtilization", (("utilization", "encoder"),)),
    ("nvmlDeviceGetDecoderUtilization", (("utilization", "decoder"),)),
    ("nvmlDeviceGetCurrentClocksEventReasons", (("throttle_reasons",),)),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", (("throttle_reasons",),)),
    ("nvmlDeviceGetPcieThroughput", (("pcie", "tx_kbps"), ("pcie", "rx_kbps"))),
    ("nvmlDeviceGetMaxClockInfo", (("clocks", "max_sm"), ("clocks", "max_mem"), ("clocks", "max_graphics"))),
    ("nvmlDeviceGetRetiredPages", (("retired_pages",),)),
    ("nvmlDeviceGetRemappedRows", (("remapped_rows",),)),
    ("nvmlDeviceGetTotalEccErrors", (("ecc",),)),
    ("nvmlDeviceGetMigMode", (("mig_mode",),)),
    ("nvmlDeviceGetPerformanceState", (("pstate",),)),
)


def recording_from_nvidia_smi_xml(xml_text: str) -> list[dict[str, Any]]:
    """One recording per ``<gpu>`` in an ``nvidia-smi -q -x`` capture: what that GPU reported.

    Readings printed as N/A, Not Supported, deprecated, or absent from the capture are left
    out (and listed in ``not_supported`` where one NVML function maps to them), so the fake
    raises NotSupported for them. Compute capability is not in the XML and is inferred from
    the product name/architecture; MIG UUIDs and names are synthesised (stable) because the
    XML does not print them. Total energy is never in the XML, so it is NotSupported.
    """
    root = ET.fromstring(xml_text.encode("utf-8") if isinstance(xml_text, str) else xml_text)
    driver = _text(root, "driver_version")
    cuda = _text(root, "cuda_version")
    cuda_int = None
    if cuda and re.match(r"^\d+\.\d+$", cuda):
        major, minor = cuda.split(".")
        cuda_int = int(major) * 1000 + int(minor) * 10
    out: list[dict[str, Any]] = []
    for gpu in root.findall("gpu"):
        name = _text(gpu, "product_name") or "Unknown GPU"
        uuid = _text(gpu, "uuid")
        bus = _text(gpu, "pci/pci_bus_id") or gpu.get("id")
        rec: dict[str, Any] = {
            "name": name,
            "uuid": uuid,
            "serial": _text(gpu, "serial"),
            "pci_bus_id": bus,
            "architecture": _text(gpu, "product_architecture"),
            "compute_capability": _compute_capability(name, _text(gpu, "product_architecture")),
            "driver_version": driver,
            "cuda_driver_version": cuda_int,
            "memory": _memory(gpu.find("fb_memory_usage")),
            "bar1": _bar1(gpu.find("bar1_memory_usage")),
            "utilization": {
                "gpu": _int(gpu, "utilization/gpu_util"),
                "memory": _int(gpu, "utilization/memory_util"),
                "encoder": _int(gpu, "utilization/encoder_util"),
                "decoder": _int(gpu, "utilization/decoder_util"),
            },
            "temperature": {
                "gpu": _int(gpu, "temperature/gpu_temp"),
                "memory": _int(gpu, "temperature/memory_temp"),
            },
            "power": {
                # v11 and older: power_readings; v12: gpu_power_readings/power_draw; v13 splits the
                # draw into instant and average (NVML's power usage is the instant one there).
                "usage_mw": _mw(
                    gpu,
                    "power_readings/power_draw",
                    "gpu_power_readings/power_draw",
                    "gpu_power_readings/instant_power_draw",
                    "power_readings/instant_power_draw",
                ),
                "limit_mw": _mw(
                    gpu,
                    "power_readings/enforced_power_limit",
                    "gpu_power_readings/current_power_limit",
                    "power_readings/power_limit",
                ),
            },
            "energy_mj": None,
            "clocks": {
                "graphics": _int(gpu, "clocks/graphics_clock"),
                "sm": _int(gpu, "clocks/sm_clock"),
                "mem": _int(gpu, "clocks/mem_clock"),
                "max_graphics": _int(gpu, "max_clocks/graphics_clock"),
                "max_sm": _int(gpu, "max_clocks/sm_clock"),
                "max_mem": _int(gpu, "max_clocks/mem_clock"),
            },
            "pstate": None,
            "fan_percent": _int(gpu, "fan_speed"),
            "pcie": {
                "gen": _int(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
                "width": _int(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
                "max_gen": _int(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
                "max_width": _int(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"),
                "tx_kbps": _int(gpu, "pci/tx_util"),
                "rx_kbps": _int(gpu, "pci/rx_util"),
            },
            "throttle_reasons": _throttle(gpu),
            "ecc_mode": {"Enabled": 1, "Disabled": 0}.get(_text(gpu, "ecc_mode/current_ecc") or ""),
            "ecc": _ecc(gpu),
            "retired_pages": _retired(gpu),
            "remapped_rows": _remapped(gpu),
            "processes": _processes(gpu),
        }
        ps = _text(gpu, "performance_state")
        if ps and re.match(r"^P\d+$", ps):
            rec["pstate"] = int(ps[1:])
        mig = _text(gpu, "mig_mode/current_mig")
        if mig in ("Enabled", "Disabled"):
            pending = _text(gpu, "mig_mode/pending_mig")
            rec["mig_mode"] = {
                "current": int(mig == "Enabled"),
                "pending": int((pending or mig) == "Enabled"),
            }
        if mig == "Enabled":
            devs = []
            for m in gpu.findall("mig_devices/mig_device"):
                gi, ci = _int(m, "gpu_instance_id"), _int(m, "compute_instance_id")
                mem = _memory(m.find("fb_memory_usage"))
                sms = _int(m, "device_attributes/shared/multiprocessor_count")
                gib = round((mem or {}).get("total", 0) / (1 << 30))
                devs.append(
                    {
                        "uuid": _mig_uuid(uuid or name, gi, ci),
                        "name": f"{name} MIG {sms or '?'}SM.{gib}gb",
                        "gpu_instance_id": gi,
                        "compute_instance_id": ci,
                        "memory": mem,
                        "bar1": _bar1(m.find("bar1_memory_usage")),
                    }
                )
            rec["mig_devices"] = devs
        rec["not_supported"] = sorted(
            fn for fn, paths in _FUNCTION_SOURCES if all(_get(rec, *path) is None for path in paths)
        )
        out.append(rec)
    return out


def replicate(recording: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` copies of one recording with distinct UUIDs, serials and PCI bus ids, to stand
    for a multi-GPU server built from a single-GPU capture."""
    out = []
    for i in range(count):
        r = copy.deepcopy(dict(recording))
        uuid = str(r.get("uuid") or "GPU-00000000-0000-0000-0000-000000000000")
        r["uuid"] = f"{uuid[:-4]}{i:04x}"
        if r.get("serial"):
            r["serial"] = f"{str(r['serial'])[:-3]}{i:03d}"
        r["pci_bus_id"] = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        for m in r.get("mig_devices") or ():
            m["uuid"] = f"{str(m['uuid'])[:-4]}{i:04x}"
        out.append(r)
    return out


def example_recording() -> dict[str, Any]:
    """A synthetic, fully populated recording (an 80 GB HBM data-centre GPU under load); not a
    capture. Used where every reading must be present (energy, memory temperature, ECC)."""
    return {
        "name": "Example HBM GPU 80GB",
        "uuid": "GPU-5e1f0000-0000-4000-8000-000000000000",
        "serial": "1650000000000",
        "pci_bus_id": "00000000:18:00.0",
        "architecture": "Hopper",
        "compute_capability": [9, 0],
        "driver_version": "550.90.07",
        "cuda_driver_version": 12040,
        "memory": {"total": 81559 * _MIB, "used": 40000 * _MIB, "free": 41000 * _MIB, "reserved": 559 * _MIB},
        "bar1": {"total": 131072 * _MIB, "used": 40010 * _MIB, "free": 91062 * _MIB},
        "utilization": {"gpu": 87, "memory": 41, "encoder": 0, "decoder": 0},
        "temperature": {"gpu": 61, "memory": 70},
        "power": {"usage_mw": 512345, "limit_mw": 700000},
        "energy_mj": 123_456_789_000,
        "clocks": {
            "graphics": 1755,
            "sm": 1755,
            "mem": 2619,
            "max_graphics": 1980,
            "max_sm": 1980,
            "max_mem": 2619,
        },
        "pstate": 0,
        "fan_percent": None,
        "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "tx_kbps": 123456, "rx_kbps": 654321},
        "throttle_reasons": 0x4,
        "ecc_mode": 1,
        "ecc": {
            "volatile_corrected": 3,
            "volatile_uncorrected": 0,
            "aggregate_corrected": 17,
            "aggregate_uncorrected": 1,
        },
        "retired_pages": None,
        "remapped_rows": {"corrected": 2, "uncorrected": 1, "pending": False, "failure": False},
        "processes": [
            {"pid": 4242, "name": "python3", "type": "C", "used_memory": 39000 * _MIB},
            {"pid": 4343, "name": "tritonserver", "type": "C", "used_memory": 1000 * _MIB},
        ],
        "mig_mode": {"current": 0, "pending": 0},
        "not_supported": ["nvmlDeviceGetFanSpeed"],
    }
