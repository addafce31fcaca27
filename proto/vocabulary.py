"""fleetscope's vocabulary: the names and tables the agent, the collector and the dashboard share.

It lives beside the wire contract (``fleetscope.proto.v1``) because it is part of that contract:
these strings travel in ``Incident.kind``, ``Incident.facts`` and ``RegisterRequest.capabilities``,
and the collector stores them as they arrive. The agent and the collector both import this
module, so neither has to import the other; it imports nothing but the standard library, so a
drone's agent stays light.

Each fact is written here once. Modules that used to define one (``agent.classify._base``,
``agent.sdk._kinds``, ``agent.records``, ``agent.classify.xid``) re-export it under the old name.

Never rename a string: kinds, severities and fact values are stored data, CLI filters
(``--kind``, ``--severity``) and dashboard URL parameters.
"""

from __future__ import annotations

import math as _math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    # incident kinds
    "KIND_CUDA_OOM",
    "KIND_HOST_OOM",
    "KIND_JETSON_MEMORY",
    "KIND_MEMORY_ALLOC_FAILURE",
    "KIND_GPU_XID",
    "KIND_GPU_LOST",
    "KIND_TENSORRT_ERROR",
    "KIND_TRT_BENCHMARK",
    "KIND_NAN_LOSS",
    "KIND_GRAD_SCALER_COLLAPSE",
    "KIND_MODEL_ON_CPU",
    "KIND_MODEL_SPLIT_DEVICES",
    "KIND_DATALOADER_NO_WORKERS",
    "KIND_DATALOADER_NO_PIN_MEMORY",
    "KIND_ONNXRUNTIME_CPU_FALLBACK",
    "KIND_ONNXRUNTIME_PROVIDER_MISSING",
    "KIND_CUDA_UNAVAILABLE",
    "KIND_PRECISION_UNSUPPORTED",
    "KIND_TF32_DISABLED",
    "KIND_CUDNN_BENCHMARK_OFF",
    "KIND_TORCH_WITHOUT_CUDA",
    "KIND_AGENT_OFFLINE",
    "KIND_LATENCY_SLO",
    "KIND_LATENCY_REGRESSION",
    "KIND_GPU_THROTTLING",
    "KIND_GPU_STARVED",
    "KIND_MEMORY_GROWTH",
    "KIND_REPEATED_OOM",
    "INCIDENT_KINDS",
    "DERIVED_KINDS",
    "RECORD_KINDS",
    # incident lifecycle and alerts
    "INCIDENT_OPEN",
    "INCIDENT_RESOLVED",
    "INCIDENT_STATES",
    "ORIGIN_AGENT",
    "ORIGIN_DETECTOR",
    "ORIGIN_IMPORT",
    "INCIDENT_ORIGINS",
    "ALERT_PENDING",
    "ALERT_FIRING",
    "ALERT_RESOLVED",
    "ALERT_STATES",
    # device kinds
    "DEVICE_KIND_SERVER",
    "DEVICE_KIND_JETSON",
    "DEVICE_KIND_OTHER",
    "DEVICE_KINDS",
    # inventory record kinds
    "INVENTORY_ENVIRONMENT",
    "INVENTORY_TENSORRT_ENGINE",
    "INVENTORY_ONNXRUNTIME_SESSION",
    # severities and log levels
    "SEVERITY_CRITICAL",
    "SEVERITY_ERROR",
    "SEVERITY_WARNING",
    "SEVERITY_INFO",
    "SEVERITIES",
    "SEVERITY_RANK",
    "worst_severity",
    "severities_at_least",
    "LOG_LEVELS",
    "LOG_LEVEL_RANK",
    "log_levels_at_least",
    # who reported an incident
    "SOURCE_NVML",
    "SOURCE_KERNEL_LOG",
    # Xid / SXid catalogue
    "XidInfo",
    "XID_CATALOG",
    "UNKNOWN_XID_SEVERITY",
    "xid_severity",
    "xid_facts",
    "SxidInfo",
    "SXID_CATALOG",
    # clock-event (throttle) reasons
    "ClockEventReason",
    "CLOCK_EVENT_REASONS",
    "THROTTLE_REASON_BITS",
    "throttle_reason_names",
    "THERMAL_THROTTLE_MASK",
    "POWER_THROTTLE_MASK",
    # capabilities
    "CAPABILITY_COLUMNAR",
    "CAPABILITY_INCIDENTS",
    "CAPABILITY_LATENCY",
    "CAPABILITY_METRICS",
    "CAPABILITY_COMPACT",
    "CAPABILITIES",
    "REBALANCE_DETAIL",
    # units
    "BINARY_BYTE_UNITS",
    "format_reading",
]

# ================================================================================ incident kinds

# Raised by the log classifiers (fleetscope.agent.classify).
KIND_CUDA_OOM = "cuda_oom"  # an accelerator allocation failed (PyTorch, TF, JAX, CUDA, cuBLAS, cuDNN)
KIND_HOST_OOM = "host_oom"  # kernel OOM killer, cgroup/container OOM, Kubernetes OOMKilled
KIND_JETSON_MEMORY = "jetson_memory"  # NvMap / nvgpu / CMA allocation failures on Jetson
# A kernel allocation that failed or stalled without an OOM kill (CMA off a Jetson, warn_alloc).
KIND_MEMORY_ALLOC_FAILURE = "memory_alloc_failure"
KIND_GPU_XID = "gpu_xid"  # NVIDIA Xid (and SXid) driver errors, GPU fallen off the bus (also from NVML events)
KIND_TENSORRT_ERROR = "tensorrt_error"  # builder OOM, workspace too small, unsupported precision, ...
KIND_TRT_BENCHMARK = "trt_benchmark"  # a trtexec performance summary (stored as a benchmark record)

# Raised by the NVML sampler (fleetscope.agent.samplers.nvml).
KIND_GPU_LOST = "gpu_lost"  # NVML reports the GPU lost (GPU_IS_LOST, unknown error on every call)

# Raised by the in-process SDK (fleetscope.agent.sdk).
KIND_NAN_LOSS = "nan_loss"  # a training loss that is NaN or +-Inf
KIND_GRAD_SCALER_COLLAPSE = "grad_scaler_collapse"  # AMP GradScaler scale fell below its floor
KIND_MODEL_ON_CPU = "model_on_cpu"  # a model's parameters stay on the CPU while a GPU is present
KIND_MODEL_SPLIT_DEVICES = "model_split_devices"  # parameters spread over several devices
KIND_DATALOADER_NO_WORKERS = "dataloader_no_workers"  # num_workers=0 feeding a GPU
KIND_DATALOADER_NO_PIN_MEMORY = "dataloader_no_pin_memory"
KIND_ONNXRUNTIME_CPU_FALLBACK = "onnxruntime_cpu_fallback"  # asked for CUDA/TensorRT, got only CPU
KIND_ONNXRUNTIME_PROVIDER_MISSING = "onnxruntime_provider_missing"  # got some, not all, accelerators
KIND_CUDA_UNAVAILABLE = "cuda_unavailable"  # GPUs were asked for (CUDA_VISIBLE_DEVICES) but none seen
KIND_PRECISION_UNSUPPORTED = "precision_unsupported"  # e.g. bf16 weights on a GPU below sm_80
KIND_TF32_DISABLED = "tf32_disabled"  # an Ampere+ GPU doing fp32 matmuls without TF32
KIND_CUDNN_BENCHMARK_OFF = "cudnn_benchmark_off"
KIND_TORCH_WITHOUT_CUDA = "torch_without_cuda"  # a CPU-only torch build on a machine with an NVIDIA GPU

# Derived by the collector's detectors (fleetscope.collector.jobs.detectors) from stored data.
KIND_AGENT_OFFLINE = "agent_offline"  # no data from a device for longer than its interval allows
KIND_LATENCY_SLO = "latency_slo"  # p99 of an operation above the objective a rules file sets
KIND_LATENCY_REGRESSION = "latency_regression"  # p99 of an operation far above its own baseline
KIND_GPU_THROTTLING = "gpu_throttling"  # thermal or power throttling sustained, with the clock it cost
KIND_GPU_STARVED = "gpu_starved"  # a GPU idle while the job waits on data or the host CPU is saturated
KIND_MEMORY_GROWTH = "memory_growth"  # GPU or host memory rising steadily: a leak, with time to exhaustion
KIND_REPEATED_OOM = "repeated_oom"  # the same job or process out of memory again after a restart

INCIDENT_KINDS: tuple[str, ...] = (
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
    KIND_GPU_XID,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
    KIND_GPU_LOST,
    KIND_NAN_LOSS,
    KIND_GRAD_SCALER_COLLAPSE,
    KIND_MODEL_ON_CPU,
    KIND_MODEL_SPLIT_DEVICES,
    KIND_DATALOADER_NO_WORKERS,
    KIND_DATALOADER_NO_PIN_MEMORY,
    KIND_ONNXRUNTIME_CPU_FALLBACK,
    KIND_ONNXRUNTIME_PROVIDER_MISSING,
    KIND_CUDA_UNAVAILABLE,
    KIND_PRECISION_UNSUPPORTED,
    KIND_TF32_DISABLED,
    KIND_CUDNN_BENCHMARK_OFF,
    KIND_TORCH_WITHOUT_CUDA,
    KIND_AGENT_OFFLINE,
    KIND_LATENCY_SLO,
    KIND_LATENCY_REGRESSION,
    KIND_GPU_THROTTLING,
    KIND_GPU_STARVED,
    KIND_MEMORY_GROWTH,
    KIND_REPEATED_OOM,
)
# Kinds a detector derives from a condition over stored data: open while it holds, resolved when
# it clears. Every other kind is an event (an OOM, an Xid): its incident groups the repeats that
# follow within a window and is resolved after a quiet period.
DERIVED_KINDS: frozenset[str] = frozenset(
    {
        KIND_AGENT_OFFLINE,
        KIND_LATENCY_SLO,
        KIND_LATENCY_REGRESSION,
        KIND_GPU_THROTTLING,
        KIND_GPU_STARVED,
        KIND_MEMORY_GROWTH,
    }
)
# Kinds stored as incidents that are records, not problems: never counted as open incidents.
RECORD_KINDS: frozenset[str] = frozenset({KIND_TRT_BENCHMARK})

# ================================================================================ lifecycle

# ``incidents.state``: open until its condition clears (derived kinds) or a quiet period passes
# (event kinds); resolved incidents are history.
INCIDENT_OPEN = "open"
INCIDENT_RESOLVED = "resolved"
INCIDENT_STATES: tuple[str, ...] = (INCIDENT_OPEN, INCIDENT_RESOLVED)

# ``incidents.origin``: who raised it. Imported incidents (``fleetscope scan --db``) are history
# from old files: stored resolved, never open, never alerted on.
ORIGIN_AGENT = "agent"  # an agent's classifier, sampler or the SDK, over the wire
ORIGIN_DETECTOR = "detector"  # a collector detector over stored data
ORIGIN_IMPORT = "import"  # a scan of recorded logs imported into the database
INCIDENT_ORIGINS: tuple[str, ...] = (ORIGIN_AGENT, ORIGIN_DETECTOR, ORIGIN_IMPORT)

# ``alerts.state``, as in Prometheus alerting: a rule's condition holds (pending) for its ``for``
# duration before it fires; it resolves when the condition no longer holds.
ALERT_PENDING = "pending"
ALERT_FIRING = "firing"
ALERT_RESOLVED = "resolved"
ALERT_STATES: tuple[str, ...] = (ALERT_PENDING, ALERT_FIRING, ALERT_RESOLVED)

# ``devices.kind``: the name the collector stores for RegisterRequest.kind (DeviceKind), and what
# the dashboard and the CLI filter devices by.
DEVICE_KIND_SERVER = "server"
DEVICE_KIND_JETSON = "jetson"
DEVICE_KIND_OTHER = "other"  # also what an agent that names no kind is stored as
DEVICE_KINDS: tuple[str, ...] = (DEVICE_KIND_SERVER, DEVICE_KIND_JETSON, DEVICE_KIND_OTHER)

# InventoryRecord.kind values the SDK sends.
INVENTORY_ENVIRONMENT = "environment"
INVENTORY_TENSORRT_ENGINE = "tensorrt_engine"
INVENTORY_ONNXRUNTIME_SESSION = "onnxruntime_session"

# ======================================================================= severities and levels

SEVERITY_CRITICAL = "critical"  # the device or GPU needs someone now (reset, reboot, drain)
SEVERITY_ERROR = "error"  # a job failed or will fail
SEVERITY_WARNING = "warning"  # worth a look; nothing failed yet
SEVERITY_INFO = "info"  # a record (a benchmark, a recovery action of "none")

SEVERITIES: tuple[str, ...] = (SEVERITY_CRITICAL, SEVERITY_ERROR, SEVERITY_WARNING, SEVERITY_INFO)  # worst first
SEVERITY_RANK: Mapping[str, int] = MappingProxyType(
    {SEVERITY_INFO: 0, SEVERITY_WARNING: 1, SEVERITY_ERROR: 2, SEVERITY_CRITICAL: 3}
)


def worst_severity(*severities: str) -> str:
    """The worst of ``severities``; an unknown one ranks below info, and the first wins a tie."""
    return max(severities, key=lambda s: SEVERITY_RANK.get(s, -1))


def severities_at_least(floor: str) -> tuple[str, ...]:
    """``floor`` and every severity worse than it, worst first (``"warning"`` -> critical, error, warning)."""
    rank = SEVERITY_RANK[floor]
    return tuple(s for s in SEVERITIES if SEVERITY_RANK[s] >= rank)


# Log levels are the severities plus "debug", mildest first (the order `--level` filters go in).
LOG_LEVELS: tuple[str, ...] = ("debug", SEVERITY_INFO, SEVERITY_WARNING, SEVERITY_ERROR, SEVERITY_CRITICAL)
LOG_LEVEL_RANK: Mapping[str, int] = MappingProxyType({level: i for i, level in enumerate(LOG_LEVELS)})


def log_levels_at_least(floor: str) -> tuple[str, ...]:
    """``floor`` and every level above it, mildest first."""
    return LOG_LEVELS[LOG_LEVEL_RANK[floor] :]


# ================================================================= who reported an incident

# The ``source`` of the incidents the NVML sampler raises (Xid events, lost GPUs), and its name
# in the ``sources`` fact of an Xid that the kernel log reported too.
SOURCE_NVML = "nvml"
# A driver line in the kernel log, as named in that ``sources`` fact. (The incident's own
# ``source`` stays where the line was read: "kmsg", "journal:kernel", a file path.)
SOURCE_KERNEL_LOG = "kernel_log"

# ========================================================================= the Xid catalogue


@dataclass(frozen=True)
class XidInfo:
    """What NVIDIA documents for one Xid code, and the severity fleetscope gives it."""

    code: int
    mnemonic: str
    meaning: str
    action: str  # NVIDIA's "Resolution Bucket (Immediate Action)"
    severity: str  # ours, derived from the meaning and the action (see the table's comments)
    needs_gpu_reset: bool = False
    needs_reboot: bool = False
    app_error: bool = False  # the application (or its data) is the likely cause, not the GPU
    source: str = "catalog"  # where the row comes from, see the table comment

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"Xid {self.code}: severity must be one of {SEVERITIES}, got {self.severity!r}")
        # A GPU that cannot be used until someone resets it or reboots its node is critical by definition.
        if (self.needs_gpu_reset or self.needs_reboot) and self.severity != SEVERITY_CRITICAL:
            raise ValueError(f"Xid {self.code} needs a reset or reboot, so it is critical")


# One table for every Xid reporter: the kernel-log classifier (fleetscope.agent.classify.xid)
# and the NVML event thread (fleetscope.agent.samplers.nvml) both read meaning and severity here,
# so the same fault has the same severity whichever of them saw it.
#
# Sources:
#   "catalog": NVIDIA "Analyzing Xid Errors with the Xid Catalog",
#       https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer),
#       columns Mnemonic / Description / Resolution Bucket (Immediate Action). Read through the
#       generated copy of the catalog spreadsheet in leptonai/gpud
#       (components/accelerator/nvidia/xid/catalog_generated.go, generated 2025-10-29).
#   "legacy": NVIDIA "Xid Errors" listing, https://docs.nvidia.com/deploy/xid-errors/index.html
#       (r555), whose "possible causes" columns give the user-application flag (``app_error``)
#       for 13, 31, 43 and 45 and the reset guidance for 48 and 61 (61 is "Unused" on Ampere+).
#   "decode": the catalog's "XID 144-150 Decode" sheet: per unit, Fatal rows resolve with
#       RESET_GPU and Nonfatal rows with IGNORE; the printed Fatal/Nonfatal word decides.
#   "xid154": the catalog's Xid 154 description; the recovery action printed in the message
#       ("to 0x1 (GPU Reset Required)") decides what is needed.
# Action buckets: RESTART_APP, RESET_GPU, RESTART_BM (reboot the bare-metal node), IGNORE,
# WORKFLOW_* (follow NVIDIA's per-Xid workflow), CONTACT_SUPPORT, XID_154.
#
# Severity rule: RESET_GPU / RESTART_BM (the GPU is unusable until someone acts) -> critical;
# RESTART_APP (a job died, the GPU is fine) -> error; IGNORE (the driver already recovered) ->
# warning. The NVML sampler used to keep a table of its own, which disagreed with this one on
# 43, 46, 61, 74 and 109; the reconciled rows below say why they are what they are.
XID_CATALOG: Mapping[int, XidInfo] = MappingProxyType(
    {
        x.code: x
        for x in (
            XidInfo(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "error"),
            XidInfo(
                13,
                "ROBUST_CHANNEL_GR_EXCEPTION",
                "Graphics engine exception",
                "RESTART_APP",
                "error",
                app_error=True,
                source="catalog+legacy",
            ),
            XidInfo(
                31,
                "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
                "GPU memory page fault",
                "RESTART_APP",
                "error",
                app_error=True,
                source="catalog+legacy",
            ),
            XidInfo(
                32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", "error"
            ),
            # Reconciled: warning (the classifier said error). The driver reset the faulting
            # application's channel and carries on: the catalog's bucket is IGNORE and the legacy
            # listing blames the user application. The application saw its own error already;
            # the GPU needs nothing, so this is worth a look, not a page.
            XidInfo(
                43,
                "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
                "GPU stopped processing",
                "IGNORE",
                "warning",
                app_error=True,
                source="catalog+legacy",
            ),
            XidInfo(
                45,
                "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
                "Preemptive cleanup, due to previous errors",
                "WORKFLOW_XID_45",
                "warning",
                app_error=True,
                source="catalog+legacy",
            ),
            # Reconciled: critical (the sampler said error). Unlike 43, this is the GPU itself
            # timing out, not one channel: the catalog's bucket is RESET_GPU, and NVIDIA's own
            # health checks drain the node and reset the GPU on it.
            XidInfo(
                46,
                "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
                "GPU stopped processing",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(
                48,
                "ROBUST_CHANNEL_GPU_ECC_DBE",
                "Double-bit ECC error",
                "WORKFLOW_XID_48",
                "critical",
                needs_gpu_reset=True,
                source="catalog+legacy",
            ),
            # Reconciled: critical (the sampler said error). "Breakpoint/warning" is the
            # micro-controller's (PMU's) own word for why it stopped: it halted at a firmware
            # assert and does not run again until the GPU is reset, which is what the legacy
            # listing prescribes (the Ampere+ catalog marks 61 unused; older GPUs still print it).
            XidInfo(
                61,
                "PMU_BREAKPOINT",
                "Internal micro-controller breakpoint/warning",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
                source="legacy",
            ),
            XidInfo(
                62,
                "PMU_HALT_ERROR",
                "Internal micro-controller halt",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(
                63,
                "INFOROM_DRAM_RETIREMENT_EVENT",
                "ECC page retirement or row remapping recording event",
                "IGNORE",
                "warning",
            ),
            XidInfo(
                64,
                "INFOROM_DRAM_RETIREMENT_FAILURE",
                "ECC page retirement or row remapping failure",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 exception", "RESTART_APP", "error"),
            XidInfo(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error", "RESTART_APP", "error"),
            # Reconciled: critical, with a GPU reset (the classifier said error). The catalog
            # sends 74 to its NVLink workflow, whose fatal outcome is RESET_GPU, and the legacy
            # listing says a GPU reset or node reboot is needed to clear the error. Until then
            # every NCCL job spanning that GPU's links fails or falls back to PCIe: on a training
            # fleet that is a drain, not a job restart.
            XidInfo(
                74,
                "NVLINK_ERROR",
                "NVLink error",
                "WORKFLOW_NVLINK_ERR",
                "critical",
                needs_gpu_reset=True,
                source="catalog+legacy",
            ),
            XidInfo(
                79,
                "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                "GPU has fallen off the bus",
                "RESTART_BM",
                "critical",
                needs_reboot=True,
            ),
            XidInfo(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", "error"),
            XidInfo(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "warning"),
            XidInfo(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC (memory) error", "RESTART_APP", "error"),
            XidInfo(
                95,
                "ROBUST_CHANNEL_UNCONTAINED_ERROR",
                "Uncontained ECC (memory) error",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            # Reconciled: critical (the sampler said error). The catalog's bucket is RESET_GPU:
            # a context switch that times out leaves the graphics engine wedged for every context
            # on the GPU, not only the one that was switching.
            XidInfo(
                109,
                "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
                "Context switch timeout",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(110, "SEC_FAULT_ERROR", "Security fault error", "RESET_GPU", "critical", needs_gpu_reset=True),
            XidInfo(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", "RESET_GPU", "critical", needs_gpu_reset=True),
            XidInfo(120, "GSP_ERROR", "GSP error", "RESET_GPU", "critical", needs_gpu_reset=True),
            XidInfo(121, "C2C_ERROR", "C2C (chip-to-chip) link error", "IGNORE", "warning"),
            XidInfo(
                136,
                "ALI_TRAINING_FAIL",
                "NVLink link training failed",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(137, "NVLINK_PRIV_ERR", "NVLink privilege error", "IGNORE", "warning"),
            XidInfo(
                140,
                "UNRECOVERABLE_ECC_ERROR_ESCAPE",
                "Unrecovered ECC error",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(143, "GPU_INIT_ERROR", "GPU initialization error", "RESET_GPU", "critical", needs_gpu_reset=True),
            # 144-150: "error" when the message does not say Fatal/Nonfatal (an NVML event never
            # does); the classifier refines it from the printed word (see "decode" above).
            XidInfo(
                144, "NVLINK_SAW_ERROR", "NVLink SAW error", "WORKFLOW_NVLINK5_ERR", "error", source="catalog+decode"
            ),
            XidInfo(
                145, "NVLINK_RLW_ERROR", "NVLink RLW error", "WORKFLOW_NVLINK5_ERR", "error", source="catalog+decode"
            ),
            XidInfo(
                146, "NVLINK_TLW_ERROR", "NVLink TLW error", "WORKFLOW_NVLINK5_ERR", "error", source="catalog+decode"
            ),
            XidInfo(
                147, "NVLINK_TREX_ERROR", "NVLink TREX error", "WORKFLOW_NVLINK5_ERR", "error", source="catalog+decode"
            ),
            XidInfo(
                148,
                "NVLINK_NVLPW_CTRL_ERROR",
                "NVLink NVLPW_CTRL error",
                "WORKFLOW_NVLINK5_ERR",
                "error",
                source="catalog+decode",
            ),
            XidInfo(
                149,
                "NVLINK_NETIR_ERROR",
                "NVLink NETIR error",
                "WORKFLOW_NVLINK5_ERR",
                "error",
                source="catalog+decode",
            ),
            XidInfo(
                150, "NVLINK_MSE_ERROR", "NVLink MSE error", "WORKFLOW_NVLINK5_ERR", "error", source="catalog+decode"
            ),
            # "warning" when the message does not name the recovery action (an NVML event never
            # does); the classifier reads the printed action ("to 0x1 (GPU Reset Required)").
            XidInfo(
                154,
                "GPU_RECOVERY_ACTION_CHANGED",
                "GPU recovery action changed",
                "XID_154",
                "warning",
                source="catalog+xid154",
            ),
            XidInfo(
                155,
                "NVLINK_SW_DEFINED_ERROR",
                "NVLink software-defined error",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(
                156,
                "RESOURCE_RETIREMENT_EVENT",
                "Resource retirement event",
                "RESET_GPU",
                "critical",
                needs_gpu_reset=True,
            ),
            XidInfo(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU", "critical", needs_gpu_reset=True),
        )
    }
)

# A code the catalogue does not list is still a driver error.
UNKNOWN_XID_SEVERITY = SEVERITY_ERROR


def xid_severity(code: int) -> str:
    """The catalogue's severity for ``code`` (before any reading of a printed message refines it)."""
    info = XID_CATALOG.get(code)
    return info.severity if info is not None else UNKNOWN_XID_SEVERITY


def xid_facts(code: int) -> dict[str, str | bool]:
    """The catalogue's facts about ``code``, under the fact names every Xid reporter uses.

    ``known_xid`` always; for a catalogued code also its mnemonic (``xid_name``), ``meaning``,
    ``action``, ``app_error``, ``meaning_source``, ``needs_gpu_reset`` and ``needs_reboot``.
    """
    info = XID_CATALOG.get(code)
    if info is None:
        return {"known_xid": False, "needs_gpu_reset": False, "needs_reboot": False}
    return {
        "known_xid": True,
        "xid_name": info.mnemonic,
        "meaning": info.meaning,
        "action": info.action,
        "app_error": info.app_error,
        "meaning_source": info.source,
        "needs_gpu_reset": info.needs_gpu_reset,
        "needs_reboot": info.needs_reboot,
    }


@dataclass(frozen=True)
class SxidInfo:
    """What NVIDIA documents for one NVSwitch SXid code."""

    code: int
    meaning: str
    severity: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"SXid {self.code}: severity must be one of {SEVERITIES}, got {self.severity!r}")


# NVIDIA Fabric Manager User Guide (DU-09883-001), "Fatal NVSwitch SXid Errors": 20034 means
# the NVLink went down from active; on H100 systems the attached GPU needs a reset (read
# through leptonai/gpud components/accelerator/nvidia/sxid/sxid.go). Codes not listed here are
# graded by the Fatal / Non-fatal word the driver prints.
SXID_CATALOG: Mapping[int, SxidInfo] = MappingProxyType(
    {
        20034: SxidInfo(20034, "NVLink LTSSM fault up (link went down from active)", SEVERITY_CRITICAL),
    }
)

# ================================================================ clock-event (throttle) reasons


@dataclass(frozen=True)
class ClockEventReason:
    """One bit of NVML's clock-event ("throttle") reason mask."""

    name: str  # what users see, and the key of THROTTLE_REASON_BITS
    bit: int  # NVML's nvmlClocksEventReason* / nvmlClocksThrottleReason* value
    smi_tag: str  # nvidia-smi -q -x's element after its clocks_event_reason_ / clocks_throttle_reason_ prefix


# In NVML's bit order (nvml.h); the names are stored nowhere (the mask is), so they may read well.
CLOCK_EVENT_REASONS: tuple[ClockEventReason, ...] = (
    ClockEventReason("gpu_idle", 0x1, "gpu_idle"),
    ClockEventReason("applications_clocks_setting", 0x2, "applications_clocks_setting"),
    ClockEventReason("sw_power_cap", 0x4, "sw_power_cap"),
    ClockEventReason("hw_slowdown", 0x8, "hw_slowdown"),
    ClockEventReason("sync_boost", 0x10, "sync_boost"),
    ClockEventReason("sw_thermal_slowdown", 0x20, "sw_thermal_slowdown"),
    ClockEventReason("hw_thermal_slowdown", 0x40, "hw_thermal_slowdown"),
    ClockEventReason("hw_power_brake_slowdown", 0x80, "hw_power_brake_slowdown"),
    ClockEventReason("display_clock_setting", 0x100, "display_clocks_setting"),
)
THROTTLE_REASON_BITS: Mapping[str, int] = MappingProxyType({r.name: r.bit for r in CLOCK_EVENT_REASONS})


def throttle_reason_names(mask: int) -> list[str]:
    """The names of the reasons set in ``mask``, in bit order."""
    return [r.name for r in CLOCK_EVENT_REASONS if mask & r.bit]


def _mask(*names: str) -> int:
    out = 0
    for name in names:
        out |= THROTTLE_REASON_BITS[name]
    return out


# Reasons that mean "slowed down by heat" / "by power"; idle, application clocks, sync boost and
# display clocks are settings, not slowdowns. hw_slowdown counts as thermal: temperature is the
# first cause NVML gives for it (an external power brake has its own bit, hw_power_brake_slowdown).
THERMAL_THROTTLE_MASK = _mask("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")
POWER_THROTTLE_MASK = _mask("sw_power_cap", "hw_power_brake_slowdown")

# ==================================================================================== capabilities

# The start of the UNAVAILABLE detail with which a worker of a ``--workers N`` collector turns an
# agent away to even the workers' loads (collector.ingest.worker_balance): the agent reconnects
# at once, on a new connection, and says so at info level, not as a warning.
REBALANCE_DETAIL = "rebalancing the collector's workers"


# What each side of the wire understands, exchanged at Register (RegisterRequest.capabilities,
# RegisterResponse.capabilities). Add one when a side learns something the other must not send
# or expect blindly; never change one's meaning.
CAPABILITY_COLUMNAR = "columnar-v1"  # samples as Column messages (fleetscope.proto.columns)
CAPABILITY_INCIDENTS = "incidents-v1"  # Batch.incidents with typed facts
CAPABILITY_LATENCY = "latency-v1"  # LatencyHistogram, its bucket scheme named by its `scheme` field (proto.exponential)
CAPABILITY_METRICS = "metrics-v1"  # MetricPoint
CAPABILITY_COMPACT = "compact-v1"  # Batch.compact (fleetscope.proto.compact)
CAPABILITIES: tuple[str, ...] = (
    CAPABILITY_COLUMNAR,
    CAPABILITY_INCIDENTS,
    CAPABILITY_LATENCY,
    CAPABILITY_METRICS,
    CAPABILITY_COMPACT,
)

# ============================================================================================ units

# Sizes as people read them: binary units with IEC names (what nvidia-smi and the kernel print),
# largest first, for formatting a byte count.
BINARY_BYTE_UNITS: tuple[tuple[str, int], ...] = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))

# A reading's unit from its name's ending (the metric names' convention: units in names).
# (ending, unit, most decimals shown)
_READING_UNITS: tuple[tuple[str, str, int], ...] = (
    ("_percent", "%", 1), ("_c", " C", 1), ("_w", " W", 1), ("_mhz", " MHz", 0), ("_j", " J", 1), ("_ms", " ms", 2),
    ("_s", " s", 2),
)


def format_reading(metric: str, value: float) -> str:
    """A reading as people read it, in its unit, never in exponent form: ``gpu.memory_used_bytes``
    1205610000.0 -> "1.1 GiB", ``gpu.temp_c`` 83.0 -> "83 C", ``host.load1`` 1234567.0 ->
    "1,234,567" (``metric`` may carry its family, ``gpu.`` or ``host.``)."""
    name = metric.rsplit(".", 1)[-1]
    if name.endswith(("_bytes", "_bytes_per_s")):
        text = f"{int(value)} B"
        for unit, size in BINARY_BYTE_UNITS:
            if abs(value) >= size:
                text = f"{value / size:.1f} {unit}"
                break
        return text + ("/s" if name.endswith("_per_s") else "")
    for ending, unit, decimals in _READING_UNITS:
        if name.endswith(ending):
            text = f"{value:,.{decimals}f}"
            return (text.rstrip("0").rstrip(".") if "." in text else text) + unit
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e18:
        return f"{int(value):,}"
    # Two decimals, or for a value below 1 enough of them for three significant digits.
    decimals = 2 if abs(value) >= 1 else 2 - _math.floor(_math.log10(abs(value)))
    return f"{value:,.{min(decimals, 20)}f}".rstrip("0").rstrip(".")
