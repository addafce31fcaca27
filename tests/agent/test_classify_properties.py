"""Property tests: each classifier over messages generated from its formats.

The corpus tests check real samples; these check the formats themselves, with what users paste
around them: sizes in every unit, device indices, quoting, prose before and after, elisions
("......"), logger and rank prefixes, and the message cut at either end. Two properties hold for
every classifier:

* a whole message, however wrapped, is found once with the right facts;
* a cut message never reports a wrong value: each fact it reports is the whole message's. (The
  last value of a line's format is the exception nothing can catch: "oom_score_adj:200" cut to
  "oom_score_adj:20" is still a whole-looking line, so cuts are drawn before that value.)

Messages are written from the documented formats; no corpus text is copied here.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_TRT_BENCHMARK,
)
from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.classify.cuda_oom import CudaOomClassifier
from fleetscope.agent.classify.host_oom import HostOomClassifier
from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier
from fleetscope.agent.classify.tensorrt import TensorRtClassifier
from fleetscope.agent.classify.xid import XidClassifier
from fleetscope.agent.tools.scan import iter_events
from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE

CUDA, HOST, JETSON, TRT, XID = (
    CudaOomClassifier(),
    HostOomClassifier(),
    JetsonMemoryClassifier(),
    TensorRtClassifier(),
    XidClassifier(),
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------- strategies

UNITS = ("KiB", "MiB", "GiB")
sizes = st.tuples(st.integers(0, 99999), st.sampled_from(UNITS)).map(lambda t: f"{t[0] / 100:.2f} {t[1]}")
devices = st.integers(0, 15)
# What users put before a pasted message, and after it.
PREFIXES = st.sampled_from(
    ["", "HELP! ", "......", '" ', "[rank3]: ", "ERROR step failed: ", "trainer-1  | ",
     "I keep getting this error when training:\n", "2026-12-03 10:00:00,123 ERROR ", "> "]
)
SUFFIXES = st.sampled_from(["", '"', " -- any idea?", "\n\n(env) C:\\work>", "\nthanks in advance", "."])


def _facts_agree(reported: dict, truth: dict) -> None:
    """Every fact a cut message reports is the whole message's (no cut value, no invented one)."""
    for key, value in truth.items():
        if key in reported:
            assert reported[key] == value, (key, reported[key], value)


# ---------------------------------------------------------------------------- PyTorch OOM


@st.composite
def pytorch_oom(draw: st.DrawFn) -> tuple[str, dict]:
    req, total, free, alloc, reserved = (draw(sizes) for _ in range(5))
    dev = draw(devices)
    exc = draw(st.sampled_from(["", "RuntimeError: ", "torch.cuda.OutOfMemoryError: ", "torch.OutOfMemoryError: "]))
    if draw(st.booleans()):
        msg = (
            f"{exc}CUDA out of memory. Tried to allocate {req} (GPU {dev}; {total} total capacity; "
            f"{alloc} already allocated; {free} free; {reserved} reserved in total by PyTorch)"
        )
        truth = {"reserved_bytes": parse_size(reserved)}
    else:
        msg = (
            f"{exc}CUDA out of memory. Tried to allocate {req}. GPU {dev} has a total capacity of {total} of "
            f"which {free} is free. Of the allocated memory {alloc} is allocated by PyTorch, and {reserved} is "
            "reserved by PyTorch but unallocated."
        )
        truth = {"reserved_unallocated_bytes": parse_size(reserved)}
    truth.update(
        requested_bytes=parse_size(req),
        total_capacity_bytes=parse_size(total),
        free_bytes=parse_size(free),
        allocated_bytes=parse_size(alloc),
        device_index=dev,
    )
    return msg, truth


@SETTINGS
@given(pytorch_oom(), PREFIXES, SUFFIXES)
def test_pytorch_oom_found_with_its_facts_however_wrapped(oom: tuple[str, dict], pre: str, post: str) -> None:
    msg, truth = oom
    findings = CUDA.classify(pre + msg + post)
    assert len(findings) == 1
    assert findings[0].kind == KIND_CUDA_OOM and findings[0].facts["framework"] == "pytorch"
    assert {k: findings[0].facts.get(k) for k in truth} == truth


@SETTINGS
@given(pytorch_oom(), st.data())
def test_pytorch_fragment_from_anywhere_reports_no_cut_value(oom: tuple[str, dict], data: st.DataObject) -> None:
    msg, truth = oom
    start = data.draw(st.integers(0, len(msg) - 1), label="start")
    end = data.draw(st.integers(start + 1, len(msg)), label="end")
    fragment = "......" + msg[start:end]
    for f in CUDA.classify(fragment):
        _facts_agree(dict(f.facts), truth)
    # Pasted from its middle, from "Tried to allocate" on, the message is still found.
    mid = msg[msg.index("Tried to allocate") :]
    found = CUDA.classify(mid)
    assert len(found) == 1 and found[0].facts["requested_bytes"] == truth["requested_bytes"]


# -------------------------------------------------------------------------- TensorFlow OOM

DTYPES = {"float": 4, "half": 2, "float16": 2, "double": 8, "int32": 4, "int64": 8, "bfloat16": 2}


@st.composite
def tf_oom(draw: st.DrawFn) -> tuple[str, dict]:
    shape = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=4))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    dev = draw(devices)
    device = f"/job:localhost/replica:0/task:0/device:GPU:{dev}"
    alloc = f"GPU_{dev}_bfc"
    msg = (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        f"shape[{','.join(map(str, shape))}] and type {dtype} on {device} by allocator {alloc}"
    )
    n = 1
    for d in shape:
        n *= d
    truth = {
        "tensor_shape": "[" + ",".join(map(str, shape)) + "]",
        "dtype": dtype,
        "tf_device": device,
        "device_index": dev,
        "allocator": alloc,
        "requested_bytes": n * DTYPES[dtype],
    }
    return msg, truth


@SETTINGS
@given(tf_oom(), st.data())
def test_tensorflow_oom_cut_at_the_end_reports_no_cut_value(oom: tuple[str, dict], data: st.DataObject) -> None:
    msg, truth = oom
    whole = CUDA.classify(msg)
    assert len(whole) == 1 and {k: whole[0].facts.get(k) for k in truth} == truth
    end = data.draw(st.integers(msg.index("OOM when") + 1, len(msg)), label="end")
    for f in CUDA.classify(msg[:end]):
        _facts_agree(dict(f.facts), truth)


@SETTINGS
@given(tf_oom(), st.sampled_from(["Conv2D", "MatMul", "model/dense_3/BiasAdd"]))
def test_tensorflow_report_lines_are_one_finding(oom: tuple[str, dict], node: str) -> None:
    """The error, its node, the hint and the coordinator's echo: one fault, one finding, in a scan too."""
    msg, truth = oom
    lines = [
        msg,
        f"\t [[{{{{node {node}}}}}]]",
        "Hint: If you want to see a list of allocated tensors when OOM happens, add "
        "report_tensor_allocations_upon_oom to RunOptions for current allocation info.",
        "",
        f"INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework.errors_impl."
        f"ResourceExhaustedError'>, {msg.split(': ', 1)[1]}",
        "step 12 finished",
    ]
    findings = [f for ev in iter_events(lines) for f in classify_text(ev.text)]
    assert len(findings) == 1, [f.title for f in findings]
    f = findings[0]
    assert f.facts["nodes"] == node and f.facts["occurrences"] == 2
    assert {k: f.facts.get(k) for k in truth} == truth


# -------------------------------------------------------------------------- kernel OOM kill

KERNEL_PREFIXES = st.sampled_from(
    ["[ 5864.708440] ", "Jan  5 15:19:27 node7 kernel: ", "maj 06 13:37:44 rock kernel: ",
     "2026-12-03T10:00:00.000001+00:00 node7 kernel: ", "kernel: ", "[Mon Jul 22 17:53:59 2024] ", ""]
)


@st.composite
def killed_line(draw: st.DrawFn) -> tuple[str, str, dict]:
    pid = draw(st.integers(2, 4_000_000))
    name = draw(st.sampled_from(["python3", "nix-env", "java", "Isolated Servic", "(resolved)", "trainer.py"]))
    vm, anon, file_, shmem, pgt = (draw(st.integers(0, 99_999_999)) for _ in range(5))
    uid = draw(st.integers(0, 65535))
    adj = draw(st.integers(-1000, 1000))
    head = (
        f"Out of memory: Killed process {pid} ({name}) total-vm:{vm}kB, anon-rss:{anon}kB, "
        f"file-rss:{file_}kB, shmem-rss:{shmem}kB, UID:{uid} pgtables:{pgt}kB oom_score_adj:"
    )
    truth = {
        "victim_pid": pid,
        "victim_process": name,
        "total_vm_bytes": vm * 1024,
        "anon_rss_bytes": anon * 1024,
        "file_rss_bytes": file_ * 1024,
        "shmem_rss_bytes": shmem * 1024,
        "uid": uid,
        "pgtables_bytes": pgt * 1024,
        "oom_score_adj": adj,
    }
    return head, str(adj), truth


@SETTINGS
@given(killed_line(), KERNEL_PREFIXES, st.data())
def test_kernel_kill_line_whole_and_cut(line: tuple[str, str, dict], prefix: str, data: st.DataObject) -> None:
    head, last, truth = line
    whole = HOST.classify(prefix + head + last)
    assert len(whole) == 1 and whole[0].kind == KIND_HOST_OOM
    assert {k: whole[0].facts.get(k) for k in truth} == truth
    end = data.draw(st.integers(0, len(head)), label="end")  # anywhere before the last value
    for f in HOST.classify(prefix + head[:end]):
        _facts_agree(dict(f.facts), truth)


@SETTINGS
@given(st.lists(st.tuples(st.integers(100, 9_999_999), st.integers(0, 5_000_000)), min_size=2, max_size=12),
       st.booleans(), KERNEL_PREFIXES)
def test_task_table_rows_alone_are_a_partial_report(rows: list, new_columns: bool, prefix: str) -> None:
    """Rows pasted without the header or the kill: one partial report, rows counted, none invented."""
    lines = []
    for pid, rss in rows:
        cols = f"{pid:>7}]  1000 {pid:>7}   {rss + 10:>7} {rss:>7}"
        cols += f" {rss:>7} 0 0" if new_columns else ""
        lines.append(f"{prefix}[{cols}   151552      544             0 proc{pid % 97}")
    findings = HOST.classify("\n".join(lines))
    assert len(findings) == 1
    f = findings[0]
    assert f.facts["oom_report"] == "partial" and f.facts["dump_tasks_rows"] == len(rows)
    assert f.facts["largest_rss_pages"] == max(r for _, r in rows)
    assert "victim_pid" not in f.facts


# ------------------------------------------------------------------------ Jetson memory, CMA

CMA = st.builds(
    lambda area, pages, up: f"[{up:>12.6f}] cma: cma_alloc: {area}alloc failed, req-size: {pages} pages, ret: -12",
    st.sampled_from(["", "cma: ", "reserved: "]),
    st.integers(1, 1 << 20),
    st.floats(0, 1e6, allow_nan=False),
)
JETSON_CONTEXT = st.sampled_from(
    ["Linux version 5.10.120-tegra (buildbrain@mobile-u64-5494-d8000)", "# R35 (release), REVISION: 4.1 (L4T)",
     "[    0.000000] Machine model: NVIDIA Jetson AGX Orin Developer Kit", "nvgpu: 17000000.gpu probed"]
)
OTHER_BOARD = st.sampled_from(
    ["[    0.000000] Machine model: Raspberry Pi 4 Model B Rev 1.4", "rockchip-vop2 fe040000.vop: [drm] bound",
     "imx-ipuv3 2400000.ipu: IPUv3H probed", ""]
)


@SETTINGS
@given(CMA, OTHER_BOARD, JETSON_CONTEXT)
def test_cma_failure_is_jetsons_only_with_jetson_context(line: str, other: str, jetson: str) -> None:
    plain = JETSON.classify(f"{other}\n{line}")
    assert [(f.kind, f.severity) for f in plain] == [(KIND_MEMORY_ALLOC_FAILURE, "warning")]
    assert plain[0].facts["jetson"] is False
    on_jetson = JETSON.classify(f"{jetson}\n{line}")
    assert [(f.kind, f.severity) for f in on_jetson] == [(KIND_JETSON_MEMORY, "error")]
    assert on_jetson[0].facts["requested_pages"] == plain[0].facts["requested_pages"]
    known = JetsonMemoryClassifier(device_is_jetson=True).classify(line)
    assert [f.kind for f in known] == [KIND_JETSON_MEMORY]


@SETTINGS
@given(st.sampled_from(["NvMapMemAllocInternalTagged", "NvMapMemHandleAlloc", "NvMapReserveOp"]),
       st.integers(1, 2**31), st.sampled_from([12, 22, 14]), PREFIXES)
def test_nvmap_errno_is_read_and_only_enomem_is_an_oom(call: str, tag: int, err: int, pre: str) -> None:
    f = JETSON.classify(f"{pre}{call}: {tag} error {err}")
    assert len(f) == 1 and f[0].facts["errno"] == err
    assert f[0].facts["out_of_memory"] is (err == 12)
    assert f[0].severity == ("error" if err == 12 else "warning")


@SETTINGS
@given(pytorch_oom(), JETSON_CONTEXT, OTHER_BOARD)
def test_cuda_oom_says_jetson_only_when_the_text_shows_one(oom: tuple[str, dict], jetson: str, other: str) -> None:
    msg, _ = oom
    [on_jetson] = CUDA.classify(f"{jetson}\n{msg}")
    assert on_jetson.facts["jetson"] is True
    [elsewhere] = CUDA.classify(f"{other}\n{msg}")
    assert "jetson" not in elsewhere.facts


# ------------------------------------------------------------------------- trtexec summary

METRICS = ("Latency", "Enqueue Time", "H2D Latency", "GPU Compute Time", "D2H Latency")
NAMES = {"Latency": "latency", "Enqueue Time": "enqueue_time", "H2D Latency": "h2d_latency",
         "GPU Compute Time": "gpu_compute", "D2H Latency": "d2h_latency"}
positive = st.floats(0.001, 10000, allow_nan=False).map(lambda x: float(f"{x:.6g}"))


@SETTINGS
@given(
    st.sampled_from(["[12/03/2026-10:00:00] [I] ", "", "  ", "[INFO] [12/03/2026-10:00:00] [I] "]),
    st.lists(st.integers(0, 2), min_size=len(METRICS) + 3, max_size=len(METRICS) + 3),
    st.lists(st.lists(positive, min_size=3, max_size=3), min_size=len(METRICS), max_size=len(METRICS)),
    positive,
    positive,
)
def test_trtexec_summary_spaced_with_blank_lines_is_one_record(
    prefix: str, gaps: list[int], stats: list[list[float]], qps: float, wall: float
) -> None:
    lines = [prefix + "=== Performance summary ==="]
    body = [f"Throughput: {qps:g} qps"]
    truth: dict[str, float] = {"throughput_qps": qps, "total_host_walltime_s": wall}
    for metric, values in zip(METRICS, stats):
        lo, mid, hi = sorted(values)
        body.append(f"{metric}: min = {lo:g} ms, max = {hi:g} ms, mean = {mid:g} ms, median = {mid:g} ms, "
                    f"percentile(99%) = {hi:g} ms")
        truth.update({f"{NAMES[metric]}_min_ms": lo, f"{NAMES[metric]}_max_ms": hi, f"{NAMES[metric]}_p99_ms": hi})
    body.append(f"Total Host Walltime: {wall:g} s")
    for gap, line in zip(gaps, body):
        lines += [prefix.rstrip() if prefix.strip() else ""] * gap + [prefix + line]
    lines += ["", "&&&& PASSED TensorRT.trtexec [TensorRT v100300] # trtexec --loadEngine=m.engine"]
    events = list(iter_events(["starting", *lines, "done"]))
    benches = [f for ev in events for f in classify_text(ev.text) if f.kind == KIND_TRT_BENCHMARK]
    assert len(benches) == 1, [ev.text for ev in events]
    facts = benches[0].facts
    assert {k: facts.get(k) for k in truth} == truth  # nothing the summary states is lost
    assert facts["result"] == "PASSED" and "consistency_flags" not in facts


# -------------------------------------------------------------------------------------- Xid


@SETTINGS
@given(st.sampled_from([13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119]),
       st.integers(0, 255), st.integers(1, 4_000_000), KERNEL_PREFIXES, st.sampled_from(["", "see: ", "> "]))
def test_xid_found_with_its_facts_however_prefixed(xid: int, bus: int, pid: int, prefix: str, quote: str) -> None:
    pci = f"0000:{bus:02x}:00"
    line = f"{quote}{prefix}NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name=python3, Ch 00000008"
    findings = [f for f in XID.classify(line) if f.kind == KIND_GPU_XID]
    assert len(findings) == 1
    assert findings[0].facts["xid"] == xid and findings[0].facts["pci_address"] == pci
    assert findings[0].facts["pid"] == pid
