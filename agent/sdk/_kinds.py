"""Incident kinds the SDK raises itself, beside the log classifiers' kinds it reuses.

The strings are stored data and CLI filters (`--kind`), like those in
``fleetscope.agent.classify._base``: never rename one.
"""

from __future__ import annotations

from fleetscope.agent.classify._base import KIND_CUDA_OOM, KIND_HOST_OOM, KIND_TENSORRT_ERROR

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

# Inventory record kinds (InventoryRecord.kind).
INVENTORY_ENVIRONMENT = "environment"
INVENTORY_TENSORRT_ENGINE = "tensorrt_engine"
INVENTORY_ONNXRUNTIME_SESSION = "onnxruntime_session"

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
