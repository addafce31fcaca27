"""``check_environment``: the settings that silently cost a training or inference run its speed.

Everything here is read, never changed, and nothing is initialised that the program has not
initialised itself, except that asking torch whether CUDA is available (``cuda_available=None``)
and reading device properties touches the driver. GPU presence can be stated by the caller
(``cuda_available=True``) to check what a program would do on a GPU machine.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import platform
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetscope.agent.classify._base import Finding
from fleetscope.agent.sdk import _runtime
from fleetscope.agent.sdk._kinds import (
    INVENTORY_ENVIRONMENT,
    INVENTORY_ONNXRUNTIME_SESSION,
    KIND_CUDA_UNAVAILABLE,
    KIND_CUDNN_BENCHMARK_OFF,
    KIND_DATALOADER_NO_PIN_MEMORY,
    KIND_DATALOADER_NO_WORKERS,
    KIND_MODEL_ON_CPU,
    KIND_MODEL_SPLIT_DEVICES,
    KIND_ONNXRUNTIME_CPU_FALLBACK,
    KIND_ONNXRUNTIME_PROVIDER_MISSING,
    KIND_PRECISION_UNSUPPORTED,
    KIND_TF32_DISABLED,
    KIND_TORCH_WITHOUT_CUDA,
)
from fleetscope.agent.sdk._onnxruntime import OnnxSessionProviders, inspect_session
from fleetscope.agent.sdk._shapes import dtype_text
from fleetscope.proto.vocabulary import SEVERITY_WARNING, severities_at_least

# Findings at these severities are also sent as incidents; "info" ones ride in the inventory only.
INCIDENT_SEVERITIES = severities_at_least(SEVERITY_WARNING)


@dataclass(frozen=True)
class PrecisionSupport:
    """What a compute capability runs fast, per NVIDIA's architecture tables."""

    fp16: bool  # native half arithmetic (sm_53+)
    fp16_tensor_cores: bool  # Volta sm_70+
    int8_tensor_cores: bool  # Xavier sm_72, Turing sm_75+
    bf16: bool  # Ampere sm_80+
    tf32: bool  # Ampere sm_80+
    fp8: bool  # Ada sm_89, Hopper sm_90+


def precision_support(major: int, minor: int) -> PrecisionSupport:
    cc = (major, minor)
    return PrecisionSupport(
        fp16=cc >= (5, 3),
        fp16_tensor_cores=cc >= (7, 0),
        int8_tensor_cores=cc >= (7, 2),
        bf16=cc >= (8, 0),
        tf32=cc >= (8, 0),
        fp8=cc >= (8, 9),
    )


@dataclass(frozen=True)
class GpuCapability:
    index: int
    name: str
    compute_capability: str  # "8.0"
    total_memory_bytes: int
    precision: PrecisionSupport


@dataclass(frozen=True)
class ModelPlacement:
    name: str
    class_name: str
    devices: tuple[str, ...]  # every device a parameter or buffer is on, e.g. ("cuda:0",)
    dtypes: tuple[str, ...]  # parameter dtypes, e.g. ("float32",)
    parameters: int  # number of parameter elements
    training: bool | None


@dataclass(frozen=True)
class DataLoaderSettings:
    name: str
    num_workers: int | None
    pin_memory: bool | None
    batch_size: int | None
    persistent_workers: bool | None
    prefetch_factor: int | None


@dataclass(frozen=True)
class EnvironmentReport:
    """What ``check_environment`` saw. ``findings`` are what deserves attention, worst first."""

    python_version: str
    platform: str
    torch_version: str | None
    torch_cuda_version: str | None  # the CUDA torch was built with; None for CPU-only builds
    cudnn_version: int | None
    cuda_available: bool
    device_count: int
    cuda_visible_devices: str | None
    nvidia_driver_gpus: int  # GPUs the NVIDIA driver lists, whatever torch thinks
    gpus: tuple[GpuCapability, ...]
    matmul_allow_tf32: bool | None
    cudnn_allow_tf32: bool | None
    cudnn_benchmark: bool | None
    cudnn_deterministic: bool | None
    float32_matmul_precision: str | None
    autocast_enabled: bool | None  # at the time of the check, i.e. inside an autocast block or not
    onnxruntime_version: str | None
    onnxruntime_providers: tuple[str, ...]  # available in this build; empty when not probed
    tensorrt_version: str | None
    models: tuple[ModelPlacement, ...] = ()
    dataloaders: tuple[DataLoaderSettings, ...] = ()
    onnx_sessions: tuple[OnnxSessionProviders, ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        """No finding at error or critical severity."""
        return not any(f.severity in ("critical", "error") for f in self.findings)

    def finding_kinds(self) -> tuple[str, ...]:
        return tuple(f.kind for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for s, d in zip(self.onnx_sessions, out["onnx_sessions"]):
            d["fell_back_to_cpu"] = s.fell_back_to_cpu
        out["ok"] = self.ok
        return out

    def facts(self) -> dict[str, object]:
        """The report flattened for an InventoryRecord: ``gpu.0.name``, ``model.net.devices``, ..."""
        facts: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, (str, int, float, bool)):
                facts[f.name] = value
        facts["onnxruntime_providers"] = ",".join(self.onnxruntime_providers)
        for g in self.gpus:
            p = f"gpu.{g.index}."
            facts[p + "name"] = g.name
            facts[p + "compute_capability"] = g.compute_capability
            facts[p + "total_memory_bytes"] = g.total_memory_bytes
            for k, v in dataclasses.asdict(g.precision).items():
                facts[p + k] = v
        for m in self.models:
            p = f"model.{m.name}."
            facts[p + "class"] = m.class_name
            facts[p + "devices"] = ",".join(m.devices)
            facts[p + "dtypes"] = ",".join(m.dtypes)
            facts[p + "parameters"] = m.parameters
        for d in self.dataloaders:
            p = f"dataloader.{d.name}."
            for k in ("num_workers", "pin_memory", "batch_size", "persistent_workers", "prefetch_factor"):
                facts[p + k] = getattr(d, k)
        for s in self.onnx_sessions:
            p = f"onnxruntime_session.{s.name}."
            facts[p + "requested"] = ",".join(s.requested) if s.requested is not None else None
            facts[p + "actual"] = ",".join(s.actual)
            facts[p + "fell_back_to_cpu"] = s.fell_back_to_cpu
        for i, finding in enumerate(self.findings):
            facts[f"finding.{i}.kind"] = finding.kind
            facts[f"finding.{i}.severity"] = finding.severity
            facts[f"finding.{i}.title"] = finding.title
        facts["ok"] = self.ok
        return facts


# ---------------------------------------------------------------- gathering


def _quiet_get(fn: Any, default: Any = None) -> Any:
    # Settings torch has renamed warn when read; the check must not turn into warnings (or, under
    # -W error, exceptions) in the program it checks.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:
        return default


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:
            return None
    return None


def _nvidia_driver_gpus() -> int:
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


@dataclass(frozen=True)
class _TorchState:
    version: str | None = None
    cuda_version: str | None = None
    cudnn_version: int | None = None
    cuda_available: bool = False
    device_count: int = 0
    gpus: tuple[GpuCapability, ...] = ()
    matmul_allow_tf32: bool | None = None
    cudnn_allow_tf32: bool | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    float32_matmul_precision: str | None = None
    autocast_enabled: bool | None = None
    extra: Mapping[str, object] = field(default_factory=dict)


def _torch_state(cuda_available: bool | None) -> _TorchState:
    try:
        import torch
    except Exception:
        return _TorchState(cuda_available=bool(cuda_available))
    really = bool(_quiet_get(torch.cuda.is_available, False))
    available = really if cuda_available is None else bool(cuda_available)
    gpus: list[GpuCapability] = []
    count = 0
    if available and really:
        count = int(_quiet_get(torch.cuda.device_count, 0))
        for i in range(count):
            props = _quiet_get(lambda i=i: torch.cuda.get_device_properties(i))
            if props is None:
                continue
            major, minor = int(props.major), int(props.minor)
            gpus.append(
                GpuCapability(
                    index=i,
                    name=str(props.name),
                    compute_capability=f"{major}.{minor}",
                    total_memory_bytes=int(props.total_memory),
                    precision=precision_support(major, minor),
                )
            )
    elif available:
        count = 1  # stated by the caller: at least one GPU, properties unknown

    def autocast() -> bool:
        try:
            return bool(torch.is_autocast_enabled("cuda")) or bool(torch.is_autocast_enabled("cpu"))
        except TypeError:  # torch < 2.4 takes no device type
            return bool(torch.is_autocast_enabled())

    return _TorchState(
        version=str(torch.__version__),
        cuda_version=_quiet_get(lambda: torch.version.cuda),
        cudnn_version=_quiet_get(torch.backends.cudnn.version),
        cuda_available=available,
        device_count=count,
        gpus=tuple(gpus),
        matmul_allow_tf32=_quiet_get(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        cudnn_allow_tf32=_quiet_get(lambda: bool(torch.backends.cudnn.allow_tf32)),
        cudnn_benchmark=_quiet_get(lambda: bool(torch.backends.cudnn.benchmark)),
        cudnn_deterministic=_quiet_get(lambda: bool(torch.backends.cudnn.deterministic)),
        float32_matmul_precision=_quiet_get(torch.get_float32_matmul_precision),
        autocast_enabled=_quiet_get(autocast),
    )


def _named(items: Iterable[Any] | Mapping[str, Any] | None, kind: str) -> list[tuple[str, Any]]:
    if items is None:
        return []
    if isinstance(items, Mapping):
        return [(str(k), v) for k, v in items.items()]
    if not isinstance(items, (list, tuple, set, frozenset)) and any(
        hasattr(items, a) for a in ("parameters", "num_workers", "get_providers")
    ):
        items = [items]  # one object passed bare; a DataLoader must not be iterated here
    out = []
    for i, item in enumerate(items):
        obj = item[0] if isinstance(item, tuple) and item else item
        out.append((f"{type(obj).__name__}#{i}" if kind != "onnx" else f"session#{i}", item))
    return out


def _model_placement(name: str, model: Any) -> ModelPlacement:
    tensors: list[Any] = []
    params: list[Any] = []
    for attr in ("parameters", "buffers"):
        fn = getattr(model, attr, None)
        if fn is None:
            continue
        try:
            got = list(fn())
        except Exception:
            got = []
        tensors.extend(got)
        if attr == "parameters":
            params = got
    devices = sorted({str(t.device) for t in tensors if getattr(t, "device", None) is not None})
    dtypes = sorted({d for d in (dtype_text(p) for p in params) if d})
    count = 0
    for p in params:
        try:
            count += int(p.numel())
        except Exception:
            pass
    training = getattr(model, "training", None)
    return ModelPlacement(
        name=name,
        class_name=type(model).__name__,
        devices=tuple(devices),
        dtypes=tuple(dtypes),
        parameters=count,
        training=bool(training) if training is not None else None,
    )


def _dataloader_settings(name: str, loader: Any) -> DataLoaderSettings:
    def opt_int(attr: str) -> int | None:
        v = getattr(loader, attr, None)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    def opt_bool(attr: str) -> bool | None:
        v = getattr(loader, attr, None)
        return bool(v) if v is not None else None

    return DataLoaderSettings(
        name=name,
        num_workers=opt_int("num_workers"),
        pin_memory=opt_bool("pin_memory"),
        batch_size=opt_int("batch_size"),
        persistent_workers=opt_bool("persistent_workers"),
        prefetch_factor=opt_int("prefetch_factor"),
    )


def _onnxruntime_state(probe: bool) -> tuple[str | None, tuple[str, ...]]:
    version = _dist_version("onnxruntime-gpu", "onnxruntime", "onnxruntime-directml", "onnxruntime-openvino")
    ort = sys.modules.get("onnxruntime")
    if ort is None and probe:
        try:
            ort = importlib.import_module("onnxruntime")
        except Exception:
            ort = None
    providers: tuple[str, ...] = ()
    if ort is not None:
        providers = tuple(_quiet_get(ort.get_available_providers, ()) or ())
        version = str(getattr(ort, "__version__", version) or version)
    return version, providers


def _tensorrt_version(probe: bool) -> str | None:
    trt = sys.modules.get("tensorrt")
    if trt is None and probe:
        try:
            trt = importlib.import_module("tensorrt")
        except Exception:
            trt = None
    if trt is not None and getattr(trt, "__version__", None):
        return str(trt.__version__)
    return _dist_version("tensorrt", "tensorrt-cu12", "tensorrt-cu11", "tensorrt_libs")


# ---------------------------------------------------------------- judging


def _findings(
    state: _TorchState,
    visible: str | None,
    driver_gpus: int,
    models: list[ModelPlacement],
    loaders: list[DataLoaderSettings],
    sessions: list[OnnxSessionProviders],
) -> list[Finding]:
    out: list[Finding] = []
    gpu = state.cuda_available
    by_index = {g.index: g for g in state.gpus}

    if state.version is not None and state.cuda_version is None and driver_gpus > 0:
        out.append(
            Finding(
                KIND_TORCH_WITHOUT_CUDA,
                "warning",
                f"torch {state.version} is a CPU-only build but the NVIDIA driver lists {driver_gpus} GPU(s)",
                {"torch_version": state.version, "nvidia_driver_gpus": driver_gpus},
            )
        )
    if not gpu and visible not in (None, "", "-1", "none", "NoDevFiles") and state.version is not None:
        out.append(
            Finding(
                KIND_CUDA_UNAVAILABLE,
                "warning",
                f"CUDA_VISIBLE_DEVICES={visible} but torch sees no usable GPU",
                {"cuda_visible_devices": visible, "torch_cuda_version": state.cuda_version or ""},
            )
        )
    for m in models:
        types = {d.split(":", 1)[0] for d in m.devices}
        if gpu and types == {"cpu"}:
            out.append(
                Finding(
                    KIND_MODEL_ON_CPU,
                    "error",
                    f"model {m.name} ({m.class_name}) is on the CPU while a GPU is available",
                    {"model": m.name, "class": m.class_name, "parameters": m.parameters, "devices": "cpu"},
                )
            )
        elif len(m.devices) > 1 and "cpu" in types:
            out.append(
                Finding(
                    KIND_MODEL_SPLIT_DEVICES,
                    "warning",
                    f"model {m.name} ({m.class_name}) has tensors on {', '.join(m.devices)}",
                    {"model": m.name, "class": m.class_name, "devices": ",".join(m.devices)},
                )
            )
        for device in m.devices:
            if not device.startswith("cuda"):
                continue
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            g = by_index.get(index)
            if g is None:
                continue
            for dtype, supported in (("bfloat16", g.precision.bf16), ("float16", g.precision.fp16)):
                if dtype in m.dtypes and not supported:
                    out.append(
                        Finding(
                            KIND_PRECISION_UNSUPPORTED,
                            "warning",
                            f"model {m.name} has {dtype} weights on {g.name} (sm_{g.compute_capability.replace('.', '')}), "
                            f"which has no native {dtype}",
                            {
                                "model": m.name,
                                "dtype": dtype,
                                "device": device,
                                "compute_capability": g.compute_capability,
                            },
                        )
                    )
    for d in loaders:
        if gpu and d.num_workers == 0:
            out.append(
                Finding(
                    KIND_DATALOADER_NO_WORKERS,
                    "warning",
                    f"DataLoader {d.name} has num_workers=0: batches are loaded on the training thread, "
                    "so the GPU waits for each one",
                    {"dataloader": d.name, "num_workers": 0},
                )
            )
        if gpu and d.pin_memory is False:
            out.append(
                Finding(
                    KIND_DATALOADER_NO_PIN_MEMORY,
                    "info",
                    f"DataLoader {d.name} has pin_memory=False: host-to-GPU copies cannot be asynchronous",
                    {"dataloader": d.name},
                )
            )
    for s in sessions:
        if s.fell_back_to_cpu:
            out.append(
                Finding(
                    KIND_ONNXRUNTIME_CPU_FALLBACK,
                    "error",
                    f"ONNX Runtime session {s.name} asked for {', '.join(s.requested or ())} "
                    f"but runs on {', '.join(s.actual) or 'nothing'}",
                    {
                        "session": s.name,
                        "requested": ",".join(s.requested or ()),
                        "actual": ",".join(s.actual),
                    },
                )
            )
        elif s.missing:
            out.append(
                Finding(
                    KIND_ONNXRUNTIME_PROVIDER_MISSING,
                    "warning",
                    f"ONNX Runtime session {s.name} did not get {', '.join(s.missing)} (has {', '.join(s.actual)})",
                    {"session": s.name, "missing": ",".join(s.missing), "actual": ",".join(s.actual)},
                )
            )
        elif s.requested is None and gpu and not s.accelerated:
            out.append(
                Finding(
                    KIND_ONNXRUNTIME_CPU_FALLBACK,
                    "warning",
                    f"ONNX Runtime session {s.name} runs only on {', '.join(s.actual)} while a GPU is available",
                    {"session": s.name, "actual": ",".join(s.actual)},
                )
            )
    if any(g.precision.tf32 for g in state.gpus):
        if state.matmul_allow_tf32 is False and state.float32_matmul_precision == "highest":
            out.append(
                Finding(
                    KIND_TF32_DISABLED,
                    "info",
                    "fp32 matmuls run without TF32 on an Ampere-or-newer GPU "
                    "(torch.set_float32_matmul_precision('high') allows it)",
                    {"matmul_allow_tf32": False, "float32_matmul_precision": "highest"},
                )
            )
    if gpu and state.cudnn_benchmark is False and state.version is not None:
        out.append(
            Finding(
                KIND_CUDNN_BENCHMARK_OFF,
                "info",
                "torch.backends.cudnn.benchmark is off: fixed-shape convolutions may pick slower kernels",
                {"cudnn_benchmark": False},
            )
        )
    order = {"critical": 0, "error": 1, "warning": 2, "info": 3}
    out.sort(key=lambda f: order.get(f.severity, 9))
    return out


def check_environment(
    models: Iterable[Any] | Mapping[str, Any] | None = (),
    dataloaders: Iterable[Any] | Mapping[str, Any] | None = (),
    onnx_sessions: Iterable[Any] | Mapping[str, Any] | None = (),
    *,
    cuda_available: bool | None = None,
    send: bool = True,
    name: str = "environment",
    probe_imports: bool = False,
) -> EnvironmentReport:
    """Check torch/CUDA settings and the given models, DataLoaders and ONNX Runtime sessions.

    ``models``/``dataloaders``/``onnx_sessions`` take a list or a ``{name: object}`` mapping.
    An ONNX entry is a session or ``(session, requested_providers)``. ``cuda_available=None``
    asks torch; True or False states it (a check of what would happen on a GPU machine).
    ``send`` reports the result as an InventoryRecord (kind "environment") plus one incident per
    finding at warning severity or worse. ``probe_imports`` also imports onnxruntime and
    tensorrt to read their versions and providers (the doctor CLI does; programs need not).
    """
    state = _torch_state(cuda_available)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    driver_gpus = _nvidia_driver_gpus()
    placements = [_model_placement(n, m) for n, m in _named(models, "model")]
    loaders = [_dataloader_settings(n, d) for n, d in _named(dataloaders, "dataloader")]
    sessions: list[OnnxSessionProviders] = []
    for n, entry in _named(onnx_sessions, "onnx"):
        session, requested = (entry[0], entry[1]) if isinstance(entry, tuple) else (entry, None)
        try:
            sessions.append(inspect_session(session, requested, n))
        except Exception:
            continue
    ort_version, ort_providers = _onnxruntime_state(probe_imports)
    report = EnvironmentReport(
        python_version=platform.python_version(),
        platform=platform.platform(),
        torch_version=state.version,
        torch_cuda_version=state.cuda_version,
        cudnn_version=state.cudnn_version,
        cuda_available=state.cuda_available,
        device_count=state.device_count,
        cuda_visible_devices=visible,
        nvidia_driver_gpus=driver_gpus,
        gpus=state.gpus,
        matmul_allow_tf32=state.matmul_allow_tf32,
        cudnn_allow_tf32=state.cudnn_allow_tf32,
        cudnn_benchmark=state.cudnn_benchmark,
        cudnn_deterministic=state.cudnn_deterministic,
        float32_matmul_precision=state.float32_matmul_precision,
        autocast_enabled=state.autocast_enabled,
        onnxruntime_version=ort_version,
        onnxruntime_providers=ort_providers,
        tensorrt_version=_tensorrt_version(probe_imports),
        models=tuple(placements),
        dataloaders=tuple(loaders),
        onnx_sessions=tuple(sessions),
        findings=tuple(_findings(state, visible, driver_gpus, placements, loaders, sessions)),
    )
    if send:
        send_report(report, name)
    return report


def send_report(report: EnvironmentReport, name: str = "environment") -> None:
    """Report an EnvironmentReport: its inventory record(s) and its findings as incidents."""
    try:
        _runtime.report_inventory(INVENTORY_ENVIRONMENT, name, report.facts())
        for s in report.onnx_sessions:
            _runtime.report_inventory(
                INVENTORY_ONNXRUNTIME_SESSION,
                s.name,
                {
                    "requested": ",".join(s.requested) if s.requested is not None else None,
                    "actual": ",".join(s.actual),
                    "missing": ",".join(s.missing),
                    "fell_back_to_cpu": s.fell_back_to_cpu,
                },
            )
        for finding in report.findings:
            if finding.severity in INCIDENT_SEVERITIES:
                _runtime.report_incident(
                    finding.kind,
                    finding.severity,
                    finding.title,
                    finding.facts,
                    excerpt=finding.excerpt,
                    source="sdk",
                )
    except Exception:
        pass
