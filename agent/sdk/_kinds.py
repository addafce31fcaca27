"""Incident kinds the SDK raises itself, beside the log classifiers' kinds it reuses, and the
inventory record kinds it sends.

The strings are stored data and CLI filters (`--kind`): they are defined once, in
``fleetscope.proto.vocabulary``; this module names the ones the SDK uses.
"""

from __future__ import annotations

# Defined once in the shared vocabulary, beside the classifiers' kinds and the collector's reading
# of them; re-exported here for the SDK's modules.
from fleetscope.proto.vocabulary import (
    INVENTORY_ENVIRONMENT,
    INVENTORY_ONNXRUNTIME_SESSION,
    INVENTORY_TENSORRT_ENGINE,
    KIND_CUDA_OOM,
    KIND_CUDA_UNAVAILABLE,
    KIND_CUDNN_BENCHMARK_OFF,
    KIND_DATALOADER_NO_PIN_MEMORY,
    KIND_DATALOADER_NO_WORKERS,
    KIND_GRAD_SCALER_COLLAPSE,
    KIND_HOST_OOM,
    KIND_MODEL_ON_CPU,
    KIND_MODEL_SPLIT_DEVICES,
    KIND_NAN_LOSS,
    KIND_ONNXRUNTIME_CPU_FALLBACK,
    KIND_ONNXRUNTIME_PROVIDER_MISSING,
    KIND_PRECISION_UNSUPPORTED,
    KIND_TENSORRT_ERROR,
    KIND_TF32_DISABLED,
    KIND_TORCH_WITHOUT_CUDA,
)

__all__ = [
    "INVENTORY_ENVIRONMENT",
    "INVENTORY_ONNXRUNTIME_SESSION",
    "INVENTORY_TENSORRT_ENGINE",
    "KIND_CUDA_OOM",
    "KIND_CUDA_UNAVAILABLE",
    "KIND_CUDNN_BENCHMARK_OFF",
    "KIND_DATALOADER_NO_PIN_MEMORY",
    "KIND_DATALOADER_NO_WORKERS",
    "KIND_GRAD_SCALER_COLLAPSE",
    "KIND_HOST_OOM",
    "KIND_MODEL_ON_CPU",
    "KIND_MODEL_SPLIT_DEVICES",
    "KIND_NAN_LOSS",
    "KIND_ONNXRUNTIME_CPU_FALLBACK",
    "KIND_ONNXRUNTIME_PROVIDER_MISSING",
    "KIND_PRECISION_UNSUPPORTED",
    "KIND_TENSORRT_ERROR",
    "KIND_TF32_DISABLED",
    "KIND_TORCH_WITHOUT_CUDA",
]
