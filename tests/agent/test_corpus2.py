"""The second corpus batch (../shared/corpus-2): logs the classifiers were not written against.

Every sample is classified as a whole by all the registered classifiers and must give exactly the
findings listed in ``EXPECTED`` (kind and severity, in any order): one finding per fault, and no
Jetson, CUDA or kernel-OOM finding for a negative control. Every fact its MANIFEST lists is then
checked through ``CHECKS`` (how the manifest wording maps onto finding facts); a key without a
check fails the test, so a new manifest fact cannot be silently ignored. The few facts no
finding can carry (a negative control's own details) are in ``UNCHECKABLE`` with why.

The same files go through ``fleetscope scan`` too (the grouper, then the classifiers): it must
find the same kinds, so a report is one event however its lines are spread.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import pytest

from fleetscope.agent.classify import Finding, registry
from fleetscope.agent.classify._base import (
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_TRT_BENCHMARK,
)
from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.tools.scan import scan_file
from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE
from tests.agent import test_oom_corpus as c1
from tests.agent import test_tensorrt_corpus as trt1
from tests.corpus import CORPUS2_DIR, manifest_facts, require_corpus, sample_text

FOLDERS = ("oom-pytorch", "oom-other", "kernel-oom", "jetson-nvmap", "tensorrt")
CASES = [(f, p.name) for f in FOLDERS for p in sorted((CORPUS2_DIR / f).glob("*.txt"))] or [
    ("oom-pytorch", "<corpus-2 missing>")
]
Check = Callable[[list[Finding], str], None]
ABSENT = c1.ABSENT
_match = c1._match

# (kind, severity) of every finding each sample must give, nothing more.
CUDA_ERR = (KIND_CUDA_OOM, "error")
CUDA_WARN = (KIND_CUDA_OOM, "warning")
EXPECTED: dict[str, list[tuple[str, str]]] = {
    # oom-pytorch: fragments, prose around the message, cut titles
    "pt1x-opixray-5-quoted-after-prose.txt": [CUDA_ERR],
    "pt20-dstagnn-4-title-help-prefix-truncated.txt": [CUDA_ERR],
    "pt20-pinokio-31-midline-after-prose-frame.txt": [CUDA_ERR],
    "pt22-mask2dit-4-no-class-process-pid.txt": [CUDA_ERR],
    "pt25-meshgen-7-zero-free-alloc-exceeds-total.txt": [CUDA_ERR],
    "pt25-mtvcrafter-21-nvsmi-fragment-after.txt": [CUDA_ERR],
    # oom-other: one finding per fault however many lines report it
    "cublas-internlm-2462-vscode-exception.txt": [CUDA_WARN],  # NOT_INITIALIZED: a possible OOM
    "jax-alpa-759-ray-prefixed-bufferassignment.txt": [CUDA_ERR],
    "jax-bfc-mlcommons-217-multi-gpu-chunkmap.txt": [CUDA_WARN],  # four replicas, one fault, W lines
    "jax-speedppi-1-bufferassignment-peak-buffer.txt": [CUDA_ERR],
    "tf1-bert-classification-8-defined-at-recv.txt": [CUDA_ERR],
    "tf15-edje-42-coordinator-title-truncated.txt": [CUDA_ERR],
    "tf2-jetson-nano-18-bfc-stats-cut-year.txt": [CUDA_ERR],
    "tf2-sleap-628-bfc-two-warnings-dump-head.txt": [CUDA_WARN],
    # kernel-oom: partial reports are one finding; a page-allocation stall is no OOM kill
    "clickhouse-66869-dmesg-T-tail-task-table.txt": [(KIND_HOST_OOM, "error")],
    "lru-marie-6-zone-swap-rss-table-no-header.txt": [(KIND_HOST_OOM, "error")],
    "omv-2910-rockpro64-arm64-task-rows-polish-month.txt": [(KIND_HOST_OOM, "error")],
    "nixpkgs-435587-pager-truncated-oom-kill.txt": [(KIND_HOST_OOM, "critical")],
    "nixpkgs-27602-jetson-tx1-arm64-alloc-stall.txt": [(KIND_MEMORY_ALLOC_FAILURE, "warning")],
    # jetson-nvmap: negative controls are no Jetson incident; CMA off a Jetson is a generic warning
    "neg-rockchip-youyeetoo-r1-linux-rockchip-241-cma.txt": [(KIND_MEMORY_ALLOC_FAILURE, "warning")],
    "neg-rpi-vc4-anholt-94-cma-drm.txt": [(KIND_MEMORY_ALLOC_FAILURE, "warning")],
    "neg-imx6-gstreamer-imx-29-g2d-phys-alloc.txt": [],
    "tx1-tegra-x1-tf-bfc-ssd-tensorflow-231.txt": [CUDA_WARN],  # a CUDA OOM warning that says Jetson
    "nano-jetson-ffmpeg-119-nvbuf-cannot-allocate-not-oom.txt": [],  # "Cannot allocate memory": not an OOM
    # tensorrt: one summary record each
    "perf-summary-4177-leading-blank-line.txt": [(KIND_TRT_BENCHMARK, "info")],
    "perf-summary-jetson-yolo-4-inline-missing-equals-glued.txt": [(KIND_TRT_BENCHMARK, "info")],
    "perf-summary-trt7-vertical-1310-fp16.txt": [(KIND_TRT_BENCHMARK, "info")],
    "perf-summary-xavier-meta-tegra-952-test-harness.txt": [(KIND_TRT_BENCHMARK, "info")],
}
NEGATIVE = {name for name in EXPECTED if name.startswith("neg-")}
OOM_KINDS = {KIND_CUDA_OOM, KIND_HOST_OOM, KIND_JETSON_MEMORY}


def _absent(*keys: str) -> Check:
    """A manifest "(absent)" / "must not be fabricated": no finding carries any of ``keys``."""

    def check(fs: list[Finding], v: str) -> None:
        assert "absent" in v or "not be fabricated" in v or "cut" in v, v
        for f in fs:
            assert not set(keys) & set(f.facts), (keys, dict(f.facts))

    return check


def _sizes(*keys: str) -> Check:
    """A printed size ("4776kB", "3.89GiB") equals the first of ``keys`` some finding has."""

    def check(fs: list[Finding], v: str) -> None:
        want = parse_size(v.split()[0])
        assert any(f.facts.get(k) == want for f in fs for k in keys), (v, [dict(f.facts) for f in fs])

    return check


def _kb(key: str) -> Check:
    return c1.fact(key, lambda v: int(v) * 1024)


# ------------------------------------------------------------------------------- oom-pytorch


def check_pt_hint(fs: list[Finding], v: str) -> None:
    if v.startswith("(cut"):
        # The hint sentence was cut before it names its setting: no hint is reported.
        _match(fs, {"hint": ABSENT, "hint_setting": ABSENT, "framework": "pytorch"})
    else:
        c1.check_hint(fs, v)


def check_trailing_line(fs: list[Finding], v: str) -> None:
    # The nvidia-smi figure after the message is the board's, not the OOM's total capacity.
    figure = re.search(r"(\d+MiB)", v)
    assert figure
    assert all(f.facts.get("total_capacity_bytes") != parse_size(figure.group(1)) for f in fs)
    assert len(fs) == 1


def check_process_in_use(fs: list[Finding], v: str) -> None:
    if v.startswith("(absent"):
        _absent("process_in_use_bytes", "pid")(fs, v)
    else:
        c1.check_process_in_use(fs, v)


def check_allocated_by_pytorch(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+ \S+)(?: \((> total_capacity), as printed\))?", v)
    assert m, v
    f = _match(fs, {"allocated_bytes": parse_size(m[1])})  # kept as printed, never corrected
    if m[2]:
        # ... and flagged: the figures disagree with each other.
        assert "allocated_bytes>total_capacity_bytes" in str(f.facts["consistency_flags"]).split(",")
    else:
        assert "consistency_flags" not in f.facts


def check_severities(fs: list[Finding], v: str) -> None:
    # The levels the log block printed (this manifest lists them in order of appearance).
    assert any(sorted(str(f.facts.get("log_severities", ""))) == sorted(v) for f in fs), v


PYTORCH_CHECKS: dict[str, Check] = {
    **c1.PYTORCH_CHECKS,
    "allocated_by_pytorch": check_allocated_by_pytorch,
    "hint": check_pt_hint,
    "trailing_non_oom_line": check_trailing_line,
    "process_in_use": check_process_in_use,
}


# --------------------------------------------------------------------------------- oom-other

FRAMEWORKS: dict[str, dict[str, object]] = {
    **c1.OTHER_FRAMEWORKS,
    "TensorFlow (tf.train Coordinator)": {"framework": "tensorflow", "coordinator_line": True},
    "JAX/XLA (BFC allocator)": {"framework": "jax", "allocator_family": "bfc"},
    "JAX/XLA (alpa on Ray)": {"framework": "jax"},
    "PyTorch": {"caller_framework": "pytorch"},
}


def check_framework(fs: list[Finding], v: str) -> None:
    _match(fs, FRAMEWORKS[v])


def check_error(fs: list[Finding], v: str) -> None:
    if v.startswith("ResourceExhaustedError / OOM") or v.startswith("Resource exhausted: OOM"):
        f = _match(fs, {"message": "OOM when allocating tensor"})
        at = re.search(r"OP_REQUIRES failed at (\S+)\)", v)
        if at:
            assert f.facts["op_requires_failed_at"] == at.group(1)
        else:
            assert str(f.facts["exception"]).endswith("ResourceExhaustedError")
    else:
        _match(fs, c1.OTHER_ERRORS[v])


def check_nodes(fs: list[Finding], v: str) -> None:
    names = [re.sub(r"\s*\(.*\)\s*$", "", part) for part in c1._split(v)]
    f = _match(fs, {"nodes": ",".join(names)})
    at = re.search(r"defined at (\S+?)\)", v)
    if at:
        assert f.facts["node_defined_at"] == at.group(1)


def check_incidents(fs: list[Finding], v: str) -> None:
    assert len(fs) == int(v)


def check_device(fs: list[Finding], v: str) -> None:
    if v.startswith("(cut"):
        _absent("tf_device", "device_index")(fs, v)
    else:
        c1.fact("tf_device")(fs, v)


def check_allocator(fs: list[Finding], v: str) -> None:
    if v.startswith("(absent"):
        _absent("allocator")(fs, v)
    else:
        c1.fact("allocator")(fs, v)


def check_allocators(fs: list[Finding], v: str) -> None:
    names = [a.strip() for a in v.split(",")]
    f = _match(fs, {"allocators": ",".join(names)})
    assert f.facts["device_indices"] == ",".join(re.sub(r"\D", "", a) for a in names)


def check_requested(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+) \((\d+) bytes\)(?: on each)?", v)
    if m is None:
        c1.size("requested_bytes")(fs, v)
        return
    # trtexec-style "2.21GiB (2368997376 bytes)": the printed size and the rounded bytes agree.
    f = _match(fs, {"rounded_bytes": int(m[2])})
    assert abs(int(f.facts["requested_bytes"]) - int(m[2])) < 0.01 * int(m[2])


def check_soft_warning(fs: list[Finding], v: str) -> None:
    m = re.match(r"(\S+) with freed_by_count=(\d+)", v)
    assert m, v
    _match(fs, {"soft_warning_bytes": parse_size(m[1]), "freed_by_count": int(m[2])})


def check_failed_request(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\S+) \((\d+) bytes\) requested by op (\S+)", v)
    assert m, v
    _match(fs, {"requested_bytes": parse_size(m[1]), "rounded_bytes": int(m[2]), "op": m[3], "allocation_failed": True})


def check_bins(fs: list[Finding], v: str) -> None:
    bins = [re.fullmatch(r"Bin \((\d+)\): (\d+) chunks, (\d+) in use", b) for b in c1._split(v)]
    assert all(bins), v
    _match(fs, {"bfc_bins": ",".join(f"{b[1]}:{b[2]}/{b[3]}" for b in bins if b)})


BFC_STATS = {
    "Limit": "bfc_limit_bytes",
    "InUse": "bfc_in_use_bytes",
    "MaxInUse": "bfc_max_in_use_bytes",
    "NumAllocs": "bfc_num_allocs",
    "MaxAllocSize": "bfc_max_alloc_size_bytes",
    "Reserved": "bfc_reserved_bytes",
    "PeakReserved": "bfc_peak_reserved_bytes",
    "LargestFreeBlock": "bfc_largest_free_block_bytes",
}


def check_bfc_stats(fs: list[Finding], v: str) -> None:
    want = {BFC_STATS[k]: int(n) for k, n in (item.split() for item in v.split(", "))}
    f = _match(fs, want)
    # The allocator's limit is the capacity the failed request met.
    assert f.facts["total_capacity_bytes"] == want["bfc_limit_bytes"]


def check_peak_buffer(fs: list[Finding], v: str) -> None:
    size, label, shape = v.split()
    _match(fs, {"peak_buffer_1_bytes": parse_size(size), "peak_buffer_1_label": label, "peak_buffer_1_shape": shape})


def check_frames(fs: list[Finding], v: str) -> None:
    _match(fs, {"traceback_frames": int(v)})


def check_exception(fs: list[Finding], v: str) -> None:
    _match(fs, {"exception": v.split()[0]})


def check_python_traceback(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"yes \((\d+) frames, innermost (\S+) in (\w+)\)", v)
    assert m, v
    _match(fs, {"python_traceback": True, "traceback_frames": int(m[1]), "innermost_frame": f"{m[2]} in {m[3]}"})


def check_requested_bytes(fs: list[Finding], v: str) -> None:
    if v.startswith("(absent"):
        _absent("requested_bytes")(fs, v)
    else:
        c1.fact("requested_bytes", int)(fs, v)


OTHER_CHECKS: dict[str, Check] = {
    **c1.OTHER_CHECKS,
    "framework": check_framework,
    "error": check_error,
    "device": check_device,
    "allocator": check_allocator,
    "allocators": check_allocators,
    "nodes": check_nodes,
    "incidents": check_incidents,
    "coordinator_line": c1.fact("coordinator_line", lambda v: v == "yes"),
    "requested": check_requested,
    "chunk_map_lines": c1.fact("chunk_map_lines", int),
    "soft_warning": check_soft_warning,
    "failed_request": check_failed_request,
    "hint": c1.fact("hint"),
    "bins": check_bins,
    "bfc_memory_limit_bytes": c1.fact("bfc_memory_limit_bytes", int),
    "bfc_stats": check_bfc_stats,
    "requested_bytes": check_requested_bytes,
    "preallocated_temp": c1.size("buffer_preallocated_temp_allocation_bytes"),
    "parameter_allocation": c1.size("buffer_parameter_allocation_bytes"),
    "peak_buffer_1": check_peak_buffer,
    "python_traceback": check_python_traceback,
    "worker_prefix": c1.fact("worker_prefix"),
    "exception": check_exception,
    "frames": check_frames,
    "innermost_frame": c1.fact("innermost_frame", lambda v: v.replace(":", ":", 1)),
    "first_ts": c1.fact("log_first_ts", lambda v: v.replace(" (as pasted)", "")),
    "severities": check_severities,
}


# -------------------------------------------------------------------------------- kernel-oom


def check_dump_tasks(fs: list[Finding], v: str) -> None:
    c1.check_dump_tasks(fs, v)
    rows = re.search(r"(\d+) rows", v)
    if rows:
        _match(fs, {"dump_tasks_rows": int(rows.group(1))})
    if "no rss_" in v:
        _match(fs, {"dump_tasks_rss_detail": ABSENT})


def check_rows(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\d+) \(pids (\d+) \.\.\. (\d+); largest rss: (\S+) (\d+) pages\)", v)
    assert m, v
    f = _match(fs, {"dump_tasks_rows": int(m[1]), "largest_rss_process": m[4], "largest_rss_pages": int(m[5])})
    assert m[2] in f.excerpt and m[3] in f.excerpt


def check_cut_summary(fs: list[Finding], v: str) -> None:
    want: dict[str, object] = {"summary_cut": True, "task_memcg": ABSENT}  # the pager cut task_memcg
    for part in c1._split(v, ", "):
        if part == "global_oom":
            want["oom_scope"] = "system"
        elif part.startswith("task_memcg="):
            assert "cut" in part
        elif part == "nodemask=(null)":
            want["nodemask"] = ABSENT
        else:
            k, x = part.split("=", 1)
            want[c1.SUMMARY_KEYS[k][0]] = c1.SUMMARY_KEYS[k][1](x)
    _match(fs, want)


def check_stall(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"page allocation stalls for (\d+)ms, order:(\d+), mode:(0x[0-9a-f]+)", v)
    assert m, v
    _match(fs, {"event": "page_allocation_stall", "stall_ms": int(m[1]), "order": int(m[2]), "gfp_mask": m[3], "gfp_flags": ABSENT})


def check_hardware(fs: list[Finding], v: str) -> None:
    f = _match(fs, {"hardware": v})
    assert f.facts["jetson"] is True  # a Jetson named in the report: said so


def check_mem_info(fs: list[Finding], v: str) -> None:
    _match(fs, {f"meminfo_{k}_pages": int(n) for k, n in (p.split(":") for p in v.split())})


def check_oom_context(fs: list[Finding], v: str) -> None:
    kv = c1._kv_words(v)
    _match(
        fs,
        {
            "invoker_cpu": int(kv["cpu"]),
            "invoker_pid": int(kv["pid"]),
            "invoker_process": kv["comm"],
            "kernel_release": kv["kernel"].split()[0],
        },
    )


def check_killed(fs: list[Finding], v: str) -> None:
    if v.startswith("(absent"):
        _absent("victim_pid", "victim_process")(fs, v)
        assert all(f.kind != KIND_HOST_OOM or f.facts.get("oom_report") == "partial" for f in fs)
    else:
        c1.check_killed(fs, v)


KERNEL_CHECKS: dict[str, Check] = {
    **c1.KERNEL_CHECKS,
    "invoked_oom_killer": _absent("oom_killer_invoked", "invoker_oom_score_adj"),
    "killed": check_killed,
    "header_line": _absent("oom_killer_invoked", "dump_tasks_table"),
    "pages_reserved": c1.fact("pages_reserved", int),
    "pages_hwpoisoned": c1.fact("pages_hwpoisoned", int),
    "pages_ram": c1.fact("pages_ram", int),
    "pages_cma_reserved": c1.fact("pages_cma_reserved", int),
    "total_pagecache_pages": c1.fact("total_pagecache_pages", int),
    "swap_cache_pages": c1.fact("swap_cache_pages", int),
    "total_swap_kb": _kb("total_swap_bytes"),
    "normal_zone_free": _sizes("zone_normal_free_bytes"),
    "dump_tasks_table": check_dump_tasks,
    "dump_tasks_rows": check_rows,
    "first_ts": c1.fact("log_time"),
    "journal_ts": lambda fs, v: _match(fs, {"log_time": v.split(" (")[0]}) and None,
    "host": c1.fact("host"),
    "oom_kill_summary": check_cut_summary,
    "event": check_stall,
    "oom_context": check_oom_context,
    "hardware": check_hardware,
    "mem_info": check_mem_info,
}


# ------------------------------------------------------------------------------ jetson-nvmap


def check_negative(fs: list[Finding], v: str) -> None:
    assert v.startswith("must NOT"), v
    assert not {f.kind for f in fs} & OOM_KINDS, [f.title for f in fs]
    assert all(f.facts.get("jetson") is not True and f.severity in ("warning", "info") for f in fs)


def check_cma_failures(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\d+) x req-size (\d+) pages, ret (-?\d+)", v)
    assert m, v
    _match(fs, {"occurrences": int(m[1]), "requested_pages": int(m[2]), "cma_ret": int(m[3]), "jetson": False})


def check_vc4_sizes(fs: list[Finding], v: str) -> None:
    sizes: list[str] = []
    for size, times in re.findall(r"(\d+) \(x(\d+)\)", v):
        sizes += [size] * int(times)
    f = _match(fs, {"source": "cma"})
    assert sorted(str(f.facts["related_failed_sizes"]).split(",")) == sorted(sizes)


def check_drm_errors(fs: list[Finding], v: str) -> None:
    m = re.search(r"\(x(\d+)\)", v)
    assert m, v
    sizes = len(str(_match(fs, {"source": "cma"}).facts.get("related_failed_sizes", "")).split(","))
    # The driver's own failure lines are the same fault's: counted on the one finding.
    assert _match(fs, {"source": "cma"}).facts["related_failures"] == sizes + int(m[1])


def check_board(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"Jetson (\w+) \((NVIDIA Tegra \w+), compute capability ([\d.]+)\)", v)
    assert m, v
    _match(fs, {"jetson": True, "board": m[2], "compute_capability": m[3]})


def check_not_oom_hint(fs: list[Finding], v: str) -> None:
    assert v.startswith("NOT an OOM"), v
    assert fs == []


JETSON_CHECKS: dict[str, Check] = {
    "negative_control": check_negative,
    "cma_area": c1.fact("cma_area"),
    "req_pages": c1.fact("requested_pages", int),
    "ret": lambda fs, v: _match(fs, {"cma_ret": int(v.split()[0]), "errno_name": "ENOMEM"}) and None,
    "uptime_s": c1.fact("kernel_uptime_s", float),
    "cma_failures": check_cma_failures,
    "vc4_failed_buffer_sizes": check_vc4_sizes,
    "drm_errors": check_drm_errors,
    "board": check_board,
    "total_memory": c1.size("device_total_memory_bytes"),
    "free_memory": c1.size("device_free_memory_bytes"),
    "allocator": c1.fact("allocator"),
    "requested": c1.size("requested_bytes"),
    "severity": c1.check_tf_severity,
    "severities": check_severities,
    "classification_hint": check_not_oom_hint,
}


# ---------------------------------------------------------------------------------- tensorrt


def check_result(fs: list[Finding], v: str) -> None:
    m = re.fullmatch(r"(\w+) \(TensorRT v(\d)(\d)(\d)\d, --batch=(\d+)\)", v)
    assert m, v
    f = trt1._bench(fs)
    assert f.facts["result"] == m[1] and f.facts["batch_size"] == int(m[5])
    assert f.facts["trt_version"] == f"{m[2]}.{m[3]}.{m[4]}"


def check_absent_bench(fact: str) -> Check:
    def check(fs: list[Finding], v: str) -> None:
        assert v.startswith("(absent"), v
        assert fact not in trt1._bench(fs).facts

    return check


TRT_CHECKS: dict[str, Check] = {
    **trt1.CHECKS,
    "throughput_qps": lambda fs, v: (check_absent_bench("throughput_qps") if v.startswith("(") else trt1.CHECKS["throughput_qps"])(fs, v),
    "gpu_compute_cv_percent": trt1._number("gpu_compute_cv_percent"),
    "result": check_result,
}

CHECKS: dict[str, dict[str, Check]] = {
    "oom-pytorch": PYTORCH_CHECKS,
    "oom-other": OTHER_CHECKS,
    "kernel-oom": KERNEL_CHECKS,
    "jetson-nvmap": JETSON_CHECKS,
    "tensorrt": TRT_CHECKS,
}

_NEG = "negative control: no classifier reads this board's own driver output, so no finding carries it"
UNCHECKABLE: dict[tuple[str, str], str] = {
    ("neg-rpi-vc4-anholt-94-cma-drm.txt", "drm_bos"): _NEG + " (vc4's buffer statistics)",
    ("neg-imx6-gstreamer-imx-29-g2d-phys-alloc.txt", "g2d_alloc_fail_bytes"): _NEG,
    ("neg-imx6-gstreamer-imx-29-g2d-phys-alloc.txt", "gst_errors"): _NEG,
    ("neg-imx6-gstreamer-imx-29-g2d-phys-alloc.txt", "reason"): _NEG,
    ("nano-jetson-ffmpeg-119-nvbuf-cannot-allocate-not-oom.txt", "jetson_specific"): (
        "confounder that is no incident: no finding carries its facts"
    ),
    ("nano-jetson-ffmpeg-119-nvbuf-cannot-allocate-not-oom.txt", "messages"): (
        "confounder that is no incident: no finding carries its facts"
    ),
    ("perf-summary-xavier-meta-tegra-952-test-harness.txt", "harness"): (
        "the Yocto test harness's own summary after trtexec's, not trtexec output"
    ),
}


# Manifest values the sample text itself contradicts: checked against the text instead, with why.
MANIFEST_DISAGREES: dict[tuple[str, str], tuple[str, Callable[[str], str]]] = {
    ("tf2-sleap-628-bfc-two-warnings-dump-head.txt", "log_lines"): (
        "the manifest says 9; the sample has 8 lines, all non-blank (grep -c '' says 8)",
        lambda text: str(sum(1 for line in text.splitlines() if line.strip())),
    ),
}

# -------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("folder", FOLDERS)
def test_manifest_keys_are_all_mapped(folder: str) -> None:
    entries = manifest_facts(folder, CORPUS2_DIR)
    assert set(entries) == {p.name for p in (CORPUS2_DIR / folder).glob("*.txt")}
    for name, pairs in entries.items():
        assert name in EXPECTED, f"{name}: no expected findings listed"
        unknown = {k for k, _ in pairs if k not in CHECKS[folder] and (name, k) not in UNCHECKABLE}
        assert not unknown, f"{name}: manifest keys without a check: {unknown}"


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_corpus2_sample(folder: str, name: str) -> None:
    path = require_corpus(folder, CORPUS2_DIR) / name
    text = sample_text(path)
    findings = registry().classify(text)
    got = Counter((f.kind, f.severity) for f in findings)
    assert got == Counter(EXPECTED[name]), [(f.kind, f.severity, f.title) for f in findings]
    for f in findings:
        assert f.title and "\n" not in f.title
        assert f.excerpt and all(line in text for line in f.excerpt.splitlines())
    pairs = manifest_facts(folder, CORPUS2_DIR)[name]
    assert pairs
    for key, value in pairs:
        if (name, key) in MANIFEST_DISAGREES:
            value = MANIFEST_DISAGREES[(name, key)][1](text)
        if (name, key) not in UNCHECKABLE:
            CHECKS[folder][key](findings, value)


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_corpus2_sample_through_scan(folder: str, name: str) -> None:
    """Grouped as ``fleetscope scan`` and the agent group it, the sample gives the same kinds."""
    path = require_corpus(folder, CORPUS2_DIR) / name
    result = scan_file(path)
    assert result.error is None
    kinds = Counter(f.kind for f in result.findings)
    want = Counter(k for k, _ in EXPECTED[name])
    if name == "neg-rpi-vc4-anholt-94-cma-drm.txt":
        # Four CMA failures seconds apart are four kernel lines, each its own event in a scan.
        assert set(kinds) == set(want)
    else:
        assert kinds == want, [(f.line, f.kind, f.title) for f in result.findings]
    if name in NEGATIVE:
        assert not set(kinds) & OOM_KINDS


def test_corpus2_is_all_here() -> None:
    require_corpus("oom-pytorch", CORPUS2_DIR)
    assert len(CASES) == 28 and set(EXPECTED) == {n for _, n in CASES}
    checked = sum(len(p) for f in FOLDERS for p in manifest_facts(f, CORPUS2_DIR).values())
    assert checked - len(UNCHECKABLE) >= 120
