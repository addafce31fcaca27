"""TensorRtClassifier against the shared corpus (../shared/corpus/tensorrt) and made-up lines.

Every fact the MANIFEST lists for a sample is checked through ``CHECKS`` (manifest key -> how it
maps onto the findings); an unknown key fails the test.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import pytest

from fleetscope.agent.classify._base import KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK, SEVERITIES, Finding
from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.classify.tensorrt import TensorRtClassifier
from tests.corpus import CORPUS_DIR, manifest_facts, require_corpus, sample_text

FOLDER = "tensorrt"
_NAMES = sorted(p.name for p in (CORPUS_DIR / FOLDER).glob("*.txt")) or ["<corpus missing>"]
CLASSIFIER = TensorRtClassifier()
MIB = 1 << 20


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.kind == KIND_TENSORRT_ERROR]


def _bench(findings: list[Finding]) -> Finding:
    benches = [f for f in findings if f.kind == KIND_TRT_BENCHMARK]
    assert len(benches) == 1, f"expected one benchmark finding, got {len(benches)}"
    return benches[0]


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(" | ")] if value.strip() else []


def _of(findings: list[Finding], *categories: str) -> list[Finding]:
    return [f for f in _errors(findings) if f.facts.get("category") in categories]


# ------------------------------------------------------------------------- manifest key checks


def check_device(findings: list[Finding], value: str) -> None:
    assert _bench(findings).facts["device_name"] == value


def check_device_global_memory(findings: list[Finding], value: str) -> None:
    assert _bench(findings).facts["device_memory_bytes"] == parse_size(value)


def check_compute_capability(findings: list[Finding], value: str) -> None:
    assert _bench(findings).facts["compute_capability"] == value


def check_error_codes(findings: list[Finding], value: str) -> None:
    printed = {
        f"Error Code {f.facts['error_code']}: {f.facts['error_category']} ({f.facts['error_detail']})"
        for f in _errors(findings)
        if "error_code" in f.facts
    }
    assert printed == set(_split(value))


def check_requested_gpu_memory_bytes(findings: list[Finding], value: str) -> None:
    got = {f.facts["requested_bytes"] for f in _of(findings, "gpu_memory_allocation_failed")}
    assert got == {int(value)}
    assert all(f.facts["out_of_memory"] is True for f in _of(findings, "gpu_memory_allocation_failed"))


def check_skipped_tactics(findings: list[Finding], value: str) -> None:
    got = [
        f"{f.facts['tactic_index']} size={f.facts['requested_bytes']} id={f.facts['tactic']}"
        for f in _of(findings, "tactic_skipped_insufficient_memory", "tactic_skipped")
    ]
    assert got == _split(value)


def check_severities(findings: list[Finding], value: str) -> None:
    assert {f.facts["severity_tag"] for f in _errors(findings) if "severity_tag" in f.facts} == set(
        _split(value)
    )


def check_tactic_device_request_vs_available_mb(findings: list[Finding], value: str) -> None:
    req, avail = (int(v) for v in value.split("/"))
    tactic = _of(findings, "tactic_device_memory_insufficient")
    assert tactic
    for f in tactic:
        assert f.facts["requested_bytes"] == req * MIB and f.facts["available_bytes"] == avail * MIB


def check_tactic_lines(findings: list[Finding], value: str) -> None:
    assert len(_of(findings, "tactic_device_memory_insufficient")) == int(value)


# The manifest describes the FP16 notice in words; each wording -> the precision_issue fact.
FP16_ISSUES = {
    "Half2 requested on hardware without native FP16": "half2_without_native_fp16",
    "platform does not have FP16 support": "platform_no_fast_native",
}


def check_fp16(findings: list[Finding], value: str) -> None:
    [f] = _of(findings, "fp16_unsupported")
    assert f.facts["precision"] == "fp16" and f.facts["precision_issue"] == FP16_ISSUES[value]


ARCH = {"Assertion failed: Unsupported SM": ("unsupported_sm", "Unsupported SM")}


def check_arch(findings: list[Finding], value: str) -> None:
    category, assertion = ARCH[value]
    [f] = _of(findings, category)
    assert f.facts["assertion"] == assertion and f.severity == "error"


def _stats(prefix: str) -> Callable[[list[Finding], str], None]:
    def check(findings: list[Finding], value: str) -> None:
        facts = _bench(findings).facts
        for item in value.split(","):
            stat, _, number = item.strip().partition("=")
            assert facts[f"{prefix}_{stat}_ms"] == pytest.approx(float(number)), (prefix, stat)

    return check


def _number(fact: str) -> Callable[[list[Finding], str], None]:
    def check(findings: list[Finding], value: str) -> None:
        assert _bench(findings).facts[fact] == pytest.approx(float(value))

    return check


def check_line_prefix(findings: list[Finding], value: str) -> None:
    assert _bench(findings).facts["line_prefix"] == ast.literal_eval(value)


def check_has_header_line(findings: list[Finding], value: str) -> None:
    assert _bench(findings).facts["has_header"] is {"True": True, "False": False}[value]


_MEMUSAGE = re.compile(r"^(?P<stage>.*): now CPU (?P<cpu>\d+) MiB, GPU (?P<gpu>\d+) MiB$")


def check_memusagechange_last(findings: list[Finding], value: str) -> None:
    m = _MEMUSAGE.match(value)
    assert m, value
    errors = _errors(findings)
    assert errors
    for f in errors:  # the last memory state is context for every error of the event
        assert f.facts["memusage_stage"] == m.group("stage")
        assert f.facts["memusage_cpu_now_bytes"] == int(m.group("cpu")) * MIB
        assert f.facts["memusage_gpu_now_bytes"] == int(m.group("gpu")) * MIB


def check_memusagechange_lines(findings: list[Finding], value: str) -> None:
    assert {f.facts["memusage_lines"] for f in _errors(findings)} == {int(value)}


def check_assertion(findings: list[Finding], value: str) -> None:
    [f] = _of(findings, "assertion_failed")
    assert f.facts["assertion"] == value


def check_cuda_error(findings: list[Finding], value: str) -> None:
    [f] = _of(findings, "cuda_error")
    assert f"{f.facts['cuda_call']}: {f.facts['cuda_error_code']} ({f.facts['cuda_error_name']})" == value
    assert f.facts["out_of_memory"] is True


CHECKS: dict[str, Callable[[list[Finding], str], None]] = {
    "device": check_device,
    "device_global_memory": check_device_global_memory,
    "compute_capability": check_compute_capability,
    "error_codes": check_error_codes,
    "requested_gpu_memory_bytes": check_requested_gpu_memory_bytes,
    "skipped_tactics": check_skipped_tactics,
    "severities": check_severities,
    "tactic_device_request_vs_available_mb": check_tactic_device_request_vs_available_mb,
    "tactic_lines": check_tactic_lines,
    "fp16": check_fp16,
    "arch": check_arch,
    "throughput_qps": _number("throughput_qps"),
    "latency_ms": _stats("latency"),
    "enqueue_time_ms": _stats("enqueue_time"),
    "h2d_latency_ms": _stats("h2d_latency"),
    "gpu_compute_time_ms": _stats("gpu_compute"),
    "d2h_latency_ms": _stats("d2h_latency"),
    "total_host_walltime_s": _number("total_host_walltime_s"),
    "total_gpu_compute_time_s": _number("total_gpu_compute_time_s"),
    "line_prefix": check_line_prefix,
    "has_header_line": check_has_header_line,
    "memusagechange_last": check_memusagechange_last,
    "memusagechange_lines": check_memusagechange_lines,
    "assertion": check_assertion,
    "cuda_error": check_cuda_error,
}
# Manifest facts that cannot be checked, with the reason. Every fact is checkable today.
UNCHECKABLE: dict[str, str] = {}
_SUMMARY_KEYS = {"throughput_qps", "latency_ms", "gpu_compute_time_ms"}
_A_SUMMARY = "[I] === Performance summary ===\n[I] Throughput: 100 qps\n[I] Latency: min = 9 ms, max = 11 ms, mean = 10 ms"


def test_manifest_and_folder_agree() -> None:
    require_corpus(FOLDER)
    entries = manifest_facts(FOLDER)
    assert set(entries) == set(_NAMES)
    unknown = {k for pairs in entries.values() for k, _ in pairs} - set(CHECKS) - set(UNCHECKABLE)
    assert not unknown, f"manifest keys with no check: {unknown}"


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_sample(name: str) -> None:
    folder = require_corpus(FOLDER)
    pairs = manifest_facts(FOLDER)[name]
    text = sample_text(folder / name)
    findings = CLASSIFIER.classify(text)
    keys = {k for k, _ in pairs}
    if "device" in keys and not keys & _SUMMARY_KEYS:
        # A device block alone is no benchmark; its facts are read once a summary follows it (the
        # grouper puts the block in front of the summary).
        assert not findings, "a device block alone measured nothing"
        findings = CLASSIFIER.classify(text + "\n" + _A_SUMMARY)
    assert findings
    for key, value in pairs:
        if key not in UNCHECKABLE:
            CHECKS[key](findings, value)
    benches = [f for f in findings if f.kind == KIND_TRT_BENCHMARK]
    if keys & _SUMMARY_KEYS:
        [b] = benches
        assert b.facts["record"] == "performance_summary" and b.facts["summary_complete"] is True
        assert b.severity == "info" and "qps" in b.title
    elif "device" in keys:
        [b] = benches
        assert b.facts["record"] == "performance_summary"
    else:
        assert not benches, "an error log must not produce a benchmark record"
    if "severities" not in keys:  # untagged lines: no severity tag invented
        assert all("severity_tag" not in f.facts for f in findings)
    for f in findings:
        assert f.severity in SEVERITIES and f.title and f.excerpt


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_errors_line_by_line(name: str) -> None:
    """Fed one line at a time, the same error lines are found (the assertion needs its event)."""
    folder = require_corpus(FOLDER)
    text = sample_text(folder / name)
    whole = [
        f.facts["category"]
        for f in _errors(CLASSIFIER.classify(text))
        if f.facts["category"] != "assertion_failed"
    ]
    per_line = [f.facts["category"] for line in text.splitlines() for f in _errors(CLASSIFIER.classify(line))]
    assert per_line == whole


# ------------------------------------------------------------------------------ made-up lines

ORDINARY_LINES = [
    "loaded engine in 3.2 s",
    "[05/01/2024-12:00:00] [I] [TRT] Loaded engine size: 48 MiB",
    "[TensorRT] INFO: Detected 1 inputs and 3 output network tensors.",
    "[05/01/2024-12:00:01] [TRT] [V] Tactic: 0x0000000000000007 Time: 0.0123",
    "[05/01/2024-12:00:02] [TRT] [W] onnx2trt_utils.cpp:374: Your ONNX model has been generated with INT64 weights.",
    "config.set_flag(trt.BuilderFlag.FP16)  # enable FP16 for the detector",
    "INFO building engine for resnet50 with workspace 4096 MiB",
    "epoch 3 step 1200 throughput = 812 img/s latency = 3.1 ms",
    "Throughput: 1200 samples/s over 30 s",
    "=== training summary ===",
    "May  1 12:00:00 host systemd[1]: Started Session 4 of user root.",
    "Assertion `x > 0' failed.",  # an assertion without any TensorRT around it
    "",
]


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_no_finding_on_ordinary_lines(line: str) -> None:
    assert CLASSIFIER.classify(line) == []


@pytest.mark.parametrize(
    ("line", "category", "facts"),
    [
        (
            "[03/04/2024-10:00:00] [TRT] [E] 1: [stdArchiveReader.cpp::StdArchiveReader::42] Error Code 1: Serialization "
            "(Serialization assertion stdVersionRead == serializationVersion failed.Version tag does not match. "
            "Note: Current Version: 236, Serialized Engine Version: 228)",
            "engine_version_mismatch",
            {"serialization_version": 236, "engine_serialization_version": 228, "error_code": 1},
        ),
        (
            "[TensorRT] ERROR: INVALID_CONFIG: The engine plan file is not compatible with this version of TensorRT, "
            "expecting library version 8.6.1.6 got 8.5.3.1, please rebuild.",
            "engine_version_mismatch",
            {"trt_version": "8.6.1.6", "engine_trt_version": "8.5.3.1", "severity_tag": "ERROR"},
        ),
        (
            "[TensorRT] ERROR: INVALID_CONFIG: The engine plan file is generated on an incompatible device, "
            "expecting compute 8.7 got compute 7.2, please rebuild.",
            "engine_device_mismatch",
            {"expected_compute_capability": "8.7", "compute_capability": "7.2"},
        ),
        (
            "[05/01/2024-12:00:00] [TRT] [W] Some tactics do not have sufficient workspace memory to run. Increasing "
            "workspace size will enable more tactics, please check verbose output for requested sizes.",
            "workspace_too_small",
            {"severity_tag": "W"},
        ),
        (
            "[TRT] [E] 10: [optimizer.cpp::computeCosts::3728] Error Code 10: Internal Error (Could not find any "
            "implementation for node /backbone/conv1/Conv, try increasing the workspace size with "
            "IBuilderConfig::setMemoryPoolLimit().)",
            "workspace_too_small",
            {"layer": "/backbone/conv1/Conv", "error_code": 10},
        ),
        (
            "[TRT] [W] Int8 requested, but platform doesn't support fast native int8",
            "int8_unsupported",
            {"precision": "int8"},
        ),
        (
            "[TRT] [W] Platform doesn't support fast native fp16, results may be slow",
            "fp16_unsupported",
            {"precision": "fp16", "precision_issue": "platform_no_fast_native"},
        ),
        (
            "[TRT] [E] Target GPU SM 61 is not supported by this TensorRT release.",
            "unsupported_sm",
            {"sm": "61"},
        ),
        (
            "[TRT] [E] CUDA initialization failure with error: 35. Please check your CUDA installation",
            "cuda_init_failure",
            {"cuda_error_code": 35},
        ),
        (
            "[E] [TRT] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)",
            "out_of_memory",
            {"error_category": "Cuda Runtime", "out_of_memory": True},
        ),
        (
            "[TRT] [E] 9: [pluginV2Builder.cpp::reportPluginError::24] Error Code 9: Internal Error (node_of_nms: "
            "could not find any supported formats consistent with input/output data types)",
            "error_code",
            {"error_code": 9, "error_origin": "pluginV2Builder.cpp::reportPluginError::24"},
        ),
        (
            "[TRT] [E] UNSUPPORTED_STATE: the requested precision is not available for this layer",
            "unsupported_state",
            {},
        ),
        ("[TRT] [E] Parameter check failed at: engine.cpp::setBindingDimensions::1046", "error", {}),
    ],
)
def test_error_categories(line: str, category: str, facts: dict[str, object]) -> None:
    [f] = CLASSIFIER.classify(line)
    assert f.kind == KIND_TENSORRT_ERROR and f.facts["category"] == category
    for k, v in facts.items():
        assert f.facts[k] == v, k


def test_summary_with_device_block_command_line_and_version() -> None:
    # A made-up trtexec run: command line, option blocks, device block, then the summary.
    p = "[06/02/2025-09:15:00] [I] "
    text = "\n".join(
        [
            "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --onnx=det.onnx --fp16 --shapes=images:8x3x640x640",
            p + "=== Build Options ===",
            p + "Precision: FP32+FP16",
            p + "=== Device Information ===",
            p + "Selected Device: NVIDIA Jetson AGX Orin",
            p + "Compute Capability: 8.7",
            p + "SMs: 16",
            p + "Device Global Memory: 62841 MiB",
            p + "Application Compute Clock Rate: 1.3 GHz",
            p + "=== Performance summary ===",
            p + "Throughput: 250.5 qps",
            p
            + "Latency: min = 3.5 ms, max = 4.75 ms, mean = 3.9 ms, median = 3.875 ms, percentile(90%) = 4.1 ms, "
            "percentile(95%) = 4.2 ms, percentile(99%) = 4.5 ms, percentile(99.9%) = 4.7 ms",
            p
            + "GPU Compute Time: min = 3.25 ms, max = 4.5 ms, mean = 3.75 ms, median = 3.7 ms, percentile(99%) = 4.25 ms",
            p + "Total Host Walltime: 3.01 s",
        ]
    )
    [b] = CLASSIFIER.classify(text)
    facts = b.facts
    assert b.kind == KIND_TRT_BENCHMARK and b.severity == "info"
    assert (
        facts["throughput_qps"] == 250.5
        and facts["latency_p99_ms"] == 4.5
        and facts["latency_p99_9_ms"] == 4.7
    )
    assert facts["gpu_compute_mean_ms"] == 3.75 and facts["total_host_walltime_s"] == 3.01
    assert facts["device_name"] == "NVIDIA Jetson AGX Orin" and facts["sm_count"] == 16
    assert facts["device_memory_bytes"] == 62841 * MIB and facts["compute_clock_mhz"] == 1300.0
    assert facts["batch_size"] == 8 and facts["precision"] == "FP32+FP16"
    assert facts["trt_version"] == "10.3.0" and facts["log_time"] == "2025-06-02T09:15:00"
    assert "on NVIDIA Jetson AGX Orin" in b.title


def test_summary_line_by_line_gives_partial_records() -> None:
    line = "[I] Latency: min = 1.5 ms, max = 2.5 ms, mean = 2 ms, median = 2 ms, percentile(99%) = 2.25 ms"
    [b] = CLASSIFIER.classify(line)
    assert b.facts["latency_mean_ms"] == 2.0 and b.facts["summary_complete"] is False
    assert b.facts["line_prefix"] == "[I] "


def _ordinary_corpus(n: int = 20000) -> list[str]:
    import random

    rng = random.Random(11)
    templates = [
        "2024-05-01 12:00:{s:02d},123 INFO [worker-{a}] processed batch {a} in {b} ms loss=0.{a}",
        "May  1 12:00:{s:02d} host systemd[1]: Started Session {a} of user root.",
        "[{a}.{b}] usb 1-1: new high-speed USB device number {a} using xhci_hcd",
        '10.0.0.{a} - - [01/May/2024:12:00:{s:02d} +0000] "GET /api/v1/items/{a} HTTP/1.1" 200 {b}',
        "epoch {a} step {b} train_loss=1.{b} val_acc=0.9{a} throughput={b} samples/s",
        "I0501 12:00:{s:02d}.{b} {a} main.cc:{a}] loaded engine in 3.2 s, warmup {a} iterations",
    ]
    return [
        rng.choice(templates).format(s=i % 60, a=rng.randint(0, 999), b=rng.randint(0, 99999))
        for i in range(n)
    ]


def test_ordinary_lines_stop_at_the_prefilter(monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps this classifier cheap (about 0.3 us an ordinary line; the speed itself is a
    benchmark: benchmarks/bench_classify.py): an ordinary line never reaches the line parsers."""
    from fleetscope.agent.classify import tensorrt

    reached: list[str] = []
    parse = tensorrt._classify
    monkeypatch.setattr(tensorrt, "_classify", lambda text: reached.append(text) or parse(text))
    lines = _ordinary_corpus()
    assert all(CLASSIFIER.classify(line) == [] for line in lines)
    assert reached == [], f"{len(reached)} of {len(lines)} ordinary lines passed the prefilter, e.g. {reached[:3]}"
    assert CLASSIFIER.classify("[TRT] [E] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)")
    assert reached, "a TensorRT line reaches the parsers"
