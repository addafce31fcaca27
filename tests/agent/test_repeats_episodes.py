"""One fault, one finding across lines that are events of their own (``agent/classify/repeats.py``).

Each line is classified alone, as ``fleetscope scan`` and the agent do for lines no block groups,
and the findings are then merged. The lines are written from the producers' formats (TensorFlow's
stream executor and BFC allocator, XLA's status, libnvrm_mem's NvMap errors, the kernel's warn_alloc
and show_mem); none is copied from the corpus.
"""

from __future__ import annotations

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import Finding
from fleetscope.agent.classify.repeats import merge_repeats
from fleetscope.proto.vocabulary import (
    KIND_CUDA_OOM,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_MEMORY_ALLOC_FAILURE,
)


def _merged(*lines: str) -> list[Finding]:
    return merge_repeats([f for line in lines for f in classify_text(line)])


def _kinds(findings: list[Finding]) -> list[str]:
    return [f.kind for f in findings]


# ------------------------------------------------------------------- Jetson: two layers, two families


def test_nvmap_enomem_and_the_cuda_oom_after_it_are_both_reported() -> None:
    found = _merged(
        "NvMapMemAllocInternalTagged: 1075072516 error 12",
        "NvMapMemHandleAlloc: error 0",
        "RuntimeError: CUDA error: out of memory",
    )
    assert sorted(_kinds(found)) == [KIND_CUDA_OOM, KIND_JETSON_MEMORY]
    (j,) = [f for f in found if f.kind == KIND_JETSON_MEMORY]
    assert j.facts["errno"] == 12 and "reported_as" not in j.facts


def test_two_nvmap_failures_of_one_call_and_errno_stay_one() -> None:
    found = _merged("NvMapMemAllocInternalTagged: 1075072516 error 12", "NvMapMemAllocInternalTagged: 1075072516 error 12")
    assert _kinds(found) == [KIND_JETSON_MEMORY]


# ------------------------------------------------------------- TensorFlow / XLA allocator tries

_SE = "2024-02-03 10:11:{s}: {lvl} tensorflow/stream_executor/cuda/cuda_driver.cc:802] failed to allocate {h} ({b} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
_BFC = ("2024-02-03 10:11:{s}: W tensorflow/core/common_runtime/bfc_allocator.cc:290] Allocator (GPU_{d}_bfc) ran out of "
        "memory trying to allocate {h} with freed_by_count=0. The caller indicates that this is not a failure, but may "
        "mean that there could be performance gains if more memory were available.")


def test_the_stream_executor_backing_off_by_a_tenth_is_one_fault() -> None:
    sizes = [2000000000]
    for _ in range(5):
        sizes.append(int(sizes[-1] * 0.9) // 256 * 256)
    lines = [_SE.format(s=f"{20 + i:02d}.000100", lvl="E", h=f"{b / 2**20:.2f}M", b=b) for i, b in enumerate(sizes)]
    (f,) = _merged(*lines)
    assert f.facts["requested_bytes"] == sizes[0]  # the first try's figure stands
    assert f.facts["occurrences"] == len(sizes)


def test_tries_a_warning_and_the_error_they_end_in_are_one_fault_with_the_errors_figures() -> None:
    found = _merged(
        _SE.format(s="20.000100", lvl="I", h="2.12G", b=2282521344),
        _BFC.format(s="20.000200", d=0, h="2.10GiB"),
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
        "shape[64,512,512] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    )
    (f,) = found
    assert f.facts.get("exception") and f.facts.get("tensor_shape") == "[64,512,512]"


def test_the_not_a_failure_warning_after_an_xla_error_is_that_fault() -> None:
    found = _merged(
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3000000000 bytes.",
        _BFC.format(s="21.000000", d=0, h="2.79GiB").replace("tensorflow/core/common_runtime", "external/xla/xla/tsl/framework"),
    )
    assert len(found) == 1 and found[0].facts["requested_bytes"] == 3000000000


def test_warnings_alone_of_different_sizes_stay_apart() -> None:
    found = _merged(_BFC.format(s="20.000100", d=0, h="45.50MiB"), _BFC.format(s="20.100100", d=0, h="550.00MiB"))
    assert len(found) == 2


def test_tries_on_two_gpus_or_far_apart_are_two_faults() -> None:
    a = _SE.format(s="20.000100", lvl="E", h="1.00G", b=1073741824)
    b = _SE.format(s="20.000200", lvl="E", h="1.00G", b=1073741824)
    # the same wording an hour later: another episode
    later = b.replace("10:11:20", "11:11:20").replace("1.00G (1073741824", "900.00M (943718400")
    assert len(_merged(a, later)) == 2
    error_gpu0 = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
                  "shape[8,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
    found = _merged(error_gpu0, _BFC.format(s="20.000300", d=1, h="1.00GiB"))
    assert [f.facts.get("device_index") for f in found] == [0, 1]  # another GPU's warning: another process's


def test_pytorch_errors_of_different_sizes_are_not_folded_as_tries() -> None:
    found = _merged(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 15.77 GiB",
    )
    assert len(found) == 2


# ----------------------------------------------------------- kernel: warn_alloc and its show_mem


_WARN = "[ 5000.100000] insmod: vmalloc: allocation failure: 4194304 bytes, mode:0xcc0(GFP_KERNEL), nodemask=(null)"
_SHOW_MEM = ["[ 5000.200000] Mem-Info:", "[ 5000.200010] active_anon:1335 inactive_anon:0 isolated_anon:0",
             "[ 5000.200020] 916199 pages RAM", "[ 5000.200030] 0 pages reserved"]


def test_a_show_mem_dump_beside_an_allocation_failure_is_that_failures() -> None:
    found = merge_repeats([f for line in [_WARN, *_SHOW_MEM] for f in classify_text(line)]
                          + [f for f in classify_text("\n".join(_SHOW_MEM))])
    assert _kinds(found) == [KIND_MEMORY_ALLOC_FAILURE]
    assert found[0].facts["show_mem"] is True
    assert found[0].facts["invoker_process"] == "insmod"


def test_a_show_mem_dump_alone_is_still_a_partial_oom_report() -> None:
    found = merge_repeats(classify_text("\n".join(_SHOW_MEM)))
    assert _kinds(found) == [KIND_HOST_OOM]


def test_show_mem_is_not_folded_when_a_kill_is_reported() -> None:
    kill = ("[ 5001.000000] Out of memory: Killed process 4242 (java) total-vm:8000000kB, anon-rss:6000000kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:12000kB oom_score_adj:0")
    found = merge_repeats(classify_text(_WARN) + classify_text("\n".join(_SHOW_MEM)) + classify_text(kill))
    assert KIND_HOST_OOM in _kinds(found) and KIND_MEMORY_ALLOC_FAILURE in _kinds(found)


def test_the_same_allocation_failure_seconds_apart_is_two_faults_within_a_second_one() -> None:
    vmap = "[{t}] vmap allocation for size 36864 failed: use vmalloc=<size> to increase size"
    same_second = _merged(vmap.format(t="100.100000"), vmap.format(t="100.600000"))
    assert len(same_second) == 1
    apart = _merged(vmap.format(t="100.100000"), vmap.format(t="103.400000"), vmap.format(t="106.700000"))
    assert [f.kind for f in apart] == [KIND_MEMORY_ALLOC_FAILURE] * 3
