"""What to try next, per incident kind, from the incident's own facts.

Pure functions of (kind, facts): no Streamlit, no database, so they are tested directly and
the wording is reviewed in one place. Each hint is one sentence an operator can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fleetscope.dashboard import fmt
from fleetscope.proto.vocabulary import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
)

GIB = 1024**3

Facts = Mapping[str, Any]


def _num(facts: Facts, key: str) -> float | None:
    v = facts.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _cuda_oom(f: Facts) -> list[str]:
    out = []
    requested, free, total = (
        _num(f, "requested_bytes"),
        _num(f, "free_bytes"),
        _num(f, "total_capacity_bytes"),
    )
    if requested is not None:
        where = f" on a {fmt.gib(total)} GPU" if total else ""
        have = f" with {fmt.bytes_(free, digits=2)} free" if free is not None else ""
        out.append(f"The allocation asked for {fmt.bytes_(requested, digits=2)}{have}{where}.")
    reserved = _num(f, "reserved_unallocated_bytes")
    # Fragmentation: PyTorch holds cached blocks it cannot hand out in one piece. When that
    # cache is larger than the failed request (or a sizeable share of the GPU), expandable
    # segments let the allocator grow blocks instead of failing.
    if reserved is not None and (
        reserved >= GIB or (requested and reserved >= requested) or (total and reserved >= 0.05 * total)
    ):
        out.append(
            f"{fmt.bytes_(reserved, digits=2)} is reserved by PyTorch but unallocated (fragmentation): "
            "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
        )
    batch = f.get("batch_size")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 1:
        out.append(f"Reduce the batch size (it was {batch}), or accumulate gradients over smaller batches.")
    else:
        out.append("Reduce the batch size (or sequence length / image resolution) of the failing step.")
    if f.get("loop") or f.get("step") is not None:
        out.append(
            "For training: mixed precision (torch.autocast) and activation checkpointing cut activation memory."
        )
    else:
        out.append(
            "For inference: run under torch.inference_mode() and free cached tensors between requests."
        )
    return out


def _host_oom(f: Facts) -> list[str]:
    out = []
    victim = f.get("victim_name") or f.get("process_name")
    if victim:
        out.append(f"The kernel ended {victim} to free memory.")
    if f.get("cgroup") or f.get("container_id") or f.get("memcg"):
        out.append(
            "A container or cgroup memory limit was hit: raise the limit or lower the job's footprint."
        )
    out.append(
        "DataLoader workers each hold a copy of the dataset object: lower num_workers or prefetch_factor."
    )
    out.append(
        "On a Jetson, CPU and GPU share RAM: a large model plus camera buffers may not fit; add zram or swap."
    )
    return out


def _gpu_xid(f: Facts) -> list[str]:
    out = []
    meaning = f.get("meaning")
    if meaning:
        out.append(f"Xid {f.get('xid', f.get('implied_xid', '?'))}: {meaning}")
    if f.get("needs_reboot"):
        out.append("The node needs a reboot before this GPU is usable again: drain it first.")
    elif f.get("needs_gpu_reset"):
        out.append(
            "Reset the GPU (nvidia-smi -r -i <index>) after draining its jobs; reboot if the reset fails."
        )
    if f.get("app_error"):
        out.append(
            "Likely caused by the application (bad memory access, illegal instruction), not the hardware: check the job."
        )
    action = f.get("action")
    if action:
        out.append(f"NVIDIA's recommended action: {action}.")
    if not out:
        out.append(
            "Look the Xid code up in NVIDIA's Xid catalog; repeated Xids on one GPU point to hardware."
        )
    return out


def _jetson_memory(_f: Facts) -> list[str]:
    return [
        "An NvMap/CMA allocation failed: the Jetson's contiguous memory pool is exhausted.",
        "Lower the model's input resolution or batch, or give TensorRT a smaller workspace.",
        "Raise the CMA size (kernel command line cma=...) if the board has RAM to spare.",
    ]


def _tensorrt_error(f: Facts) -> list[str]:
    out = []
    if f.get("out_of_memory"):
        out.append(
            "The builder ran out of memory: lower the workspace (trtexec --memPoolSize=workspace:...) or build elsewhere."
        )
    if f.get("precision_issue"):
        out.append(
            f"This GPU has no native {f.get('precision', 'requested')} support: build in another precision."
        )
    if (
        f.get("engine_trt_version")
        or f.get("engine_serialization_version")
        or f.get("expected_compute_capability")
    ):
        out.append("Engines are tied to a TensorRT version and GPU: rebuild the engine on this device.")
    if not out:
        out.append(
            "Check the layer named in the message; unsupported layers need a plugin or an ONNX change."
        )
    return out


def _trt_benchmark(_f: Facts) -> list[str]:
    return ["A benchmark record, not a fault: compare it with other devices on the Compare page."]


_HINTS: dict[str, Callable[[Facts], list[str]]] = {
    KIND_CUDA_OOM: _cuda_oom,
    KIND_HOST_OOM: _host_oom,
    KIND_GPU_XID: _gpu_xid,
    KIND_JETSON_MEMORY: _jetson_memory,
    KIND_TENSORRT_ERROR: _tensorrt_error,
    KIND_TRT_BENCHMARK: _trt_benchmark,
}


def hints_for(kind: str, facts: Facts) -> list[str]:
    """Hints for one incident; a generic one for kinds without specific advice."""
    fn = _HINTS.get(kind)
    if fn is None:
        return [
            "No specific advice for this kind yet: the excerpt, logs and context chart below show what happened."
        ]
    return fn(facts)
