"""One fault, one finding: merge the findings that report the same fault twice.

A fault is often printed more than once: PyTorch's message in the exception and again in a
summary, TensorFlow's allocator warning before its ``ResourceExhaustedError``, a kernel line
repeated in the same second, a kernel OOM kill relayed by Kubernetes, a TensorRT tactic's failed
allocation and the builder error it ends in, a trtexec device block beside its summary. Each
event is classified on its own, so each copy becomes a finding; :func:`merge_repeats` folds them.

Two findings report the same fault when they are of one kind and none of the kind's *identity*
facts (``IDENTITY``) differs between them: a different requested size, GPU, rank, Xid, victim
or pod is a different fault; the same Xid on the same GPU again, in one file or one tick, is the
same fault counted again (a channel that keeps faulting), whatever the time between. The merged finding keeps the first one's
text and title, takes the facts the others add, the most severe severity, and counts the copies in
``occurrences``. Standard library only (the agent imports it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from fleetscope.proto.vocabulary import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
)

__all__ = ["IDENTITY", "WINDOW", "merge_repeats", "same_fault"]

IDENTITY: Mapping[str, tuple[str, ...]] = {
    KIND_CUDA_OOM: ("framework", "requested_bytes", "device_index", "worker_prefix", "tensor_shape", "pid"),
    # Two reports of the kernel differ in their uptime stamp even when the same process invoked both.
    KIND_HOST_OOM: ("source", "victim_pid", "victim_process", "pod", "container", "container_id", "exit_code",
                    "kernel_uptime_s", "invoker_pid"),
    KIND_MEMORY_ALLOC_FAILURE: ("invoker_process", "invoker_pid", "order"),
    KIND_GPU_XID: ("xid", "sxid", "pci_address", "pid", "nvswitch_index", "link"),
    # NvMap's calls nest (HandleAlloc reports its AllocInternalTagged's error): the call is not identity.
    KIND_JETSON_MEMORY: ("source", "errno", "heap", "requested_bytes"),
    KIND_TENSORRT_ERROR: ("error_code", "layer", "assertion", "error_origin", "trt_version"),
    KIND_TRT_BENCHMARK: ("throughput_qps", "latency_mean_ms", "latency_median_ms", "trt_version"),
}
WINDOW = 64
# Identity facts that are measurements: two values this close are one report's (its lines are stamped
# a few milliseconds apart), farther apart two reports.
_NEAR: Mapping[str, float] = {"kernel_uptime_s": 1.0}
_RANK = {"info": 0, "warning": 1, "error": 2, "critical": 3}


class _FindingLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def facts(self) -> Mapping[str, Any]: ...


F = TypeVar("F", bound=_FindingLike)


def _identity(kind: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    keys = IDENTITY.get(kind, ())
    ident = {k: facts[k] for k in keys if facts.get(k) is not None}
    if kind == KIND_CUDA_OOM:
        # A CUDA runtime error ("CUDA error: out of memory") and an allocator's message are two
        # wordings that never relay each other: which one it is belongs to the identity.
        ident["cuda_error"] = facts.get("cuda_error") or ""
    if kind == KIND_GPU_XID:
        # "GPU has fallen off the bus" alone implies Xid 79; a GPU is named "0000:01:00" by the Xid
        # line and "0000:01:00.0" by the next one.
        if "xid" not in ident and facts.get("implied_xid") is not None:
            ident["xid"] = facts["implied_xid"]
        if isinstance(ident.get("pci_address"), str):
            ident["pci_address"] = _bus_id(ident["pci_address"])
    if kind == KIND_TRT_BENCHMARK and facts.get("record") == "run_averages":
        # Each average line of one run: the run is one benchmark however many it printed.
        return {"record": "run_averages", "runs_per_average": facts.get("runs_per_average")}
    if kind == KIND_TRT_BENCHMARK and "run_averages" in str(facts.get("record")):
        return {}
    if kind == KIND_TENSORRT_ERROR:
        if facts.get("out_of_memory") is True:
            # A tactic's failed allocation, the skip it causes and the builder's error are one fault:
            # the build ran out of memory.
            return {"trt_version": facts["trt_version"]} if "trt_version" in facts else {"out_of_memory": True}
        if severity_of(facts) == "error":
            # A failing build or load prints a cascade: the root error, then "Assertion engine !=
            # nullptr failed", "Building engine failed", "Engine set up failed". One fault.
            return {k: v for k, v in ident.items() if k in ("trt_version", "layer")} | {"failed": True}
        # Warnings repeat per layer or tactic in one build ("Subnormal FP16 values detected" for
        # every weight): one fault per kind of warning.
        return {"category": facts.get("category")} | ({"trt_version": facts["trt_version"]} if "trt_version" in facts else {})
    return ident


def severity_of(facts: Mapping[str, Any]) -> str:
    """A TensorRT finding's severity as its facts say it: printed tags, else its category's."""
    tag = str(facts.get("severity_tag", ""))
    if tag in ("E", "F", "ERROR", "INTERNAL_ERROR"):
        return "error"
    if tag in ("W", "WARNING"):
        return "warning"
    return "error" if facts.get("category") in _TRT_ERROR_CATEGORIES or "error_code" in facts else "warning"


_TRT_ERROR_CATEGORIES = frozenset({
    "out_of_memory", "error_code", "cuda_runtime_error", "cuda_error", "cuda_init_failure", "unsupported_sm",
    "engine_version_mismatch", "engine_device_mismatch", "engine_invalid", "engine_deserialize_failed",
    "build_failed", "trtexec_failed", "missing_optimization_profile", "assertion_failed", "error",
})


def _bus_id(pci: str) -> str:
    """A PCI address as domain-less bus:device, the part every NVRM line prints."""
    parts = pci.lower().removeprefix("pci:").split(":")
    if len(parts) == 3:
        parts = parts[1:]
    return ":".join(parts).removesuffix(".0")


def same_fault(a: _FindingLike, b: _FindingLike) -> bool:
    """Whether ``a`` and ``b`` report one fault (see the module's docstring)."""
    if a.kind != b.kind or a.kind not in IDENTITY:
        return False
    ia, ib = _identity(a.kind, a.facts), _identity(b.kind, b.facts)
    if (a.facts.get("out_of_memory") is True) != (b.facts.get("out_of_memory") is True) and a.kind == KIND_TENSORRT_ERROR:
        return False
    for k, v in ia.items():
        if k not in ib or ib[k] == v:
            continue
        near = _NEAR.get(k)
        if near is None or not isinstance(v, (int, float)) or not isinstance(ib[k], (int, float)) or abs(v - ib[k]) > near:
            return False
    return True


def _merged(first: F, other: F) -> F:
    facts = dict(other.facts)
    facts.update(first.facts)  # the first copy's figures stand; the others add what it lacks
    facts.pop("consistency_flags", None)  # recomputed by Finding for the merged facts
    facts["occurrences"] = int(first.facts.get("occurrences") or 1) + int(other.facts.get("occurrences") or 1)
    severity = max(first.severity, other.severity, key=lambda s: _RANK.get(s, 0))
    return dataclasses.replace(first, severity=severity, facts=facts)  # type: ignore[type-var]


# On a Jetson the GPU's memory is NvMap's: a CUDA allocation failing right after NvMap ran out
# (ENOMEM) is that same fault as the framework saw it.
ABSORBED_BY: Mapping[str, tuple[str, ...]] = {KIND_CUDA_OOM: (KIND_JETSON_MEMORY,)}
NEAR_LINES = 20


def _absorbs(kept: _FindingLike, f: _FindingLike) -> bool:
    if kept.kind not in ABSORBED_BY.get(f.kind, ()) or kept.facts.get("out_of_memory") is not True:
        return False
    a, b = getattr(kept, "line", None), getattr(f, "line", None)
    return a is None or b is None or abs(a - b) <= NEAR_LINES


def merge_repeats(findings: Sequence[F]) -> list[F]:
    """``findings`` with each fault once, in the order of its first copy.

    A finding is compared with the last ``WINDOW`` distinct faults of its kind, so a file of many
    thousand distinct faults costs a bounded amount per finding.
    """
    out: list[F] = []
    by_kind: dict[str, list[int]] = {}
    for f in findings:
        recent = by_kind.setdefault(f.kind, [])
        for i in reversed(recent[-WINDOW:]):
            if same_fault(out[i], f):
                out[i] = _merged(out[i], f)
                break
        else:
            recent.append(len(out))
            out.append(f)
    return _absorb_relayed(out)


def _absorb_relayed(findings: list[F]) -> list[F]:
    """Fold each finding another kind's finding reports the same fault of (``ABSORBED_BY``) into it,
    whichever of the two came first."""
    if not any(f.kind in ABSORBED_BY for f in findings):
        return findings
    out = list(findings)
    gone: set[int] = set()
    for j, f in enumerate(findings):
        hosts = ABSORBED_BY.get(f.kind, ())
        if not hosts:
            continue
        host = next((i for i, h in enumerate(out) if i not in gone and h.kind in hosts and _absorbs(h, f)), None)
        if host is not None:
            out[host] = _absorbed(out[host], f)
            gone.add(j)
    return [f for i, f in enumerate(out) if i not in gone]


def _absorbed(host: F, f: F) -> F:
    """``host`` with what ``f`` (the same fault seen by another layer) adds, under its kind's name."""
    facts = dict(host.facts)
    for k, v in f.facts.items():
        if k not in facts and k not in ("occurrences", "consistency_flags"):
            facts[f"{f.kind}_{k}" if k in ("framework", "requested_bytes", "device_index") else k] = v
    seen = [k for k in str(facts.get("reported_as", "")).split(",") if k]
    facts["reported_as"] = ",".join(dict.fromkeys([*seen, f.kind]))
    severity = max(host.severity, f.severity, key=lambda s: _RANK.get(s, 0))
    return dataclasses.replace(host, severity=severity, facts=facts)  # type: ignore[type-var]
