"""OOM classifiers (cuda_oom, host_oom, jetson_memory) against the shared corpus and made-up lines.

Four corpus folders (../shared/corpus/{oom-pytorch,oom-other,kernel-oom,jetson-nvmap}). For every
sample, every fact its MANIFEST lists is checked through ``CHECKS[folder][key]`` (how the manifest
wording maps onto finding facts); a key the table does not know fails the test, so a new manifest
fact cannot be silently ignored. Facts that cannot be checked are in ``UNCHECKABLE`` with why.
Sizes in the MANIFESTs keep their printed units and are converted with ``parse_size``.

Synthetic lines below are written from the documented formats; no corpus text is copied here.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from fleetscope.agent.classify._base import (
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    SEVERITIES,
    Finding,
)
from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.classify.cuda_oom import CudaOomClassifier
from fleetscope.agent.classify.host_oom import HostOomClassifier
from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier
from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE
from tests.corpus import CORPUS_DIR, manifest_facts, require_corpus, sample_text

CUDA = CudaOomClassifier()
HOST = HostOomClassifier()
JETSON = JetsonMemoryClassifier()
ALL = (CUDA, HOST, JETSON)
KINDS = {CUDA.name: KIND_CUDA_OOM, HOST.name: KIND_HOST_OOM, JETSON.name: KIND_JETSON_MEMORY}

OWNER = {"oom-pytorch": CUDA, "oom-other": CUDA, "kernel-oom": HOST, "jetson-nvmap": JETSON}
CASES = [(folder, p.name) for folder in OWNER for p in sorted((CORPUS_DIR / folder).glob("*.txt"))] or [
    ("oom-pytorch", "<corpus missing>")
]

Check = Callable[[list[Finding], str], None]
ABSENT = object()  # "this fact must not be set"


# ----------------------------------------------------------------------------------- helpers


def _split(value: str, sep: str = " | ") -> list[str]:
    return [v.strip() for v in value.split(sep) if v.strip()]


def _match(findings: list[Finding], want: dict[str, object]) -> Finding:
    """The finding whose facts agree with every entry of ``want`` (ABSENT: key not set)."""

    def ok(f: Finding) -> bool:
        for k, v in want.items():
            if v is ABSENT:
                if k in f.facts:
                    return False
            elif f.facts.get(k) != v:
                return False
        return True

    hits = [f for f in findings if ok(f)]
    assert hits, f"no finding with {want}; facts were {[dict(f.facts) for f in findings]}"
    return hits[0]


def fact(name: str, conv: Callable[[str], object] = str) -> Check:
    """Manifest value, converted, equals one finding's ``name`` fact."""
    return lambda fs, v: _match(fs, {name: conv(v)}) and None


def size(name: str) -> Check:
    return fact(name, parse_size)


def _kv_words(value: str) -> dict[str, str]:
    """'pid=1 name=(x) restarts=4 (57s ago)' -> {'pid': '1', 'name': '(x)', 'restarts': '4 (57s ago)'}."""
    return {m[1]: m[2].strip() for m in re.finditer(r"(\S+?)=(.*?)(?=\s\S+?=|$)", value)}


def _kib(v: str) -> int:
    return parse_size(v)  # "920kB": the kernel's kB mean KiB, which parse_size's default reads


# ----------------------------------------------------------------------------- oom-pytorch

PT_FORMATS = {
    "parenthesised (<=2.0)": {"format": "parenthesised"},
    'sentence (>=2.1) with "capacty" typo': {"format": "sentence", "capacity_typo": True},
    "sentence (>=2.1)": {"format": "sentence", "capacity_typo": False},
}


def check_pt_exception(fs: list[Finding], v: str) -> None:
    _match(fs, {"exception": ABSENT if v.startswith("(none") else v, "framework": "pytorch"})


def check_process_in_use(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(.+?) \((?:pid (\d+)|(this process))\)", v)
    assert m, v
    want: dict[str, object] = {"process_in_use_bytes": parse_size(m[1])}
    want.update(
        {"pid": int(m[2]), "process_in_use_is_self": False} if m[2] else {"process_in_use_is_self": True}
    )
    if m[3]:
        want["pid"] = ABSENT
    _match(fs, want)


def check_hint(fs: list[Finding], v: str) -> None:
    assert any(v in (f.facts.get("hint"), f.facts.get("hint_setting")) for f in fs), v


PYTORCH_CHECKS: dict[str, Check] = {
    "exception": check_pt_exception,
    "requested": size("requested_bytes"),
    "format": lambda fs, v: _match(fs, dict(PT_FORMATS[v])) and None,
    "device": fact("device_index", int),
    "total_capacity": size("total_capacity_bytes"),
    "free": size("free_bytes"),
    "allocated": size("allocated_bytes"),
    "allocated_by_pytorch": size("allocated_bytes"),  # same quantity, >= 2.1 wording
    "cached": size("cached_bytes"),
    "reserved": size("reserved_bytes"),
    "reserved_unallocated": size("reserved_unallocated_bytes"),
    "process_in_use": check_process_in_use,
    "hint": check_hint,
    "traceback_frames": fact("traceback_frames", int),
    "innermost_frame": fact("innermost_frame"),
}

# ------------------------------------------------------------------------------- oom-other

# Manifest "framework" wording -> facts. cuBLAS/cuDNN findings name the failing library in ``library``
# and the framework that called it in ``caller_framework`` (and in ``framework`` when it is PyTorch,
# TensorFlow or JAX; else ``framework`` is the library).
OTHER_FRAMEWORKS: dict[str, dict[str, object]] = {
    "CNTK": {"framework": "cublas", "caller_framework": "cntk"},
    "PyTorch (C++ backtrace)": {"caller_framework": "pytorch"},
    "Torch7 (Lua)": {"framework": "cudnn", "caller_framework": "torch7"},
    "JAX/XLA": {"framework": "jax"},
    "TensorFlow": {"framework": "tensorflow"},
    "TensorFlow (stream_executor)": {"framework": "tensorflow", "component": "stream_executor"},
}

OTHER_ERRORS: dict[str, dict[str, object]] = {
    "jaxlib.xla_extension.XlaRuntimeError": {"exception": "jaxlib.xla_extension.XlaRuntimeError"},
    "(bare status)": {"exception": ABSENT, "status": "RESOURCE_EXHAUSTED"},
    "ResourceExhaustedError / OOM when allocating tensor": {
        "exception": "ResourceExhaustedError",
        "message": "OOM when allocating tensor",
    },
    "NV_ERR_NO_MEMORY (0x00000051)": {"nv_status": "NV_ERR_NO_MEMORY", "nv_status_code": 0x51},
}


def check_other_framework(fs: list[Finding], v: str) -> None:
    f = _match(fs, OTHER_FRAMEWORKS[v])
    if "C++ backtrace" in v:
        assert int(f.facts["cpp_frames"]) > 0


def check_tf_severity(fs: list[Finding], v: str) -> None:
    letter = v.split()[0]
    f = _match(fs, {"log_severity": letter, "fatal": letter not in ("W", "I")})
    assert f.severity == {"W": "warning", "I": "info"}.get(letter, "error")


def check_failed_alloc(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+) \((\d+) bytes\) (\w+)", v)
    assert m, v
    assert parse_size(m[1]) == int(m[2])  # the printed "32.00M" and the byte count agree
    _match(fs, {"requested_bytes": int(m[2]), "cuda_error": m[3]})


def check_cublas_companion(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\w+) \(x(\d+)\)", v)
    assert m, v
    _match(fs, {"cublas_status": m[1], "cublas_status_count": int(m[2])})


OTHER_CHECKS: dict[str, Check] = {
    "status": fact("status"),
    "framework": check_other_framework,
    "cublas_failure_code": fact("cublas_failure_code", int),
    "gpu": fact("device_index", int),
    "call": fact("call"),
    "frames": fact("cpp_frames", int),
    "error": lambda fs, v: _match(fs, OTHER_ERRORS[v]) and None,
    "requested_bytes": fact("requested_bytes", int),
    "python_traceback": fact("python_traceback", lambda v: v == "yes"),
    "bufferassignment_total_allocation": size("buffer_total_allocation_bytes"),
    "source": lambda fs, v: _match(fs, {"framework": {"NVIDIA kernel driver (NVRM)": "nvrm"}[v]}) and None,
    "sites": lambda fs, v: _match(fs, {"sites": ",".join(_split(v))}) and None,
    "tensor_shape": fact("tensor_shape"),
    "dtype": fact("dtype"),
    "device": fact("tf_device"),
    "allocator": fact("allocator"),
    "nodes": lambda fs, v: _match(fs, {"nodes": ",".join(_split(v))}) and None,
    "root_errors": fact("root_errors", int),
    "requested": size("requested_bytes"),
    "severity": check_tf_severity,
    "log_lines": fact("log_lines", int),
    "first_ts": fact("log_first_ts"),
    "severities": fact("log_severities"),
    "cuda_alloc_failures": lambda fs, v: (
        _match(fs, {"component": "stream_executor", "occurrences": int(v)}) and None
    ),
    "failed_alloc": check_failed_alloc,
    "cublas": check_cublas_companion,
}

# ------------------------------------------------------------------------------ kernel-oom


def check_invoked(fs: list[Finding], v: str) -> None:
    name, rest = v.split(" ", 1)
    kv = _kv_words(rest)
    gfp = re.fullmatch(r"(0x[0-9a-f]+)(?:\((.*)\))?", kv["gfp_mask"])
    assert gfp, v
    want: dict[str, object] = {
        "invoker_process": name,
        "gfp_mask": gfp[1],
        "order": int(kv["order"]),
        "invoker_oom_score_adj": int(kv["oom_score_adj"]),
    }
    if gfp[2]:
        want["gfp_flags"] = gfp[2]
    _match(fs, want)


KILLED_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "pid": ("victim_pid", int),
    "name": ("victim_process", str),
    "total-vm": ("total_vm_bytes", _kib),
    "anon-rss": ("anon_rss_bytes", _kib),
    "file-rss": ("file_rss_bytes", _kib),
    "shmem-rss": ("shmem_rss_bytes", _kib),
    "UID": ("uid", int),
    "pgtables": ("pgtables_bytes", _kib),
    "oom_score_adj": ("oom_score_adj", int),
}


def _victims(v: str, keys: dict[str, tuple[str, Callable[[str], object]]]) -> list[dict[str, object]]:
    out = []
    for item in _split(v):
        kv = _kv_words(item)
        unknown = set(kv) - set(keys)
        assert not unknown, f"manifest field(s) {unknown} not mapped"
        out.append({keys[k][0]: keys[k][1](x) for k, x in kv.items()})
    return out


def check_killed(fs: list[Finding], v: str) -> None:
    wants = _victims(v, KILLED_KEYS)
    hits = {id(_match(fs, w)) for w in wants}
    assert len(hits) == len(wants), "each killed process is its own finding"


def check_reaper(fs: list[Finding], v: str) -> None:
    for w in _victims(v, {"pid": ("victim_pid", int), "name": ("victim_process", str)}):
        _match(fs, {**w, "reaped": True})


SCOPES = {"Memory cgroup out of memory": "memcg", "Out of memory": "system"}


def check_selected(fs: list[Finding], v: str) -> None:
    scope, rest = v.split(": ", 1)
    kv = _kv_words(rest)
    _match(
        fs,
        {
            "oom_scope": SCOPES[scope],
            "victim_pid": int(kv["pid"]),
            "victim_process": kv["name"],
            "oom_score": int(kv["score"]),
        },
    )


def check_memcg_task_in(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+) \(limit of (\S+)\)", v)
    assert m, v
    _match(fs, {"task_memcg": m[1], "oom_memcg": m[2], "oom_scope": "memcg"})


def check_memcg_usage(fs: list[Finding], v: str) -> None:
    kv = _kv_words(v)
    _match(
        fs,
        {
            "memcg_usage_bytes": _kib(kv["usage"]),
            "memcg_limit_bytes": _kib(kv["limit"]),
            "memcg_failcnt": int(kv["failcnt"]),
        },
    )


def check_oom_context(fs: list[Finding], v: str) -> None:
    kv = _kv_words(v)
    _match(
        fs,
        {
            "invoker_cpu": int(kv["cpu"]),
            "invoker_pid": int(kv["pid"]),
            "invoker_process": kv["comm"],
            "kernel_release": kv["kernel"],
        },
    )


def check_dump_tasks(fs: list[Finding], v: str) -> None:
    assert v.startswith("present"), v
    want: dict[str, object] = {"dump_tasks_table": True}
    if "rss_anon" in v:
        want["dump_tasks_rss_detail"] = True
    f = _match(fs, want)
    assert int(f.facts["dump_tasks_rows"]) > 0


SUMMARY_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "constraint": ("constraint", str),
    "cpuset": ("cpuset", str),
    "mems_allowed": ("mems_allowed", str),
    "oom_memcg": ("oom_memcg", str),
    "task_memcg": ("task_memcg", str),
    "task": ("victim_process", str),
    "pid": ("victim_pid", int),
    "uid": ("uid", int),
}


def check_summary(fs: list[Finding], v: str) -> None:
    want: dict[str, object] = {}
    for part in _split(v, ", "):
        k, x = part.split("=", 1)
        name, conv = SUMMARY_KEYS[k]
        want[name] = conv(x)
    f = _match(fs, want)
    assert f.facts["oom_scope"] == "memcg"
    # kubepods paths name the pod and the container: both are read out for queries.
    assert "pod_uid" in f.facts and "container_id" in f.facts


def check_started_finished(fs: list[Finding], v: str) -> None:
    started, finished = _split(v)
    _match(fs, {"started_at": started, "finished_at": finished})


def check_get_pod(fs: list[Finding], v: str) -> None:
    kv = _kv_words(v)
    r = re.fullmatch(r"(\d+)(?: \((.*)\))?", kv["restarts"])
    assert r, v
    _match(
        fs,
        {
            "pod": kv["name"],
            "ready": kv["ready"],
            "k8s_status": kv["status"],
            "restarts": int(r[1]),
            "last_restart_ago": r[2] if r[2] else ABSENT,
            "age": kv["age"],
        },
    )


def check_k8s_event(fs: list[Finding], v: str) -> None:
    typ, reason = v.split()
    _match(fs, {"k8s_event_type": typ, "k8s_event_reason": reason})


KERNEL_CHECKS: dict[str, Check] = {
    "invoked_oom_killer": check_invoked,
    "killed": check_killed,
    "selected": check_selected,
    "memcg_task_in": check_memcg_task_in,
    "memcg_usage": check_memcg_usage,
    "oom_context": check_oom_context,
    "dump_tasks_table": check_dump_tasks,
    "free_swap_kb": fact("free_swap_bytes", lambda v: int(v) * 1024),
    "oom_kill_summary": check_summary,
    "oom_reaper": check_reaper,
    "k8s_reason": fact("k8s_reason"),
    "k8s_exit_code": fact("exit_code", int),
    "k8s_started_finished": check_started_finished,
    "k8s_finishedAt": fact("finished_at"),
    "k8s_get_pod": check_get_pod,
    "k8s_event": check_k8s_event,
}

# ---------------------------------------------------------------------------- jetson-nvmap


def check_errno(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\d+) \((\w+)\)(?: on all (\w+))?", v)
    assert m, v
    want: dict[str, object] = {"errno": int(m[1]), "errno_name": m[2], "out_of_memory": m[2] == "ENOMEM"}
    if m[3]:
        want["occurrences"] = {"two": 2, "three": 3, "four": 4}[m[3]]
    _match(fs, want)


def check_dma(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"\[(\w+)\] size=(\d+) aligned=(\d+) flags:(\S+)", v)
    assert m, v
    _match(fs, {"heap": m[1], "requested_bytes": int(m[2]), "aligned_bytes": int(m[3]), "dma_flags": m[4]})


def _squash(s: str) -> str:
    return " ".join(s.replace(":", " ").split())


def check_nvgpu_errors(fs: list[Finding], v: str) -> None:
    # The manifest drops the colons nvgpu prints after function names; compare without them.
    assert any(_squash(str(f.facts.get("nvgpu_errors", ""))) == _squash(v) for f in fs), v


def check_cma(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+) alloc failed, req-size (\d+) pages, ret (-?\d+)", v)
    assert m, v
    _match(
        fs, {"cma_area": m[1], "requested_pages": int(m[2]), "cma_ret": int(m[3]), "errno": abs(int(m[3]))}
    )


def check_cma_stamps(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"([\d.]+) s; journal time (.+)", v)
    assert m, v
    _match(fs, {"source": "cma", "kernel_uptime_s": float(m[1]), "log_time": m[2]})


def check_not_oom(fs: list[Finding], v: str) -> None:
    assert v.startswith("NOT an OOM"), v
    assert fs == []


JETSON_CHECKS: dict[str, Check] = {
    "nvmap_call": fact("nvmap_call"),
    "ops": lambda fs, v: _match(fs, {"nvmap_ops": ",".join(_split(v, ","))}) and None,
    "errno": check_errno,
    "library": fact("library"),
    "call": fact("call"),
    "message": fact("message"),
    "nvmap_handle_flags_or_tag": fact("nvmap_tag", int),
    "followed_by": fact("followed_by"),
    "cuda_error": fact("cuda_error"),
    "host": fact("host"),
    "nvgpu device": fact("nvgpu_device"),
    "dma_alloc_failed": check_dma,
    "errors": check_nvgpu_errors,
    "cma": check_cma,
    "kernel uptime stamp on the cma line": check_cma_stamps,
    "classification hint": check_not_oom,
}

CHECKS: dict[str, dict[str, Check]] = {
    "oom-pytorch": PYTORCH_CHECKS,
    "oom-other": OTHER_CHECKS,
    "kernel-oom": KERNEL_CHECKS,
    "jetson-nvmap": JETSON_CHECKS,
}

# (folder, file, key) -> why the fact is not checked against findings.
UNCHECKABLE: dict[tuple[str, str, str], str] = {
    ("jetson-nvmap", "cupcl-24-nvmapreserveop-22.txt", "board (source)"): (
        "provenance from the issue thread; the board is not printed in the sample text"
    ),
    ("jetson-nvmap", "libsgm-30-tx2-gpumat-allocate.txt", "library"): (
        "confounder (CUDA arch mismatch, not an OOM): no classifier reports it, so no finding carries it"
    ),
    ("jetson-nvmap", "libsgm-30-tx2-gpumat-allocate.txt", "error"): (
        "confounder (CUDA arch mismatch, not an OOM): no classifier reports it, so no finding carries it"
    ),
}

# Findings per sample from its own classifier (default 1).
EXPECTED_COUNT = {
    "docker-for-linux-1001-oom-reaper.txt": 4,  # four processes killed and reaped
    "meta-tegra-1613-nvgpu-dma-cma.txt": 2,  # nvgpu DMA failure and a separate CMA failure
    "libsgm-30-tx2-gpumat-allocate.txt": 0,  # confounder
}

# Severity per sample (default "error"): system-wide OOM kills are critical (the host ran out),
# the BFC "not a failure" warning is a warning, NvMap EINVAL is not an OOM.
EXPECTED_SEVERITY = {
    "tf-jetson-nano-bfc-warning.txt": "warning",
    "cadvisor-systemOomExampleLog.txt": "critical",
    "docker-for-linux-1001-oom-reaper.txt": "critical",
    "relate-1383-uid-pgtables.txt": "critical",
    "shoc-38-jetson-tk1.txt": "critical",
    "cupcl-24-nvmapreserveop-22.txt": "warning",
}

# Samples another classifier rightly reports too: {file: {classifier name: findings}}.
CROSS_KIND = {
    # ggml's "cudaMalloc failed: out of memory" after the NvMap error is a CUDA OOM as well.
    "llamacpp-pr23732-nvmap-error-12.txt": {CUDA.name: 1},
}


# ------------------------------------------------------------------------------ corpus tests


@pytest.mark.parametrize("folder", list(OWNER))
def test_manifest_keys_are_all_mapped(folder: str) -> None:
    require_corpus(folder)
    entries = manifest_facts(folder)
    files = {p.name for p in (CORPUS_DIR / folder).glob("*.txt")}
    assert set(entries) == files, "MANIFEST entries and sample files differ"
    for name, pairs in entries.items():
        unknown = {k for k, _ in pairs if k not in CHECKS[folder] and (folder, name, k) not in UNCHECKABLE}
        assert not unknown, f"{name}: manifest keys without a check: {unknown}"


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_corpus_sample(folder: str, name: str) -> None:
    path = require_corpus(folder) / name
    pairs = manifest_facts(folder)[name]
    assert pairs, f"{name} has no facts in the MANIFEST"
    owner = OWNER[folder]
    text = sample_text(path)
    findings = owner.classify(text)

    assert len(findings) == EXPECTED_COUNT.get(name, 1), [f.title for f in findings]
    for f in findings:
        assert f.kind == KINDS[owner.name]
        assert f.severity == EXPECTED_SEVERITY.get(name, "error"), f.title
        assert f.title and "\n" not in f.title
        assert f.excerpt and all(line in text for line in f.excerpt.splitlines())

    checked = 0
    for key, value in pairs:
        if (folder, name, key) in UNCHECKABLE:
            continue
        CHECKS[folder][key](findings, value)
        checked += 1
    assert checked == len(pairs) - sum((folder, name, k) in UNCHECKABLE for k, _ in pairs)

    # The other classifiers stay quiet unless the sample is listed as legitimately both.
    for other in ALL:
        if other is owner:
            continue
        extra = other.classify(text)
        assert len(extra) == CROSS_KIND.get(name, {}).get(other.name, 0), [f.title for f in extra]
        assert all(f.kind == KINDS[other.name] for f in extra)


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_corpus_sample_line_by_line(folder: str, name: str) -> None:
    """Plain log tails deliver one line per event: the key line still yields a finding."""
    path = require_corpus(folder) / name
    owner = OWNER[folder]
    text = sample_text(path)
    block = owner.classify(text)
    per_line = [f for line in text.splitlines() for f in owner.classify(line)]
    assert bool(per_line) == bool(block)
    victims = {f.facts["victim_pid"] for f in block if "victim_pid" in f.facts}
    assert victims <= {f.facts.get("victim_pid") for f in per_line}
    for f in per_line:
        assert f.kind == KINDS[owner.name] and f.severity in SEVERITIES


def test_corpus_fact_coverage() -> None:
    """Every sample of the four folders is exercised and nearly every manifest fact is checked."""
    total = unchecked = 0
    for folder in OWNER:
        require_corpus(folder)
        for name, pairs in manifest_facts(folder).items():
            total += len(pairs)
            unchecked += sum((folder, name, k) in UNCHECKABLE for k, _ in pairs)
    assert len(CASES) >= 56  # 17 + 17 + 17 + 5 samples
    assert unchecked <= 3 and total - unchecked >= 200


# --------------------------------------------------------------------------- no false positives

ORDINARY_LINES = [
    "epoch 3 loss 0.12",
    "Killed process list updated",
    "2024-05-01 12:00:01,123 INFO memory usage 3.2 GiB / 16.0 GiB (20%)",
    "torch.cuda.memory_allocated() = 1.50 GiB, max_split_size_mb not set",
    "Out of memory errors so far: 0",
    "zoom level 3, room temperature 22 C, bloom filter loaded",
    "[    0.016266] Initializing cgroup subsys memory",
    "[  455.521498] Mem-Info:",
    "[12345.678901] CPU: 3 PID: 1234 Comm: python3 Not tainted 5.15.0-91-generic #101-Ubuntu",
    "Tasks state (memory values in pages):",
    "Mar  3 10:00:00 node1 kernel: [  12.5] oom_score_adj for sshd set to -1000",
    "systemd-journald[375]: Under memory pressure, flushing caches.",
    "[   14.366411] init: failsafe main process (491) killed by TERM signal",
    "Killed",
    '            "OOMKilled": false,',
    "memory-demo   1/1     Running     0          24s",
    "  Reason:       Completed",
    "  Exit Code:    137",
    "reason: Error",
    "HashMap resized to 4096 buckets",
    "NvMapMemHandleAlloc: error 0",
    "cma: Reserved 256 MiB at 0x00000000f0000000",
    "nvgpu: 17000000.gpu  gk20a_pm_finalize_poweron:123 [INFO]  GPU powered on",
    "2019-07-21 23:23:06.224853: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1640] Found device 0",
    "CUDA out of memory handling enabled",
    "OpenCV Error: Gpu API call (unknown error) in allocate",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.14",
    "XLA service 0x55d0 initialized for platform CUDA (this does not guarantee that XLA will be used).",
    "oom-killer test suite: 12 passed",
]


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_no_finding_on_ordinary_lines(line: str) -> None:
    for c in ALL:
        assert c.classify(line) == [], c.name


def test_no_finding_on_an_ordinary_block() -> None:
    block = "\n".join(ORDINARY_LINES)
    for c in ALL:
        assert c.classify(block) == [], c.name


# ------------------------------------------------------- synthetic lines from documented formats


def _only(findings: list[Finding], kind: str) -> Finding:
    assert len(findings) == 1, [f.title for f in findings]
    assert findings[0].kind == kind
    return findings[0]


def test_pytorch_title_and_units() -> None:
    f = _only(
        CUDA.classify(
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.78 GiB total "
            "capacity; 12.00 GiB already allocated; 1.00 GiB free; 13.50 GiB reserved in total by PyTorch)"
        ),
        KIND_CUDA_OOM,
    )
    assert f.title == "CUDA OOM on cuda:1: tried to allocate 2.00 GiB (15.78 GiB total, 1.00 GiB free)"
    assert f.facts["requested_bytes"] == 2 * 1024**3
    assert f.facts["reserved_bytes"] == int(13.5 * 1024**3)
    assert f.facts["wording_era"] == "1.5-2.0" and f.severity == "error"


def test_pytorch_chained_traceback_is_one_finding() -> None:
    msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
        "of 8.00 GiB of which 512.00 MiB is free. Process 4242 has 7.00 GiB memory in use. Including "
        "non-PyTorch memory, this process has 7.25 GiB memory in use. Of the allocated memory 6.00 GiB is "
        "allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
    )
    event = f"{msg}\n\nDuring handling of the above exception, another exception occurred:\n\n{msg}"
    f = _only(CUDA.classify(event), KIND_CUDA_OOM)
    assert f.facts["occurrences"] == 2
    assert f.facts["process_in_use_bytes"] == int(7.25 * 1024**3) and f.facts["process_in_use_is_self"]
    assert f.facts["processes_listed"] == 2 and "pid" not in f.facts
    assert f.facts["wording_era"] == ">=2.5"


def test_hip_and_raw_cuda_wordings() -> None:
    hip = _only(
        CUDA.classify(
            "HIP out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 63.98 GiB of which 0 bytes is free."
        ),
        KIND_CUDA_OOM,
    )
    assert hip.facts["backend"] == "hip" and hip.facts["free_bytes"] == 0
    # The other backends of the caching allocator, and a message cut after its first words.
    for line, backend in (
        ("XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.00 GiB total capacity)", "xpu"),
        ("NPU out of memory. Tried to allocate 1.00 GiB (NPU 3; 60.96 GiB total capacity)", "npu"),
        ("MPS backend out of memory (MPS allocated: 8.9 GB, other allocations: 1.2 GB, max allowed: 18.1 GB).", "mps"),
        ("[Bug]: torch.OutOfMemoryError: CUDA out of memory", "cuda"),
    ):
        f = _only(CUDA.classify(line), KIND_CUDA_OOM)
        assert f.facts["framework"] == "pytorch" and f.facts["backend"] == backend, line
    # Documents: a heading, a template's placeholders, prose naming the error.
    for line in (
        "## CUDA out of memory",
        "RuntimeError: CUDA out of memory. Tried to allocate X GiB (GPU 0; total capacity Y GiB; free N MiB)",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {size} MiB",
        "What Is the CUDA Out of Memory Error in PyTorch?",
    ):
        assert CUDA.classify(line) == [], line
    # PyTorch's wordings of a CUDA runtime failure are PyTorch's allocation; the others the raw API's.
    for line, err, framework in (
        ("RuntimeError: CUDA error: out of memory", "cudaErrorMemoryAllocation", "pytorch"),
        ("torch.AcceleratorError: CUDA error: out of memory", "cudaErrorMemoryAllocation", "pytorch"),
        (
            "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCGeneral.cpp:844",
            "cudaErrorMemoryAllocation",
            "pytorch",
        ),
        (
            "THCudaCheck FAIL file=/work/torch/lib/THC/generic/THCStorage.cu line=66 error=2 : out of memory",
            "cudaErrorMemoryAllocation",
            "pytorch",
        ),
        ("CUDA error: out of memory", "cudaErrorMemoryAllocation", "cuda"),
        ("cudaMalloc returned cudaErrorMemoryAllocation (out of memory)", "cudaErrorMemoryAllocation", "cuda"),
        ("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_OUT_OF_MEMORY", "cuda"),
    ):
        f = _only(CUDA.classify(line), KIND_CUDA_OOM)
        assert (
            f.facts["framework"] == framework
            and f.facts["cuda_error"] == err
            and f.facts["cuda_error_code"] == 2
        ), line
    g = _only(
        CUDA.classify(
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1024.00 MiB on device 1: cudaMalloc failed: out of memory"
        ),
        KIND_CUDA_OOM,
    )
    assert (
        g.facts["requested_bytes"] == 1024**3
        and g.facts["device_index"] == 1
        and g.facts["call"] == "cudaMalloc"
    )


def test_tensorflow2_tensor_oom_with_op() -> None:
    f = _only(
        CUDA.classify(
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
            "shape[8,1024,1024] and type half on /job:localhost/replica:0/task:0/device:GPU:1 by allocator "
            "GPU_1_bfc [Op:MatMul]"
        ),
        KIND_CUDA_OOM,
    )
    assert f.facts["exception"] == "tensorflow.python.framework.errors_impl.ResourceExhaustedError"
    assert f.facts["device_index"] == 1 and f.facts["op"] == "MatMul"
    assert f.facts["requested_bytes"] == 8 * 1024 * 1024 * 2


def test_tensorflow_bfc_warning_merges_into_the_tensor_oom() -> None:
    event = (
        "2024-01-02 03:04:05.000001: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator "
        "(GPU_0_bfc) ran out of memory trying to allocate 64.00MiB (rounded to 67108864)requested by op Conv2D\n"
        "2024-01-02 03:04:05.000002: W tensorflow/core/framework/op_kernel.cc:1733] OP_REQUIRES failed: "
        "Resource exhausted: OOM when allocating tensor with shape[16,64,128,128] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
    )
    f = _only(CUDA.classify(event), KIND_CUDA_OOM)
    assert f.facts["bfc_requested_bytes"] == 64 * 1024**2
    assert f.facts["log_lines"] == 2 and f.facts["log_severities"] == "W"
    assert f.ts_ns == 1704164645000002000  # the OOM line's glog time, read as UTC


def test_jax_old_request_wording() -> None:
    f = _only(
        CUDA.classify(
            "RuntimeError: Resource exhausted: Failed to allocate request for 2.00GiB (2147483648B) on device ordinal 0"
        ),
        KIND_CUDA_OOM,
    )
    assert (
        f.facts["framework"] == "jax"
        and f.facts["requested_bytes"] == 2147483648
        and f.facts["device_index"] == 0
    )


def test_cudnn_not_initialized_needs_an_oom_in_the_event() -> None:
    event = (
        "2020-01-01 00:00:00.000001: E tensorflow/stream_executor/cuda/cuda_driver.cc:890] failed to alloc "
        "4294967296 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
        "2020-01-01 00:00:00.000002: E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create "
        "cudnn handle: CUDNN_STATUS_NOT_INITIALIZED"
    )
    f = _only(CUDA.classify(event), KIND_CUDA_OOM)
    assert f.facts["host_pinned_memory"] and f.facts["cudnn_status"] == "CUDNN_STATUS_NOT_INITIALIZED"
    # A handle that could not be created, with no OOM in sight: reported as what it is, a
    # possible OOM, at warning (it is as often a driver/library mismatch).
    for line in (
        "2019-07-21 23:23:06.224853: E tensorflow/stream_executor/cuda/cuda_blas.cc:238] failed to create "
        "cublas handle: CUBLAS_STATUS_NOT_INITIALIZED",
        "Could not create cudnn handle: CUDNN_STATUS_NOT_INITIALIZED",
    ):
        p = _only(CUDA.classify(line), KIND_CUDA_OOM)
        assert p.severity == "warning" and p.facts["oom_cause"] == "possible"
    lone = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED (possibly out of memory)"
    g = _only(CUDA.classify(lone), KIND_CUDA_OOM)
    assert (
        g.facts["library"] == "cudnn" and g.facts["oom_cause"] and g.facts["framework"] == g.facts["caller_framework"] == "pytorch"
    )


def test_global_oom_summary_is_critical() -> None:
    line = (
        "kern  :err   : 2025-03-01T10:00:00,000001+00:00 oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),"
        "cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice/user-1000.slice/session-3.scope,"
        "task=stress,pid=4242,uid=1000"
    )
    f = _only(HOST.classify(line), KIND_HOST_OOM)
    assert f.severity == "critical" and f.facts["oom_scope"] == "system"
    assert f.facts["victim_pid"] == 4242 and f.facts["uid"] == 1000
    assert f.ts_ns == 1740823200000001000


def test_kernel_burst_is_one_finding_per_victim() -> None:
    burst = "\n".join(
        [
            "[100.000001] trainer invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            "[100.000002] CPU: 7 PID: 999 Comm: trainer Not tainted 5.15.0-91-generic #101-Ubuntu",
            "[100.000003] memory: usage 4194304kB, limit 4194304kB, failcnt 17",
            "[100.000004] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
            "oom_memcg=/docker/abc,task_memcg=/docker/abc,task=trainer,pid=999,uid=0",
            "[100.000005] Memory cgroup out of memory: Killed process 999 (trainer) total-vm:8000000kB, "
            "anon-rss:4100000kB, file-rss:1000kB, shmem-rss:0kB, UID:0 pgtables:9000kB oom_score_adj:0",
            "[100.000006] oom_reaper: reaped process 999 (trainer), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
        ]
    )
    f = _only(HOST.classify(burst), KIND_HOST_OOM)
    assert f.severity == "error" and f.facts["oom_scope"] == "memcg"
    assert f.facts["invoker_pid"] == 999 and f.facts["memcg_limit_bytes"] == 4194304 * 1024
    assert f.facts["anon_rss_bytes"] == 4100000 * 1024 and f.facts["reaped"] is True
    assert f.facts["gfp_flags"] == "GFP_KERNEL" and f.facts["kernel_uptime_s"] == 100.000001
    reaper_only = _only(HOST.classify(burst.splitlines()[-1]), KIND_HOST_OOM)
    assert reaper_only.severity == "info"


def test_docker_inspect_and_get_pods_with_namespace() -> None:
    inspect = "\n".join(
        [
            "    {",
            '        "Id": "0123abcd",',
            '        "State": {',
            '            "Status": "exited",',
            '            "OOMKilled": true,',
            '            "Pid": 0,',
            '            "ExitCode": 137,',
            '            "FinishedAt": "2024-02-03T04:05:06.000000007Z"',
            "        },",
            '        "Name": "/trainer",',
            "    }",
        ]
    )
    d = _only(HOST.classify(inspect), KIND_HOST_OOM)
    assert d.facts["docker_oom_killed"] and d.facts["exit_code"] == 137
    assert d.facts["container"] == "trainer" and d.facts["container_id"] == "0123abcd"
    assert d.ts_ns == 1706933106000000007  # Docker's nanosecond FinishedAt, kept exactly
    inline = _only(HOST.classify('{"Status":"exited","OOMKilled":true,"ExitCode":137}'), KIND_HOST_OOM)
    assert inline.facts["exit_code"] == 137
    row = _only(HOST.classify("ml-jobs    trainer-7f9c   0/1     OOMKilled   3 (2m ago)   1h"), KIND_HOST_OOM)
    assert (
        row.facts["namespace"] == "ml-jobs"
        and row.facts["pod"] == "trainer-7f9c"
        and row.facts["restarts"] == 3
    )


def test_describe_names_the_container_and_pod() -> None:
    describe = "\n".join(
        [
            "Name:         trainer-7f9c",
            "Namespace:    ml-jobs",
            "Containers:",
            "  worker:",
            "    State:          Waiting",
            "      Reason:       CrashLoopBackOff",
            "    Last State:     Terminated",
            "      Reason:       OOMKilled",
            "      Exit Code:    137",
            "    Ready:          False",
            "    Restart Count:  5",
        ]
    )
    f = _only(HOST.classify(describe), KIND_HOST_OOM)
    assert f.facts["container"] == "worker" and f.facts["pod"] == "trainer-7f9c"
    assert f.facts["k8s_state"] == "last" and f.facts["restarts"] == 5 and f.facts["exit_code"] == 137


def test_kubelet_system_oom_event() -> None:
    f = _only(
        HOST.classify(
            "Warning  SystemOOM  5m  kubelet  System OOM encountered, victim process: java, pid: 31337"
        ),
        KIND_HOST_OOM,
    )
    assert f.severity == "critical" and f.facts["victim_pid"] == 31337 and f.facts["victim_process"] == "java"


def test_jetson_kernel_nvmap_and_cma_lines() -> None:
    f = _only(
        JETSON.classify(
            "[  812.000001] nvmap_alloc_handle: PID 4242: failed to allocate 1048576 bytes from heap iovmm"
        ),
        KIND_JETSON_MEMORY,
    )
    assert f.facts["pid"] == 4242 and f.facts["requested_bytes"] == 1048576 and f.facts["heap"] == "iovmm"
    cma = "cma: cma_alloc: alloc failed, req-size: 1024 pages, ret: -12"
    # CMA is every board's: a Jetson memory incident only with Jetson context or a known Jetson.
    bare = _only(JETSON.classify(cma), KIND_MEMORY_ALLOC_FAILURE)
    assert bare.severity == "warning" and bare.facts["jetson"] is False
    for g in (
        _only(JetsonMemoryClassifier(device_is_jetson=True).classify(cma), KIND_JETSON_MEMORY),
        _only(JETSON.classify("Linux version 4.9.253-tegra (buildbrain@mobile-u64)\n" + cma), KIND_JETSON_MEMORY),
    ):
        assert (
            g.facts["requested_pages"] == 1024 and g.facts["errno_name"] == "ENOMEM" and "cma_area" not in g.facts
        )
        assert g.facts["jetson"] is True and g.severity == "error"
    h = _only(JETSON.classify("NvMapMemAllocInternalTagged: 1075072515 error 12"), KIND_JETSON_MEMORY)
    assert h.severity == "error" and h.facts["out_of_memory"] is True


# ----------------------------------------------------------------------------------- throughput


def _ordinary_corpus(n: int = 20000) -> list[str]:
    rng = random.Random(11)
    templates = [
        "2024-05-01 12:00:{s:02d},123 INFO [worker-{a}] processed batch {a} in {b} ms loss=0.{a}",
        "May  1 12:00:{s:02d} host systemd[1]: Started Session {a} of user root.",
        "[{a}.{b}] usb 1-1: new high-speed USB device number {a} using xhci_hcd",
        '10.0.0.{a} - - [01/May/2024:12:00:{s:02d} +0000] "GET /api/v1/items/{a} HTTP/1.1" 200 {b}',
        "epoch {a} step {b} train_loss=1.{b} val_acc=0.9{a} throughput={b} samples/s",
        "[{a}.{b}] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
        "RAM 2950/7772MB (lfb 4x2MB) SWAP 0/3886MB CPU [12%@1190,8%@1190] GR3D_FREQ 0% temp {a}C",
    ]
    return [
        rng.choice(templates).format(s=i % 60, a=rng.randint(0, 999), b=rng.randint(0, 99999))
        for i in range(n)
    ]


def test_ordinary_lines_give_no_finding() -> None:
    """The lines of a busy, healthy service give nothing (their speed through the classifiers is a
    benchmark's: benchmarks/bench_classify.py, not a timed test)."""
    lines = _ordinary_corpus()
    assert not [line for line in lines for c in ALL if c.classify(line)]
