"""The words (and the few shapes) that wake each classifier, kept apart from the classifiers.

The registry gates every classifier with the union of these in one regex (``_gate.py``): a log
line holding none of them costs one scan and no classifier runs. The agent builds that gate from
this module alone and imports a classifier's module (its code and its regex families, about 2 MiB
of a drone's resident memory) only when a text first gets through the gate
(``fleetscope.agent.classify.Registry``). Each classifier class points at its tuples here
(``triggers = _triggers.CUDA_OOM``), so there is one list per classifier;
tests/agent/test_classify_lazy.py checks that the classes and this module agree.

Every text a classifier reads contains one of its words. A gate searches each word from its
rarest character (``_gate.anchor``), so a word that starts at a common character is spelt from
a rarer one ("illed process", "xhausted").
"""

from __future__ import annotations

__all__ = [
    "CUDA_OOM", "CUDA_OOM_SHAPES", "HOST_OOM", "HOST_OOM_SHAPES", "JETSON_MEMORY", "TASK_ROW_TAIL", "TENSORRT", "TENSORRT_SHAPES", "XID",
]

CUDA_OOM: tuple[str, ...] = (
    'of memory', 'OfMemory', 'MemoryAllocation', 'OF_MEMORY', 'NO_MEMORY', 'OOM', 'ALLOC_FAILED', 'EXHAUSTED',
    'xhausted', 'Tried to allocate', 'by PyTorch', 'BufferAssignment', 'BFCAllocator', 'memory_limit_',
    'in-use chunks', '_STATUS_NOT_INITIALIZED', 'requested buffer', 'BFCArena',
    'InUse at',  # TensorFlow's BFC dump, its chunk list alone (entered at the "U" CUDA_OOM_SHAPES is entered at)
    '] Chunk at ',  # the same list from TensorFlow <= 1.11
    '!!! Allocation on device',  # ComfyUI's relay of PyTorch's OOM, its message alone (cuda_oom._COMFY_RELAY)
    # MLX's allocator; nvidia-drm's GEM allocation; RELION's requested-space field (a line of its
    # own in a paste).
    '] Unable to allocate', 'allocate NVKMS', 'requestedSpace:',
    # TensorFlow's pinned host allocator; CUDA.jl's OutOfGPUMemoryError; cuRAND.
    'pinned host memory of size', 'of GPU memory trying', 'ALLOCATION_FAILED',
    "memory isn't enough",  # MindSpore
    'CUDA memory with byte size',  # Triton's memory manager (cuda_oom._TRITON_CUDA)
    'hipError_t(1002)',  # TensorFlow's ROCm stream executor before HIP named its errors
    'MemoryError: ',  # Python's MemoryError raised by a GPU runtime's allocator (cuda_oom._gpu_memory_error)
    'allocating <= available',  # Paddle Fluid 1.x's GPU allocator check (cuda_oom._PADDLE_ENFORCE)
)
# A word with a number inside, entered at its rare capitals: PyTorch's "GPU 0 has a total capacity
# of ..." sentence on a line of its own.
CUDA_OOM_SHAPES: tuple[tuple[str, str], ...] = (("U ", r"\d+ has a total capacit"),)  # "GPU 0", "NPU 0", "XPU 0"

# ("oom-kill" and "oom_reaper" rather than "oom-" and "oom_": a gate searches a word from its
# rarest character, and longer words have rarer ones.)
HOST_OOM: tuple[str, ...] = (
    'oom-kill', 'oom_reaper', 'OOM', 'of memory', 'illed process', 'tgid total_vm', 'Tasks state', 'Mem-Info',
    'pages RAM', 'pages reserved', 'Free swap', 'page allocation', 'total pagecache', 'Action=kill',
    'cgroups for killing', 'badness', 'killed as a result of limit', 'Killed /', 'order allocation failed',
    'vmalloc: allocation', 'vmalloc error:', 'vmap allocation', 'container oom', '/tasks/oom', '"oom"',
    # ECS's "OutOfMemoryError: Container killed due to memory usage", earlyoom's sysrq mode, Slurm's "oom_kill
    # event" and srun's "Out Of Memory", vc4's CMA failure; the OOM killer's stack frames (out_of_memory,
    # oom_kill_process) and a zone's watermarks when a report is pasted without its other lines.
    # (Spelt to hold a rarer character or another classifier's word: "MemoryError: " is cuda_oom's, so the scan's gate
    # adds nothing for it; without "OutOf", so that a retyped "OutofMemoryError" gets through.)
    'MemoryError: Container', 'oom killer: done', 'oom_kill', ': Out Of Memory', '*ERROR* Failed to allocate from CMA',
    'out_of_memory',
    # The panic out_of_memory() ends in when nothing at all could be killed, often all that a boot log shows.
    'deadlocked on memory',
    # Batch schedulers' memory-limit kills (host_oom._RUNTIME_MORE's lsf, pbs, torque).
    'TERM_MEMLIMIT', 'PBS: job killed', 'memory resource limit',
    'kB min:',
    'oomd attempting to kill',  # systemd-oomd naming the process it kills
    'VM: killing process',  # Linux 2.4/2.6's page-fault OOM kill
    'on the node (IP:',  # Ray's memory monitor, the error for the worker it killed (host_oom._RAY_NODE)
    # Its first sentence alone and Ray 2.0's raylet line (host_oom._RAY_LOW_MEMORY, _RAY_SYSTEM_LOW).
    'low on memory', 'System memory low',
    'illing process', 'sending SIG',  # earlyoom's kill line, v0.5 to now (host_oom._EARLYOOM)
    # The allocation-failure warning's stack frame, its header cut (host_oom._WARN_ALLOC_FRAME): entered at the rare "+".
    'warn_alloc+0x', 'warn_alloc_failed+0x',
    'process(es) in this unit',  # systemd on a unit whose processes systemd-oomd killed (host_oom._SYSTEMD_UNIT_OOM)
    # A memory cgroup's part of an OOM report pasted alone (host_oom._MEMCG_USAGE, _MEMCG_STATS): entered at the
    # "k" and "M" other words are entered at.
    'kB, limit', 'Memory cgroup stats',
    # Its memory.stat counters alone on kernel lines (host_oom._MEMCG_STAT_KEY), entered at the "_" and "k" others are.
    'workingset_', 'slab_reclaimable', 'slab_unreclaimable', 'shmem_thp', 'file_thp', 'anon_thp',
)
# A dump_tasks row: "[  pid  ] uid tgid total_vm rss [rss_anon rss_file rss_shmem] pgtables swapents
# oom_score_adj name": seven to ten numbers after the pid. Its shape alone marks a task table.
TASK_ROW_TAIL = r"\s+-?\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+-?\d+\s+\S"
# A task-table row alone carries no word to look for: the registry gates on its shape too.
HOST_OOM_SHAPES: tuple[tuple[str, str], ...] = (("]", TASK_ROW_TAIL),)

# "cma: Failed to reserve": the gate anchors a word at its rare "F" on
JETSON_MEMORY: tuple[str, ...] = (
    'NvMap', 'nvmap', 'NVMAP', 'AllocMapped', 'ma_alloc', 'nvgpu', 'NvRmMemInit', 'DMA alloc FAILED', 'Failed to reserve',
)

XID: tuple[str, ...] = (
    'Xid', 'fallen off', 'XID', 'RmInitAdapter', 'rm_init_adapter', 'RPC history', 'RPC event history',
    'kflcnCoreDump', 'RPC from GSP', 'RPC response from GPU', 'NV_ERR_GPU_IS_LOST',
    'detected by dmesg', 'detected by kmsg', 'detected by nvml',  # gpud's event message
    # The RM's assertions (nvAssertFailedNoLog, nvAssertOkFailedNoLog) on a GPU to reset or in the GSP's code.
    'FailedNoLog', 'NV_ERR_RESET_REQUIRED',
    'region assigned to your NVIDIA',  # the driver refusing a GPU whose BAR is invalid (xid._BAR_INVALID)
)

TENSORRT: tuple[str, ...] = (
    'TRT]', 'TensorRT', 'Error Code', 'FP16', 'Unsupported SM', 'ms, max', 'tion ===', 'summary ===',
    'Enqueue Time', 'GPU Compute', 'Host Latency', 'Cuda Error in', 'Serialization Error', 'ngine failed', 'ngine file failed',
    'ngine build failed',
    'optimization profile', 'ngine could not', 'nvinfer1::', 'Average o', 'NvDsInferContext',
    # Lines that name no logger: relayed by another logger, retyped, or cut from their tags. Each word is
    # searched from its rarest character (agent/classify/_gate.py): none may start at a common one.
    'Skipping tactic', 'equested amount of GPU memory', 'engine plan file', 'xpect fall back to non-int8',
    'sufficient workspace memory', 'ould not find any implementation', 'qps', '-bit weights not found',
    'tensorrt_execution_provider', 'Calibration failure occurred', 'ngine set up failed',
    'Failed to create engine from', 'Device memory is insufficient to use tactic',
    # TensorRT-LLM's runtime check "Assertion failed: Failed to deserialize cuda engine." quoted without its tag.
    'eserialize cuda engine',
    # Polygraphy's loader failing to deserialize an engine, relayed alone ("Could not deserialize engine. See log ...").
    'deserialize engine. See log',
    # onnx-tensorrt's parser ("In node -1 (parseGraph): UNSUPPORTED_NODE: ..."), by its error codes' capitals.
    'UNSUPPORTED_NODE', 'UNSUPPORTED_GRAPH', 'INVALID_NODE', 'INVALID_GRAPH', 'INVALID_VALUE',
    'MODEL_DESERIALIZE_FAILED', 'MEM_ALLOC_FAILED', 'REFIT_FAILED', 'INTERNAL_ERROR:',
    # Its C++ ModelImporter's "ERROR: ModelImporter.cpp:492 In function importModel:" (tensorrt._ONNX_IN_FUNCTION),
    # and its kINVALID_NODE description on the line after it, "[6] Invalid Node - <node>" (entered at its "v").
    ' In function ', 'Invalid Node - ',
)
# TensorRT 8+'s logger error "<ErrorCode>: <description>" under trtexec's or Polygraphy's "[E]" alone ("[E] 1: Myelin
# (...)"), no other word of TensorRT's on its line: entered at the "]" the task-table row's shape is entered at.
TENSORRT_SHAPES: tuple[tuple[str, str], ...] = (("[E] ", r"(?:10|\d): "),)
