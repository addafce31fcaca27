"""TensorRT: its log messages as LogEvents, engine execution timing, and engine metadata.

``tensorrt`` is imported only when a function here needs it, and every function also takes the
module as ``trt=`` so the same code runs against a stand-in where TensorRT cannot be installed.
The logger follows the documented Python interface: a subclass of ``trt.ILogger`` that calls
``trt.ILogger.__init__(self)`` and overrides ``log(self, severity, msg)``, with severities
``trt.ILogger.Severity.{INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE}`` (0..4, lower is worse).
"""

from __future__ import annotations

import enum
import importlib
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetscope.agent.sdk import _runtime
from fleetscope.agent.sdk._kinds import INVENTORY_TENSORRT_ENGINE, KIND_TENSORRT_ERROR
from fleetscope.agent.sdk._registry import make_key, record

# TensorRT severity -> fleetscope level. By name, so pybind11 enums and stand-ins both work.
SEVERITY_LEVELS: Mapping[str, str] = {
    "INTERNAL_ERROR": "critical",
    "ERROR": "error",
    "WARNING": "warning",
    "INFO": "info",
    "VERBOSE": "debug",
}
_BY_VALUE = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
_SHORT = {"INTERNAL_ERROR": "F", "ERROR": "E", "WARNING": "W", "INFO": "I", "VERBOSE": "V"}
_MAX_REMEMBERED_ERRORS = 256


class PlainILogger:
    """The base used when tensorrt is not importable: same shape as ``trt.ILogger``."""

    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def __init__(self) -> None:
        pass

    def log(self, severity: Any, msg: str) -> None:  # pragma: no cover - overridden
        pass


def _import_trt(trt: Any | None) -> Any | None:
    if trt is not None:
        return trt
    module = sys.modules.get("tensorrt")
    if module is not None:
        return module
    try:
        return importlib.import_module("tensorrt")
    except Exception:
        return None


def severity_name(severity: Any) -> str:
    name = getattr(severity, "name", None)
    if isinstance(name, str) and name in SEVERITY_LEVELS:
        return name
    try:
        return _BY_VALUE[int(severity)]
    except (TypeError, ValueError, IndexError):
        return "INFO"


def _severity_value(severity: Any) -> int:
    try:
        return int(severity)
    except (TypeError, ValueError):
        return _BY_VALUE.index(severity_name(severity))


_classes: dict[type, type] = {}
_classes_lock = threading.Lock()


def trt_logger_class(trt: Any | None = None) -> type:
    """The FleetscopeTrtLogger class over ``trt.ILogger`` (or PlainILogger without TensorRT)."""
    module = _import_trt(trt)
    base: type = getattr(module, "ILogger", None) or PlainILogger
    with _classes_lock:
        cls = _classes.get(base)
        if cls is None:
            cls = _classes[base] = _build_class(base)
        return cls


def _build_class(base: type) -> type:
    class FleetscopeTrtLogger(base):
        """Forwards TensorRT's messages to fleetscope; pass it wherever TensorRT takes a logger."""

        Severity = getattr(base, "Severity", PlainILogger.Severity)

        def __init__(
            self,
            min_severity: Any = None,
            *,
            echo: bool = True,
            source: str = "tensorrt",
            incidents: bool = True,
        ) -> None:
            # pybind11 needs the base initialised explicitly, or TensorRT cannot call back into us.
            base.__init__(self)  # type: ignore[misc]
            self.min_severity = self.Severity.WARNING if min_severity is None else min_severity
            self._min_value = _severity_value(self.min_severity)
            self.echo = echo
            self.source = source
            self.incidents = incidents
            self._seen_errors: OrderedDict[str, None] = OrderedDict()
            self._lock = threading.Lock()
            self.counts: dict[str, int] = {name: 0 for name in SEVERITY_LEVELS}

        def log(self, severity: Any, msg: str) -> None:
            # Called from TensorRT's C++ side, possibly from its worker threads: an exception
            # here would surface inside the engine build, so nothing may escape.
            try:
                if _severity_value(severity) > self._min_value:
                    return
                name = severity_name(severity)
                self.counts[name] = self.counts.get(name, 0) + 1
                text = str(msg)
                if self.echo:
                    print(f"[TRT] [{_SHORT[name]}] {text}", file=sys.stderr)
                level_name = SEVERITY_LEVELS[name]
                _runtime.log(text, level_name, source=self.source)
                if self.incidents and level_name in ("critical", "error") and self._first_time(text):
                    _runtime.report_incident(
                        KIND_TENSORRT_ERROR,
                        level_name,
                        f"TensorRT {name.lower().replace('_', ' ')}: {text[:160]}",
                        {"trt_severity": name},
                        excerpt=text,
                        source=self.source,
                    )
            except Exception:
                pass

        def _first_time(self, text: str) -> bool:
            # The builder repeats one error per tactic or per layer; one incident per message.
            with self._lock:
                if text in self._seen_errors:
                    return False
                self._seen_errors[text] = None
                if len(self._seen_errors) > _MAX_REMEMBERED_ERRORS:
                    self._seen_errors.popitem(last=False)
                return True

    FleetscopeTrtLogger.__qualname__ = "FleetscopeTrtLogger"
    return FleetscopeTrtLogger


def create_trt_logger(
    min_severity: Any = None,
    *,
    echo: bool = True,
    source: str = "tensorrt",
    incidents: bool = True,
    trt: Any | None = None,
) -> Any:
    """A logger for ``trt.Builder(logger)``, ``trt.Runtime(logger)``, ``trt.OnnxParser(..., logger)``.

    Messages at ``min_severity`` (default WARNING) or worse go out as LogEvents with their
    severity (INTERNAL_ERROR->critical, ERROR->error, WARNING->warning, INFO->info,
    VERBOSE->debug); each distinct ERROR/INTERNAL_ERROR message also as a ``tensorrt_error``
    incident. ``echo`` prints them to stderr like ``trt.Logger`` does, so replacing that logger
    loses no console output.
    """
    cls = trt_logger_class(trt)
    return cls(min_severity, echo=echo, source=source, incidents=incidents)


# ---------------------------------------------------------------- timing


def _stream_handle(stream: Any) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "handle", "ptr"):  # torch.cuda.Stream, cupy, polygraphy
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    return int(stream)


def trt_timed(
    context: Any,
    stream: Any = None,
    *,
    bindings: Any = None,
    name: str = "tensorrt.execute",
    sync: bool = True,
    **labels: object,
) -> Any:
    """Run ``context`` once and time it into ``latency(name, **labels)``; returns TensorRT's result.

    With ``bindings`` and no stream: ``execute_v2(bindings)`` (synchronous). With bindings and a
    stream: ``execute_async_v2``. Without bindings (tensor addresses set on the context, TensorRT
    8.5+): ``execute_async_v3(stream)``. ``stream`` is a raw handle or an object with
    ``cuda_stream`` (torch.cuda.Stream); with ``sync`` and a stream that has ``synchronize()``,
    the time covers the GPU work, not just the enqueue. A False return counts as an error;
    an exception counts as one and propagates unchanged.
    """
    key = make_key(name, labels)
    start = time.perf_counter_ns()
    ok = False
    try:
        if bindings is not None and stream is None:
            result = context.execute_v2(bindings)
        elif bindings is not None:
            result = context.execute_async_v2(bindings, _stream_handle(stream))
        else:
            result = context.execute_async_v3(_stream_handle(stream))
        if sync and stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()
        ok = result is not False
        return result
    finally:
        try:
            record(key, time.perf_counter_ns() - start, not ok)
        except Exception:
            pass


# ---------------------------------------------------------------- engine metadata


@dataclass(frozen=True)
class TrtTensorInfo:
    name: str
    is_input: bool
    shape: tuple[int, ...]  # -1 where the dimension is dynamic
    dtype: str
    profile_shapes: tuple[
        tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...
    ] = ()  # (min, opt, max)

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)


@dataclass(frozen=True)
class TrtEngineInfo:
    name: str
    trt_version: str | None
    tensors: tuple[TrtTensorInfo, ...]
    num_layers: int | None
    num_optimization_profiles: int | None
    device_memory_bytes: int | None
    precision_flags: Mapping[str, bool] = field(default_factory=dict)  # from the builder config, when given
    memory_pool_limits: Mapping[str, int] = field(default_factory=dict)  # bytes, from the builder config

    @property
    def inputs(self) -> tuple[TrtTensorInfo, ...]:
        return tuple(t for t in self.tensors if t.is_input)

    @property
    def outputs(self) -> tuple[TrtTensorInfo, ...]:
        return tuple(t for t in self.tensors if not t.is_input)

    @property
    def dynamic(self) -> bool:
        return any(t.dynamic for t in self.inputs)

    def facts(self) -> dict[str, object]:
        facts: dict[str, object] = {
            "trt_version": self.trt_version,
            "num_layers": self.num_layers,
            "num_optimization_profiles": self.num_optimization_profiles,
            "device_memory_bytes": self.device_memory_bytes,
            "num_inputs": len(self.inputs),
            "num_outputs": len(self.outputs),
            "dynamic_shapes": self.dynamic,
        }
        for t in self.tensors:
            p = f"{'input' if t.is_input else 'output'}.{t.name}."
            facts[p + "shape"] = _dims_text(t.shape)
            facts[p + "dtype"] = t.dtype
            facts[p + "dynamic"] = t.dynamic
            for i, (lo, opt, hi) in enumerate(t.profile_shapes):
                facts[f"{p}profile{i}.min"] = _dims_text(lo)
                facts[f"{p}profile{i}.opt"] = _dims_text(opt)
                facts[f"{p}profile{i}.max"] = _dims_text(hi)
        for flag, on in self.precision_flags.items():
            facts[f"flag.{flag.lower()}"] = on
        for pool, limit in self.memory_pool_limits.items():
            facts[f"memory_pool.{pool.lower()}_bytes"] = limit
        return facts


def _dims(dims: Any) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in dims)
    except TypeError:
        return ()


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _dtype_name(dtype: Any) -> str:
    name = getattr(dtype, "name", None)
    return str(name if isinstance(name, str) else dtype).lower().replace("datatype.", "")


_PRECISION_FLAGS = (
    "FP16",
    "BF16",
    "INT8",
    "FP8",
    "INT4",
    "TF32",
    "STRICT_TYPES",
    "OBEY_PRECISION_CONSTRAINTS",
    "PREFER_PRECISION_CONSTRAINTS",
    "SPARSE_WEIGHTS",
    "REFIT",
    "STRONGLY_TYPED",
)
_MEMORY_POOLS = (
    "WORKSPACE",
    "DLA_MANAGED_SRAM",
    "DLA_LOCAL_DRAM",
    "DLA_GLOBAL_DRAM",
    "TACTIC_DRAM",
    "TACTIC_SHARED_MEMORY",
)


def _tensors(engine: Any) -> list[TrtTensorInfo]:
    out: list[TrtTensorInfo] = []
    profiles = int(getattr(engine, "num_optimization_profiles", 1) or 1)
    if hasattr(engine, "num_io_tensors"):  # TensorRT 8.5+: named I/O tensors
        for i in range(int(engine.num_io_tensors)):
            tname = engine.get_tensor_name(i)
            mode = engine.get_tensor_mode(tname)
            is_input = getattr(mode, "name", str(mode)).upper().endswith("INPUT")
            shape = _dims(engine.get_tensor_shape(tname))
            shapes: list[Any] = []
            if is_input and any(d < 0 for d in shape):
                for p in range(profiles):
                    try:
                        lo, opt, hi = engine.get_tensor_profile_shape(tname, p)
                        shapes.append((_dims(lo), _dims(opt), _dims(hi)))
                    except Exception:
                        break
            out.append(
                TrtTensorInfo(
                    tname, is_input, shape, _dtype_name(engine.get_tensor_dtype(tname)), tuple(shapes)
                )
            )
    elif hasattr(engine, "num_bindings"):  # TensorRT 7/8 (JetPack 4 and 5): bindings by index
        for i in range(int(engine.num_bindings)):
            is_input = bool(engine.binding_is_input(i))
            shape = _dims(engine.get_binding_shape(i))
            shapes = []
            if is_input and any(d < 0 for d in shape):
                for p in range(profiles):
                    try:
                        lo, opt, hi = engine.get_profile_shape(p, i)
                        shapes.append((_dims(lo), _dims(opt), _dims(hi)))
                    except Exception:
                        break
            out.append(
                TrtTensorInfo(
                    str(engine.get_binding_name(i)),
                    is_input,
                    shape,
                    _dtype_name(engine.get_binding_dtype(i)),
                    tuple(shapes),
                )
            )
    return out


def _optional_int(obj: Any, *attrs: str) -> int | None:
    for attr in attrs:
        try:
            value = getattr(obj, attr)
        except Exception:
            continue
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                continue
    return None


def describe_engine(
    engine: Any,
    *,
    name: str | None = None,
    config: Any = None,
    trt: Any | None = None,
    send: bool = True,
) -> TrtEngineInfo:
    """Read an ``ICudaEngine``'s inputs, outputs and memory needs; report it (kind "tensorrt_engine").

    Precision flags and memory-pool limits live on the ``IBuilderConfig``, not on the engine:
    pass ``config=`` when describing an engine right after building it.
    """
    module = _import_trt(trt)
    flags: dict[str, bool] = {}
    pools: dict[str, int] = {}
    if config is not None and module is not None:
        builder_flag = getattr(module, "BuilderFlag", None)
        for flag_name in _PRECISION_FLAGS:
            flag = getattr(builder_flag, flag_name, None)
            if flag is None:
                continue
            try:
                flags[flag_name] = bool(config.get_flag(flag))
            except Exception:
                pass
        pool_type = getattr(module, "MemoryPoolType", None)
        for pool_name in _MEMORY_POOLS:
            pool = getattr(pool_type, pool_name, None)
            if pool is None:
                continue
            try:
                pools[pool_name] = int(config.get_memory_pool_limit(pool))
            except Exception:
                pass
        if not pools:
            workspace = _optional_int(config, "max_workspace_size")  # TensorRT < 8.4
            if workspace is not None:
                pools["WORKSPACE"] = workspace
    version = getattr(module, "__version__", None) if module is not None else None
    info = TrtEngineInfo(
        name=name or str(getattr(engine, "name", "") or "engine"),
        trt_version=str(version) if version else None,
        tensors=tuple(_tensors(engine)),
        num_layers=_optional_int(engine, "num_layers"),
        num_optimization_profiles=_optional_int(engine, "num_optimization_profiles"),
        device_memory_bytes=_optional_int(engine, "device_memory_size_v2", "device_memory_size"),
        precision_flags=flags,
        memory_pool_limits=pools,
    )
    if send:
        _runtime.report_inventory(INVENTORY_TENSORRT_ENGINE, info.name, info.facts())
    return info


def __getattr__(name: str) -> Any:
    # `FleetscopeTrtLogger` is built on first use, over trt.ILogger when TensorRT is importable.
    if name == "FleetscopeTrtLogger":
        return trt_logger_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
