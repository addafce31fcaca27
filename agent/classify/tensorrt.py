"""TensorRT builder/runtime errors and trtexec performance summaries.

Errors (``KIND_TENSORRT_ERROR``), one finding per recognised line, in every logger format seen
in the field: TensorRT 7's ``[TensorRT] ERROR: ...``, the 8.x/10.x Python logger's
``[MM/DD/YYYY-HH:MM:SS] [TRT] [E] ...``, DeepStream's ``ERROR: [TRT]: ...``, trtexec's
``[E] [TRT] ...``, trtexec's error recorder ``[E] Error[N]: ...``, ONNX Runtime's relay
``[2024-02-08 11:00:22 WARNING] ...``, TensorRT-LLM's ``[TensorRT-LLM][ERROR] ...`` and untagged lines
from applications with their own logger. The ``category`` fact says what went wrong:

* ``out_of_memory``: ``Error Code 2: OutOfMemory`` (and any coded error whose detail says so; TensorRT
  10's "(Requested size was N bytes.)" gives ``requested_bytes``)
* ``gpu_memory_allocation_failed``: "Requested amount of GPU memory (N bytes) could not be allocated", and
  the allocator's own "Error Code 1: Cuda Runtime (In allocate at .../defaultAllocator.cpp:57)";
  ``memory_allocation_failed``: TensorRT 7/8's "Requested amount of memory (N bytes) could not be allocated"
* ``tactic_skipped_insufficient_memory`` / ``tactic_skipped``: "Skipping tactic ..." (8.0-8.4 spell it
  "insuficient")
* ``tactic_device_memory_insufficient``: "Tactic Device request: 2304MB Available: 1536MB"
* ``workspace_too_small``: too little workspace for some tactics / "try increasing the workspace size"
* ``fp16_unsupported`` / ``int8_unsupported``: "Half2 support requested on hardware without native
  FP16", "Platform doesn't support fast native fp16", "platform does not have FP16 support"
* ``fp16_weights_out_of_range`` (subnormal or overflowing weights, 8.4's per-weight and 8.6+'s counted
  wordings), ``fp16_layernorm_overflow``, ``int8_missing_scale`` ("Missing scale and zero-point for
  tensor X, expect fall back to non-int8 ..."), ``int8_calibration_failed``, ``int64_weights_cast`` (the ONNX
  parser casting INT64 weights down to INT32, or clamping them): precision warnings/errors
* ``unsupported_sm``: "Assertion failed: Unsupported SM", "Target GPU SM 70 is not supported"
* ``unsupported_state``: an ``UNSUPPORTED_STATE`` error not about a tactic
* ``engine_version_mismatch`` / ``engine_device_mismatch`` / ``engine_invalid``: a serialized
  engine built by another TensorRT version or for another GPU, or not an engine at all;
  ``engine_other_device_model``: the warning for an engine built on another GPU model
* ``caffe_weights_missing``: the Caffe parser's "<layer>: ERROR - 32-bit weights not found for 32-bit model"
* ``cuda_runtime_error``: ``Error Code 1: Cuda Runtime (...)``; ``cuda_error``: "Cuda Error in
  <call>: N (name)"; ``cuda_init_failure``: "CUDA initialization failure with error: N"
* ``error_code``: any other coded TensorRT error; ``error``: any other line tagged as an error
* ``assertion_failed``: a C assertion in the same event as TensorRT output (only then: an
  assertion on its own is not TensorRT's)

Benchmarks (``KIND_TRT_BENCHMARK``): a trtexec "Performance summary" (prefixed with
``[date] [I]``, re-logged as ``[INFO] [date] [I]``, stripped, stripped with a leading space,
with or without the ``=== Performance summary ===`` header) becomes one finding with
``throughput_qps``, ``latency_{min,max,mean,median,p90,p95,p99}_ms``, the same for
``end_to_end_latency``, ``enqueue_time``, ``h2d_latency``, ``gpu_compute`` and ``d2h_latency``,
``total_host_walltime_s`` and ``total_gpu_compute_time_s``; the device block
("=== Device Information ===") adds ``device_name``, ``compute_capability``, ``sm_count``,
``device_memory_bytes`` ... and batch size, precision and TensorRT version are added where the
event prints them. A device block without a summary is no benchmark (trtexec prints it before
every build and run, also those that fail): nothing is reported for it. The summary should reach the classifier as one event (the log source
groups lines); fed line by line, each stat line gives a partial finding
(``summary_complete: False``). A run quoted by its throughput alone (``[I] Throughput: 96.2 qps``) is
such a partial finding only with trtexec's ``[I]`` tag: other tools print qps too.

TensorRT <= 7's vertical layout (a heading such as "Host Latency" or "GPU Compute", then one
"min: x ms (end to end y ms)" line per statistic and "percentile: x ms at 99%") is read into the
same facts (``layout: vertical``). Hand-copied summaries that lost an "=" ("max 6.19 ms") or glued
"Total Host Walltime: ..." onto another line lose nothing; the coefficient of variance trtexec
warns about is ``gpu_compute_cv_percent`` and a following "&&&& PASSED" line is ``result``.
Blank lines between a summary's metrics do not split it (the grouper keeps them in one event).
"""

from __future__ import annotations

import re

from fleetscope.agent.classify import _triggers
from fleetscope.agent.classify._base import KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK, FactValue, Finding
from fleetscope.agent.classify._units import parse_size

__all__ = ["TensorRtClassifier"]

# ---------------------------------------------------------------------------- error regexes

# Severity tags as the various loggers print them.
_SEV_TAG = re.compile(
    r"\[(?:TRT|TensorRT)\]:?\s*(?:\[(?P<a>[EWIVF])\]|(?P<b>INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE)\b)"
    r"|(?P<c>INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE):\s*\[TRT\]"
    r"|\[(?P<d>[EWF])\]\s*(?:\[TRT\])?"
    r"|\[(?P<e>INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE)\]\s*\[(?:TRT|TensorRT)\]"  # "[ERROR] [TensorRT] ..."
    # ONNX Runtime's TensorRT logger (and loggers written after it): "[2024-02-08 11:00:22 WARNING] msg",
    # "[2024-02-08 11:00:22   ERROR] msg" (the level right-aligned).
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+(?P<f>INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE)\]"
    r"|\[TensorRT-LLM\]\s*\[(?P<g>ERROR|WARNING|WARN|INFO|DEBUG|TRACE)\]"  # "[TensorRT-LLM][ERROR] ..."
)
_SEV_NORMAL = {
    "E": "error",
    "F": "error",
    "ERROR": "error",
    "INTERNAL_ERROR": "error",
    "W": "warning",
    "WARNING": "warning",
    "I": "info",
    "INFO": "info",
    "V": "info",
    "VERBOSE": "info",
    "WARN": "warning",
    "DEBUG": "info",
    "TRACE": "info",
}
# What comes before the message: bracketed tags, "ERROR:" words, a trailing ":" after [TRT].
_LEAD = re.compile(r"^\s*(?:\[[^\]]{0,40}\]:?\s*|(?:INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE)\s*:\s*)")

_SKIP_TACTIC = re.compile(
    r"(?P<status>UNSUPPORTED_STATE)?:?\s*Skipping tactic (?P<idx>\d+|0x[0-9A-Fa-f]+) due to (?P<why>.*?)"
    # TensorRT 8.6 runs the hint on after the period: "...for tactic 0x0000000000000000.Try decreasing ...".
    r"(?: on requested size of (?P<size>\d+) detected for tactic (?P<tactic>0x[0-9A-Fa-f]+))?(?:\.|\s*$)"
)
# TensorRT 10 says why in the skip itself: "Skipping tactic 0x0 due to exception [tunable_graph.cpp:create:117]
# autotuning: User allocator error allocating 15485030400-byte buffer" (its allocator's cudaMalloc failed).
_INSUFFICIENT_MEMORY = re.compile(r"insuff?icient memory|allocator error allocating|out of memory|\boom error\b")
_BUFFER_BYTES = re.compile(r"allocating (?P<bytes>\d+)-byte buffer")
# TensorRT 8.2+'s tactic warning, ending "Device memory is insufficient to use tactic." (its "Tactic Device request:
# 2304MB Available: 1536MB." part is read by _TACTIC_DEVICE): the ending alone, a title's or a cut line's.
_INSUFFICIENT_TACTIC = re.compile(r"Device memory is insufficient to use tactic")
# The logger's error as TensorRT 8+ formats it, "<ErrorCode>: <description>" ("1: [caskUtils.cpp::...] ...",
# "4: The timing cache will not be used!"), under trtexec's or Polygraphy's "[E]" with no "[TRT]": ErrorCode
# runs from 0 (kSUCCESS) to 10 (kUNSUPPORTED_STATE).
_CODED_E = re.compile(r"(?:^|[\s\]])\[E\] (?P<code>10|[0-9]): (?P<desc>\S[^\n]*)")
_TACTIC_DEVICE = re.compile(
    r"Tactic Device request: (?P<req>\d+(?:\.\d+)?)\s*(?P<ru>[KMG]i?B) Available: (?P<avail>\d+(?:\.\d+)?)\s*(?P<au>[KMG]i?B)"
)
# TensorRT 7/8 also say it without "GPU" ("Requested amount of memory (150994944 bytes) could not be allocated. There
# may not be enough free memory for allocation to succeed.", its builder on a Jetson Nano): the same failed allocation.
_REQUESTED_GPU = re.compile(r"Requested amount of (?P<gpu>GPU )?memory \((?P<bytes>\d+) bytes\) could not be allocated")
# A message cut after its detail opened (an issue title) still has its code and category.
_ERROR_CODE = re.compile(
    r"(?:(?P<cls>\d+): )?(?:\[(?P<origin>[^\]]+)\] )?Error Code (?P<code>\d+): (?P<cat>[A-Za-z][A-Za-z0-9 _]*?)"
    r"(?: \((?P<detail>.*)\)\s*$| \((?P<cut>.*)$|\s*$|(?=[.,;]))"
)
# TensorRT <= 7's status lines: "../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)",
# "coreReadArchive.cpp (31) - Serialization Error in verifyHeader: 0 (Magic tag does not match)".
# Some print no detail: "../rtSafe/WeightsPtr.cpp (92) - OutOfMemory Error in allocate: 0" (the builder's weights).
# Some builds print it without the spaces: "coreReadArchive.h(271) - Serialization Error in readExternal:0(Type mismatch)".
_STATUS_LINE = re.compile(
    r"(?P<origin>[\w./-]+\.(?:cpp|cu|h|hpp)) ?\((?P<line>\d+)\) - (?P<what>[A-Z]\w*(?: \w+)*?) Error in "
    r"(?P<func>\w+): ?(?P<code>-?\d+)(?: ?\((?P<detail>[^)]*)\)|\s*$)"
)
# TensorRT 5-7's builder when a tactic's allocation fails, as an error: "Out of memory error during getBestTactic:
# <node>", and the advice it ends in, as an error too: "Try increasing the workspace size with
# IBuilderConfig::setMaxWorkspaceSize() ...", "Internal error: could not find any implementation for node <node>, try
# increasing the workspace size with IBuilder::setMaxWorkspaceSize()": the build failed for want of memory, the same
# shortage as the "Requested amount of memory" or "OutOfMemory Error in computeCosts" printed beside them.
_BEST_TACTIC_OOM = re.compile(r"Out of memory error during getBestTactic(?:: (?P<layer>\S.*?))?\s*$")
_WORKSPACE_ADVICE = re.compile(r"(?i)\btry increasing the workspace size\b")
# Whole-build failures as the builders and their wrappers say them.
_BUILD_FAILED = re.compile(
    r"(?i)(?:building|failed to build|unable to build|could not build|build) (?:the |a )?(?:tensorrt |trt |cuda )?engine"
    r"(?: file)?(?: from network)?(?: failed| \(failed\))?|buildSerializedNetwork failed|engine could not be created"
    r"|Failed to create (?:the )?(?:TensorRT|TRT) engine"
    r"|(?:TensorRT|TRT) [Ee]ngine build failed"  # optimum-nvidia's RuntimeError after a failed build
)
# DeepStream's nvinfer: "NvDsInferContext[UID 3]: Error in NvDsInferContextImpl::buildModel()
# <nvdsinfer_context_impl.cpp:2126> [UID = 3]: build engine file failed".
_NVDSINFER = re.compile(r"NvDsInferContext\[UID \d+\]: Error in (?P<func>[\w:]+)\(\) <(?P<origin>[^>]+)> \[UID = \d+\]: ?(?P<detail>.*)")
_NO_PROFILE = re.compile(r"Network has dynamic or shape inputs, but no optimization profile has been defined")
_SUBNORMAL = re.compile(
    r"Subnormal FP16 values detected|smallest positive FP16 Subnormal value|had the following issues when converted to FP16"
    r"|(?:exceed|Values? (?:larger|greater) than) (?:the )?(?:largest|max(?:imum)?) FP16"
    # TensorRT 8.6+ counts the weights per issue under one heading (each wording whole: a
    # manual's elided or wrapped quote of it is not the builder's line).
    r"|TensorRT encountered issues when converting weights between types and that could affect accuracy"
    r"|weights are affected by this issue: Detected (?:subnormal FP16 values|values less than smallest positive FP16 "
    r"subnormal value|(?:finite )?FP32 values which would overflow in FP16)"
)
_AFFECTED = re.compile(r"(?P<n>\d+) weights are affected by this issue")
# INT8 without a scale for a tensor: TensorRT 8.2+ "Missing scale and zero-point for tensor X, expect fall
# back to non-int8 implementation for any layer consuming or producing given tensor", TensorRT 7/8.0
# "Missing dynamic range for tensor X, expect fall back ...".
_MISSING_SCALE = re.compile(
    r"Missing (?:scale and zero-point|dynamic range) for tensor (?P<tensor>.+?), expect fall back to non-int8"
)
# The Caffe parser (TensorRT <= 8): "<layer>: ERROR - 32-bit weights not found for 32-bit model".
_CAFFE_WEIGHTS = re.compile(r"(?:^|\s)(?P<layer>[^\s:]+): ERROR - (?P<bits>\d+)-bit weights not found for \d+-bit model")
# trtexec's error recorder: "[E] Error[10]: <description>" (the number is the ErrorCode).
_RECORDER = re.compile(r"(?:^|[\]\s])Error\[(?P<code>\d+)\]: ")
# TensorRT 10's OutOfMemory detail: "Error Code 2: OutOfMemory (Requested size was 20132809216 bytes.)".
_REQUESTED_SIZE = re.compile(r"Requested size was (?P<bytes>\d+) bytes")
# The builder's "no implementation" error names a node that may hold spaces, brackets and dots
# ("{ForeignNode[177...Reshape_81 + (Unnamed Layer* 146) [Shuffle]]}"): it runs to the message's end.
# TensorRT 8.6 adds why: "... for node X due to insufficient workspace. See verbose log for requested sizes."
# A Myelin-fused node's name ends at its "]}" (its own brackets nest inside): a writer's sentence may run on after it
# ("... for node {ForeignNode[12...Sigmoid_4]}. failure of TensorRT 8.6 when ...").
_IMPL_NODE = re.compile(
    r"(?i)could not find any implementation for node "
    r"(?P<layer>\{ForeignNode\[.*?\]\}(?=[\s.,;]|$)|.+?(?=(?: due to .*|, try increasing.*|\.?\s*)$))"
)
_WORKSPACE_TACTICS = re.compile(r"Some tactics do not have sufficient workspace memory to run")
# Triton's TensorRT backend when deserializeCudaEngine returns no engine: "Internal: unable to create TensorRT
# engine" (a model's UNAVAILABLE status, the servable loader's error). Polygraphy's EngineFromBytes loader:
# "Could not deserialize engine. See log for details." (relayed alone by an application that wraps it).
_DESERIALIZE = re.compile(r"(?i)deserializ\w* (?:the )?(?:cuda )?engine failed|deserializeCudaEngine failed"
                          r"|failed to deserialize (?:the )?(?:cuda )?engine|unable to create TensorRT engine"
                          r"|could not deserialize engine\. See log for details")
_TRTEXEC_FAILED = re.compile(r"&&&& FAILED TensorRT\.trtexec(?: \[TensorRT v(?P<v>\d{4,6})\])?")
_CUDA_ERROR_IN = re.compile(r"Cuda Error in (?P<call>\S+?): (?P<code>\d+)(?: \((?P<name>[^)]*)\))?")
_CUDA_INIT = re.compile(r"CUDA initialization failure with error:? (?P<code>\d+)")
# "Half2 support requested on hardware without native FP16 support" and the same for Int8 (TensorRT <= 8).
_HALF2 = re.compile(r"(?P<prec>Half2|FP16|Int8|INT8) support requested on hardware without native (?:FP16|Int8|INT8) support")
# TensorRT 8.6+: "Detected layernorm nodes in FP16: ... Running layernorm after self-attention in FP16 may
# cause overflow."
_LAYERNORM_FP16 = re.compile(r"Detected layernorm nodes in FP16|Running layernorm after self-attention in FP16 may cause overflow")
_CALIBRATION_FAILED = re.compile(r"Calibration failure occurred with no scaling factors detected")
# onnx-tensorrt's importer (onnx2trt_utils.cpp, TensorRT 6 to 8.6) converting a model's INT64 initialisers: "Your ONNX
# model has been generated with INT64 weights, while TensorRT does not natively support INT64. Attempting to cast down
# to INT32.", then for values that did not fit "One or more weights outside the range of INT32 was clamped".
_INT64_CAST = re.compile(
    r"(?i)generated with INT64 weights,? while TensorRT does not natively support INT64"
    r"|weights? outside the range of INT32 (?:was|were) clamped"
)
# DeepStream's nvinfer building an engine in another precision than asked (nvdsinfer_model_builder.cpp):
# "INT8 calibration file not specified. Trying FP16 mode." (its platform checks, "INT8 not supported by
# platform. Trying FP16 mode.", are read by _PREC_NOT_SUPPORTED).
_NVDS_NO_CALIBRATION = re.compile(r"INT8 calibration file not specified\. Trying FP16 mode")
# trtexec's own failure lines after a failed build or load.
_TRTEXEC_SETUP = re.compile(r"Engine set up failed|Failed to create engine from model(?: or file)?")
_PLATFORM_PREC = re.compile(
    r"(?i)platform (?:does not|doesn't|does n't) (?:have|support) (?:fast )?(?:native )?(?P<prec>fp16|int8|bf16|fp8)"
)
_PREC_NOT_SUPPORTED = re.compile(
    r"(?i)\b(?P<prec>fp16|int8|bf16|fp8)\b(?: precision)? (?:is )?not supported(?: natively)?(?: on this (?:platform|gpu|device))?"
)
_UNSUPPORTED_SM = re.compile(r"Unsupported SM|Target GPU SM (?P<sm>\d+) is not supported")
_SM_VALUE = re.compile(r"\b(?:SM|sm_?|compute capability)\s*(?P<sm>\d+(?:\.\d+)?)\b")
_ASSERTION_FAILED = re.compile(r"Assertion failed: (?P<what>.+?)\.?\s*$")
# glibc's assert(): "file:line: func: Assertion `expr' failed."; a Markdown code span around the line eats its
# backtick ("Assertion size >= bsize && ...' failed."), the closing quote stays.
_C_ASSERT = re.compile(r"Assertion [`']?(?P<what>[^`'\s].*?)' failed")
_ENGINE_VERSION = re.compile(
    r"engine plan file is not compatible with this version of TensorRT[,.] expecting library version "
    r"(?P<lib>\d+(?:\.\d+)*) got (?P<plan>\d+(?:\.\d+)*)"
)
_SERIAL_VERSION = re.compile(r"Current Version: (?P<cur>\d+), Serialized Engine Version: (?P<eng>\d+)")
_ENGINE_DEVICE = re.compile(
    r"engine plan file is generated on an incompatible device[,.] expecting compute (?P<want>\d+(?:\.\d+)?) got compute "
    r"(?P<got>\d+(?:\.\d+)?)"
)
_MAGIC = re.compile(r"(?i)Magic tag does not match|not a valid TensorRT engine")
# An engine serialized by another TensorRT release, where no version number is printed: TensorRT 7's
# "Version tag does not match", TensorRT 10's "...incompatible serialization version".
_VERSION_TAG = re.compile(r"(?i)Version tag does not match|engine created with incompatible serialization version")
# TensorRT 8.x's warning when an engine built on one GPU model is loaded on another.
# As the message itself, after the logger's tags, a quote's or a code span's opening mark, or a "WARNING:"
# label (a quoted sentence that runs into it is blanked before: _citation.py).
_OTHER_DEVICE_MODEL = re.compile(
    r"^-?\s*[`\"'\u201c]*\s*(?:(?:WARNING|Warning|\[W\]|W)\s*:?\s*)?"
    r"Using an engine plan file across different models of devices is not recommended"
    r"|`(?:WARNING: |\[W\] )?Using an engine plan file across different models of devices is not recommended"
)
_WORKSPACE = re.compile(
    r"(?i)(?:insufficient|not have sufficient|too small|increas\w* the workspace|workspace size .*? too small)"
)
_WORKSPACE_BYTES = re.compile(r"workspace size (?:to )?(?P<bytes>\d+)(?: bytes)?")
# A name after "node"/"layer" looks like one (a digit, a path, an underscore, a capital): not "node number
# 146" or "any layer consuming ...".
_NODE = re.compile(r"(?:for node|node|layer) (?=[^\s,:()]*[\d/_.\[\]{}A-Z])(?P<layer>[^\s,:()]+[^\s,:().])")
# A layer's own error puts its name first: "Error Code 4: Internal Error (/model.11/Reshape: IShuffleLayer
# applied to shape tensor ...)", "((Unnamed Layer* 7) [Shuffle]: at most one dimension may be inferred)".
_LAYER_FIRST = re.compile(r"^(?P<layer>\(Unnamed Layer\* \d+\) \[[^\]]+\]|[^\s:()][^:()]*?): (?:an? )?I[A-Z]\w*Layer\b")
# The builder's format selection failing for one layer names it first: "Error Code 9: Internal Error (/Conv_3: could not
# find any supported formats consistent with input/output data types)".
_FORMATS_FIRST = re.compile(r"^(?P<layer>[^\s:()][^:()]*?): could not find any supported formats\b")
_UNSUPPORTED_STATE = re.compile(r"UNSUPPORTED_STATE")
_UNNAMED_FIRST = re.compile(r"^\s*(?:\d{1,2}: )?(?P<layer>\(Unnamed Layer\* \d+\) \[[^\]\n]+\])\s*:")
# A message cut right after the layer's automatic name (an issue's title: "Error Code 9: Internal Error ((Unnamed Layer*
# 183)"): the detail read up to the name's own ")" leaves "(Unnamed Layer* 183".
_UNNAMED_CUT = re.compile(r"^\(Unnamed Layer\* (?P<n>\d+)\)?\s*$")
_UFF_VALIDATOR = re.compile(r"\bValidator error: (?P<layer>[^\s:]+): Unsupported operation\b")
# TensorRT 7's network validation names the layer first: "Layer: Where_1305's output can not be used as shape tensor."
_LAYER_OWN = re.compile(r"\bLayer: (?P<layer>[^\s']+)'s ")
# The builder's error when no tactic fits (TensorRT 5 to 7, and TF-TRT's "DefaultLogger" relaying it):
# "Internal error: could not find any implementation for node <node>, try increasing the workspace size with
# IBuilder::setMaxWorkspaceSize()". TensorRT's own wording: read with no logger tag too. TensorRT 8's logger puts
# its ErrorCode first instead ("10: Could not find any implementation for node X."), under an application's own
# severity tag ("ERROR: 10: ...").
# TensorRT 8's message for a Myelin-fused node names it "{ForeignNode[first...last]}", a name no other software
# prints: the message is the builder's with no code or tag too (a title quoting its detail).
_NO_IMPL = re.compile(
    r"(?i)(?:Internal error: |(?<![\w.:])(?P<code>10|[0-9]): )could not find any implementation for node \S"
    r"|(?<![\w.:])Could not find any implementation for node \{ForeignNode\["
)

# Context lines, read once per event and attached to what the event yields.
# trtexec's "TensorRT version: 8.6.1" and "[TensorRT v8601]" (its integer version, also written bare: "TensorRT
# v8503"); an issue template's environment ("**TensorRT Version**: 8.0.1.6", "TensorRT Version 8.0.1.6:", "- TensorRT
# version: 10.3", a field filled between its asterisks "**TensorRT Version*7.1.3.0*:").
_TRT_VERSION = re.compile(
    r"TensorRT(?:\*\*)? ?[Vv]ersion\**:? ?(?:\*\*)?:?[ \t]*v?(?P<v>\d+(?:\.\d+)+|\d{4,6})\b"
    r"|\[?TensorRT v(?P<n>\d{4,6})\b(?![.\d])"
)
# Else a release named by its number: a tarball's "TensorRT-8.4.3.1", "TensorRT 10.3.0", "TensorRT v8.6".
_TRT_RELEASE = re.compile(r"\bTensorRT[- ]v?(?P<v>\d{1,2}\.\d{1,2}(?:\.\d{1,3}){0,2})(?![\d.]*\d)")
_MEMUSAGE = re.compile(
    r"\[MemUsageChange\] (?P<stage>.*?): CPU [+-]?\d+, GPU [+-]?\d+, now: CPU (?P<cpu>\d+), GPU (?P<gpu>\d+) \((?P<unit>[KMG]i?B)\)"
)

# ---------------------------------------------------------------------------- benchmark regexes

_PREFIX = r"(?P<prefix>\s*(?:\[[^\]\n]*\]\s*)*)"
_SUMMARY_LINE = re.compile(
    r"^"
    + _PREFIX
    + r"(?P<key>=== Performance summary ===|Throughput|End-to-End Host Latency|Host Latency|Latency"
    r"|Enqueue Time|H2D Latency|GPU Compute Time|GPU Compute|D2H Latency|Total Host Walltime"
    r"|Total GPU Compute Time)"
    # A digest of a summary names one statistic a line after its metric: "Latency median: 16.5417 ms".
    r"(?: (?P<stat1>min|max|mean|median|percentile\((?P<pct1>\d+(?:\.\d+)?)%\)))?"
    r"(?::\s*(?P<body>.*?))?\s*$"
)
# "min = 1.2 ms"; a hand-copied summary may have lost the "=" ("max 6.19 ms").
_STAT = re.compile(
    r"(?P<stat>min|max|mean|median|percentile\((?P<pct>\d+(?:\.\d+)?)%\))(?: ?= ?| )"
    r"(?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?) ms\b"
)
# Totals found anywhere on a line (a copied summary may glue them onto another metric's line).
_GLUED = re.compile(
    r"(?P<k>Total Host Walltime|Total GPU Compute Time|Throughput): (?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?) ?(?P<u>s|qps)\b"
)
_CV = re.compile(r"coefficient of variance = (?P<v>\d+(?:\.\d+)?)%")
_RESULT = re.compile(r"^&&&& (?P<r>PASSED|FAILED|WAIVED) TensorRT\.trtexec")
# trtexec <= 7's layout: a heading line per metric, then "min: 1.2 ms" lines (and "percentile:
# 1.5 ms at 99%"), with the end-to-end figure in parentheses on the Host Latency lines.
_V_HEADING = re.compile(
    r"^" + r"(?P<prefix>\s*(?:\[[^\]\n]*\]\s*)*)"
    + r"(?P<key>End-to-End Host Latency|Host Latency|Enqueue Time|GPU Compute(?: Time)?|H2D Latency|D2H Latency)\s*$"
)
_V_STAT = re.compile(
    r"^\s*(?:\[[^\]\n]*\]\s*)*(?P<stat>min|max|mean|median|percentile): (?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?) ms"
    r"(?: at (?P<pct>\d+(?:\.\d+)?)%)?(?: \(end to end (?P<e2e>[-+]?\d+(?:\.\d+)?) ms(?: at \d+(?:\.\d+)?%)?\))?"
)
_V_TOTAL = re.compile(
    r"^\s*(?:\[[^\]\n]*\]\s*)*(?P<k>throughput|walltime|GPU Compute Time|Total Host Walltime): "
    r"(?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?) ?(?P<u>qps|s|ms)?\s*$",
    re.I,
)
_STAT_NAMES = {
    "Latency": "latency",
    "Host Latency": "latency",
    "End-to-End Host Latency": "end_to_end_latency",
    "Enqueue Time": "enqueue_time",
    "H2D Latency": "h2d_latency",
    "GPU Compute Time": "gpu_compute",
    "GPU Compute": "gpu_compute",
    "D2H Latency": "d2h_latency",
}
_NUM_UNIT = re.compile(r"^(?P<v>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?P<u>qps|s|ms)?$")
_DEVICE_LINE = re.compile(
    r"^"
    + _PREFIX
    + r"(?P<key>=== Device Information ===|Selected Device UUID|Selected Device ID|Selected Device"
    r"|Device|Compute Capability|SMs|Device Global Memory|Shared Memory per SM|Memory Bus Width"
    r"|Application Compute Clock Rate|Application Memory Clock Rate|Compute Clock Rate|Memory Clock Rate)"
    r"(?::\s*(?P<body>.*?))?\s*$"
)
_BUS_WIDTH = re.compile(r"^(?P<bits>\d+) bits(?: \(ECC (?P<ecc>enabled|disabled)\))?")
_GHZ = re.compile(r"^(?P<v>\d+(?:\.\d+)?) GHz$")
_LOG_TIME = re.compile(r"\[(?P<mo>\d\d)/(?P<d>\d\d)/(?P<y>\d{4})-(?P<t>\d\d:\d\d:\d\d)\]")
_BATCH = re.compile(
    r"--batch=(?P<a>\d+)|--shapes=[^:\s]+:(?P<b>\d+)x|Input inference shapes?: [^=\s]+=(?P<c>\d+)x"
    r"|^" + _PREFIX + r"Batch: (?P<d>\d+)\s*$",
    re.MULTILINE,
)
_PRECISION_LINE = re.compile(r"^" + _PREFIX + r"Precision: (?P<p>\S+)\s*$", re.MULTILINE)
_PRECISION_FLAGS = re.compile(r"\s--(?P<f>fp16|bf16|int8|fp8|best)\b")


class TensorRtClassifier:
    name = "tensorrt"
    # The words every text it reads contains: the registry's gate (_triggers.py).
    triggers = _triggers.TENSORRT
    gate_patterns = _triggers.TENSORRT_SHAPES

    def classify(self, text: str) -> list[Finding]:
        # Prefilter on words every recognised line carries: the logger tags ("[TRT]",
        # "[TensorRT]"), untagged coded errors, FP16 notices, the SM assertion, trtexec's stat
        # lines ("min = 1.2 ms, max = ...") and its "=== Device Information ===" header. Plain
        # `in` checks with needles of 4+ characters (substring search skips faster on longer
        # needles) keep an ordinary line to about 0.3 us.
        if not (
            "TRT]" in text
            or "TensorRT" in text
            or "Error Code" in text
            or "FP16" in text
            or "Unsupported SM" in text
            or "ms, max" in text
            or "tion ===" in text
            or "summary ===" in text
            or "Enqueue Time" in text
            or "GPU Compute" in text
            or "Host Latency" in text
            or "Cuda Error in" in text
            or "Serialization Error" in text
            or "ngine failed" in text
            or "eserialize cuda engine" in text
            or "deserialize engine. See log" in text
            or "ngine build failed" in text
            or "ngine file failed" in text
            or "optimization profile" in text
            or "ngine could not" in text
            or "nvinfer1::" in text
            or "Average o" in text
            or "NvDsInferContext" in text
            or "Skipping tactic" in text
            or "equested amount of GPU memory" in text
            or "equested amount of memory" in text
            or "engine plan file" in text
            or "xpect fall back to non-int8" in text
            or "sufficient workspace memory" in text
            or "ould not find any implementation" in text
            or "qps" in text
            or "-bit weights not found" in text
            or "tensorrt_execution_provider" in text
            or "Calibration failure occurred" in text
            or "ngine set up failed" in text
            or "Failed to create engine from" in text
            or "In node " in text
            or " In function " in text
            or "Invalid Node - " in text
            or "[E] " in text
            or "insufficient to use tactic" in text
        ):
            return []
        return _classify(text)


def _classify(text: str) -> list[Finding]:
    lines = text.splitlines()
    if " In function " in text:
        lines = _join_parser_errors(lines)
    findings: list[Finding] = []
    for line in lines:
        f = _error_line(line)
        if f is not None:
            findings.append(f)
    context = _context(text)
    if findings or context or "nvinfer1::" in text:
        # An assertion is TensorRT's only when the event also shows TensorRT at work.
        for line in lines:
            m = _C_ASSERT.search(line)
            if m and "Unsupported SM" not in line:
                findings.append(
                    Finding(
                        kind=KIND_TENSORRT_ERROR,
                        severity="error",
                        title=f"TensorRT application assertion failed: {m.group('what')}",
                        facts={
                            "category": "assertion_failed",
                            "assertion": m.group("what"),
                            "message": line.strip(),
                        },
                        excerpt=line.strip(),
                    )
                )
    if context and findings:
        findings = [_with_facts(f, context) for f in findings]
    bench = _benchmark(lines, text)
    if bench is None and "Average o" in text:
        bench = _run_averages(lines)
    if bench is not None:
        if context.get("trt_version") is not None:
            bench = _with_facts(bench, {"trt_version": context["trt_version"]})
        findings.append(bench)
    return findings


def _with_facts(f: Finding, extra: dict[str, FactValue]) -> Finding:
    facts = dict(f.facts)
    for k, v in extra.items():
        facts.setdefault(k, v)
    return Finding(
        kind=f.kind, severity=f.severity, title=f.title, facts=facts, excerpt=f.excerpt, ts_ns=f.ts_ns
    )


def _context(text: str) -> dict[str, FactValue]:
    ctx: dict[str, FactValue] = {}
    if "TensorRT" in text:
        m = _TRT_VERSION.search(text)
        if m:
            ctx["trt_version"] = (
                m.group("v")
                if m.group("v") and "." in m.group("v")
                else _decode_version(m.group("v") or m.group("n"))
            )
        else:
            r = _TRT_RELEASE.search(text)
            if r:
                ctx["trt_version"] = r.group("v")
    if "[MemUsageChange]" in text:
        usages = list(_MEMUSAGE.finditer(text))
        if usages:
            last = usages[-1]
            unit = last.group("unit")
            ctx["memusage_stage"] = last.group("stage")
            ctx["memusage_cpu_now_bytes"] = parse_size(f"{last.group('cpu')} {unit}")
            ctx["memusage_gpu_now_bytes"] = parse_size(f"{last.group('gpu')} {unit}")
            ctx["memusage_lines"] = len(usages)
    return ctx


def printed_version(text: str) -> tuple[str | None, str | None]:
    """The TensorRT version ``text`` prints: (from a version line, trtexec's or an environment's; from a
    release named by its number), each None where not printed. ``fleetscope scan`` gives a report's
    findings that name no version the one its environment section prints (another event of the file)."""
    if "TensorRT" not in text:
        return None, None
    m = _TRT_VERSION.search(text)
    if m:
        v = m.group("v")
        return (v if v and "." in v else _decode_version(v or m.group("n"))), None
    r = _TRT_RELEASE.search(text)
    return None, (r.group("v") if r else None)


# The library named in other spellings, as environment lists and pip print it: "Tensorrt version:8.4.0.6",
# "tensorRT 7.1.0.16", "tensorrt           6.0.1.5" (pip list), "TRT 8.6", "Trt8.4.1". Not another package whose
# name holds it ("onnx-tensorrt 0.1.0", "torch_tensorrt 1.4", "tensorrt-llm 0.9", "tensorrt_llm").
_LOOSE_VERSION = re.compile(
    r"(?i)(?<![\w-])(?:tensorrt|trt)(?![a-z_-])[ \t]*(?:version)?[ \t:=*]*v?(?P<v>(?:[2-9]|1[0-9])\.\d{1,2}(?:\.\d{1,3}){0,2})(?![\d.]*\d)"
)


def loose_version(text: str) -> str | None:
    """The TensorRT release ``text`` names in any spelling (``fleetscope scan`` reads it in a small file whose
    findings name no version and whose lines the gate passed over); None where none is printed."""
    m = _LOOSE_VERSION.search(text)
    return m.group("v") if m else None


def _decode_version(raw: str) -> str:
    """TensorRT's integer version: 8601 -> "8.6.1" (major*1000+minor*100+patch), 100300 -> "10.3.0"."""
    n = int(raw)
    if n >= 10000:
        return f"{n // 10000}.{(n // 100) % 100}.{n % 100}"
    return f"{n // 1000}.{(n // 100) % 10}.{n % 100}"


# ------------------------------------------------------------------------------------ errors


def _message_of(line: str) -> str:
    msg = line
    for _ in range(6):  # a handful of tags at most ("[INFO] [date] [TRT] [E]")
        m = _LEAD.match(msg)
        if not m or not m.group(0):
            break
        msg = msg[m.end() :]
    return msg.strip()


_EMPTY_CODED = re.compile(r"\d+:\s*")


def _error_line(line: str) -> Finding | None:
    # Same words as the prefilter, per line: most lines of a multi-line event are not errors.
    if not (
        "RT]" in line
        or "Error Code" in line
        or "P16" in line
        or "p16" in line
        or "Unsupported SM" in line
        or "TensorRT" in line
        or "actic" in line
        or "workspace" in line
        or " Error in " in line
        or "ngine" in line
        or "ubnormal" in line
        or "optimization profile" in line
        or "non-int8" in line
        or "equested amount" in line
        or "Error[" in line
        or "weights not found" in line
        or "tensorrt_execution_provider" in line
        or "Calibration failure" in line
        or "In node " in line
        or " In function " in line
        or "Invalid Node - " in line
        or "implementation for node" in line
        or "[E] " in line
        or "to use tactic" in line
        or "range of INT32" in line
    ):
        return None
    sev = _SEV_TAG.search(line)
    tag = None
    if sev:
        tag = next((g for g in sev.groups() if g), None)
    printed = _SEV_NORMAL.get(tag or "", None)
    if printed == "info":
        return None  # INFO/VERBOSE lines are progress, never incidents
    tagged_trt = "[TRT]" in line or "[TensorRT]" in line or "tensorrt_execution_provider" in line
    message = _message_of(line)
    if _EMPTY_CODED.fullmatch(message):
        # The logger's "[E] 2: " with an empty description (TensorRT reports "<code>: <desc>"): no error of its
        # own, a blank report beside the coded errors of the same failure.
        return None
    facts: dict[str, FactValue] = {}
    if tag:
        facts["severity_tag"] = tag

    category, severity, title = _categorise(line, message, facts, printed, tagged_trt)
    if category is None:
        return None
    facts["category"] = category
    facts["message"] = message
    if "layer" not in facts and category != "onnx_parser_error" and (
        "node" in message or "layer" in message or "Layer" in message or "Validator error" in message
    ):
        # The node a "no implementation" error names runs to the end of its detail (or message).
        detail = facts.get("error_detail")
        impl = None
        if not facts.get("cut"):
            impl = _IMPL_NODE.search(detail if isinstance(detail, str) else message)
        first = _LAYER_FIRST.search(detail) if isinstance(detail, str) and "Layer" in detail else None
        whole = impl.group("layer") if impl and _balanced(impl.group("layer")) else None
        if whole is None and not first and "implementation for node" in message:
            # The detail in parentheses holds parentheses of its own ("(Unnamed Layer* 8) [Fully
            # Connected]") or lost its ")": the node runs to the message's end, less the detail's ")".
            whole = _whole_node(message)
        own = _LAYER_OWN.search(message) if "Layer: " in message else None
        if not (impl or first or own):
            # A layer's own error names it first in the logger's message: "3: (Unnamed Layer* 201) [Convolution]:kernel
            # weights has count ..." (TensorRT's automatic name), the UFF parser's "Validator error: <node>: Unsupported
            # operation <op>".
            own = (_UNNAMED_FIRST.search(detail if isinstance(detail, str) else message) if "Unnamed Layer" in message
                   else _UFF_VALIDATOR.search(message) if "Validator error" in message else None)
        node = impl or first or own or _NODE.search(message)
        if whole is not None:
            facts["layer"] = whole
        elif node:
            facts["layer"] = node.group("layer")
    detail = facts.get("error_detail")
    if "layer" not in facts and isinstance(detail, str) and "supported formats" in detail:
        fmt = _FORMATS_FIRST.search(detail)
        if fmt:
            facts["layer"] = fmt.group("layer")
    if "layer" not in facts and isinstance(detail, str) and "Unnamed Layer" in detail:
        cut = _UNNAMED_CUT.match(detail)
        if cut:
            facts["layer"] = f"(Unnamed Layer* {cut['n']})"
    return Finding(
        kind=KIND_TENSORRT_ERROR, severity=severity, title=title, facts=facts, excerpt=line.strip()
    )


# onnx-tensorrt's ErrorCode names (kUNSUPPORTED_NODE, ...), as its ModelImporter prints them.
_ONNX_PARSER = re.compile(
    r"\bIn node -?\d+ (?:with name: (?P<name>\S.*?) and operator: (?P<op>\S+) )?\((?P<fn>\w+)\): "
    r"(?P<code>INTERNAL_ERROR|MEM_ALLOC_FAILED|MODEL_DESERIALIZE_FAILED|INVALID_VALUE|INVALID_GRAPH|INVALID_NODE"
    r"|UNSUPPORTED_GRAPH|UNSUPPORTED_NODE|UNSUPPORTED_NODE_ATTR|UNSUPPORTED_NODE_INPUT|UNSUPPORTED_NODE_DATATYPE"
    r"|UNSUPPORTED_NODE_DYNAMIC|UNSUPPORTED_NODE_SHAPE|REFIT_FAILED):"
)
# Its C++ ModelImporter (TensorRT 6 to 10) logs each parser error as LOG_ERROR("ERROR: " << file << ":" << line <<
# " In function " << func << ":\n" << "[" << code << "] " << desc), after "While parsing node number N [Op -> \"out\"]:"
# for an error at a node; the code is NvOnnxParser.h's ErrorCode.
_ONNX_CODES = ("SUCCESS", "INTERNAL_ERROR", "MEM_ALLOC_FAILED", "MODEL_DESERIALIZE_FAILED", "INVALID_VALUE", "INVALID_GRAPH",
               "INVALID_NODE", "UNSUPPORTED_GRAPH", "UNSUPPORTED_NODE", "UNSUPPORTED_NODE_ATTR", "UNSUPPORTED_NODE_INPUT",
               "UNSUPPORTED_NODE_DATATYPE", "UNSUPPORTED_NODE_DYNAMIC", "UNSUPPORTED_NODE_SHAPE", "REFIT_FAILED")
# The Python backend (onnx_tensorrt.backend) raises the same error as RuntimeError("While parsing node number N:\n"
# "<file>:<line> In function <func>:\n[<code>] <desc>"), with no "ERROR: ": read then only with its "[code]".
_ONNX_IN_FUNCTION = re.compile(
    r"(?P<err>\bERROR: )?(?<![\w.\\/-])(?P<file>[\w.\\/-]+\.(?:cpp|hpp|cc|cu|h)):(?P<line>\d+) In function (?P<fn>\w+):"
    r"(?:\s*\[(?P<code>\d{1,2})\](?: (?P<desc>.*\S))?)?"
)
_ONNX_NODE = re.compile(r"While parsing node number (?P<n>-?\d+) \[(?P<op>[\w.]+)(?: -> \\?\"(?P<out>[^\"\\\n]*)\\?\")?\]")
_ONNX_CODE_LINE = re.compile(r"^\s*\[\d{1,2}\] \S")
_INVALID_NODE = re.compile(r"Invalid Node - (?P<name>[^\s,]+)")
# That description on a line of its own: the parser's message holds a newline after "In function <f>:", so a
# log shows "[6] Invalid Node - <node>" as a line (an event) apart from the "ERROR: ... In function" line.
_INVALID_NODE_LINE = re.compile(r"^\s*(?:\[(?P<code>\d{1,2})\] )?Invalid Node - (?P<name>[^\s,]+)")


def _join_parser_errors(lines: list[str]) -> list[str]:
    """The parser's "... In function F:" line joined with the "[N] desc" line its message goes on with."""
    out: list[str] = []
    for line in lines:
        if out and _ONNX_CODE_LINE.match(line) and out[-1].rstrip().endswith(":") and " In function " in out[-1]:
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return out


_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"))


def _balanced(name: str) -> bool:
    return all(name.count(a) == name.count(b) for a, b in _PAIRS)


def _whole_node(message: str) -> str | None:
    """The node a "no implementation" error names, read to the end of ``message``: whole only when its
    brackets close (a name cut by a paste is left to the shorter reading)."""
    m = _IMPL_NODE.search(message)
    if not m:
        return None
    name = m.group("layer").rstrip()
    while name.endswith(")") and name.count(")") > name.count("("):
        name = name[:-1].rstrip().rstrip(".")
    if name and not _balanced(name):
        # Text after the message on its line (a quote's closing mark, the writer's own words): the name ends
        # where TensorRT's detail does, at the first ".)" that leaves it whole.
        at = name.find(".)")
        while at > 0:
            if _balanced(name[:at]):
                return name[:at]
            at = name.find(".)", at + 1)
        return None
    return name or None


def _sev(printed: str | None, default: str) -> str:
    return printed if printed in ("error", "warning") else default


def _categorise(
    line: str, message: str, facts: dict[str, FactValue], printed: str | None, tagged: bool
) -> tuple[str | None, str, str]:
    m = _ONNX_PARSER.search(line) if "In node " in line else None
    if m:
        # onnx-tensorrt's parser (ModelImporter): "In node -1 (parseGraph): UNSUPPORTED_NODE: Assertion failed: ...",
        # TensorRT 8.6+: "In node 0 with name: /Mul and operator: Mul (parseGraph): INVALID_NODE: ...".
        facts["onnx_error"] = m["code"]
        if m["name"]:
            facts["layer"] = m["name"]
        if m["op"]:
            facts["onnx_operator"] = m["op"]
        return "onnx_parser_error", _sev(printed, "error"), f"TensorRT's ONNX parser failed: {m['code']}"
    m = _INVALID_NODE_LINE.match(message) if "Invalid Node - " in line else None
    if m:
        facts["onnx_error"] = "INVALID_NODE"
        if m["code"]:
            facts["onnx_error_code"] = int(m["code"])
        facts["layer"] = m["name"]
        return "onnx_parser_error", _sev(printed, "error"), f"TensorRT's ONNX parser failed: invalid node {m['name']}"
    m = _ONNX_IN_FUNCTION.search(line) if " In function " in line else None
    if m and (m["err"] or m["code"]):
        facts["onnx_function"] = m["fn"]
        facts["error_site"] = f"{m['file']}:{m['line']}"
        code = int(m["code"]) if m["code"] else None
        if code is not None:
            facts["onnx_error_code"] = code
            if code < len(_ONNX_CODES):
                facts["onnx_error"] = _ONNX_CODES[code]
        if m["desc"]:
            facts["error_detail"] = m["desc"]
            # parseGraph's kINVALID_NODE names the node: "[6] Invalid Node - <node name>" (then why, a line on).
            inv = _INVALID_NODE.match(m["desc"])
            if inv:
                facts["layer"] = inv["name"]
        node = _ONNX_NODE.search(line)
        if node:
            facts["onnx_node_index"] = int(node["n"])
            facts["onnx_operator"] = node["op"]
        what = facts.get("onnx_error") or f"in {m['fn']}"
        return "onnx_parser_error", _sev(printed, "error"), f"TensorRT's ONNX parser failed: {what}"
    m = _SKIP_TACTIC.search(line) if "actic" in line else None
    if m:
        if m.group("status"):
            facts["error_status"] = m.group("status")
        idx = m.group("idx")
        facts["tactic_index" if idx.isdigit() else "tactic"] = int(idx) if idx.isdigit() else idx
        if m.group("tactic"):
            facts["tactic"] = m.group("tactic")
        if m.group("size"):
            facts["requested_bytes"] = int(m.group("size"))
        buf = _BUFFER_BYTES.search(line) if "-byte buffer" in line else None
        if buf and "requested_bytes" not in facts:
            facts["requested_bytes"] = int(buf.group("bytes"))
        memory = bool(_INSUFFICIENT_MEMORY.search(line[m.start("why"):] if m.group("why") is not None else ""))
        facts["out_of_memory"] = memory
        cat = "tactic_skipped_insufficient_memory" if memory else "tactic_skipped"
        what = f"needs {facts['requested_bytes']} bytes" if "requested_bytes" in facts else m.group("why")
        return cat, _sev(printed, "warning"), f"TensorRT skipped tactic {idx}: {what}"
    m = _TACTIC_DEVICE.search(line) if "actic" in line else None
    if m:
        facts["requested_bytes"] = parse_size(f"{m.group('req')} {m.group('ru')}")
        facts["available_bytes"] = parse_size(f"{m.group('avail')} {m.group('au')}")
        facts["out_of_memory"] = True
        title = f"TensorRT tactic needs {m.group('req')}{m.group('ru')} of device memory, {m.group('avail')}{m.group('au')} available"
        return "tactic_device_memory_insufficient", _sev(printed, "warning"), title
    if "to use tactic" in line and _INSUFFICIENT_TACTIC.search(line):
        facts["out_of_memory"] = True
        return "tactic_device_memory_insufficient", _sev(printed, "warning"), "TensorRT: too little device memory for a tactic"
    m = _REQUESTED_GPU.search(line)
    if m:
        facts["requested_bytes"] = int(m.group("bytes"))
        facts["out_of_memory"] = True
        return (
            "gpu_memory_allocation_failed" if m.group("gpu") else "memory_allocation_failed",
            _sev(printed, "error"),
            f"TensorRT could not allocate {m.group('bytes')} bytes of {'GPU ' if m.group('gpu') else ''}memory",
        )
    m = _ERROR_CODE.search(message) if "Error Code" in line else None
    if m:
        code = int(m.group("code"))
        cat_printed = m.group("cat").strip()
        detail = (m.group("detail") or "").strip()
        facts["error_code"] = code
        facts["error_category"] = cat_printed
        if m.group("detail") is not None:
            facts["error_detail"] = detail
        if m.group("origin"):
            facts["error_origin"] = m.group("origin")
        if m.group("cls"):
            facts["error_class"] = int(m.group("cls"))
        if m.group("cut") is not None:
            detail = m.group("cut").strip()
            facts["error_detail"] = detail
            facts["cut"] = True
        oom = "outofmemory" in cat_printed.replace(" ", "").lower() or "out of memory" in detail.lower()
        size = _REQUESTED_SIZE.search(detail) if "Requested size" in detail else None
        if size:
            facts["requested_bytes"] = int(size.group("bytes"))
        # TensorRT's allocator failing its cudaMalloc: TensorRT 10 names only where ("Cuda Runtime (In
        # allocate at common/dispatch/defaultAllocator.cpp:57)"), 8.x the CUDA error ("(out of memory)").
        allocation = (
            not oom
            and cat_printed.lower().startswith("cuda")
            and ("::allocate::" in (m.group("origin") or "") or detail.startswith("In allocate at"))
            and (not detail or detail.startswith("In allocate at") or detail == "no further information")
        )
        if allocation:
            facts["allocation_failed"] = True
        facts["out_of_memory"] = oom or allocation
        device = _ENGINE_DEVICE.search(message)
        if _version_facts(message, facts):
            cat = "engine_version_mismatch"
        elif device:
            facts["expected_compute_capability"] = device.group("want")
            facts["compute_capability"] = device.group("got")
            cat = "engine_device_mismatch"
        elif _MAGIC.search(message):
            cat = "engine_invalid"
        elif oom:
            cat = "out_of_memory"
        elif allocation:
            cat = "gpu_memory_allocation_failed"
        elif cat_printed.lower().startswith("cuda"):
            cat = "cuda_runtime_error"
        elif "UNSUPPORTED_STATE" in message:
            cat = "unsupported_state"
        else:
            cat = "error_code"
        if "workspace" in message and _WORKSPACE.search(message):
            cat = "workspace_too_small"
        title = f"TensorRT error code {code}: {cat_printed}" + (f" ({detail})" if detail else "")
        return cat, _sev(printed, "error"), title
    m = _RECORDER.search(line) if "Error[" in line else None
    if m:
        facts["error_code"] = int(m.group("code"))
        detail = line[m.end() :].strip()
        if detail:
            facts["error_detail"] = detail
        return "error_code", _sev(printed, "error"), f"TensorRT error {m.group('code')}: {detail[:100]}"
    m = _NVDSINFER.search(line) if "NvDsInferContext" in line else None
    if m:
        facts["error_origin"] = m.group("origin")
        facts["error_status"] = m.group("func")
        _put_detail = m.group("detail").strip()
        if _put_detail:
            facts["error_detail"] = _put_detail
        build = "build" in m.group("func").lower() or "build" in _put_detail.lower()
        return ("build_failed" if build else "error"), _sev(printed, "error"), f"DeepStream nvinfer: error in {m.group('func')}"
    m = _STATUS_LINE.search(line) if " Error in " in line else None
    if m and not m.group("what").startswith("Cuda"):
        facts["error_origin"] = f"{m.group('origin')}:{m.group('line')}"
        facts["error_status"] = f"{m.group('what')} Error in {m.group('func')}"
        # TensorRT <= 7's "<file> (<line>) - <What> Error in <func>: <status> (<detail>)": the number is the
        # status its function returned, not an "Error Code" (which TensorRT 8 introduced), and is kept apart.
        facts["error_status_code"] = int(m.group("code"))
        if m.group("detail") is None:
            if m.group("what") == "OutOfMemory":
                facts["out_of_memory"] = True
                return "out_of_memory", _sev(printed, "error"), f"TensorRT ran out of memory in {m.group('func')}"
            return "error_code", _sev(printed, "error"), f"TensorRT {m.group('what')} error in {m.group('func')}"
        facts["error_detail"] = m.group("detail")
        if _MAGIC.search(m.group("detail")):
            return "engine_invalid", _sev(printed, "error"), f"TensorRT could not deserialize the engine ({m.group('detail')})"
        if _VERSION_TAG.search(m.group("detail")):
            return (
                "engine_version_mismatch",
                _sev(printed, "error"),
                f"TensorRT engine was serialized by another TensorRT version ({m.group('detail')})",
            )
        return "error_code", _sev(printed, "error"), f"TensorRT {m.group('what')} error in {m.group('func')}: {m.group('detail')}"
    m = _CUDA_ERROR_IN.search(line)
    if m:
        name = m.group("name")
        facts["cuda_call"] = m.group("call")
        facts["cuda_error_code"] = int(m.group("code"))
        if name is not None:
            facts["cuda_error_name"] = name
        # 2 is cudaErrorMemoryAllocation, whether or not its name is printed.
        facts["out_of_memory"] = "out of memory" in (name or "").lower() or m.group("code") == "2"
        return (
            "cuda_error",
            _sev(printed, "error"),
            f"CUDA error {m.group('code')}" + (f" ({name})" if name else "") + f" in {m.group('call')}",
        )
    m = _CUDA_INIT.search(line)
    if m:
        facts["cuda_error_code"] = int(m.group("code"))
        return (
            "cuda_init_failure",
            _sev(printed, "error"),
            f"TensorRT: CUDA initialization failed with error {m.group('code')}",
        )
    if "Calibration failure" in line and _CALIBRATION_FAILED.search(line):
        facts["precision"] = "int8"
        return "int8_calibration_failed", _sev(printed, "error"), "TensorRT INT8 calibration found no scaling factors"
    if "ngine" in line and _TRTEXEC_SETUP.search(line):
        return "build_failed", _sev(printed, "error"), f"trtexec: {message[:100]}"
    m = _MISSING_SCALE.search(line) if "non-int8" in line else None
    if m:
        facts["precision"] = "int8"
        facts["precision_issue"] = "missing_scale"
        facts["tensor"] = m.group("tensor")
        return (
            "int8_missing_scale",
            _sev(printed, "warning"),
            f"TensorRT INT8: no scale for tensor {m.group('tensor')}, its layers fall back from INT8",
        )
    m = _CAFFE_WEIGHTS.search(line) if "weights not found" in line else None
    if m:
        facts["layer"] = m.group("layer")
        return (
            "caffe_weights_missing",
            _sev(printed, "error"),
            f"TensorRT Caffe parser: {m.group('bits')}-bit weights not found for layer {m.group('layer')}",
        )
    if "INT" in line and _INT64_CAST.search(line):
        facts["precision"] = "int32"
        facts["precision_issue"] = "int64_weights_cast_to_int32"
        return "int64_weights_cast", _sev(printed, "warning"), "TensorRT's ONNX parser casts INT64 weights down to INT32"
    if "16" in line or "INT8" in line or "int8" in line or "Int8" in line:
        if "calibration file" in line and _NVDS_NO_CALIBRATION.search(line):
            facts["precision"] = "int8"
            facts["precision_issue"] = "no_calibration_file"
            return ("int8_calibration_missing", _sev(printed, "warning"),
                    "DeepStream nvinfer: no INT8 calibration file, the engine is built in FP16")
        m = _HALF2.search(line)
        if m:
            int8 = m.group("prec").lower() == "int8"
            facts["precision"] = "int8" if int8 else "fp16"
            facts["precision_issue"] = "int8_without_native_int8" if int8 else "half2_without_native_fp16"
            return (
                "int8_unsupported" if int8 else "fp16_unsupported",
                _sev(printed, "warning"),
                "TensorRT: " + ("INT8" if int8 else "Half2/FP16") + " requested on hardware without native support",
            )
        if _LAYERNORM_FP16.search(line):
            facts["precision"] = "fp16"
            facts["precision_issue"] = "layernorm_overflow"
            return "fp16_layernorm_overflow", _sev(printed, "warning"), "TensorRT: layernorm in FP16 may overflow"
        m = _PLATFORM_PREC.search(line) or _PREC_NOT_SUPPORTED.search(line)
        if m:
            prec = m.group("prec").lower()
            facts["precision"] = prec
            facts["precision_issue"] = (
                "platform_no_fast_native" if m.re is _PLATFORM_PREC else "not_supported"
            )
            cat = "int8_unsupported" if prec == "int8" else "fp16_unsupported"
            return (
                cat,
                _sev(printed, "warning"),
                f"TensorRT: {prec.upper()} not supported natively on this GPU",
            )
    m = _UNSUPPORTED_SM.search(line)
    if m:
        sm = m.group("sm")
        if sm is None:
            sv = _SM_VALUE.search(message.replace("Unsupported SM", ""))
            sm = sv.group("sm") if sv else None
        if sm:
            facts["sm"] = sm
        a = _ASSERTION_FAILED.search(message)
        if a:
            facts["assertion"] = a.group("what")
        return (
            "unsupported_sm",
            _sev(printed, "error"),
            "TensorRT does not support this GPU architecture (SM)" + (f" {sm}" if sm else ""),
        )
    if "engine" in line or "Engine" in line or "Serializ" in line or "tag does not match" in line:
        if _version_facts(message, facts):
            return (
                "engine_version_mismatch",
                _sev(printed, "error"),
                "TensorRT engine was built by another TensorRT version",
            )
        m = _ENGINE_DEVICE.search(line)
        if m:
            facts["expected_compute_capability"] = m.group("want")
            facts["compute_capability"] = m.group("got")
            return (
                "engine_device_mismatch",
                _sev(printed, "error"),
                f"TensorRT engine was built for compute {m.group('want')}, this GPU is {m.group('got')}",
            )
        if _MAGIC.search(line):
            return "engine_invalid", _sev(printed, "error"), "TensorRT could not deserialize the engine file"
        # Only as the message itself (after the logger's tags), not quoted inside a sentence.
        if "plan file across" in line and _OTHER_DEVICE_MODEL.search(message):
            return (
                "engine_other_device_model",
                _sev(printed, "warning"),
                "TensorRT engine was built on another GPU model than this one",
            )
    m = _BEST_TACTIC_OOM.search(message) if "getBestTactic" in line else None
    if m:
        if m.group("layer"):
            facts["layer"] = m.group("layer")
        facts["out_of_memory"] = True
        return "out_of_memory", _sev(printed, "error"), "TensorRT ran out of memory choosing a tactic"
    if "workspace" in line and _WORKSPACE.search(line) and (tagged or printed or _WORKSPACE_TACTICS.search(line)):
        wb = _WORKSPACE_BYTES.search(line)
        if wb:
            facts["requested_bytes"] = int(wb.group("bytes"))
        if printed == "error" and _WORKSPACE_ADVICE.search(message):
            facts["out_of_memory"] = True
        return (
            "workspace_too_small",
            _sev(printed, "warning"),
            "TensorRT: builder workspace too small for some tactics",
        )
    if "optimization profile" in line and _NO_PROFILE.search(line):
        return "missing_optimization_profile", _sev(printed, "error"), "TensorRT: dynamic inputs without an optimization profile"
    if "ubnormal" in line or "FP16" in line or "converting weights" in line:
        if _SUBNORMAL.search(line):
            facts["precision"] = "fp16"
            facts["precision_issue"] = "weights_out_of_fp16_range"
            n = _AFFECTED.search(line)
            if n:
                facts["affected_weights"] = int(n.group("n"))
            return "fp16_weights_out_of_range", _sev(printed, "warning"), "TensorRT: weights lose precision in FP16"
    if "ngine" in line:
        if _DESERIALIZE.search(line) and "open error" not in line and "file path" not in line:
            return "engine_deserialize_failed", _sev(printed, "error"), "TensorRT could not deserialize the engine"
        if _BUILD_FAILED.search(line) and ("fail" in line.lower() or "could not" in line or "unable" in line.lower()):
            return "build_failed", _sev(printed, "error"), f"TensorRT engine build failed: {message[:100]}"
    if "FAILED TensorRT" in line:
        m = _TRTEXEC_FAILED.search(line)
        if m:
            if m.group("v"):
                facts["trt_version"] = _decode_version(m.group("v"))
            return "trtexec_failed", "error", "trtexec failed" + (f" (TensorRT {facts['trt_version']})" if m.group("v") else "")
    if _UNSUPPORTED_STATE.search(line) and (tagged or printed):
        return "unsupported_state", _sev(printed, "error"), f"TensorRT unsupported state: {message[:100]}"
    if printed == "error" and tagged:
        return "error", "error", f"TensorRT error: {message[:120]}"
    m = _NO_IMPL.search(line) if "implementation for node" in line else None
    if m:
        if m["code"]:
            facts["error_code"] = int(m["code"])
        return "error", _sev(printed, "error"), f"TensorRT error: {message[:120]}"
    m = _CODED_E.search(line) if printed == "error" and "[E] " in line else None
    if m:
        facts["error_code"] = int(m.group("code"))
        facts["error_detail"] = m.group("desc").strip()
        return "error_code", "error", f"TensorRT error {m.group('code')}: {m.group('desc')[:100]}"
    return None, "", ""


def _version_facts(message: str, facts: dict[str, FactValue]) -> bool:
    m = _ENGINE_VERSION.search(message)
    if m:
        facts["trt_version"] = m.group("lib")
        facts["engine_trt_version"] = m.group("plan")
        return True
    m = _SERIAL_VERSION.search(message)
    if m:
        facts["serialization_version"] = int(m.group("cur"))
        facts["engine_serialization_version"] = int(m.group("eng"))
        return True
    return bool(_VERSION_TAG.search(message))


# ---------------------------------------------------------------------------------- benchmark


def _vertical(lines: list[str], facts: dict[str, FactValue], excerpt: list[str]) -> str | None:
    """trtexec <= 7's layout; returns the line prefix when the event has one."""
    name: str | None = None
    prefix: str | None = None
    for line in lines:
        h = _V_HEADING.match(line)
        if h:
            name = _STAT_NAMES[h["key"] if h["key"] != "GPU Compute Time" else "GPU Compute"]
            prefix = h["prefix"] if prefix is None else prefix
            excerpt.append(line.rstrip())
            continue
        t = _V_TOTAL.match(line)
        if t and name is not None:
            k, v = t["k"].lower(), float(t["v"])
            if k == "throughput":
                facts["throughput_qps"] = v
            elif k in ("walltime", "total host walltime"):
                facts["total_host_walltime_s"] = v
            else:
                facts["total_gpu_compute_time_s"] = v
            excerpt.append(line.rstrip())
            continue
        st = _V_STAT.match(line)
        if st and name is not None:
            stat = st["stat"]
            if stat == "percentile":
                if not st["pct"]:
                    continue
                stat = "p" + st["pct"].replace(".", "_")
            facts[f"{name}_{stat}_ms"] = float(st["v"])
            if st["e2e"] and name == "latency":
                facts[f"end_to_end_latency_{stat}_ms"] = float(st["e2e"])
            excerpt.append(line.rstrip())
    return prefix


# trtexec's per-run averages: TensorRT 4-5 "Average over 10 runs is 0.66 ms (host walltime is 0.81 ms,
# 99% percentile time is 0.67).", TensorRT 7+ "Average on 10 runs - GPU latency: 2.11 ms - Host latency:
# 2.14 ms (enqueue 2.11 ms)", giexec's "Average over 10 runs is 12.87 ms."
_AVERAGE_OVER = re.compile(
    r"Average over (?P<n>\d+) runs is (?P<avg>[\d.]+) ms(?: \((?:host walltime is (?P<wall>[\d.]+) ms, )?"
    r"(?:(?P<pct>\d+(?:\.\d+)?)% )?percentile time is (?P<p>[\d.]+)(?: ms)?\))?"
)
_AVERAGE_ON = re.compile(
    r"Average on (?P<n>\d+) runs - GPU latency: (?P<gpu>[\d.]+) ms - Host latency: (?P<host>[\d.]+) ms"
    r"(?: \(enqueue (?P<enq>[\d.]+) ms\))?"
)


def _run_averages(lines: list[str]) -> Finding | None:
    """trtexec's per-run average lines (all of them in the event) as one benchmark finding."""
    over = [m for m in map(_AVERAGE_OVER.search, lines) if m]
    on = [m for m in map(_AVERAGE_ON.search, lines) if m]
    if not over and not on:
        return None
    facts: dict[str, FactValue] = {"record": "run_averages"}
    if on:
        facts["runs_per_average"] = int(on[0]["n"])
        facts["averages_printed"] = len(on)
        facts["trace_gpu_latency_mean_ms"] = round(sum(float(m["gpu"]) for m in on) / len(on), 6)
        facts["trace_host_latency_mean_ms"] = round(sum(float(m["host"]) for m in on) / len(on), 6)
        facts["trace_host_latency_max_ms"] = max(float(m["host"]) for m in on)
    else:
        # TensorRT <= 5 prints no summary: the averages are the run's latency.
        facts["runs_per_average"] = int(over[0]["n"])
        facts["averages_printed"] = len(over)
        avgs = [float(m["avg"]) for m in over]
        facts["latency_mean_ms"] = round(sum(avgs) / len(avgs), 6)
        facts["latency_min_ms"], facts["latency_max_ms"] = min(avgs), max(avgs)
        walls = [float(m["wall"]) for m in over if m["wall"]]
        if walls:
            facts["host_walltime_mean_ms"] = round(sum(walls) / len(walls), 6)
    first = (on or over)[0]
    title = f"trtexec run averages: {facts['averages_printed']} x {facts['runs_per_average']} runs"
    return Finding(kind=KIND_TRT_BENCHMARK, severity="info", title=title, facts=facts,
                   excerpt=first.string.strip()[:300])


def _benchmark(lines: list[str], text: str) -> Finding | None:
    if "ms, max" not in text and "===" not in text and " qps" not in text and "ms at " not in text:
        if not ("min: " in text and ("GPU Compute" in text or "Enqueue Time" in text or "Latency" in text)):
            return None
    facts: dict[str, FactValue] = {}
    excerpt: list[str] = []
    prefix: str | None = None
    header = False
    stats_seen = False
    digest = False  # statistics a line each, "<metric> <stat>: x ms": a digest of trtexec's summary
    throughput = False
    if "min: " in text:
        prefix = _vertical(lines, facts, excerpt)
        stats_seen = any(k.endswith("_ms") for k in facts)
        throughput = "throughput_qps" in facts
        if stats_seen:
            facts["layout"] = "vertical"
    for line in lines:
        if "Total " in line or "coefficient of variance" in line:
            for g in _GLUED.finditer(line):
                k, v = g["k"], float(g["v"])
                if k == "Throughput" and g["u"] == "qps":
                    facts["throughput_qps"] = v
                elif k == "Total Host Walltime" and g["u"] == "s":
                    facts["total_host_walltime_s"] = v
                elif k == "Total GPU Compute Time" and g["u"] == "s":
                    facts["total_gpu_compute_time_s"] = v
            cv = _CV.search(line)
            if cv:
                facts["gpu_compute_cv_percent"] = float(cv["v"])
        if line.startswith("&&&&"):
            r = _RESULT.match(line)
            if r:
                facts["result"] = r["r"]
        m = _SUMMARY_LINE.match(line)
        if not m:
            continue
        key, body = m.group("key"), (m.group("body") or "")
        if prefix is None:
            prefix = m.group("prefix")
        if key.startswith("==="):
            header = True
            excerpt.append(line.rstrip())
            continue
        if m.group("stat1") is not None:
            nm = _NUM_UNIT.match(body.strip()) if key in _STAT_NAMES else None
            if nm and nm.group("u") == "ms":
                stat = "p" + m.group("pct1").replace(".", "_") if m.group("pct1") else m.group("stat1")
                facts[f"{_STAT_NAMES[key]}_{stat}_ms"] = float(nm.group("v"))
                digest = True
                excerpt.append(line.rstrip())
            continue
        if key in _STAT_NAMES:
            stats = list(_STAT.finditer(body))
            if not stats:
                continue
            name = _STAT_NAMES[key]
            for s in stats:
                stat = s.group("stat")
                if s.group("pct"):
                    stat = "p" + s.group("pct").replace(".", "_")
                facts[f"{name}_{stat}_ms"] = float(s.group("v"))
            stats_seen = True
            excerpt.append(line.rstrip())
            continue
        nm = _NUM_UNIT.match(body.strip())
        if not nm:
            if key in ("Throughput", "Total Host Walltime", "Total GPU Compute Time") and _GLUED.search(line):
                excerpt.append(line.rstrip())
                throughput = throughput or "throughput_qps" in facts
            continue
        value, unit = float(nm.group("v")), nm.group("u")
        if key == "Throughput" and unit == "qps":
            facts["throughput_qps"] = value
            throughput = True
        elif key == "Total Host Walltime" and unit == "s":
            facts["total_host_walltime_s"] = value
        elif key == "Total GPU Compute Time" and unit == "s":
            facts["total_gpu_compute_time_s"] = value
        else:
            continue
        excerpt.append(line.rstrip())
    if digest and not stats_seen:
        # Statistics written one a line by a digest are trtexec's only beside its own marks: the "[I]" level tag or
        # the run's "&&&& PASSED TensorRT.trtexec" line (other benchmarks print medians too).
        if "[I]" in (prefix or "") or "result" in facts:
            stats_seen = True
        else:
            for k in [k for k in facts if k.endswith("_ms")]:
                del facts[k]
    if throughput and not (stats_seen or header or "total_host_walltime_s" in facts or "total_gpu_compute_time_s" in facts):
        # A lone "Throughput: N qps" is trtexec's only with its "[I]" level tag or its run's "&&&& PASSED
        # TensorRT.trtexec" line (other tools print qps too).
        if "[I]" not in (prefix or "") and "result" not in facts:
            throughput = False
            facts.pop("throughput_qps", None)
    if not (stats_seen or throughput):
        return None  # a device block alone (a build's start, a run that failed) measured nothing
    device = _device_block(lines, text)
    facts["record"] = "performance_summary"
    facts["has_header"] = header
    facts["line_prefix"] = prefix or ""
    if "throughput_qps" in facts:
        throughput = True
    facts["summary_complete"] = throughput and "latency_mean_ms" in facts
    facts.update(device)
    lt = _LOG_TIME.search(prefix or "")
    if lt:
        facts["log_time"] = f"{lt.group('y')}-{lt.group('mo')}-{lt.group('d')}T{lt.group('t')}"
    _run_settings(text, facts)
    parts = []
    if "throughput_qps" in facts:
        parts.append(f"{facts['throughput_qps']:g} qps")
    if "latency_mean_ms" in facts:
        parts.append(f"mean latency {facts['latency_mean_ms']:g} ms")
    if "latency_p99_ms" in facts:
        parts.append(f"p99 {facts['latency_p99_ms']:g} ms")
    title = "trtexec: " + (", ".join(parts) if parts else "performance summary")
    if "device_name" in facts:
        title += f" on {facts['device_name']}"
    # trtexec prints local time without a zone, so ts_ns stays unset (log_time keeps the text).
    return Finding(
        kind=KIND_TRT_BENCHMARK, severity="info", title=title, facts=facts, excerpt="\n".join(excerpt)
    )


def _device_block(lines: list[str], text: str) -> dict[str, FactValue]:
    if "Device" not in text and "Compute Capability" not in text:
        return {}
    out: dict[str, FactValue] = {}
    for line in lines:
        m = _DEVICE_LINE.match(line)
        if not m:
            continue
        key, body = m.group("key"), (m.group("body") or "").strip()
        if not body:
            continue
        try:
            if key in ("Selected Device", "Device") and "device_name" not in out:
                out["device_name"] = body
            elif key == "Selected Device ID":
                out["device_id"] = int(body)
            elif key == "Selected Device UUID":
                out["device_uuid"] = body
            elif key == "Compute Capability":
                out["compute_capability"] = body
            elif key == "SMs":
                out["sm_count"] = int(body)
            elif key == "Device Global Memory":
                out["device_memory_bytes"] = parse_size(body)
            elif key == "Shared Memory per SM":
                out["shared_memory_per_sm_bytes"] = parse_size(body)
            elif key == "Memory Bus Width":
                bw = _BUS_WIDTH.match(body)
                if bw:
                    out["memory_bus_width_bits"] = int(bw.group("bits"))
                    if bw.group("ecc"):
                        out["ecc_enabled"] = bw.group("ecc") == "enabled"
            elif key in ("Application Compute Clock Rate", "Compute Clock Rate"):
                g = _GHZ.match(body)
                if g:
                    out["compute_clock_mhz"] = round(float(g.group("v")) * 1000, 3)
            elif key in ("Application Memory Clock Rate", "Memory Clock Rate"):
                g = _GHZ.match(body)
                if g:
                    out["memory_clock_mhz"] = round(float(g.group("v")) * 1000, 3)
        except ValueError:
            continue  # a value of an unexpected shape: leave that fact out
    return out


def _run_settings(text: str, facts: dict[str, FactValue]) -> None:
    """Batch size and precision, when the event shows the command line or the option blocks."""
    b = _BATCH.search(text)
    if b:
        facts["batch_size"] = int(b.group("a") or b.group("b") or b.group("c") or b.group("d"))
    p = _PRECISION_LINE.search(text)
    if p:
        facts["precision"] = p.group("p")
    else:
        flags = [f.group("f") for f in _PRECISION_FLAGS.finditer(text)]
        if flags:
            facts["precision"] = "+".join(dict.fromkeys(flags))
