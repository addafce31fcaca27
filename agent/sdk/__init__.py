"""fleetscope's in-process SDK: what a training or inference program reports to its device's agent.

    from fleetscope.agent import sdk

    with sdk.latency("forward", model="resnet50"):
        out = model(x)

    for batch in (steps := sdk.train_steps(loader, name="train")):
        loss = step(batch)
        steps.loss(loss.item())

Records go to the local agent over its Unix socket from one background thread; without an
agent they are dropped and counted. Nothing here blocks the program or raises into it, and
torch, tensorrt and onnxruntime are imported only by the functions that use them. See
docs/sdk/ for PyTorch training and inference, TensorRT and ONNX Runtime.
"""

from __future__ import annotations

from typing import Any

from fleetscope.agent.sdk._config import DEFAULT_SOCKET, SOCKET_ENV, SdkConfig
from fleetscope.agent.sdk._doctor import doctor_main
from fleetscope.agent.sdk._environment import (
    DataLoaderSettings,
    EnvironmentReport,
    GpuCapability,
    ModelPlacement,
    PrecisionSupport,
    check_environment,
    precision_support,
)
from fleetscope.agent.sdk._histogram import Histogram, LatencySummary
from fleetscope.agent.sdk._latency import LatencyBlock, latency, record_duration
from fleetscope.agent.sdk._memory import CudaMemory, cuda_memory
from fleetscope.agent.sdk._onnxruntime import OnnxSessionProviders, inspect_session
from fleetscope.agent.sdk._oom import OomInfo, classify_oom, install_oom_hook, oom_guard, report_oom
from fleetscope.agent.sdk._runtime import (
    configure,
    flush,
    get_config,
    invalid_values,
    latency_summaries,
    latency_summary,
    log,
    metric,
    report_incident,
    report_inventory,
    shutdown,
    stats,
)
from fleetscope.agent.sdk._steps import StepContext, StepTotals, TrainSteps, current_step, train_steps
from fleetscope.agent.sdk._tensorrt import (
    TrtEngineInfo,
    TrtTensorInfo,
    create_trt_logger,
    describe_engine,
    trt_logger_class,
    trt_timed,
)
from fleetscope.agent.sdk._transport import SdkStats

__all__ = [
    "DEFAULT_SOCKET",
    "SOCKET_ENV",
    "CudaMemory",
    "DataLoaderSettings",
    "EnvironmentReport",
    "FleetscopeTrtLogger",
    "GpuCapability",
    "Histogram",
    "LatencyBlock",
    "LatencySummary",
    "ModelPlacement",
    "OnnxSessionProviders",
    "OomInfo",
    "PrecisionSupport",
    "SdkConfig",
    "SdkStats",
    "StepContext",
    "StepTotals",
    "TrainSteps",
    "TrtEngineInfo",
    "TrtTensorInfo",
    "check_environment",
    "classify_oom",
    "configure",
    "create_trt_logger",
    "cuda_memory",
    "current_step",
    "describe_engine",
    "doctor_main",
    "flush",
    "get_config",
    "inspect_session",
    "install_oom_hook",
    "invalid_values",
    "latency",
    "latency_summaries",
    "latency_summary",
    "log",
    "metric",
    "oom_guard",
    "precision_support",
    "record_duration",
    "report_incident",
    "report_inventory",
    "report_oom",
    "shutdown",
    "stats",
    "train_steps",
    "trt_logger_class",
    "trt_timed",
]


def __getattr__(name: str) -> Any:
    # The logger class subclasses tensorrt.ILogger, so it is built (and tensorrt imported) only
    # when someone asks for it by name.
    if name == "FleetscopeTrtLogger":
        return trt_logger_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
