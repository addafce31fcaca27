"""cuda_oom: message formats read from their producers' format strings (synthetic lines only).

Each test writes lines the way the producing software prints them (PyTorch's caching allocator,
TensorFlow's BFC allocator and stream_executor, XLA's statuses, the CUDA/HIP runtimes through glog
CHECKs, MLX, nvidia-drm, RELION, Paddle, CuPy) with made-up figures, and a negative or two: the same
words in prose, or an allocation of host memory, stay silent.
"""

from __future__ import annotations

import pytest

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import KIND_CUDA_OOM, Finding
from fleetscope.agent.classify._units import parse_size
from fleetscope.agent.classify.cuda_oom import CudaOomClassifier

CUDA = CudaOomClassifier()


def _one(text: str) -> Finding:
    found = CUDA.classify(text)
    assert len(found) == 1, [f.title for f in found]
    assert found[0].kind == KIND_CUDA_OOM
    return found[0]


def _none(text: str) -> None:
    assert CUDA.classify(text) == [], [f.title for f in CUDA.classify(text)]


# ------------------------------------------------------------------------------------- PyTorch


def test_npu_parenthesised_device_index() -> None:
    f = _one(
        "RuntimeError: NPU out of memory. Tried to allocate 2.50 GiB (NPU 3; 31.00 GiB total capacity; "
        "20.10 GiB already allocated; 20.10 GiB current active; 9.00 GiB free; 21.00 GiB reserved in total by PyTorch)"
    )
    assert f.facts["device_index"] == 3
    assert f.facts["total_capacity_bytes"] == parse_size("31.00 GiB")
    assert f.facts["free_bytes"] == parse_size("9.00 GiB")


def test_capacity_sentence_on_a_line_of_its_own() -> None:
    # A message split by its author after "Tried to allocate ...": the next sentence alone.
    f = _one("GPU 2 has a total capacity of 23.64 GiB of which 310.25 MiB is free.")
    assert f.facts["framework"] == "pytorch"
    assert f.facts["device_index"] == 2
    assert f.facts["total_capacity_bytes"] == parse_size("23.64 GiB")
    assert f.facts["free_bytes"] == parse_size("310.25 MiB")
    # The registry's gate lets such a line through.
    assert [x.kind for x in classify_text("GPU 2 has a total capacity of 23.64 GiB of which 310.25 MiB is free.")] == [
        KIND_CUDA_OOM
    ]


def test_fragment_keeps_the_figure_before_its_clause() -> None:
    # A terminal hard wrap cut "this process has" mid-word; the next piece starts mid-sentence.
    f = _one(
        "s 11.20 GiB memory in use. Of the allocated memory 10.75 GiB is allocated by PyTorch, and "
        "128.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try s"
    )
    assert f.facts["allocated_bytes"] == parse_size("10.75 GiB")
    assert f.facts["reserved_unallocated_bytes"] == parse_size("128.00 MiB")


def test_capacity_words_in_prose_are_not_a_fragment() -> None:
    _none("The card has a total capacity of 24 GB, which is plenty for this model.")


# ------------------------------------------------------------------------------------ TensorFlow


def test_pre_1_2_bfc_wording_without_allocator_name() -> None:
    line = (
        "W tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc:217] Ran out of memory trying to allocate "
        "96.00MiB.  See logs for memory state"
    )
    f = _one(line)
    assert f.facts["framework"] == "tensorflow"
    assert f.facts["requested_bytes"] == parse_size("96.00MiB")
    assert "allocator" not in f.facts


def test_ran_out_of_memory_elsewhere_is_not_tensorflow() -> None:
    _none("Ran out of memory trying to allocate 4096 bytes for the packet ring; dropping frame")
    _none("ERROR: Ran out of memory trying to allocate an image buffer structure.")


def _bfc_soft(ts: str, size: str) -> str:
    return (
        f"2021-03-04 05:06:{ts}: W tensorflow/core/common_runtime/bfc_allocator.cc:248] Allocator (GPU_1_bfc) ran "
        f"out of memory trying to allocate {size} with freed_by_count=0. The caller indicates that this is not a "
        "failure, but may mean that there could be performance gains if more memory were available."
    )


def test_soft_warnings_of_different_sizes_are_one_finding_each() -> None:
    cut = _bfc_soft("07.300000", "75.00MiB")
    cut = cut[: cut.index("with freed_") + len("with freed_")]  # the paste ends mid-word
    text = "\n".join([_bfc_soft("07.100000", "1.25GiB"), _bfc_soft("07.200000", "600.00MiB"), cut])
    found = CUDA.classify(text)
    assert sorted(f.facts["requested_bytes"] for f in found) == sorted(
        parse_size(s) for s in ("1.25GiB", "600.00MiB", "75.00MiB")
    )
    assert all(f.severity == "warning" and f.facts["allocation_failed"] is False for f in found)
    assert all(f.facts["device_index"] == 1 for f in found)


def test_soft_warnings_of_one_size_are_one_finding() -> None:
    found = CUDA.classify("\n".join([_bfc_soft("07.100000", "1.25GiB"), _bfc_soft("07.200000", "1.25GiB")]))
    assert len(found) == 1 and found[0].facts["occurrences"] == 2


def test_cpu_allocator_tensor_oom_is_host_memory() -> None:
    _none(
        "2022-01-02 03:04:05.000001: W tensorflow/core/framework/op_kernel.cc:1745] OP_REQUIRES failed at "
        "conv_ops.cc:88 : Resource exhausted: OOM when allocating tensor with shape[8,256,256,64] and type float "
        "on /job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu"
    )
    _none(
        "2022-01-02 03:04:05.000002: W tensorflow/core/common_runtime/bfc_allocator.cc:456] Allocator (mklcpu) ran "
        "out of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op Conv2D"
    )
    gpu = _one(
        "Resource exhausted: OOM when allocating tensor with shape[8,256,256,64] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc"
    )
    assert gpu.facts["device_index"] == 1


def test_local_xla_path_is_tensorflow_and_a_cut_stamp_keeps_its_level() -> None:
    f = _one(
        "3:21:09.123456: W external/local_xla/xla/tsl/framework/bfc_allocator.cc:482] Allocator (GPU_0_bfc) ran "
        "out of memory trying to allocate 12.00MiB (rounded to 12582912)requested by op model/dense/MatMul"
    )
    assert f.facts["framework"] == "tensorflow"
    assert f.facts["log_severity"] == "W" and f.severity == "warning"


def test_eigen_allocator_fatal() -> None:
    f = _one(
        ": F tensorflow/core/common_runtime/gpu/gpu_device.cc:104] EigenAllocator for GPU ran out of memory when "
        "allocating 4096. See error logs for more detailed info."
    )
    assert f.facts["framework"] == "tensorflow"
    assert f.facts["requested_bytes"] == 4096
    assert f.severity == "critical"


def test_stream_executor_unified_memory() -> None:
    f = _one(
        "2022-05-06 07:08:09.101112: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:770] "
        "failed to alloc 987654144 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    )
    assert f.facts["requested_bytes"] == 987654144
    assert f.facts["unified_memory"] is True
    assert f.facts["framework"] == "jax"  # jaxlib's build of stream_executor
    g = _one(
        "2019-01-02 03:04:05.060708: E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate "
        "3.00G (3221225472 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    )
    assert g.facts["framework"] == "tensorflow" and g.facts["requested_bytes"] == 3221225472


# ------------------------------------------------------------------------------------- XLA / JAX


def test_xla_status_in_tensorflow_wording() -> None:
    text = "\n".join([
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: 2 root error(s) found.",
        "  (0) Resource exhausted: Out of memory while trying to allocate 123456789 bytes.",
    ])
    f = _one(text)
    assert f.facts["framework"] == "tensorflow"
    assert f.facts["requested_bytes"] == 123456789


def test_xla_status_raised_as_a_plain_runtime_error_is_old_jaxlibs() -> None:
    f = _one("RuntimeError: Resource exhausted: Out of memory while trying to allocate 1048576 bytes.")
    assert f.facts["framework"] == "jax" and f.facts["requested_bytes"] == 1048576


def test_pytest_summary_of_tests_failing_for_device_memory_is_one_fault() -> None:
    text = "\n".join([
        "FAILED tests/api_test.py::APITest::test_vmap_3 - RuntimeError: Resource exhausted: Out of memory while "
        "trying to allocate 64 bytes.",
        "FAILED tests/api_test.py::APITest::test_grad_7 - RuntimeError: Resource exhausted: Out of memory while "
        "trying to allocate 8 bytes.",
        "FAILED tests/api_test.py::APITest::test_jit_1 - RuntimeError: Resource exhausted: Out of memory while "
        "trying to allocate 64 bytes.",
    ])
    f = _one(text)
    assert f.facts["framework"] == "jax" and f.facts["requested_bytes"] == 64 and f.facts["occurrences"] == 3


def test_xla_status_cut_after_its_first_word() -> None:
    f = _one(
        "2020-01-01 00:00:00.000001: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:600] "
        "Execution of replica 0 failed: Resource exhausted: Out"
    )
    assert f.facts["framework"] == "jax"
    assert "requested_bytes" not in f.facts
    _none("RESOURCE_EXHAUSTED: Quota exceeded for quota metric 'Requests' of service compute.googleapis.com")


def test_tpu_reservation_failure() -> None:
    f = _one(
        "E torch_xla/csrc/runtime/xla_util.cc:90] RESOURCE_EXHAUSTED: Attempting to reserve 3.25G at the bottom of "
        "memory. That was not possible. There are 2.50G free, 0B reserved, and 1.75G reservable."
    )
    assert f.facts["requested_bytes"] == parse_size("3.25G")
    assert f.facts["free_bytes"] == parse_size("2.50G")
    assert f.facts["framework"] == "pytorch"


def test_compile_time_memory_space() -> None:
    f = _one(
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
        "memory in memory space hbm. Used 40.10G of 31.25G hbm. Exceeded hbm capacity by 8.85G."
    )
    assert f.facts["framework"] == "jax"
    assert f.facts["total_capacity_bytes"] == parse_size("31.25G")
    assert f.facts["memory_space"] == "hbm" and f.facts["compile_time"] is True
    assert "requested_bytes" not in f.facts


# ------------------------------------------------------------------------------ runtimes, CHECKs


def test_hip_error_names() -> None:
    f = _one("ERROR: HIPError(code hipErrorOutOfMemory, out of memory)")
    assert f.facts["cuda_error"] == "hipErrorOutOfMemory"
    assert f.facts["framework"] == "hip"
    g = _one("\n".join([
        '  File "/opt/venv/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1, in _call_impl',
        "RuntimeError: HIP error: out of memory",
    ]))
    assert g.facts["framework"] == "pytorch"


def test_glog_check_on_a_cuda_call() -> None:
    caffe = _one("F0102 03:04:05.678901 12345 syncedmem.cpp:71] Check failed: error == cudaSuccess (2 vs. 0)  out of memory")
    assert caffe.facts["glog_check"] is True and caffe.facts["cuda_error"] == "cudaErrorMemoryAllocation"
    _one("[10:11:12] src/storage/./pooled_storage_manager.h:157: Check failed: e == cudaSuccess || "
         "e == cudaErrorCudartUnloading CUDA: out of memory")
    _one("[10:11:12] src/storage/./pooled_storage_manager.h:108: cudaMalloc retry failed: out of memory")
    # Another CUDA error through the same CHECK is not an OOM.
    _none("F0102 03:04:05.678901 12345 math_functions.cu:79] Check failed: error == cudaSuccess (9 vs. 0)  "
          "invalid configuration argument")


def test_tensorview_check() -> None:
    _one("RuntimeError: /io/include/tensorview/tensor.h(120) cuda failed with error 2 out of memory. "
         "use CUDA_LAUNCH_BLOCKING=1 to get correct traceback.")


def test_status_names_in_prose_are_silent() -> None:
    _none("CUDA_ERROR_OUT_OF_MEMORY in JAX usually means preallocation took the whole card")
    _none("This patch retries the call when it returns a CUBLAS_STATUS_ALLOC_FAILED.")
    _none("The handler maps a cudaErrorMemoryAllocation to a retry")
    # ... while the log forms of the same names are read.
    _one("numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")
    _one("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")


def test_nvrm_needs_the_driver_prefix() -> None:
    _none("- notes: dmesg showed NVRM `NV_ERR_NO_MEMORY` errors with the old driver, fixed by the upgrade")
    f = _one("[ 812.345678] NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] "
             "(0x00000051) returned from pRmApi->Alloc(pRmApi, hClient, hParent) @ mem_mgr.c:1234")
    assert f.facts["nv_status"] == "NV_ERR_NO_MEMORY"


# -------------------------------------------------------------------------------- other software


def test_mlx_allocator() -> None:
    f = _one("libc++abi: terminating due to uncaught exception of type std::runtime_error: "
             "[malloc_or_wait] Unable to allocate 4194304 bytes.")
    assert f.facts["requested_bytes"] == 4194304
    g = _one("[metal::malloc] Attempting to allocate 40000000000 bytes which is greater than the maximum allowed "
             "buffer size of 17179869184 bytes.")
    assert g.facts["requested_bytes"] == 40000000000 and g.facts["max_buffer_bytes"] == 17179869184
    _none("[malloc] allocated 4194304 bytes for the staging area")


def test_nvidia_drm_gem_allocation() -> None:
    f = _one("[ 101.000001] [drm:nv_drm_gem_alloc_nvkms_memory_ioctl [nvidia_drm]] *ERROR* [nvidia-drm] "
             "[GPU ID 0x00000200] Failed to allocate NVKMS memory for GEM object")
    assert f.severity == "error" and f.facts["drm_gpu_id"] == "0x00000200"
    g = _one("[ 102.000002] [drm] [nvidia-drm] [GPU ID 0x00000200] Failed to allocate NVKMS video memory for GEM "
             "object, trying to fall back to sysmem")
    assert g.severity == "warning" and g.facts["fallback_to_sysmem"] is True


def test_relion_custom_allocator_fields() -> None:
    f = _one("\n".join([
        "ERROR: CudaCustomAllocator out of memory",
        " [requestedSpace:             20971520 B]",
        " [largestContinuousFreeSpace: 10485760 B]",
        " [totalFreeSpace:             15728640 B]",
    ]))
    assert f.facts["requested_bytes"] == 20971520
    assert f.facts["free_bytes"] == 15728640
    assert f.facts["largest_free_block_bytes"] == 10485760
    # A field line split from its head by a paste is still RELION's message.
    assert _one(" [requestedSpace:             20971520 B]").facts["requested_bytes"] == 20971520


@pytest.mark.parametrize(
    ("line", "free"),
    [
        ("Out of memory error on GPU 1. Cannot allocate 512.000000MB memory on GPU 1, available memory is only "
         "100.500000MB.", "100.500000MB"),
        ("Out of memory error on GPU 1. Cannot allocate 512.000000MB memory on GPU 1, available memory is only ", None),
    ],
)
def test_paddle_1_8_wording(line: str, free: str | None) -> None:
    f = _one(line)
    assert f.facts["device_index"] == 1
    assert f.facts["requested_bytes"] == parse_size("512.000000MB")
    assert f.facts.get("free_bytes") == (parse_size(free) if free else None)


def test_cupy_thousands_separators() -> None:
    f = _one("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes "
             "(allocated so far: 2,147,483,648 bytes).")
    assert f.facts["requested_bytes"] == 1073741824
    assert f.facts["allocated_bytes"] == 2147483648


def test_xla_cuda_graph_instantiation() -> None:
    f = _one(
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: CUDA driver ran out of memory trying to instantiate CUDA "
        "graph with 42 nodes and 0 conditionals (total of 3 alive CUDA graphs in the process)."
    )
    assert f.facts["framework"] == "jax" and f.facts["graph_nodes"] == 42


def test_stream_executor_size_in_iec_units() -> None:
    # tsl's HumanReadableNumBytes prints "GiB" where TensorFlow 1.x printed "G".
    f = _one(
        "2024-02-03 04:05:06.070809: W external/xla/xla/stream_executor/cuda/cuda_driver.cc:1540] failed to allocate "
        "10.50GiB (11274289152 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    )
    assert f.facts["requested_bytes"] == 11274289152
    assert f.facts["component"] == "stream_executor"


def test_mps_allocator_figures() -> None:
    f = _one(
        "RuntimeError: MPS backend out of memory (MPS allocated: 9.50 GB, other allocations: 1.25 MB, max allowed: "
        "9.07 GB). Tried to allocate 512.00 MB on private pool."
    )
    assert f.facts["requested_bytes"] == parse_size("512.00 MB")
    assert f.facts["allocated_bytes"] == parse_size("9.50 GB")
    assert f.facts["max_allowed_bytes"] == parse_size("9.07 GB")
    assert "total_capacity_bytes" not in f.facts


# ---------------------------------------------------------------- more runtimes and libraries


@pytest.mark.parametrize(
    "line",
    [
        "CUDA Error: out of memory",  # Darknet's check_error
        "CUDA error: Out of memory in cuMemAlloc_v2(&device_pointer, size), line 512",  # Blender's cuew check
        "GPUassert: out of memory solver.cu 88",  # the common gpuErrchk macro
        "node7:1234:1290 [3] misc/utils.cc:120 NCCL WARN Cuda failure 'out of memory'",
    ],
)
def test_cuda_error_string_after_a_callers_prefix(line: str) -> None:
    assert _one(line).facts["cuda_error"] == "cudaErrorMemoryAllocation"


def test_context_creation_reports_the_total() -> None:
    f = _one(
        "2018-07-08 09:10:11.121314: E tensorflow/core/common_runtime/direct_session.cc:158] Internal: failed "
        "initializing StreamExecutor for CUDA device ordinal 2: Internal: failed call to cuDevicePrimaryCtxRetain: "
        "CUDA_ERROR_OUT_OF_MEMORY: out of memory; total memory reported: 8513978368"
    )
    assert f.facts["total_capacity_bytes"] == 8513978368
    assert f.facts["device_index"] == 2
    assert f.facts["framework"] == "tensorflow"


def test_pinned_host_allocations() -> None:
    tf = _one("2019-03-04 05:06:07.080910: E tensorflow/core/common_runtime/gpu/gpu_host_allocator.h:44] could not "
              "allocate pinned host memory of size: 4294967296")
    assert tf.facts["requested_bytes"] == 4294967296 and tf.facts["host_pinned_memory"] is True
    gg = _one("ggml_cuda_host_malloc: failed to allocate 1024.00 MiB of pinned memory: out of memory")
    assert gg.facts["requested_bytes"] == parse_size("1024.00 MiB")


def test_ggml_buffer_line_echoes_the_cuda_failure() -> None:
    # The CUDA backend's buffer line echoes its "cudaMalloc failed" line: only that one is the fault.
    found = CUDA.classify("\n".join([
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: cudaMalloc failed: out of memory",
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2147483648",
    ]))
    assert len(found) == 1 and found[0].facts["call"] == "cudaMalloc"


def test_cuda_jl_out_of_gpu_memory() -> None:
    f = _one("\n".join([
        "ERROR: Out of GPU memory trying to allocate 2.500 GiB",
        "Effective GPU memory usage: 98.10% (11.620 GiB/11.845 GiB)",
        "Memory pool usage: 9.000 GiB (9.500 GiB reserved)",
    ]))
    assert f.facts["requested_bytes"] == parse_size("2.500 GiB")
    assert f.facts["total_capacity_bytes"] == parse_size("11.845 GiB")


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "CUFFT_ALLOC_FAILED"),
        ("RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
         "CUSOLVER_STATUS_ALLOC_FAILED"),
        ("curandCreateGenerator failed: CURAND_STATUS_ALLOCATION_FAILED", "CURAND_STATUS_ALLOCATION_FAILED"),
    ],
)
def test_math_library_allocation_statuses(line: str, status: str) -> None:
    f = _one(line)
    assert f.facts["status"] == status and f.severity == "error"


def test_capacity_sentence_about_hardware_is_not_pytorch() -> None:
    _none("On this cluster GPU 0 has a total capacity of 80 GB and GPU 1 has a total capacity of 40 GB.")


def test_mindspore_device_memory() -> None:
    f = _one("[ERROR] RUNTIME_FRAMEWORK(12345,7f0000000000,python):2024-01-02-03:04:05.678.901 [mindspore/ccsrc/runtime/"
             "graph_scheduler/actor/kernel_actor.cc:300] Device(id:1) memory isn't enough and alloc failed, kernel "
             "name: Default/network/Conv2D-op12, alloc size: 268435456B.")
    assert f.facts["device_index"] == 1 and f.facts["requested_bytes"] == 268435456
    _none("Memory isn't enough and alloc failed, kernel name: Default/Add-op3, alloc size: 1024B.")  # the CPU's


def test_opencv_cuda_module() -> None:
    _one("cv2.error: OpenCV(4.8.0) /io/opencv/modules/core/src/cuda/gpu_mat.cu:116: error: (-217:Gpu API call) "
         "out of memory in function 'allocate'")


def test_opencv_cuda_module_names_the_call_and_two_calls_are_two_faults() -> None:
    f = _one("cv2.error: OpenCV(4.5.1) /src/opencv/modules/core/src/cuda_stream.cpp:42: error: (-217:Gpu API call) "
             "out of memory in function 'createStream'")
    assert f.facts["call"] == "createStream"
    found = classify_text(
        "modules/core/src/cuda_stream.cpp:42: error: (-217:Gpu API call) out of memory in function 'createStream'\n"
        "modules/core/src/gpu_mat.cu:116: error: (-217:Gpu API call) out of memory in function 'allocate'\n"
    )
    assert sorted(x.facts.get("call") for x in found if x.kind == KIND_CUDA_OOM) == ["allocate", "createStream"]


def test_opencv_2_cuda_error_and_caffe2_enforce() -> None:
    f = _one("OpenCV Error: Gpu API call (out of memory) in CudaFuncTable::mallocArray, file /tmp/dynamicuda.hpp, line 99")
    assert f.facts["call"] == "CudaFuncTable::mallocArray"
    g = _one("RuntimeError: [enforce fail at context_gpu.cu:77] err == cudaSuccess. 2 vs 0. Error at: "
             "/src/caffe2/core/context_gpu.cu:77: out of memory")
    assert g.facts["cuda_error_code"] == 2
    _none("[enforce fail at context_gpu.cu:77] err == cudaSuccess. 1 vs 0. Error at: /src/x.cu:77: invalid argument")


def test_pytorch_sentence_cut_before_its_capacity_keeps_the_gpu() -> None:
    f = _one("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 6 has a total capa")
    assert f.facts["device_index"] == 6 and f.facts["requested_bytes"] == parse_size("3.50 GiB")
    assert "total_capacity_bytes" not in f.facts


def test_pytorch_fraction_limit_is_kept() -> None:
    f = _one("RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 15.90 GiB total capacity; "
             "3.10 GiB already allocated; 11.50 GiB free; 4.00 GiB allowed; 3.20 GiB reserved in total by PyTorch)")
    assert f.facts["max_allowed_bytes"] == parse_size("4.00 GiB")
    assert f.facts["free_bytes"] == parse_size("11.50 GiB")


def test_tpu_program_load_failure() -> None:
    f = _one("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Error loading program: Attempting to "
             "allocate 2.10G. That was not possible. There are 1.45G free.; (0x0x0_HBM0)")
    assert f.facts["requested_bytes"] == parse_size("2.10G") and f.facts["free_bytes"] == parse_size("1.45G")
    _none("Attempting to allocate 2.10G. That was not possible.")  # no status: not read alone


def test_ctranslate2_and_ggml_cuda_checks() -> None:
    # CTranslate2 (faster-whisper): THROW_RUNTIME_ERROR("CUDA failed with error " + cudaGetErrorString(status)).
    f = _one("RuntimeError: CUDA failed with error out of memory")
    assert f.facts["cuda_error_code"] == 2
    # ggml's CUDA_CHECK: "CUDA error %d at %s:%d: %s".
    g = _one("CUDA error 2 at ggml-cuda.cu:359: out of memory")
    assert g.facts["cuda_error_code"] == 2
    _none("CUDA error 700 at ggml-cuda.cu:359: an illegal memory access was encountered")


def test_tensorflows_stream_executor_on_rocm() -> None:
    f = _one("2023-11-01 16:19:17.812101: E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606] failed to "
             "allocate 127.99TiB (140729850295296 bytes) from device: HIP_ERROR_OutOfMemory")
    assert (f.facts["framework"], f.facts["requested_bytes"], f.facts["platform"]) == ("tensorflow", 140729850295296, "rocm")
    old = _one("mnist.py: failed to allocate 8.00G from device: hipError_t(1002)")  # the size alone, no byte count
    assert old.facts["requested_bytes"] == 8 * 1024**3 and old.facts["cuda_error"] == "hipError_t(1002)"
    _none("failed to allocate 8.00G from device: hipError_t(1001)")


def test_onnx_runtimes_arena_failure_whole_or_cut_inside_its_message() -> None:
    head = ("/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal("
            "size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) ")
    whole = _one(head + "Failed to allocate memory for requested buffer of size 939524096")
    assert (whole.facts["framework"], whole.facts["requested_bytes"]) == ("onnxruntime", 939524096)
    cut = _one("# " + head + "Failed to alloc")
    assert cut.facts["framework"] == "onnxruntime" and "requested_bytes" not in cut.facts
    _none("I1 BFCArena::AllocateRawInternal] Extending BFCArena for Cuda. bin_num:20 num_bytes: 564000000")


# ------------------------------------------------------------------- math libraries' callers


def test_a_math_librarys_status_names_the_framework_that_called_it() -> None:
    # TensorFlow's stream executor: cuda_blas.cc LOG(ERROR) << "failed to create cublas handle: " << ToString(ret),
    # cuda_dnn.cc LOG(ERROR) << "Could not create cudnn handle: " << ...; glog's path says whose build printed it,
    # a Windows build's with backslashes.
    for line, lib in (
        ("2021-03-04 05:06:07.123456: E tensorflow/stream_executor/cuda/cuda_blas.cc:226] "
         "failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED", "cublas"),
        ("E c:\\users\\ci\\src\\tensorflow\\stream_executor\\cuda\\cuda_dnn.cc:329] "
         "Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED", "cudnn"),
    ):
        f = _one(line)
        assert (f.facts["framework"], f.facts["library"]) == ("tensorflow", lib), line
    # PyTorch's TORCH_CUDABLAS_CHECK: "CUDA error: ", _cublasGetErrorEnum(err), " when calling `" #EXPR "`"
    f = _one("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert (f.facts["framework"], f.facts["library"], f.facts["call"]) == ("pytorch", "cublas", "cublasCreate(handle)")
    # No caller shown: the library alone.
    f = _one("cublas returned CUBLAS_STATUS_ALLOC_FAILED")
    assert f.facts["framework"] == f.facts["library"] == "cublas"


def test_a_cublas_and_a_cudnn_failure_of_one_run_are_two_faults() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    lines = [
        "E tensorflow/stream_executor/cuda/cuda_blas.cc:510] failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED",
        "E tensorflow/stream_executor/cuda/cuda_blas.cc:510] failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED",
        "E tensorflow/stream_executor/cuda/cuda_dnn.cc:334] Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
    ]
    merged = merge_repeats([f for line in lines for f in classify_text(line)])
    assert [(f.facts["library"], f.facts.get("occurrences", 1)) for f in merged] == [("cublas", 2), ("cudnn", 1)]


def test_two_pytorch_ooms_of_one_size_with_different_allocated_figures_are_two_faults() -> None:
    # c10/cuda/CUDACachingAllocator.cpp (2.1+): "CUDA out of memory. Tried to allocate %s. GPU %d has a total
    # capacity of %s of which %s is free. %sOf the allocated memory %s is allocated by PyTorch, and %s is reserved
    # by PyTorch but unallocated." The figures are the allocator's state when it failed: the same message again
    # (its exception relayed, a summary) is one fault, other figures another failure.
    from fleetscope.agent.classify.repeats import merge_repeats

    def msg(allocated: str) -> str:
        return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 MiB. GPU 0 has a total capacity "
                f"of 4.00 GiB of which 0 bytes is free. Of the allocated memory {allocated} is allocated by PyTorch, "
                f"and 65.23 MiB is reserved by PyTorch but unallocated.")

    found = [f for text in (msg("3.41 GiB"), msg("3.41 GiB"), msg("6.97 GiB")) for f in classify_text(text)]
    merged = merge_repeats(found)
    assert [(f.facts["allocated_bytes"], f.facts.get("occurrences", 1)) for f in merged] == [
        (parse_size("3.41 GiB"), 2), (parse_size("6.97 GiB"), 1)]


def test_any_callers_cuda_check_ending_in_the_runtimes_out_of_memory_string() -> None:
    # cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory"; callers print it after their own prefix:
    # ethminer's CUDA_SAFE_CALL ("CUDA error in func '" __FUNCTION__ "' at line " __LINE__ " : " ...), Paddle 1.x's
    # glog CHECK (PADDLE_ENFORCE on cudaStat: "Check failed: cudaSuccess == cudaStat (0 vs. 2) Cuda Error: ..."),
    # a project's own "[cuda] kernel launch failed = out of memory". A whole line quoted in backticks too.
    for line in (
        "CUDA error in func 'search' at line 388 : out of memory.",
        "`CUDA error in func 'search' at line 388 : out of memory.`",
        "F0101 10:11:12.000000 777 gpu_info.cc:90] Check failed: cudaSuccess == cudaStat (0 vs. 2) Cuda Error: out of memory",
        "[cuda] kernel launch failed = out of memory",
    ):
        f = _one(line)
        assert (f.facts["cuda_error"], f.facts["framework"]) == ("cudaErrorMemoryAllocation", "cuda"), line
    # The driver's status keeps its own reading (TensorFlow's stream executor through its glog path).
    f = _one("E tensorflow/stream_executor/cuda/cuda_driver.cc:936] failed to allocate 3.5G (3758096384 bytes) from "
             "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    assert f.facts["cuda_error"] == "CUDA_ERROR_OUT_OF_MEMORY" and f.facts["framework"] == "tensorflow"
    # A sentence without the caller's "<prefix>: out of memory" shape, and c10's wording retyped without its space.
    _none("My cuda training failed because it ran out of memory")
    _none("what leads to RuntimeError: CUDA error:out of memory")


def test_xlas_buffer_assignment_listing_read_apart_is_its_status_messages_fault(tmp_path) -> None:
    # xla/service/buffer_assignment.cc BufferAssignment::ToVerboseString: "BufferAssignment OOM Debugging.\n" then
    # the stats and "Peak buffers:", appended to the status "RESOURCE_EXHAUSTED: Out of memory while trying to
    # allocate N bytes." (one message over lines): one fault, with the status's size and the listing's figures.
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "run.log"
    p.write_text(
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1048576000 bytes.\n"
        "BufferAssignment OOM Debugging.\n"
        "BufferAssignment stats:\n"
        "             parameter allocation:   12.00MiB\n"
        "              constant allocation:         0B\n"
        "        maybe_live_out allocation:  100.00MiB\n"
        "     preallocated temp allocation: 1000.00MiB\n"
        "                 total allocation:    1.09GiB\n"
        "Peak buffers:\n"
        "\tBuffer 1:\n"
        "\t\tSize: 500.00MiB\n"
    )
    (f,) = [x for x in scan_file(p).findings if x.kind == KIND_CUDA_OOM]
    assert (f.facts["framework"], f.facts["requested_bytes"]) == ("jax", 1048576000)
    assert f.facts["buffer_preallocated_temp_allocation_bytes"] == parse_size("1000.00MiB")


def test_ggmls_cuda_error_report_names_its_device(tmp_path) -> None:
    # ggml-cuda.cu CUDA_CHECK (2023): fprintf(stderr, "\nCUDA error %d at %s:%d: %s\n", ...) then
    # fprintf(stderr, "current device: %d\n", id); ggml_cuda_error() since 2024: "CUDA error: %s", then
    # "  current device: %d, in function %s at %s:%d" and "  %s" (the statement). The device line is the report's.
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "server.log"
    p.write_text(
        "llm_load_tensors: offloaded 33/33 layers to GPU\n"
        "\n"
        "CUDA error 2 at /src/llama.cpp/ggml-cuda.cu:7700: out of memory\n"
        "current device: 1\n"
        "GGML_ASSERT: /src/llama.cpp/ggml-cuda.cu:7700: !\"CUDA error\"\n"
    )
    (f,) = [x for x in scan_file(p).findings if x.kind == KIND_CUDA_OOM]
    assert f.facts["device_index"] == 1
    p.write_text(
        "ROCm error: out of memory\n"
        "  current device: 0, in function ggml_backend_cuda_buffer_type_alloc_buffer at ggml-cuda.cu:480\n"
        "  hipMalloc(&dev_ptr, size)\n"
        "ROCm error\n"
    )
    (f,) = [x for x in scan_file(p).findings if x.kind == KIND_CUDA_OOM]
    assert f.facts["device_index"] == 0


# ------------------------------------------- PyTorch: "Allocation on device" (the allowed-memory limit)


def test_allocation_on_device_limit_message_gives_device_and_its_fields() -> None:
    # c10/cuda/CUDACachingAllocator.cpp's message past the per-process memory fraction, a field a line.
    f = _one(
        "torch.OutOfMemoryError: Allocation on device 1 would exceed allowed memory. (out of memory)\n"
        "Currently allocated     : 5.25 GiB\n"
        "Requested               : 768.00 MiB\n"
        "Device limit            : 15.00 GiB\n"
        "Free (according to CUDA): 9.10 GiB\n"
        "PyTorch limit (set by user-supplied memory fraction)\n"
        "                        : 6.00 GiB"
    )
    assert f.facts["framework"] == "pytorch" and f.facts["device_index"] == 1
    assert f.facts["requested_bytes"] == parse_size("768.00 MiB")
    assert f.facts["allocated_bytes"] == parse_size("5.25 GiB")
    assert f.facts["free_bytes"] == parse_size("9.10 GiB")
    # "Device limit" is the device's total; the fraction's limit is the value under "PyTorch limit".
    assert f.facts["total_capacity_bytes"] == parse_size("15.00 GiB")
    assert f.facts["max_allowed_bytes"] == parse_size("6.00 GiB")


def test_allocation_on_device_relayed_with_escaped_newlines_keeps_its_fields() -> None:
    f = _one(
        "Error: Warmup(Generation(\"Allocation on device 2 would exceed allowed memory. (out of memory)\\nCurrently "
        "allocated     : 9.50 GiB\\nRequested               : 1.25 GiB\\nDevice limit            : 11.00 GiB\\nFree "
        "(according to CUDA): 64.00 MiB\\nPyTorch limit (set by user-supplied memory fraction)\\n                       "
        " : 10.50 GiB\"))"
    )
    assert f.facts["device_index"] == 2 and f.facts["requested_bytes"] == parse_size("1.25 GiB")
    assert f.facts["allocated_bytes"] == parse_size("9.50 GiB") and f.facts["free_bytes"] == parse_size("64.00 MiB")
    assert f.facts["total_capacity_bytes"] == parse_size("11.00 GiB")
    assert f.facts["max_allowed_bytes"] == parse_size("10.50 GiB")


def test_the_of_the_allocated_memory_sentence_cut_early_still_gives_the_allocated_figure() -> None:
    f = _one(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacty of "
        "23.69 GiB of which 5.06 MiB is free. Of the allocated memory 21.88 GiB is al"
    )
    assert f.facts["allocated_bytes"] == parse_size("21.88 GiB") and f.facts["device_index"] == 1


def test_allocation_on_device_cut_to_its_first_words_is_still_a_pytorch_oom() -> None:
    # A front-end showing the exception cut after its first words: no device, no sizes are printed.
    for exc in ("torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"):
        f = _one(f"{exc}: Allocation on device \nGot an OOM, unloading all loaded models.")
        assert f.facts["framework"] == "pytorch"
        assert "device_index" not in f.facts and "requested_bytes" not in f.facts


def test_allocation_on_device_in_code_or_prose_is_not_a_failure() -> None:
    _none('if "Allocation on device" in str(e) or "out of memory" in str(e).lower():')
    _none("Allocation on device memory is faster than on the host.")


# ------------------------------------------- TensorFlow's BFC chunk list, ONNX Runtime's arena sentence alone


@pytest.mark.parametrize("chunk", [
    "InUse at 00000007A1B2C300 next 811 of size 1048576",  # TF 1.x: next before size, upper-case address
    "InUse at 7f3a20000400 of size 4096 next 77",  # TF 2.x
])
def test_a_bfc_dumps_chunk_list_alone_is_the_allocators_failure(chunk: str) -> None:
    text = "\n".join(
        f"2021-03-04 05:06:{7 + n:02d}.100000: I tensorflow/core/common_runtime/bfc_allocator.cc:1046] {line}"
        for n, line in enumerate((chunk, "Free  at 7f3a20001400 of size 2048 next 78", chunk))
    )
    f = _one(text)
    assert f.facts["framework"] == "tensorflow"
    assert f.facts["chunk_list_lines"] == 3
    assert "requested_bytes" not in f.facts  # the failing request is not among these lines
    # The scan's gate lets a chunk line through.
    assert [x.kind for x in classify_text(text)] == [KIND_CUDA_OOM]


def test_a_chunk_line_not_logged_by_the_bfc_allocator_is_nothing() -> None:
    _none("InUse at 7f3a20000400 of size 4096 next 77")


def test_onnxruntime_arena_sentence_wrapped_onto_its_own_line_keeps_the_size() -> None:
    f = _one("Failed to allocate memory for requested buffer of size 50331648")
    assert f.facts["framework"] == "onnxruntime"
    assert f.facts["requested_bytes"] == 50331648


def test_xlas_memory_space_check_quoted_without_its_status_is_read() -> None:
    f = _one('Flax training on a TPU fails: "Ran out of memory in memory space hbm." after the first step')
    assert f.facts["memory_space"] == "hbm"
    assert "status" not in f.facts  # RESOURCE_EXHAUSTED is not printed here
    assert "total_capacity_bytes" not in f.facts


def test_a_runtime_oom_relayed_without_a_framework_is_the_frameworks_same_fault(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "relay.log"
    p.write_text(
        "RuntimeError: CUDA error: out of memory\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
        "\n"
        "worker 3 failed\n"
        "Exception string: 'CUDA error: out of memory\n",
        encoding="utf-8",
    )
    assert [f.kind for f in scan_file(p).findings] == [KIND_CUDA_OOM]


def test_tritons_cuda_pool_exhausted_warning_gives_size_device_and_fallback() -> None:
    f = _one("W0301 10:11:12.131415 1 memory.cc:170] failed to allocate CUDA memory with byte size 4194304 on GPU 1: "
             "CNMEM_STATUS_OUT_OF_MEMORY, falling back to pinned system memory")
    assert f.severity == "warning"  # served from pinned host memory instead
    assert (f.facts["requested_bytes"], f.facts["device_index"]) == (4194304, 1)
    assert f.facts["fallback_to_pinned_memory"] is True
    assert [x.kind for x in classify_text("Failed to allocate CUDA memory with byte size")] == [KIND_CUDA_OOM]


@pytest.mark.parametrize("line", [
    "[rank0]: torch.cuda.OutOfMemoryError: CUDA out",
    "torch.OutOfMemoryError: CUDA out of",
    "torch.cuda.OutOfMemoryError: CUDA",
])
def test_the_allocators_exception_cut_inside_its_first_words_is_a_pytorch_oom(line: str) -> None:
    f = _one(line)
    assert f.facts["framework"] == "pytorch" and f.facts["backend"] == "cuda"
    assert "requested_bytes" not in f.facts


def test_the_exception_class_caught_in_code_is_not_an_oom() -> None:
    _none("    except torch.cuda.OutOfMemoryError:")
    _none("except cupy.cuda.memory.OutOfMemoryError: pass")


def test_xlas_status_wrapped_after_out_keeps_its_size_in_one_fault(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "wrapped.log"
    p.write_text(
        "2020-01-02 03:04:05.000001: E external/org_tensorflow/tensorflow/compiler/xla/pjrt/local.cc:99] "
        "Execution failed: Resource exhausted: Out \n"
        "of memory while trying to allocate 123456789 bytes.\n",
        encoding="utf-8",
    )
    (f,) = scan_file(p).findings
    assert f.kind == KIND_CUDA_OOM
    assert f.facts["requested_bytes"] == 123456789
    assert f.facts["framework"] == "jax"  # named by the first line's org_tensorflow path, not by the rest


def test_the_rest_of_xlas_status_alone_names_no_framework() -> None:
    f = _one("of memory while trying to allocate 2048 bytes.")
    assert f.facts["requested_bytes"] == 2048 and "framework" not in f.facts


def test_a_comfyui_error_reports_out_of_memory_exception_type_is_one_pytorch_oom(tmp_path) -> None:
    # ComfyUI's frontend report template: "- **Exception Type:** <class>" then "- **Exception Message:** <message>",
    # a list item each; the message "Allocation on device " names no device and no size.
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "report.md"
    p.write_text(
        "# ComfyUI Error Report\n"
        "## Error Details\n"
        "- **Node ID:** 7\n"
        "- **Node Type:** VAEDecode\n"
        "- **Exception Type:** torch.OutOfMemoryError\n"
        "- **Exception Message:** Allocation on device \n"
        "## Stack Trace\n"
    )
    (f,) = scan_file(p).findings
    assert (f.kind, f.facts["framework"], f.facts["exception"]) == (KIND_CUDA_OOM, "pytorch", "torch.OutOfMemoryError")
    assert "device_index" not in f.facts and "requested_bytes" not in f.facts


def test_a_comfyui_error_report_with_another_exception_finds_no_oom(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "report.md"
    p.write_text("- **Exception Type:** RuntimeError\n- **Exception Message:** Allocation on device failed to load\n")
    assert not scan_file(p).findings


def test_tensorflow_0x_unshaped_oom_takes_its_device_from_the_node_line() -> None:
    # TF 0.x's executor: "Compute status: Resource exhausted: OOM when allocating tensor with shape" (no bracketed
    # shape), then "[[Node: name = Op[..., _device=\"/job:.../task:0/gpu:N\"](inputs)]]".
    f = _one(
        "W tensorflow/core/common_runtime/executor.cc:1102] 0x7f00aa Compute status: Resource exhausted: "
        "OOM when allocating tensor with shape\n"
        '\t [[Node: gradients/MatMul_grad/MatMul = MatMul[T=DT_FLOAT, transpose_a=false, '
        '_device="/job:localhost/replica:0/task:0/gpu:1"](gradients/add_grad, W/read)]]'
    )
    assert (f.facts["framework"], f.facts["device_index"]) == ("tensorflow", 1)
    assert "tensor_shape" not in f.facts
    _none("Understanding the ResourceExhaustedError OOM when allocating tensor with shape")


def test_cudamallocasync_allocators_failure_reads_free_and_total_from_its_next_line(tmp_path) -> None:
    # gpu_cudamallocasync_allocator.cc: "<name> cuMemAllocAsync failed to allocate N bytes: <status>" then, in the
    # same message, "\n Reported by CUDA: Free memory/Total memory: <free>/<total>" in bytes.
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "run.log"
    p.write_text(
        "E0102 03:04:05.000001 4242 gpu_cudamallocasync_allocator.cc:361] gpu_async_0 cuMemAllocAsync failed to "
        "allocate 4294967296 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
        " Reported by CUDA: Free memory/Total memory: 1073741824/25769803776\n"
    )
    (f,) = [x for x in scan_file(p).findings if x.kind == KIND_CUDA_OOM]
    assert (f.facts["requested_bytes"], f.facts["free_bytes"], f.facts["total_capacity_bytes"]) == (
        4294967296, 1073741824, 25769803776)


# ------------------------------------------------------------------ a CUDA check's message quoted in a sentence


@pytest.mark.parametrize("line", [
    'My solver always prints "CUDA Error: cudaMallocManaged d_grid failed: out of memory." as soon as it starts.',
    "the renderer stops with 'cuda error in kernel launch: out of memory', then exits",
    "After the upgrade I get \u201cROCm error: out of memory\u201d on every second run.",
])
def test_a_check_macros_message_quoted_in_the_writers_sentence_is_read(line: str) -> None:
    assert _one(line).facts["cuda_error"] in ("cudaErrorMemoryAllocation", "hipErrorOutOfMemory")


def test_a_heading_that_is_only_a_quoted_check_message_is_not_read() -> None:
    _none("Why does my job report \u201ccuda failure in cudaMalloc: out of memory\u201d")


# ------------------------------------------------- an application's own exception or warning about the backend's OOM


@pytest.mark.parametrize("text", [
    "INFO 11-02 10:00:01 [worker.py:88] loading weights\n"
    "ERROR 11-02 10:00:09 [engine.py:512] RuntimeError: CUDA out of memory occurred when profiling the KV cache with 64 "
    "sequences. Try lowering `max_num_seqs`.",
    "Traceback (most recent call last):\n  File \"/srv/app/serve.py\", line 41, in <module>\n    warm_up()\n"
    "  File \"/srv/app/serve.py\", line 30, in warm_up\n    raise RuntimeError(msg) from e\n"
    "RuntimeError: HIP out of memory while capturing graphs for batch size 256",
])
def test_an_applications_own_exception_about_the_backends_oom_is_read_when_raised_or_logged(text: str) -> None:
    f = _one(text)
    assert f.facts["exception"] == "RuntimeError" and f.facts["framework"] in ("cuda", "hip")
    assert "requested_bytes" not in f.facts


def test_a_sentence_naming_such_an_exception_is_not_read() -> None:
    _none("The RuntimeError: CUDA out of memory occurs when the batch does not fit the card.")


def test_a_library_that_caught_the_backends_oom_and_goes_on_is_a_warning() -> None:
    f = _one("train: WARNING \u26a0\ufe0f GPU OutOfMemoryError in DynamicMatcher, using CPU")
    assert f.severity == "warning" and f.facts["caught_in"] == "DynamicMatcher" and f.facts["fallback"] == "using CPU"


def test_a_sentence_about_an_oom_in_some_tool_is_not_that_warning() -> None:
    _none("I hit a CUDA OutOfMemoryError in Colab, any idea?")


@pytest.mark.parametrize("call", ["cuMemAlloc", "cuMemHostAlloc", "cuMemAllocManaged"])
def test_a_driver_api_allocation_that_failed_out_of_memory_is_read(call: str) -> None:
    f = _one(f"decoder: {call} failed: out of memory")
    assert f.facts["call"] == call and f.facts["cuda_error"] == "cudaErrorMemoryAllocation"


@pytest.mark.parametrize("line", [
    "I keep getting `failed to create cublas handle: CUBLAS_STATUS_ALLOC_FAILED` on the second GPU",
    "E1102 08:00:00.123456 140 cuda_dnn.cc:350] Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
    "  Profiling failure on CUDNN engine 3: UNKNOWN: CUDNN_STATUS_ALLOC_FAILED",
])
def test_the_stream_executors_handle_wording_names_tensorflow_as_the_framework(line: str) -> None:
    f = _one(line)
    assert f.facts["framework"] == "tensorflow" and f.facts["library"] in ("cublas", "cudnn")


def test_a_pytorch_message_wrapped_inside_its_figures_keeps_the_figures_after_the_wrap(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "issue.md"
    p.write_text(
        "RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 1; 7.79 GiB total capacity; 6.90 GiB "
        "already allocated;\n12.25 MiB free; 7.01 GiB reserved in total by PyTorch)\n\nAny idea?\n",
        encoding="utf-8",
    )
    (f,) = scan_file(p).findings
    assert f.facts["free_bytes"] == parse_size("12.25 MiB") and f.facts["device_index"] == 1
    assert f.facts["allocated_bytes"] == parse_size("6.90 GiB")


def test_a_paddle_message_wrapped_after_its_last_words_keeps_the_free_figure(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "issue.md"
    p.write_text(
        "Out of memory error on GPU 1. Cannot allocate 2.000000GB memory on GPU 1, available memory is only \n"
        "    120.500000MB.\n",
        encoding="utf-8",
    )
    (f,) = scan_file(p).findings
    assert f.facts["device_index"] == 1 and f.facts["free_bytes"] == parse_size("120.500000MB")


def test_a_memoryerror_raised_in_a_gpu_backends_allocator_is_a_device_oom() -> None:
    f = _one(
        "Traceback (most recent call last):\n"
        '  File "/opt/app/train.py", line 12, in <module>\n    x = Tensor.empty(n).realize()\n'
        '  File "/opt/lib/grad/runtime/ops_nv.py", line 301, in _gpu_alloc\n'
        "    raise MemoryError(f\"Cannot allocate {size} bytes: no memory is available.\")\n"
        "MemoryError: Cannot allocate 8589934592 bytes: no memory is available."
    )
    assert f.facts["requested_bytes"] == 8589934592 and "framework" not in f.facts


def test_a_memoryerror_from_host_code_is_not_a_device_oom() -> None:
    _none(
        "Traceback (most recent call last):\n"
        '  File "/opt/app/prep.py", line 40, in load\n    arr = np.zeros((n, n))\n'
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 74.5 GiB for an array\n"
        "MemoryError: Unable to allocate 8589934592 bytes"
    )


def test_paddle_fluids_allocator_check_is_a_paddle_oom() -> None:
    f = _one("paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 4294967296 > 1073741824")
    assert f.facts["framework"] == "paddle"
    assert f.facts["enforce_allocating_bytes"] == 4294967296 and f.facts["enforce_available_bytes"] == 1073741824


def test_the_caching_allocators_cudamalloc_warning_is_a_pytorch_oom() -> None:
    f = _one(
        "[rank3]:[W914 03:50:36.437786958 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on "
        "device 3 while trying to allocate 3221225472 bytes (free: 1048576000, total: 85095874560)."
    )
    assert f.severity == "warning" and f.facts["framework"] == "pytorch" and f.facts["device_index"] == 3
    assert f.facts["requested_bytes"] == 3221225472 and f.facts["free_bytes"] == 1048576000
    assert f.facts["total_capacity_bytes"] == 85095874560


def test_the_caching_allocators_warning_wrapped_after_its_device_is_read_whole_by_the_scan() -> None:
    from fleetscope.agent.tools.scan import iter_events

    text = (
        "[W903 13:41:51.709566905 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 5\n"
        "  while trying to allocate 671088640 bytes (free: 513736704, total: 85095874560).\n"
    )
    found = [f for e in iter_events(text.splitlines()) for f in classify_text(e.text)]
    assert [f.facts["requested_bytes"] for f in found] == [671088640]
    assert found[0].facts["device_index"] == 5 and found[0].facts["total_capacity_bytes"] == 85095874560


def test_the_caching_allocators_warning_before_the_exception_is_one_oom() -> None:
    f = _one(
        "[W903 13:41:51.709566905 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 0 while "
        "trying to allocate 42949672960 bytes (free: 33136967680, total: 33668857856).\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 9, in <module>\n    x = torch.empty(n, device="cuda")\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a total capacity of "
        "31.36 GiB of which 30.86 GiB is free. Including non-PyTorch memory, this process has 498.00 MiB memory in use."
    )
    assert f.severity == "error" and f.facts["requested_bytes"] == 40 * 1024**3


# ------------------------------------------------ the allocator's exception named where its message is not printed


def test_ipython_traceback_header_names_the_oom_raised() -> None:
    f = _one("---------------------------------------------------------------------------\n"
             "OutOfMemoryError                          Traceback (most recent call last)\n"
             "Cell In[4], line 7\n"
             "      5 model.to('cuda')\n"
             "----> 7 model.generate(**inputs)\n")
    assert f.facts["exception"] == "OutOfMemoryError" and f.facts["message_cut"] is True


def test_ipython_traceback_header_of_another_error_is_silent() -> None:
    _none("KeyError                                  Traceback (most recent call last)\n"
          "Cell In[4], line 7\n")
    _none("If you see OutOfMemoryError   Traceback (most recent call last) in a notebook, lower the batch size.")


def test_dataparallel_relay_of_a_replicas_oom_names_its_device() -> None:
    f = _one('2025-02-03T08:15:00.120+00:00    ErrorMessage "torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in '
             'replica 2 on device 2. Original Traceback (most recent call last) File "/usr/lib/python3/site-packages/'
             'torch/nn/parallel/parallel_apply.py", line 83, in _worker output = module(*input, **kwargs)')
    assert f.facts["framework"] == "pytorch" and f.facts["device_index"] == 2


def test_a_relay_of_another_error_is_silent() -> None:
    _none("RuntimeError: Caught RuntimeError in replica 0 on device 0. Original Traceback (most recent call last):")
    _none("KeyError: Caught KeyError in DataLoader worker process 0.")


# ------------------------------------------------------------- NCCL's allocator: the CUDA check, then the size


def test_nccl_cuda_failure_keeps_the_size_its_allocator_asked_for(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "rank3.log"
    p.write_text("node7:41022:41180 [3] NCCL INFO Channel 00 : 3[3] -> 0[0] via P2P/IPC\n"
                 "\n"
                 "node7:41022:41180 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
                 "\n"
                 "node7:41022:41180 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 2097152 bytes\n"
                 "node7:41022:41180 [3] NCCL INFO transport/p2p.cc:204 -> 1\n", encoding="utf-8")
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM]
    assert f.facts["caller_framework"] == "nccl" and f.facts["requested_bytes"] == 2097152


def test_nccl_allocator_size_without_an_oom_is_silent(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "rank0.log"
    p.write_text("node7:41022:41180 [0] include/alloc.h:178 NCCL WARN Cuda failure 'invalid argument'\n"
                 "\n"
                 "node7:41022:41180 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 2097152 bytes\n",
                 encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM] == []


# ---------------------------------------------------- the raised message running on into a title's own words


def test_raised_oom_running_on_into_a_titles_words_is_read() -> None:
    f = _one("# RuntimeError: CUDA out of memory when fine-tuning with batch size 64")
    assert f.facts["framework"] == "pytorch" and f.facts["exception"] == "RuntimeError"


def test_oom_words_without_a_raised_class_or_before_other_words_are_silent() -> None:
    _none("# CUDA out of memory when fine-tuning with batch size 64")
    _none("RuntimeError: CUDA out of memory is what people usually hit here")


# ------------------------------------------------------- one request failing twice, with other memory free


_SENTENCE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 96.00 GiB. GPU 0 has a total capacity of "
             "79.33 GiB of which {free} is free. Including non-PyTorch memory, this process has 2.10 GiB memory in use.")


def test_same_request_with_other_memory_free_is_another_failure(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "runs.log"
    p.write_text("first run:\n" + _SENTENCE.format(free="76.77 GiB") + "\nafter setting use_cache=False:\n"
                 + _SENTENCE.format(free="3.88 GiB") + "\n", encoding="utf-8")
    assert len([f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM]) == 2


def test_same_message_printed_twice_is_one_failure(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "runs.log"
    p.write_text(_SENTENCE.format(free="3.88 GiB") + "\nduring handling, another exception:\n"
                 + _SENTENCE.format(free="3.88 GiB") + "\n", encoding="utf-8")
    assert len([f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM]) == 1


# ---------------------------------------------------------------- an issue titled with the exception class alone


def test_issue_title_of_the_qualified_oom_class_is_read() -> None:
    f = _one("## torch.OutOfMemoryError while training an SDXL LoRA on a 12 GB card\n\nSteps to reproduce: ...")
    assert f.facts["framework"] == "pytorch" and f.facts["exception"] == "torch.OutOfMemoryError"
    f = _one("# cupy.cuda.memory.OutOfMemoryError:\n\nThank you for using CuPy!")
    assert f.facts["framework"] == "cupy"


def test_a_title_about_the_class_or_another_name_is_silent() -> None:
    _none("# Handling torch.cuda.OutOfMemoryError in your training loop\n\nWrap the step in try/except.")
    _none("# torch.cuda.OutOfMemoryErrorHandler: a helper that retries with a smaller batch")


# ------------------------------------------------------- CTranslate2's CUDA_CHECK retyped in lower case


def test_ctranslate2_cuda_failed_retyped_lower_case_is_read() -> None:
    f = _one("After an hour of transcribing I keep getting `cuda failed with error out of memory` on a 12 GB card.")
    assert f.facts["framework"] == "cuda"


def test_ctranslate2_wording_with_another_error_is_silent() -> None:
    _none("After an hour of transcribing I keep getting `cuda failed with error invalid device ordinal` on GPU 1.")


# ---------------------------------------------------------------- Ray relaying a task's own OOM class


def test_ray_task_error_wrapping_an_oom_class_is_read() -> None:
    f = _one("ray.exceptions.RayTaskError(OutOfMemoryError): ray::Trainer.fit() (pid=20731, ip=10.0.3.17, "
             "actor_id=5c1f0e9a7d2b, repr=<train.Trainer object at 0x7f3a2c1d9e80>)\n"
             '  File "/opt/app/train.py", line 88, in fit\n    loss.backward()')
    assert f.facts["exception"] == "OutOfMemoryError" and f.facts["relayed"] is True
    assert "framework" not in f.facts


def test_ray_task_error_of_another_class_or_the_memory_monitor_is_silent() -> None:
    _none("ray.exceptions.RayTaskError(ValueError): ray::Trainer.fit() (pid=20731, ip=10.0.3.17)\n"
          "ValueError: memory layout not supported")
    _none("ray.exceptions.RayTaskError(OutOfMemoryError): ray::Trainer.fit() (pid=20731, ip=10.0.3.17)\n"
          "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.")


# ------------------------------------------------------- old TensorFlow: 0.5's protobuf shape, 1.x's "Chunk at" dump


def test_tensorflow_05_oom_with_a_protobuf_shape_is_read_with_the_nodes_device() -> None:
    f = _one("tensorflow.python.framework.errors.ResourceExhaustedError: OOM when allocating tensor with shape"
             "dim { size: 512 } dim { size: 28 } dim { size: 28 } dim { size: 32 }\n"
             '\t [[Node: conv1/Conv2D = Conv2D[T=DT_FLOAT, padding="SAME", strides=[1, 1, 1, 1], '
             'use_cudnn_on_gpu=true, _device="/job:localhost/replica:0/task:0/gpu:1"](Reshape, conv1/W)]]')
    assert f.facts["framework"] == "tensorflow" and f.facts["device_index"] == 1
    assert f.facts["tensor_shape"] == "[512,28,28,32]"


def test_tensorflow_05_oom_on_the_cpu_or_a_proto_in_prose_is_silent() -> None:
    _none("tensorflow.python.framework.errors.ResourceExhaustedError: OOM when allocating tensor with shape"
          "dim { size: 512 } dim { size: 28 }\n"
          '\t [[Node: fc/MatMul = MatMul[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/cpu:0"](a, b)]]')
    _none("The shape proto is written as dim { size: 512 } dim { size: 28 } in the graph file.")


def test_tensorflow_1x_chunk_list_alone_is_the_bfc_dump() -> None:
    f = _one("\n".join(
        f"2019-02-11 08:14:{s:02d}.120431: I tensorflow/core/common_runtime/bfc_allocator.cc:645] "
        f"Chunk at 7f04a2{s:02d}0000 of size 1048576" for s in range(4)))
    assert f.facts["framework"] == "tensorflow" and f.facts["chunk_list_lines"] == 4


def test_a_chunk_line_from_another_program_is_silent() -> None:
    _none("2019-02-11 08:14:01.120431: I mempool/arena.cc:88] Chunk at 7f04a2000000 of size 1048576\n"
          "2019-02-11 08:14:01.120502: I mempool/arena.cc:88] Chunk at 7f04a2100000 of size 1048576")


# ------------------------------------------------------- ComfyUI's relay of the allocator's OOM, one per prompt


def test_comfyui_relay_line_alone_is_pytorchs_oom() -> None:
    f = _one("2025-03-02 14:07:55,310 - root - ERROR - !!! Exception during processing !!! Allocation on device \n"
             "2025-03-02 14:07:55,311 - root - ERROR - Traceback (most recent call last):")
    assert f.facts["framework"] == "pytorch" and f.facts["relayed"] is True


def test_comfyui_relay_of_another_error_is_silent() -> None:
    _none("2025-03-02 14:07:55,310 - root - ERROR - !!! Exception during processing !!! Allocation of the node failed\n"
          "2025-03-02 14:07:55,311 - root - ERROR - Traceback (most recent call last):")


def test_comfyui_two_prompts_failing_are_two_faults_and_one_prompt_one(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    tail = "torch.OutOfMemoryError: Allocation on device \n\n"
    relay = "2025-03-02 14:{m}:55,310 - root - ERROR - !!! Exception during processing !!! Allocation on device \n"
    tb = "2025-03-02 14:{m}:55,311 - root - ERROR - Traceback (most recent call last):\n" \
         '  File "/srv/ComfyUI/execution.py", line 327, in execute\n'
    p = tmp_path / "comfy.log"
    p.write_text(tail + "2025-03-02 14:05:01,002 - root - INFO - got prompt\n" + relay.format(m="07")
                 + tb.format(m="07"), encoding="utf-8")
    assert len([f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM]) == 2
    p.write_text(relay.format(m="07") + tb.format(m="07") + tail, encoding="utf-8")
    assert len([f for f in scan_file(p).findings if f.kind == KIND_CUDA_OOM]) == 1


# ------------------------------------------------------- the raised line quoted in a code span inside a report


def test_raised_oom_quoted_in_a_span_inside_a_report_sentence_is_read() -> None:
    found = [f for f in classify_text(
        "Since the upgrade I get a `torch.cuda.OutOfMemoryError: CUDA out of memory` after the third validation "
        "step, on both A10 cards.") if f.kind == KIND_CUDA_OOM]
    assert len(found) == 1 and found[0].facts["framework"] == "pytorch"


def test_the_words_alone_in_a_span_or_a_manuals_sentence_are_silent() -> None:
    _none("Since the upgrade the job stops with a `CUDA out of memory` after the third validation step.")
    assert [f for f in classify_text(
        "The trainer catches a `torch.cuda.OutOfMemoryError: CUDA out of memory` after a step and halves the batch.")
        if f.kind == KIND_CUDA_OOM] == []


def test_cuda_check_wordings_of_tinygrad_optix_and_haskell_cuda() -> None:
    # tinygrad's driver-API check, relayed by an app's own log line.
    f = _one("Error processing request: CUDA Error 2, out of memory")
    assert (f.facts["cuda_error"], f.facts["cuda_api"]) == ("CUDA_ERROR_OUT_OF_MEMORY", "driver")
    # The OptiX SDK's CUDA_CHECK, whole, and a title cut after the message with the call's arguments elided.
    g = _one("Caught exception: CUDA call (cudaMalloc( reinterpret_cast<void**>( &d_buf ), size ) ) failed with "
             "error: 'out of memory' (/src/render/Pipeline.cpp:212)")
    assert g.facts["cuda_error"] == "cudaErrorMemoryAllocation"
    _one("# RuntimeError: CUDA call (cudaMalloc ... failed with error: 'out of memory")
    # Haskell's cuda package, shown by a program that did not catch it.
    _one("./Data/Array/Accelerate/CUDA/Execute.hs:120 (unhandled): CUDA Exception: out of memory")


def test_cuda_check_wordings_with_other_errors_are_silent() -> None:
    _none("Error processing request: CUDA Error 700, an illegal memory access was encountered")
    _none("CUDA call (cudaMemcpy( d, s, n, cudaMemcpyHostToDevice ) ) failed with error: 'invalid argument' (a.cpp:9)")
    _none("CUDA Exception: invalid device ordinal")


def test_tensorflow_status_quoted_with_its_shape_cut_ends_at_a_full_stop() -> None:
    f = _one("> Resource exhausted: OOM when allocating tensor with shape.")
    assert f.facts["framework"] == "tensorflow" and "tensor_shape" not in f.facts
    # The words alone, without the status before them, and the status running on into a sentence: silent.
    _none("OOM when allocating tensor with shape.")
    _none("Resource exhausted: OOM when allocating tensor with shape. That is what TensorFlow says when a batch is too big.")
