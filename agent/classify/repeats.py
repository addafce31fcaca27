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
``occurrences``. Findings of different kinds are never merged: a framework's CUDA out-of-memory
error printed after NvMap's ENOMEM on a Jetson is reported as both (``jetson_memory`` and
``cuda_oom``), each layer's own finding. Standard library only (the agent imports it).
"""

from __future__ import annotations

import dataclasses
import re
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
    # The same request failing again with other memory free on the GPU is another run's failure, not a repeat.
    KIND_CUDA_OOM: ("framework", "requested_bytes", "device_index", "worker_prefix", "tensor_shape", "pid", "allocated_bytes",
                    "free_bytes", "relay_episode"),
    # Two reports of the kernel differ in their uptime stamp even when the same process invoked both.
    KIND_HOST_OOM: ("source", "victim_pid", "victim_process", "pod", "container", "container_id", "exit_code",
                    "kernel_uptime_s", "invoker_pid", "systemd_unit"),
    KIND_MEMORY_ALLOC_FAILURE: ("invoker_process", "invoker_pid", "order", "kernel_uptime_s"),
    KIND_GPU_XID: ("xid", "sxid", "pci_address", "pid", "nvswitch_index", "link"),
    # NvMap's calls nest (HandleAlloc reports its AllocInternalTagged's error): the call is not identity.
    KIND_JETSON_MEMORY: ("source", "errno", "heap", "requested_bytes"),
    KIND_TENSORRT_ERROR: ("error_code", "layer", "assertion", "error_origin", "trt_version"),
    KIND_TRT_BENCHMARK: ("throughput_qps", "latency_mean_ms", "latency_median_ms", "trt_version"),
}
WINDOW = 64
# Reports that name the one pid killed and no cgroup: earlyoom's kill, and the bpf oomkill tracer's relay of the
# kernel's (a kprobe on oom_kill_process).
_NAMES_A_PID_KILL = frozenset({"earlyoom", "bpf-oomkill"})
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
        if ident.get("framework") in ("cuda", "hip") and facts.get("cuda_error"):
            # The runtime's error with no framework named ("CUDA error: out of memory" relayed as an exception
            # string) is the same error a framework raised beside it: the framework it lacks is no difference.
            del ident["framework"]
        # A math library's status (cuBLAS, cuDNN) is its own fault beside the framework's allocator error.
        ident["library"] = facts.get("library") or ""
        if facts.get("caller_framework") == "opencv" and facts.get("call"):
            # OpenCV's CUDA module throws one cv::Exception per failing function ("... out of memory in function
            # 'setDevice'", then "... in function 'allocate'"): two functions named are two faults.
            ident["call"] = facts["call"]
    if kind == KIND_HOST_OOM and "victim_pid" in ident and ident.get("source") in _NAMES_A_PID_KILL:
        # A process killed is one fault whoever reports it: earlyoom's SIGTERM to a pid and the kernel's kill of
        # that pid after it (the process did not exit in time) are one OOM kill, and so are the kernel's report and
        # the oomkill tracer's line for it. (The source stays a key: a container's termination named by its pod is never
        # one fault with a pid's kill by their absent facts alone.)
        ident["source"] = "kernel"
        if facts.get("source") == "earlyoom":
            # The pid names the process: earlyoom's kill line and its notification ("Low memory! Killing process
            # PID NAME", the name running to the end of a line that a retyped paste may end with its own ".") print
            # one name two ways.
            ident.pop("victim_process", None)
    if kind == KIND_HOST_OOM and ident.get("source") == "systemd" and "systemd_unit" in ident:
        # systemd's line on a unit whose cgroup saw the kernel's OOM kill relays that kill: it is one fault with the
        # kernel's report whose memory cgroup is the unit's (same_fault).
        ident["source"] = "kernel"
        ident["memcg_unit"] = ident.pop("systemd_unit")
    elif kind == KIND_HOST_OOM and ident.get("source") == "kernel":
        memcg = facts.get("task_memcg") or facts.get("oom_memcg")
        if isinstance(memcg, str) and memcg.rstrip("/"):
            ident["memcg_unit"] = memcg.rstrip("/").rsplit("/", 1)[-1]
    if kind == KIND_HOST_OOM and facts.get("finished_at") is not None:
        # A container terminated at two different times was killed twice (its current state and its last
        # one, both OOMKilled); the same state shown twice, or before and after a restart, is one kill.
        ident["finished_at"] = " ".join(str(facts["finished_at"]).split())
    if kind == KIND_GPU_XID:
        # "GPU has fallen off the bus" alone implies Xid 79; a GPU is named "0000:01:00" by the Xid
        # line and "0000:01:00.0" by the next one.
        if "xid" not in ident and facts.get("implied_xid") is not None:
            ident["xid"] = facts["implied_xid"]
        if "xid" not in ident and facts.get("init_failed") is True:
            # RmInitAdapter failing is its own fault beside the Xid that came before it on the same GPU
            # (an Xid 119 burst, then the adapter failing to come back): not folded into that Xid.
            ident["xid"] = "init_failed"
        if "xid" not in ident and facts.get("gsp_failure") is not None:
            # GSP notices with no Xid and no GPU named: an RPC history, a core dump, an assertion are told
            # apart by what they are.
            ident["gsp_failure"] = facts["gsp_failure"]
        if isinstance(ident.get("pci_address"), str):
            if not ident["pci_address"].strip(". \u2026"):
                del ident["pci_address"]  # hand-redacted ("(...)", "(.)"): no GPU named, so no difference
            else:
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
    "build_failed", "trtexec_failed", "missing_optimization_profile", "assertion_failed", "error", "onnx_parser_error",
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
    if a.kind == KIND_CUDA_OOM and b.facts.get("relayed") is True and b.facts.get("relay_episode") is not None \
            and (a.facts.get("relay_episode") is None or a.facts.get("relayed") is True) \
            and a.facts.get("in_title") is not True:
        # ComfyUI logs a prompt's failure ("!!! Exception during processing !!! ...") before its traceback: such a line
        # (``b``, the later) opens a failure of its own, never repeats an exception reported before it.
        return False
    ia, ib = _identity(a.kind, a.facts), _identity(b.kind, b.facts)
    if a.kind == KIND_HOST_OOM and (a.facts.get("source") == "systemd") != (b.facts.get("source") == "systemd"):
        # A unit's OOM line and a kernel report: one fault only when the report names the unit's cgroup, or, naming
        # none (a system-wide OOM), kills the process the unit is named for ("Killed process 2653 (kwin_wayland)",
        # then "plasma-kwin_wayland.service: Failed with result 'oom-kill'.").
        unit, kern = (ia, ib) if a.facts.get("source") == "systemd" else (ib, ia)
        if "memcg_unit" in unit and "memcg_unit" not in kern and _unit_named_for(unit["memcg_unit"], kern.get("victim_process")):
            kern["memcg_unit"] = unit["memcg_unit"]
        if "memcg_unit" not in ia or "memcg_unit" not in ib:
            return False
    if a.kind == KIND_TENSORRT_ERROR and (a.facts.get("category") == "engine_other_device_model") != (
            b.facts.get("category") == "engine_other_device_model"):
        # An engine loaded on another GPU model than it was built on is a warning about that engine, never a report
        # of a builder's or runtime's error beside it (which names no engine's device either).
        return False
    if (a.facts.get("out_of_memory") is True) != (b.facts.get("out_of_memory") is True) and a.kind == KIND_TENSORRT_ERROR:
        # The builder finding no implementation for a node once its tactics' allocations failed is that shortage's end
        # ("Error Code 10: Internal Error (Could not find any implementation for node ...)" after "Error Code 1: Cuda
        # Runtime (out of memory)"): one fault.
        # A tactic skipped for memory is a warning the builder goes on after: what fails later is its own fault.
        oom, other = (a, b) if a.facts.get("out_of_memory") is True else (b, a)
        return severity_of(oom.facts) == "error" and _no_implementation(other)
    if a.kind == KIND_TENSORRT_ERROR and "layer" in ia and "layer" in ib and ia["layer"] != ib["layer"] \
            and a.facts.get("error_origin") and a.facts.get("error_origin") == b.facts.get("error_origin") \
            and a.facts.get("error_code") == b.facts.get("error_code") and severity_of(a.facts) == "error":
        # One check in the builder (the same source location, the same code) failing for layer after layer of one
        # network ("[graphShapeAnalyzer.cpp::...::2212] Error Code 4: ... ((Unnamed Layer* 407) ...)", then 424):
        # one build failure, its first layer kept.
        ia = {k: v for k, v in ia.items() if k != "layer"}
        ib = {k: v for k, v in ib.items() if k != "layer"}
    if a.kind == KIND_TENSORRT_ERROR and "layer" in ia and "layer" in ib and _invalid_node_and_its_reason(a, b):
        # The ONNX parser's "[6] Invalid Node - /Tile" names the node whose import failed; the line after it is
        # TensorRT's reason, an "Error Code 4: Internal Error (/OneHot: ...)" naming the layer the builder choked on:
        # one failure told twice, under two names.
        ia = {k: v for k, v in ia.items() if k != "layer"}
        ib = {k: v for k, v in ib.items() if k != "layer"}
    return _same_identity(a, b, ia, ib)


def _invalid_node_and_its_reason(a: _FindingLike, b: _FindingLike) -> bool:
    node, other = (a, b) if a.facts.get("onnx_error") == "INVALID_NODE" else (b, a)
    return node.facts.get("onnx_error") == "INVALID_NODE" and "error_code" not in node.facts \
        and "error_code" in other.facts and "onnx_error" not in other.facts


def _no_implementation(f: _FindingLike) -> bool:
    """The end of a build whose memory ran out: no implementation for a node, then the build's failure."""
    if f.facts.get("category") in ("build_failed", "trtexec_failed"):
        return True
    text = f"{f.facts.get('error_detail', '')} {f.facts.get('message', '')}"
    return "ould not find any implementation" in text and "workspace" not in text


# Words of a unit's name that name no program: its slice, a session, a VM's or container's scope.
_UNIT_WORDS = frozenset({"user", "session", "machine", "system", "docker", "libpod", "snap", "app", "run", "cri",
                         "containerd", "crio", "podman", "kubepods", "burstable", "besteffort", "service", "scope"})


def _unit_named_for(unit: str, process: Any) -> bool:
    """Whether systemd unit ``unit`` is named for ``process`` (its comm, maybe cut to 15 characters): the name
    holds it ("plasma-kwin_wayland.service", kwin_wayland), or one of its words starts it ("mariadb.service",
    mariadbd; "machine-qemu-1-vm.scope", qemu-system-x86)."""
    if not isinstance(process, str) or len(process) < 4:
        return False
    stem = unit.rsplit(".", 1)[0].lower().replace("_", "-").replace(".", "-")
    proc = process.lower().replace("_", "-")
    if proc in stem:
        return True
    return any(len(w) >= 4 and w not in _UNIT_WORDS and proc.startswith(w) for w in re.split(r"[-@\\]", stem))


def _same_identity(a: _FindingLike, b: _FindingLike, ia: dict[str, Any], ib: dict[str, Any]) -> bool:
    for k, v in ia.items():
        if k not in ib or ib[k] == v:
            continue
        if k == "layer" and a.kind == KIND_TENSORRT_ERROR and isinstance(v, str) and isinstance(ib[k], str) \
                and _cut_copy(v, ib[k]):
            continue  # a node name cut by a title or a paste, beside the whole line naming it
        if k == "memcg_unit" and isinstance(v, str) and isinstance(ib[k], str) and _unit_nested(v, ib[k]):
            continue  # one kill, counted in its cgroup and in every slice above it
        near = _NEAR.get(k)
        if near is None or not isinstance(v, (int, float)) or not isinstance(ib[k], (int, float)) or abs(v - ib[k]) > near:
            return False
    return True


_USER_SERVICE = re.compile(r"user@(\d+)\.service")


def _slices_above(unit: str) -> list[str]:
    """The slices a systemd unit sits in, as its name says (systemd.slice(5): "foo-bar.slice" is in "foo.slice";
    a user's manager "user@1000.service" in "user-1000.slice"); other units name no slice."""
    m = _USER_SERVICE.fullmatch(unit)
    if m:
        unit = f"user-{m[1]}.slice"
        out = [unit]
    elif unit.endswith(".slice") and unit != "-.slice":
        out = []
    else:
        return []
    parts = unit[: -len(".slice")].split("-")
    out += ["-".join(parts[:n]) + ".slice" for n in range(len(parts) - 1, 0, -1)]
    return out


def _unit_nested(a: str, b: str) -> bool:
    """Whether one unit sits inside the other: the kernel counts an OOM kill in every cgroup above its victim's,
    and systemd reports it for each of those units at once."""
    return a in _slices_above(b) or b in _slices_above(a)


def _cut_copy(a: str, b: str) -> bool:
    """Whether one name is the other cut short (its brackets left open): "{ForeignNode[a + (Unnamed Layer* 6"; or
    a scoped name (TensorFlow's and ONNX exporters' "scope/scope/op") given by its last part alone: "op"."""
    short, full = (a, b) if len(a) < len(b) else (b, a)
    if len(short) >= 3 and "/" not in short and full.endswith("/" + short):
        return True
    return len(short) >= 3 and full.startswith(short) and any(short.count(o) > short.count(c) for o, c in ("()", "[]", "{}"))


def _merged(first: F, other: F) -> F:
    facts = dict(other.facts)
    facts.update(first.facts)  # the first copy's figures stand; the others add what it lacks
    if first.facts.get("earlyoom_notification") and not other.facts.get("earlyoom_notification"):
        facts.update(other.facts)  # earlyoom's kill line, not its notification, names the victim as it printed it
        facts.pop("earlyoom_notification", None)
    if (first.kind == KIND_TENSORRT_ERROR and other.facts.get("error_category") == "OutOfMemory"
            and first.facts.get("error_category") != "OutOfMemory"):
        # TensorRT 10's allocator reports its failed cudaMalloc by location only ("Error Code 1: Cuda Runtime (In
        # allocate at .../defaultAllocator.cpp:57)") before the error the allocation ends in ("Error Code 2:
        # OutOfMemory (Requested size was N bytes.)"): the fault's code is the latter's.
        # The size it names is the one that failed (a tactic's skip before it names the buffer it tried).
        for k in ("error_code", "error_category", "error_detail", "error_origin", "requested_bytes"):
            if k in other.facts:
                facts[k] = other.facts[k]
    if first.kind == KIND_TENSORRT_ERROR and "layer" in first.facts and "layer" in other.facts \
            and first.facts["layer"] != other.facts["layer"] and _invalid_node_and_its_reason(first, other):
        # The layer TensorRT's error names is where the build failed; the parser's node is kept beside it.
        node, reason = (first, other) if first.facts.get("onnx_error") == "INVALID_NODE" else (other, first)
        facts["layer"] = reason.facts["layer"]
        facts["onnx_node"] = node.facts["layer"]
    la, lb = first.facts.get("layer"), other.facts.get("layer")
    if first.kind == KIND_TENSORRT_ERROR and isinstance(la, str) and isinstance(lb, str) and len(lb) > len(la) \
            and _cut_copy(la, lb):
        facts["layer"] = lb  # the whole name, not the cut copy's
    facts.pop("consistency_flags", None)  # recomputed by Finding for the merged facts
    facts["occurrences"] = int(first.facts.get("occurrences") or 1) + int(other.facts.get("occurrences") or 1)
    severity = max(first.severity, other.severity, key=lambda s: _RANK.get(s, 0))
    return dataclasses.replace(first, severity=severity, facts=facts)  # type: ignore[type-var]


def merge_repeats(findings: Sequence[F]) -> list[F]:
    """``findings`` with each fault once, in the order of its first copy.

    A finding is compared with the last ``WINDOW`` distinct faults of its kind, so a file of many
    thousand distinct faults costs a bounded amount per finding.
    """
    findings = _fold_cast_notices(findings)  # before merging: the outcome's finding, not the notice, stands
    out: list[F] = []
    by_kind: dict[str, list[int]] = {}
    tries: set[int] = set()  # findings of only the stream executor's tries so far (_try)
    for f in findings:
        recent = by_kind.setdefault(f.kind, [])
        for i in reversed(recent[-WINDOW:]):
            if same_fault(out[i], f):
                out[i] = _merged(out[i], f)
                break
        else:
            ep = _episode(out, recent, tries, f) if f.kind == KIND_CUDA_OOM and recent else None
            if ep is not None:
                i, stands = ep
                out[i] = _merged(f, out[i]) if stands else _merged(out[i], f)
                if stands:
                    tries.discard(i)
                continue
            if f.kind == KIND_CUDA_OOM and _try(f):
                tries.add(len(out))
            recent.append(len(out))
            out.append(f)
    return _fold_show_mem(_fold_stalls(out))


# The ONNX parser's notice that it casts a model's INT64 weights down to INT32 (tensorrt.py's ``int64_weights_cast``) is
# printed by nearly every ONNX import: a fault of its own only when the import's outcome is not reported beside it. A
# build that goes on to fail, to warn of something else or to run a benchmark is reported by that finding, which
# carries the notice (``int64_weights_cast``).
_CAST_NOTICE = "int64_weights_cast"


def _fold_cast_notices(findings: Sequence[F]) -> Sequence[F]:
    notices = [i for i, f in enumerate(findings)
               if f.kind == KIND_TENSORRT_ERROR and f.facts.get("category") == _CAST_NOTICE]
    if not notices:
        return findings
    others = [i for i, f in enumerate(findings) if (f.kind == KIND_TRT_BENCHMARK or f.kind == KIND_TENSORRT_ERROR)
              and i not in notices]
    if not others:
        return findings
    out = list(findings)
    first = next((i for i in others if out[i].kind == KIND_TENSORRT_ERROR), None)
    if first is not None:
        facts = dict(out[first].facts)
        facts.setdefault(_CAST_NOTICE, True)
        out[first] = dataclasses.replace(out[first], facts=facts)  # type: ignore[type-var]
    drop = set(notices)
    return [f for i, f in enumerate(out) if i not in drop]


# TensorFlow's and XLA's allocators try before they fail. The stream executor prints "failed to
# allocate <size> from device: CUDA_ERROR_OUT_OF_MEMORY" for each try of a region (the BFC allocator
# backs off by a tenth each time, or grows the region), and the BFC allocator warns that it "ran out of
# memory trying to allocate" a size when "the caller indicates that this is not a failure". Each line
# is a finding of its own: one process's tries, the warnings beside them and the error they end in
# (the exception raised) are one fault, whatever the sizes. BFC warnings alone, or beside another BFC
# line, stay apart by size (the allocations of different tensors, each of which coped).
_XLA_FAMILY = frozenset({"tensorflow", "xla", "jax"})
_EPISODE_S = 60.0  # tries of one allocation follow each other within seconds
_TS = re.compile(r"(?:(\d{4}-\d\d-\d\d)[ T])?(\d{1,2}):(\d\d):(\d\d(?:\.\d+)?)")


def _try(f: _FindingLike) -> bool:
    """The stream executor's report of one try (no exception or status: nothing gave up yet)."""
    facts = f.facts
    return facts.get("component") == "stream_executor" and "exception" not in facts and "status" not in facts


def _raised(f: _FindingLike) -> bool:
    """The error the framework raised (``ResourceExhaustedError``, ``XlaRuntimeError: RESOURCE_EXHAUSTED``)."""
    return "exception" in f.facts or "status" in f.facts


def _coped(f: _FindingLike) -> bool:
    """The BFC allocator's "not a failure" warning."""
    return f.facts.get("allocation_failed") is False


def _one_process(a: _FindingLike, b: _FindingLike) -> bool:
    """Whether two TensorFlow/XLA out-of-memory findings can be one process's, at one time."""
    fa, fb = a.facts.get("framework"), b.facts.get("framework")
    if fa not in _XLA_FAMILY or fb not in _XLA_FAMILY:
        return False
    for k in ("device_index", "worker_prefix", "pid"):
        va, vb = a.facts.get(k), b.facts.get(k)
        if va is not None and vb is not None and va != vb:
            return False
    ta, tb = _TS.search(str(a.facts.get("log_first_ts", ""))), _TS.search(str(b.facts.get("log_first_ts", "")))
    if ta is None or tb is None:
        return True  # a finding without a printed time (an exception) is placed by its neighbours
    if ta[1] and tb[1] and ta[1] != tb[1]:
        return False
    sa = int(ta[2]) * 3600 + int(ta[3]) * 60 + float(ta[4])
    sb = int(tb[2]) * 3600 + int(tb[3]) * 60 + float(tb[4])
    return abs(sa - sb) <= _EPISODE_S


def _episode(out: Sequence[_FindingLike], recent: Sequence[int], tries: set[int], f: _FindingLike) -> tuple[int, bool] | None:
    """The earlier finding ``f`` is one fault with, and whether ``f``'s figures should stand."""
    f_try, f_coped = _try(f), _coped(f)
    for i in reversed(recent[-WINDOW:]):
        o = out[i]
        if not _one_process(o, f):
            continue
        if f_try or f_coped and (i in tries or _raised(o)):
            return i, False  # another try, or a warning beside the tries or the error raised
        if i in tries and not f_coped:
            return i, True  # the error the tries ended in
    return None


# The kernel's show_mem() dump ("Mem-Info:", the zones' free pages, "Free swap", "pages RAM") is
# printed by the OOM killer's report (oom_kill.c, dump_header) and by a failed allocation's warning
# (page_alloc.c, warn_alloc) alike. Read alone it is a host_oom report pasted from its middle; in a
# text whose only other kernel memory report is an allocation failure, and that shows no kill, it is
# that failure's dump.
_SHOW_MEM_PREFIXES = ("meminfo_", "pages_", "zone_", "free_swap", "total_swap", "total_pagecache", "swap_cache")
_SHOW_MEM_OTHER = frozenset({"source", "oom_report", "mem_info", "kernel_uptime_s", "log_time", "host", "hardware",
                             "occurrences", "consistency_flags"})


def _show_mem_only(f: _FindingLike) -> bool:
    facts = f.facts
    return (f.kind == KIND_HOST_OOM and facts.get("oom_report") == "partial"
            and all(k in _SHOW_MEM_OTHER or k.startswith(_SHOW_MEM_PREFIXES) for k in facts))


def _fold_stalls(findings: list[F]) -> list[F]:
    """An allocation that stalled ("page allocation stalls for Nms, order:O, mode:M") and then invoked the OOM killer
    (the kernel's report after it names the same gfp mask and order) is the kill's fault: no allocation failed without
    a kill, so the stall is folded into that report (``stall_ms``)."""
    if not any(f.kind == KIND_MEMORY_ALLOC_FAILURE and f.facts.get("event") == "page_allocation_stall" for f in findings):
        return findings
    out = list(findings)
    drop: set[int] = set()
    for i, f in enumerate(findings):
        if f.kind != KIND_MEMORY_ALLOC_FAILURE or f.facts.get("event") != "page_allocation_stall" \
                or f.facts.get("gfp_mask") is None or f.facts.get("order") is None:
            continue
        for j in range(i + 1, len(findings)):
            g = out[j]
            if g.kind == KIND_HOST_OOM and g.facts.get("gfp_mask") == f.facts["gfp_mask"] \
                    and g.facts.get("order") == f.facts["order"]:
                facts = dict(g.facts)
                if f.facts.get("stall_ms") is not None:
                    facts.setdefault("stall_ms", f.facts["stall_ms"])
                out[j] = dataclasses.replace(g, facts=facts)  # type: ignore[type-var]
                drop.add(i)
                break
    return [f for i, f in enumerate(out) if i not in drop]


def _fold_show_mem(findings: list[F]) -> list[F]:
    if not any(f.kind == KIND_MEMORY_ALLOC_FAILURE for f in findings):
        return findings
    if not all(f.kind != KIND_HOST_OOM or _show_mem_only(f) for f in findings):
        return findings  # a kill is reported: its dump may be any of them
    out: list[F] = []
    dumps: list[F] = []
    for f in findings:
        (dumps if f.kind == KIND_HOST_OOM else out).append(f)
    host = next(i for i, f in enumerate(out) if f.kind == KIND_MEMORY_ALLOC_FAILURE)
    for d in dumps:
        facts = dict(out[host].facts)
        for k, v in d.facts.items():
            if k not in _SHOW_MEM_OTHER:
                facts.setdefault(k, v)
        facts["show_mem"] = True
        out[host] = dataclasses.replace(out[host], facts=facts)  # type: ignore[type-var]
    return out
