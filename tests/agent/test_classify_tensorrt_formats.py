"""TensorRT, trtexec and tegrastats wordings read from their producers' formats: synthetic lines only.

TensorRT's builder and runtime messages across 3..10 (the 8.0-8.4 "insuficient" spelling, TensorRT
10's OutOfMemory detail and its allocator's location-only Cuda Runtime error, 8.6's per-issue FP16
weight counts, the INT8 missing-scale warning, engines from another device model or release, the
error recorder's "Error[N]:", the Caffe parser, a node name with spaces and brackets), relayed by
ONNX Runtime's and TensorRT-LLM's loggers or with no logger at all; a lone trtexec throughput line;
tegrastats lines quoted in code or a web page. And the same words quoted in prose, manuals or code,
which are not output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify.repeats import merge_repeats
from fleetscope.agent.classify.tensorrt import TensorRtClassifier
from fleetscope.agent.parsers.tegrastats import parse_tegrastats_line
from fleetscope.agent.tools.scan import scan_file
from fleetscope.proto.vocabulary import KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK

TRT = TensorRtClassifier()
STAMP = "[11/20/2025-08:15:42]"


def _one(text: str) -> dict[str, object]:
    (f,) = TRT.classify(text)
    assert f.kind == KIND_TENSORRT_ERROR
    return dict(f.facts)


def _scan(tmp_path: Path, text: str) -> list:
    p = tmp_path / "pasted.log"
    p.write_text(text, encoding="utf-8")
    return list(scan_file(p).findings)


# ------------------------------------------------------------------------------ memory


def test_tactic_skipped_with_the_old_spelling_is_a_memory_shortage() -> None:
    facts = _one(f"{STAMP} [TRT] [W] Skipping tactic 1 due to insuficient memory on requested size of 733 detected for tactic 6.")
    assert facts["category"] == "tactic_skipped_insufficient_memory" and facts["out_of_memory"] is True
    assert "requested_bytes" not in facts  # 8.0-8.4 print no unit for this size


def test_unsupported_state_run_together_with_the_skip_keeps_its_size() -> None:
    facts = _one(
        "[W] UNSUPPORTED_STATESkipping tactic 0 due to insufficient memory on requested size of 3221225472 "
        "detected for tactic 0x0000000000000000.Try decreasing the workspace size with IBuilderConfig::setMemoryPoolLimit()."
    )
    assert facts["out_of_memory"] is True and facts["requested_bytes"] == 3221225472


def test_out_of_memory_detail_gives_the_requested_size() -> None:
    facts = _one("[E] [executionContext.cpp::initializeExecutionContext::611] Error Code 2: OutOfMemory "
                 "(Requested size was 8589934592 bytes.)")
    assert facts["error_code"] == 2 and facts["requested_bytes"] == 8589934592 and facts["category"] == "out_of_memory"


def test_allocator_location_only_error_is_a_failed_allocation() -> None:
    facts = _one("[E] [defaultAllocator.cpp::allocate::61] Error Code 1: Cuda Runtime (In allocate at "
                 "common/dispatch/defaultAllocator.cpp:61)")
    assert facts["category"] == "gpu_memory_allocation_failed" and facts["out_of_memory"] is True


def test_allocator_reporting_another_cuda_error_is_not_out_of_memory() -> None:
    facts = _one("[E] [TRT] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime "
                 "(an illegal memory access was encountered)")
    assert facts["category"] == "cuda_runtime_error" and facts["out_of_memory"] is False


def test_an_out_of_memory_cascade_is_one_fault_with_its_size(tmp_path: Path) -> None:
    text = "\n".join([
        "  [I] Loading bytes from engine/unet.plan",
        "  [E] [defaultAllocator.cpp::allocate::61] Error Code 1: Cuda Runtime (In allocate at common/dispatch/defaultAllocator.cpp:61)",
        "  [W] Requested amount of GPU memory (8589934592 bytes) could not be allocated. There may not be enough free "
        "memory for allocation to succeed.",
        "  [E] [executionContext.cpp::initializeExecutionContext::611] Error Code 2: OutOfMemory (Requested size was 8589934592 bytes.)",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["requested_bytes"] == 8589934592 and f.facts["out_of_memory"] is True


def test_requested_memory_without_gpu_in_its_wording_is_a_failed_allocation_with_its_size() -> None:
    facts = _one("[TensorRT] ERROR: Requested amount of memory (268435456 bytes) could not be allocated. There may not "
                 "be enough free memory for allocation to succeed.")
    assert facts["category"] == "memory_allocation_failed" and facts["out_of_memory"] is True
    assert facts["requested_bytes"] == 268435456


def test_tensorrt_7s_out_of_memory_cascade_is_one_fault_with_its_size(tmp_path: Path) -> None:
    text = "\n".join([
        "[TensorRT] ERROR: Requested amount of memory (268435456 bytes) could not be allocated. There may not be enough "
        "free memory for allocation to succeed.",
        "[TensorRT] ERROR: ../rtSafe/WeightsPtr.cpp (92) - OutOfMemory Error in allocate: 0",
        "[TensorRT] ERROR: Out of memory error during getBestTactic: (Unnamed Layer* 12) [Fully Connected] + (Unnamed "
        "Layer* 13) [Activation]",
        "[TensorRT] ERROR: Try increasing the workspace size with IBuilderConfig::setMaxWorkspaceSize() if using "
        "IBuilder::buildEngineWithConfig, or IBuilder::setMaxWorkspaceSize() if using IBuilder::buildCudaEngine.",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["requested_bytes"] == 268435456 and f.facts["out_of_memory"] is True


def test_no_implementation_for_want_of_workspace_and_the_status_it_ends_in_are_one_fault(tmp_path: Path) -> None:
    text = "\n".join([
        "[TensorRT] ERROR: Internal error: could not find any implementation for node (Unnamed Layer* 31) [Convolution], "
        "try increasing the workspace size with IBuilder::setMaxWorkspaceSize()",
        "[TensorRT] ERROR: ../builder/tacticOptimizer.cpp (1230) - OutOfMemory Error in computeCosts: 0",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["layer"] == "(Unnamed Layer* 31) [Convolution]" and f.facts["out_of_memory"] is True


def test_a_status_line_without_its_detail_keeps_its_function_and_status() -> None:
    facts = _one("[TensorRT] ERROR: ../builder/tacticOptimizer.cpp (1230) - OutOfMemory Error in computeCosts: 0")
    assert facts["category"] == "out_of_memory" and facts["error_status"] == "OutOfMemory Error in computeCosts"
    assert facts["error_origin"] == "../builder/tacticOptimizer.cpp:1230" and facts["error_status_code"] == 0


def test_a_workspace_warning_alone_is_not_out_of_memory() -> None:
    facts = _one(f"{STAMP} [TRT] [W] Some tactics do not have sufficient workspace memory to run. Increasing "
                 "workspace size will enable more tactics, please check verbose output.")
    assert facts["category"] == "workspace_too_small" and "out_of_memory" not in facts


def test_a_tactic_skip_and_an_unrelated_build_error_are_two_faults() -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [W] Skipping tactic 0 due to insuficient memory on requested size of 1073741824 detected for tactic 0.",
        f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::2011] Error Code 10: Internal Error (Could not find any "
        "implementation for node {ForeignNode[12...Add_40]}.)",
    ])
    findings = merge_repeats([f for line in text.splitlines() for f in classify_text(line)])
    assert len(findings) == 2


# ------------------------------------------------------------------------------ precision


def test_fp16_weight_issue_counts_relayed_by_onnx_runtime_are_one_warning() -> None:
    prefix = "2025-03-01 10:20:30.123456789 [W:onnxruntime:sess, tensorrt_execution_provider.h:75 log] [2025-03-01 10:20:30 WARNING] "
    lines = [
        prefix + "- 12 weights are affected by this issue: Detected subnormal FP16 values.",
        prefix + "- 4 weights are affected by this issue: Detected values less than smallest positive FP16 subnormal "
        "value and converted them to the FP16 minimum subnormalized value.",
        prefix + "- 1 weights are affected by this issue: Detected finite FP32 values which would overflow in FP16 and "
        "converted them to the closest finite FP16 value.",
    ]
    findings = [f for line in lines for f in classify_text(line)]
    assert [f.facts["category"] for f in findings] == ["fp16_weights_out_of_range"] * 3
    assert findings[0].facts["severity_tag"] == "WARNING" and findings[0].facts["affected_weights"] == 12
    assert len(merge_repeats(findings)) == 1


def test_fp16_heading_of_tensorrt_8_6_is_a_precision_warning() -> None:
    facts = _one(f"{STAMP} [TRT] [W] TensorRT encountered issues when converting weights between types and that could affect accuracy.")
    assert facts["category"] == "fp16_weights_out_of_range"


def test_layernorm_in_fp16_is_a_precision_warning() -> None:
    facts = _one(f"{STAMP} [W] [TRT] Detected layernorm nodes in FP16: /blk.0/ln/ReduceMean_1. Running layernorm after "
                 "self-attention in FP16 may cause overflow.")
    assert facts["category"] == "fp16_layernorm_overflow" and facts["precision"] == "fp16"


@pytest.mark.parametrize(
    "line",
    [
        "[2023-07-08 09:10:11 WARNING] Missing scale and zero-point for tensor 318, expect fall back to non-int8 "
        "implementation for any layer consuming or producing given tensor",
        f"{STAMP} [TRT] [W] Missing scale and zero-point for tensor (Unnamed Layer* 22) [Constant]_output, expect fall "
        "back to non-int8 implementation for any layer consuming or producing given tensor",
        "[TensorRT] WARNING: Missing dynamic range for tensor pool5, expect fall back to non-int8 implementation for "
        "any layer consuming or producing given tensor",
    ],
)
def test_missing_int8_scale_is_a_precision_warning_without_a_layer(line: str) -> None:
    facts = _one(line)
    assert facts["category"] == "int8_missing_scale" and facts["precision"] == "int8"
    assert "layer" not in facts  # "for any layer consuming ..." names none


def test_int8_requested_without_native_support() -> None:
    facts = _one("[TensorRT] WARNING: Int8 support requested on hardware without native Int8 support, performance "
                 "will be negatively affected.")
    assert facts["category"] == "int8_unsupported"


def test_calibration_failure_needs_no_logger_tag() -> None:
    facts = _one("ERROR: Calibration failure occurred with no scaling factors detected. This could be due to no int8 "
                 "calibrator or insufficient custom scales for network layers.")
    assert facts["category"] == "int8_calibration_failed"


# ------------------------------------------------------------------------------ engines


def test_incompatible_device_with_sentences_split_by_periods() -> None:
    facts = _one("```The engine plan file is generated on an incompatible device. expecting compute 8.9 got compute 8.6. please rebuild.```")
    assert facts["category"] == "engine_device_mismatch"
    assert facts["expected_compute_capability"] == "8.9" and facts["compute_capability"] == "8.6"


def test_library_version_mismatch_of_tensorrt_10() -> None:
    facts = _one("[TRT] [E] 6: The engine plan file is not compatible with this version of TensorRT, expecting library "
                 "version 10.4.0.26 got 10.1.0.27, please rebuild.")
    assert facts["category"] == "engine_version_mismatch"
    assert facts["trt_version"] == "10.4.0.26" and facts["engine_trt_version"] == "10.1.0.27"


@pytest.mark.parametrize(
    "line",
    [
        "../rtSafe/coreReadArchive.cpp (38) - Serialization Error in verifyHeader: 0 (Version tag does not match)",
        "[E] [TRT] IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
        "plan->header.magicTag == rt::kPLAN_MAGIC_TAG failed.Trying to load an engine created with incompatible "
        "serialization version. Check that the engine was not created using safety runtime.)",
    ],
)
def test_engine_of_another_release_without_version_numbers(line: str) -> None:
    assert _one(line)["category"] == "engine_version_mismatch"


def test_magic_tag_in_either_case_is_not_an_engine() -> None:
    facts = _one("[TRT] [E] 1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization "
                 "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic Tag does not match)")
    assert facts["category"] == "engine_invalid"


@pytest.mark.parametrize(
    "line",
    [
        "[`TRT] [W] Using an engine plan file across different models of devices is not recommended and is likely to "
        "affect performance or even cause errors.`",
        "WARNING: [Torch-TensorRT] - Using an engine plan file across different models of devices is not recommended "
        "and is likely to affect performance or even cause errors",
    ],
)
def test_engine_from_another_device_model_is_a_warning(line: str) -> None:
    f = TRT.classify(line)[0]
    assert f.facts["category"] == "engine_other_device_model" and f.severity == "warning"


def test_tensorrt_llms_deserialize_assertion_quoted_without_its_tag_is_a_deserialize_failure(tmp_path: Path) -> None:
    assert _one("Assertion failed: Failed to deserialize cuda engine.")["category"] == "engine_deserialize_failed"
    p = tmp_path / "issue.md"
    p.write_text("## Assertion failed: Failed to deserialize cuda engine.\n\nworker-1  | 3  0x7f00 /lib/libfoo.so(+0x1a) [0x7f00]\n")
    assert [f.kind for f in scan_file(p).findings] == [KIND_TENSORRT_ERROR]


def test_tritons_unable_to_create_tensorrt_engine_is_a_failed_plan_load() -> None:
    # Triton's TensorRT backend when the runtime returns no engine for the plan: the model's status and the loader line.
    assert _one("| resnet_trt | 1 | UNAVAILABLE: Internal: unable to create TensorRT engine |")["category"] \
        == "engine_deserialize_failed"
    assert _one("E0101 00:00:01.000000 1 model_repository_manager.cc:1215] failed to load 'resnet_trt' version 1: "
                "Internal: unable to create TensorRT engine")["category"] == "engine_deserialize_failed"


def test_an_error_line_with_only_its_code_and_no_description_is_not_another_fault() -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [E] 2: [allocator.cpp::allocate::90] Error Code 2: OutOfMemory (no further information)",
        f"{STAMP} [TRT] [E] 2: ",
    ])
    (f,) = TRT.classify(text)
    assert (f.facts["error_code"], f.facts["category"]) == (2, "out_of_memory")
    assert TRT.classify(f"{STAMP} [TRT] [E] 4: ") == []


def test_a_no_implementation_node_quoted_with_words_after_it_keeps_its_whole_name() -> None:
    facts = _one(f'"{STAMP} [E] Error[10]: IBuilder::buildSerializedNetwork: Error Code 10: Internal Error (Could not find '
                 'any implementation for node {ForeignNode[/enc/q_proj...(Unnamed Layer* 9) [Shuffle]]}.)". Any idea why?')
    assert facts["layer"] == "{ForeignNode[/enc/q_proj...(Unnamed Layer* 9) [Shuffle]]}"


def test_an_engine_built_on_another_gpu_model_is_its_own_fault_beside_a_builder_error() -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [E] 3: [builderConfig.cpp::setDLACore::120] Error Code 3: API Usage Error (Parameter check "
        "failed at: builderConfig.cpp::setDLACore::120, condition: dlaCore < 2)",
        "",
        f"{STAMP} [TRT] [W] Using an engine plan file across different models of devices is not recommended and is "
        "likely to affect performance or even cause errors.",
    ])
    found = merge_repeats(TRT.classify(text))
    assert sorted(str(f.facts["category"]) for f in found) == ["engine_other_device_model", "error_code"]


def test_tensorrt_llm_logger_tag_and_its_deserialize_failure() -> None:
    facts = _one("[TensorRT-LLM][ERROR] Assertion failed: Failed to deserialize cuda engine (/src/runtime/tllmRuntime.cpp:80)")
    assert facts["category"] == "engine_deserialize_failed" and facts["severity_tag"] == "ERROR"
    assert TRT.classify("[TensorRT-LLM][INFO] Loaded engine size: 2048 MiB") == []


# ------------------------------------------------------------------------------ coded errors and names


def test_error_recorder_line_cut_mid_word_keeps_its_code() -> None:
    facts = _one(f"{STAMP} [E] Error[10]: Could not find any implementation fo")
    assert facts["error_code"] == 10 and facts["severity_tag"] == "E"


def test_node_name_with_spaces_and_brackets_runs_to_the_end_of_the_detail() -> None:
    facts = _one(f"{STAMP} [E] Error[10]: [optimizer.cpp::computeCosts::3728] Error Code 10: Internal Error (Could not "
                 "find any implementation for node {ForeignNode[45...Reshape_9 + (Unnamed Layer* 71) [Shuffle]]}.)")
    assert facts["layer"] == "{ForeignNode[45...Reshape_9 + (Unnamed Layer* 71) [Shuffle]]}"
    facts = _one("[E] IBuilder::buildSerializedNetwork: Error Code 10: Internal Error (Could not find any implementation "
                 "for node /neck/Conv + PWN(/neck/Sigmoid).)")
    assert facts["layer"] == "/neck/Conv + PWN(/neck/Sigmoid)"


def test_tensorrt_8_6_no_implementation_says_why_after_the_node() -> None:
    facts = _one(f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::3869] Error Code 10: Internal Error (Could not find "
                 "any implementation for node {ForeignNode[/enc/Add...Mul_7]} due to insufficient workspace. See verbose "
                 "log for requested sizes.)")
    assert facts["layer"] == "{ForeignNode[/enc/Add...Mul_7]}" and facts["category"] == "workspace_too_small"


def test_a_word_after_node_is_not_a_layer() -> None:
    facts = _one("[TRT] [E] 2: [myelinBuilderUtils.cpp::operator()::371] Error Code 2: Internal Error ([HostToDeviceCopy] "
                 "requires bool I/O but node can not be handled by Myelin.)")
    assert "layer" not in facts


def test_tensorrt_7_no_implementation_names_its_node_before_the_hint() -> None:
    facts = _one("[TensorRT] ERROR: Internal error: could not find any implementation for node (Unnamed Layer* 9) "
                 "[Convolution], try increasing the workspace size with IBuilder::setMaxWorkspaceSize()")
    assert facts["layer"] == "(Unnamed Layer* 9) [Convolution]" and facts["category"] == "workspace_too_small"


def test_a_layer_error_names_the_layer_first() -> None:
    facts = _one("[TRT] [E] 4: [graphShapeAnalyzer.cpp::analyzeShapes::1872] Error Code 4: Internal Error "
                 "(/dec/Reshape_2: IShuffleLayer applied to shape tensor must have 0 or 1 reshape dimensions)")
    assert facts["layer"] == "/dec/Reshape_2"


def test_node_number_of_the_onnx_parser_is_not_a_layer() -> None:
    facts = _one('[E] [TRT] ModelImporter.cpp:771: While parsing node number 12 [Tile -> "/Tile_output_0"]:')
    assert "layer" not in facts


def test_ort_right_aligned_error_level_is_a_tensorrt_error() -> None:
    line = ("2025-03-01 10:20:30.1 [E:onnxruntime:Default, tensorrt_execution_provider.h:88 log] "
            "[2025-03-01 10:20:30   ERROR] ModelImporter.cpp:190: Failed to open file: weights.bin")
    facts = _one(line)
    assert facts["severity_tag"] == "ERROR" and facts["category"] == "error"
    info = line.replace("E:onnx", "I:onnx").replace("  ERROR]", "   INFO]")
    assert TRT.classify(info) == []


def test_caffe_parser_missing_weights_names_its_layer() -> None:
    facts = _one("res2a_branch1: ERROR - 16-bit weights not found for 16-bit model")
    assert facts["category"] == "caffe_weights_missing" and facts["layer"] == "res2a_branch1"


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("../rtSafe/cuda/cudaPoolingRunner.cpp (51) - Cuda Error in execute: 2", None),
        ("../rtSafe/cuda/cudaConvolutionRunner.cpp (457) - Cuda Error in execute: 700 (an illegal memory access was "
         "encountered)", "an illegal memory access was encountered"),
    ],
)
def test_status_line_cuda_errors_with_or_without_a_name(line: str, name: str | None) -> None:
    facts = _one(line)
    assert facts["category"] == "cuda_error" and facts.get("cuda_error_name") == name
    assert facts["out_of_memory"] is (facts["cuda_error_code"] == 2)


def test_untagged_workspace_warning() -> None:
    assert _one("`Some tactics do not have sufficient workspace memory to run. Increasing workspace size may increase "
                "performance, please check verbose output.`")["category"] == "workspace_too_small"


def test_trtexec_setup_failures() -> None:
    assert _one(f"{STAMP} [E] Engine set up failed")["category"] == "build_failed"
    assert _one(f"{STAMP} [E] Failed to create engine from model or file.")["category"] == "build_failed"


def test_untagged_lines_reach_the_classifier_through_the_scan(tmp_path: Path) -> None:
    text = "question about my build:\n\n`[W] Requested amount of GPU memory (4294967296 bytes) could not be allocated.`\n"
    (f,) = _scan(tmp_path, text)
    assert f.kind == KIND_TENSORRT_ERROR and f.facts["requested_bytes"] == 4294967296


# ------------------------------------------------------------------------------ quoted, not printed


@pytest.mark.parametrize(
    "text",
    [
        "Each engine loaded fine with the warning `[TRT] [W] Using an engine plan file across different models of "
        "devices is not recommended` which is harmless.",
        "   - `TensorRT encountered issues when converting weights between types ...`",
        "     - 52 weights are affected by this issue: Detected subnormal FP16",
        'std::cout << "[Warning] Missing dynamic range for tensor: " << tName << std::endl;',
        "If you see WARNING: Missing dynamic range for tensor, delete the calibration cache.",
        "Throughput: 1200 qps",
        "2024-01-01 12:00:00 INFO vector search Throughput: 1200 qps latency 3 ms",
        "the builder logs Skipping tactic lines while it profiles kernels",
    ],
)
def test_the_same_words_quoted_are_not_output(text: str) -> None:
    assert classify_text(text) == []


# ------------------------------------------------------------------------------ trtexec


def test_a_lone_trtexec_throughput_line_is_a_partial_summary() -> None:
    (b,) = TRT.classify("[I] Throughput: 96.25 qps")
    assert b.kind == KIND_TRT_BENCHMARK and b.facts["throughput_qps"] == 96.25
    assert b.facts["summary_complete"] is False


def test_three_runs_of_one_throughput_line_each_are_three_benchmarks(tmp_path: Path) -> None:
    text = "PTQ:\n```\n[I] Throughput: 96.25 qps\n```\nFP16:\n```\n[I] Throughput: 71.5 qps\n```\nQAT:\n```\n[I] Throughput: 88 qps\n```\n"
    benches = [f for f in _scan(tmp_path, text) if f.kind == KIND_TRT_BENCHMARK]
    assert sorted(f.facts["throughput_qps"] for f in benches) == [71.5, 88.0, 96.25]


# ------------------------------------------------------------------------------ tegrastats


@pytest.mark.parametrize(
    "line",
    [
        '    sample = "RAM 1804/3964MB (lfb 12x4MB) SWAP 5/1982MB (cached 0MB) CPU [9%@921,4%@921] EMC_FREQ 6% GR3D_FREQ 17%\\n",',
        "  fixture('RAM 1804/3964MB SWAP 5/1982MB CPU [9%@921,4%@921] EMC_FREQ 6%@1600 GR3D_FREQ 17%@921');",
        "RAM 1804/3964MB (lfb 12x4MB) SWAP 5/1982MB (cached 0MB) CPU [9%@921,4%@921] EMC_FREQ 6% GR3D_FREQ 17%<br>",
    ],
)
def test_tegrastats_line_quoted_in_code_or_a_page_keeps_its_last_field(line: str) -> None:
    r = parse_tegrastats_line(line)
    assert (r.ram_used_mb, r.ram_total_mb, r.swap_used_mb) == (1804, 3964, 5)
    assert r.emc_load_pct == 6 and r.gr3d_load_pct == 17


def test_tegrastats_rail_closing_a_string_literal_is_read() -> None:
    r = parse_tegrastats_line('orinSample := "RAM 2210/7620MB SWAP 0/3810MB GR3D_FREQ 0% VDD_IN 4811mW/4811mW VDD_SOC 1402mW/1398mW"')
    assert r.rails_mw["VDD_SOC"] == (1402, 1398) and r.gr3d_load_pct == 0


# ------------------------------------------------------------------------------ node names


def test_a_node_whose_name_holds_parentheses_is_read_to_the_details_end() -> None:
    facts = _one("[TensorRT] ERROR: ../builder/tacticOptimizer.cpp (1715) - TRTInternal Error in computeCosts: 0 (Could not "
                 "find any implementation for node head: (Unnamed Layer* 3) [Fully Connected] + (Unnamed Layer* 4) "
                 "[Activation].)")
    assert facts["layer"] == "head: (Unnamed Layer* 3) [Fully Connected] + (Unnamed Layer* 4) [Activation]"


def test_a_foreign_node_whose_detail_lost_its_parenthesis_is_read_whole() -> None:
    facts = _one(f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::3869] Error Code 10: Internal Error (Could not find "
                 "any implementation for node {ForeignNode[Conv_0 + Relu_1...MatMul_77]}")
    assert facts["layer"] == "{ForeignNode[Conv_0 + Relu_1...MatMul_77]}"


def test_a_node_name_cut_inside_its_brackets_is_not_passed_off_as_whole() -> None:
    facts = _one(f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::3869] Error Code 10: Internal Error (Could not find "
                 "any implementation for node {ForeignNode[Conv_0 + Relu_1...Mat")
    assert facts.get("layer") != "{ForeignNode[Conv_0 + Relu_1...Mat"
    assert "+" not in str(facts.get("layer", ""))


# ------------------------------------------------------------------ trtexec's device block

_DEVICE = [f"{STAMP} [I] === Device Information ===", f"{STAMP} [I] Selected Device: NVIDIA RTX A4000",
           f"{STAMP} [I] Compute Capability: 8.6", f"{STAMP} [I] SMs: 48",
           f"{STAMP} [I] Device Global Memory: 16108 MiB", f"{STAMP} [I] "]


def test_a_device_block_without_a_summary_is_no_benchmark(tmp_path: Path) -> None:
    # trtexec prints it before every build: followed by the build's start, or by the build failing.
    build = [*_DEVICE, f"{STAMP} [I] TensorRT version: 10.3.0", f"{STAMP} [I] Start parsing network model."]
    assert TRT.classify("\n".join(_DEVICE)) == []
    assert _scan(tmp_path, "\n".join(build)) == []
    failed = [*build, f"{STAMP} [E] Error[2]: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: "
              "OutOfMemory (Requested size was 4294967296 bytes.)"]
    assert [f.kind for f in _scan(tmp_path, "\n".join(failed))] == [KIND_TENSORRT_ERROR]


def test_the_device_block_still_names_the_gpu_of_the_summary_after_it(tmp_path: Path) -> None:
    run = [*_DEVICE, f"{STAMP} [I] Starting inference", f"{STAMP} [I] === Performance summary ===",
           f"{STAMP} [I] Throughput: 812.4 qps", f"{STAMP} [I] Latency: min = 1.1 ms, max = 1.5 ms, mean = 1.2 ms"]
    [f] = _scan(tmp_path, "\n".join(run))
    assert f.kind == KIND_TRT_BENCHMARK and f.facts["device_name"] == "NVIDIA RTX A4000"
    assert f.facts["throughput_qps"] == 812.4


@pytest.mark.parametrize(
    "line",
    [
        "[01/02/2024-10:00:00] [TRT] [W] Using an engine plan file across different models of devices is not recommended "
        "and is likely to affect performance or even cause errors.",
        "\u201cWARNING: Using an engine plan file across different models of devices is not recommended and is likely "
        "to affect performance or even cause errors.\u201d",
        "When loading it I get the warning `Using an engine plan file across different models of devices is not "
        "recommended and is likely to affect performance or even cause errors.` every time.",
    ],
)
def test_an_engine_from_another_gpu_model_as_printed_quoted_or_reported_in_a_span(line: str) -> None:
    assert _one(line)["category"] == "engine_other_device_model"


def test_the_engine_warning_named_in_a_sentence_is_not_one() -> None:
    line = ("The message `Using an engine plan file across different models of devices is not recommended` means "
            "the engine was built on another GPU.")
    assert [f.kind for f in classify_text(line)] == []


def test_a_trtexec_7_vertical_summary_with_only_its_host_latency_is_read(tmp_path: Path) -> None:
    text = "\n".join(f"[05/21/2021-09:59:29] [I] {x}" + " " * 40 for x in (
        "Host Latency", "min: 638.401 ms (end to end 638.401 ms)", "mean: 643.169 ms (end to end 643.169 ms)",
        "median: 643.202 ms (end to end 643.202 ms)"))
    [f] = [f for f in _scan(tmp_path, text) if f.kind == KIND_TRT_BENCHMARK]
    assert (f.facts["latency_mean_ms"], f.facts["latency_median_ms"]) == (643.169, 643.202)


def test_onnx_tensorrts_parser_errors() -> None:
    old = _one("In node -1 (parseGraph): UNSUPPORTED_NODE: Assertion failed: convertOnnxWeights(initializer, &weights, ctx) ")
    assert (old["category"], old["onnx_error"]) == ("onnx_parser_error", "UNSUPPORTED_NODE") and "layer" not in old
    new = _one(f"{STAMP} [E] [TRT] ModelImporter.cpp:771: ERROR: ModelImporter.cpp:195 In node 12 with name: /model/Mul_3 "
               "and operator: Mul (parseGraph): INVALID_NODE: Invalid Node - /model/Mul_3")
    assert (new["layer"], new["onnx_operator"], new["onnx_error"]) == ("/model/Mul_3", "Mul", "INVALID_NODE")
    assert TRT.classify("In node 3 (the worker) we saw nothing unusual") == []


def test_a_tensorrt_assertion_whose_backtick_a_code_span_ate_is_read() -> None:
    line = ("`loadtrt: engine.cpp:868: bool nvinfer1::rt::Engine::deserialize(const void*, std::size_t, "
            "nvinfer1::IGpuAllocator&, nvinfer1::IPluginFactory*): Assertion size >= bsize && \"Mismatch between allocated "
            "memory size and expected size of serialized engine.\"' failed.`")
    facts = _one(line)
    assert facts["category"] == "assertion_failed" and facts["assertion"].startswith("size >= bsize")


def _trtexec_8_tail(prefix: str = "") -> str:
    # trtexec 8+: printEpilog's summary (sampleReporting.cpp), then "Explanations of the performance metrics are
    # printed in the verbose logs.", printMetricExplanations()'s section at --verbose ("[V] === Explanations of the
    # performance metrics ===", one "<metric>: the ..." line each), and the test report line that names the release
    # (logging.h: "&&&& PASSED TensorRT.trtexec [TensorRT v<NV_TENSORRT_VERSION>] # <command line>").
    i, v = f"{STAMP} [I] ", f"{STAMP} [V] "
    lines = [
        f"{i}=== Performance summary ===",
        f"{i}Throughput: 211.5 qps",
        f"{i}Latency: min = 4.1 ms, max = 5.2 ms, mean = 4.4 ms, median = 4.3 ms, percentile(90%) = 4.8 ms, "
        "percentile(95%) = 4.9 ms, percentile(99%) = 5.1 ms",
        f"{i}GPU Compute Time: min = 3.9 ms, max = 5.0 ms, mean = 4.2 ms, median = 4.1 ms, percentile(90%) = 4.6 ms, "
        "percentile(95%) = 4.7 ms, percentile(99%) = 4.9 ms",
        f"{i}Total Host Walltime: 3.0 s",
        f"{i}Explanations of the performance metrics are printed in the verbose logs.",
        f"{v}",
        f"{v}=== Explanations of the performance metrics ===",
        f"{v}Total Host Walltime: the host walltime from when the first query (after warmups) is enqueued to when "
        "the last query is completed.",
        f"{v}GPU Compute Time: the GPU latency to execute the kernels for a query.",
        f"{v}Latency: the summation of H2D Latency, GPU Compute Time, and D2H Latency.",
        f"{i}",
        "&&&& PASSED TensorRT.trtexec [TensorRT v8601] # trtexec --loadEngine=m.plan --verbose",
    ]
    return "\n".join(prefix + line for line in lines) + "\n"


def test_trtexec_8_verbose_explanations_keep_the_report_line_and_its_version(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(_trtexec_8_tail())
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_TRT_BENCHMARK]
    assert (f.facts["throughput_qps"], f.facts["trt_version"]) == (211.5, "8.6.1")


def test_trtexec_log_kept_in_comments_reads_its_report_line_too(tmp_path: Path) -> None:
    # A run pasted into a script's comments: every line "# "-prefixed, the "&&&&" report line as well.
    p = tmp_path / "bench.py"
    p.write_text(_trtexec_8_tail("# "))
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_TRT_BENCHMARK]
    assert f.facts["trt_version"] == "8.6.1"


def test_onnx_parsers_cpp_error_with_its_error_code() -> None:
    # onnx-tensorrt ModelImporter.cpp (TensorRT 6 to 10): LOG_ERROR("While parsing node number " << n << " [" << op
    # << " -> \"" << out << "\"]:"), then LOG_ERROR("ERROR: " << file << ":" << line << " In function " << func <<
    # ":\n" << "[" << code << "] " << desc); code is NvOnnxParser.h's ErrorCode (8 = kUNSUPPORTED_NODE).
    text = (f"{STAMP} [TRT] [E] ModelImporter.cpp:726: While parsing node number 12 [Resize -> \"up_1\"]:\n"
            f"{STAMP} [TRT] [E] ModelImporter.cpp:729: ERROR: builtin_op_importers.cpp:3422 In function importResize:\n"
            "[8] Assertion failed: scales.is_weights() && \"Resize scales must be an initializer!\"")
    # The node's line and the error are one failure (the cascade is one fault).
    (f,) = merge_repeats([x for x in classify_text(text) if x.kind == KIND_TENSORRT_ERROR])
    assert (f.facts["onnx_error"], f.facts["onnx_error_code"], f.facts["onnx_function"]) == (
        "UNSUPPORTED_NODE", 8, "importResize")
    assert f.facts["error_site"] == "builtin_op_importers.cpp:3422"
    # All on one line, as an issue title carries it (TensorRT 6's wording, without the node's output).
    f = _one_kind("While parsing node number 94 [Constant]: ERROR: ModelImporter.cpp:492 In function importModel: "
                  "[7] Assertion failed: tensors().at(name).is_tensor()")
    assert (f["onnx_error"], f["onnx_node_index"], f["onnx_operator"]) == ("UNSUPPORTED_GRAPH", 94, "Constant")
    # The "ERROR:" line cut before its code: the code is not printed, and absent.
    f = _one_kind("ERROR: ModelImporter.cpp:492 In function importModel:")
    assert "onnx_error_code" not in f and f["onnx_function"] == "importModel"
    # A compiler's "In function" is not the parser's.
    assert classify_text("src/main.c: In function 'main':") == []


def _one_kind(text: str) -> dict[str, object]:
    (f,) = [x for x in classify_text(text) if x.kind == KIND_TENSORRT_ERROR]
    return dict(f.facts)


def test_tensorrt_7s_status_number_is_not_an_error_code() -> None:
    # TensorRT <= 7: "<file> (<line>) - <What> Error in <func>: <status> (<detail>)"; "Error Code N" is TensorRT 8's.
    f = _one_kind("ERROR: ../rtSafe/coreReadArchive.cpp (38) - Serialization Error in verifyHeader: 0 (Version tag does "
                  "not match)")
    assert f["error_status_code"] == 0 and "error_code" not in f


def test_tensorrt_10s_allocator_report_then_out_of_memory_is_one_fault_with_the_oom_code() -> None:
    # TensorRT 10: the default allocator's location-only "Error Code 1: Cuda Runtime (In allocate at ...)", the
    # "Requested amount of GPU memory (N bytes) could not be allocated" warning, then "Error Code 2: OutOfMemory
    # (Requested size was N bytes.)" from the execution context: one fault, whose code is OutOfMemory's.
    lines = [
        f"{STAMP} [TRT] [E] [defaultAllocator.cpp::allocate::57] Error Code 1: Cuda Runtime (In allocate at "
        "common/dispatch/defaultAllocator.cpp:57)",
        f"{STAMP} [TRT] [W] Requested amount of GPU memory (8589934592 bytes) could not be allocated. There may not be "
        "enough free memory for allocation to succeed.",
        f"{STAMP} [TRT] [E] [executionContext.cpp::initializeExecutionContext::625] Error Code 2: OutOfMemory "
        "(Requested size was 8589934592 bytes.)",
    ]
    (f,) = merge_repeats([x for line in lines for x in classify_text(line) if x.kind == KIND_TENSORRT_ERROR])
    assert (f.facts["error_code"], f.facts["error_category"], f.facts["requested_bytes"]) == (2, "OutOfMemory", 8589934592)


# ------------------------------------------------------------------------------ the version a report prints


@pytest.mark.parametrize(("env", "version"), [
    ("**TensorRT Version**: 8.5.3.1", "8.5.3.1"),  # NVIDIA/TensorRT's issue template
    ("- TensorRT version: 10.1", "10.1"),
    ("**TensorRT Version 8.2.1.8:", "8.2.1.8"),
    ("installed from TensorRT-8.5.1.7.Linux.x86_64-gnu.cuda-11.8.cudnn8.6.tar.gz", "8.5.1.7"),
    ("**TensorRT Version*8.0.3.4*:", "8.0.3.4"),  # the template's field filled between its asterisks
    ("my TRT is `TensorRT v8401`", "8.4.1"),  # TensorRT's integer version, as trtexec prints it, unbracketed
])
def test_an_error_takes_the_version_the_reports_environment_prints(tmp_path: Path, env: str, version: str) -> None:
    text = "\n".join([
        "## Description",
        "Building the engine fails:",
        f"{STAMP} [TRT] [E] [network.cpp::validate::3012] Error Code 4: Internal Error (Network must have at least one output)",
        "",
        "## Environment",
        "",
        env,
        "**NVIDIA GPU**: RTX 3090",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["error_code"] == 4
    assert f.facts["trt_version"] == version


def test_a_version_line_beats_a_release_named_in_prose(tmp_path: Path) -> None:
    text = "\n".join([
        "It worked with TensorRT 8.4.3 but fails now:",
        f"{STAMP} [TRT] [E] 3: [executionContext.cpp::setBindingDimensions::944] Error Code 3: API Usage Error "
        "(Parameter check failed at: runtime/api/executionContext.cpp::setBindingDimensions::944)",
        "",
        "TensorRT Version: 8.6.1.6",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["trt_version"] == "8.6.1.6"


def test_an_events_own_version_is_kept(tmp_path: Path) -> None:
    text = "\n".join([
        "&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --onnx=m.onnx",
        f"{STAMP} [E] Error[4]: [network.cpp::validate::3012] Error Code 4: Internal Error (Network must have at least one output)",
        "",
        "TensorRT Version: 8.5.3",
    ])
    found = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert found and all(f.facts["trt_version"] == "8.6.1" for f in found)


# ------------------------------------------------------------------------------ TensorRT 8+/10 wordings


def test_a_tactic_skipped_for_an_allocator_error_is_a_memory_shortage_with_its_buffer() -> None:
    # TensorRT 10: "Error Code: 9: Skipping tactic ... autotuning: User allocator error allocating N-byte buffer".
    f = _one(f"{STAMP} [E] Error[9]: Error Code: 9: Skipping tactic 0x0000000000000000 due to exception "
             "[tunable_graph.cpp:create:117] autotuning: User allocator error allocating 4294967296-byte buffer")
    assert f["out_of_memory"] is True
    assert f["requested_bytes"] == 4294967296


def test_the_allocator_skip_and_the_out_of_memory_error_are_one_fault_of_the_errors_size(tmp_path: Path) -> None:
    text = "\n".join([
        "[E] [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)",
        "",
        "[E] Error Code: 9: Skipping tactic 0x0000000000000000 due to exception [tunable_graph.cpp:create:117] "
        "autotuning: User allocator error allocating 40000000000-byte buffer",
        "",
        "[E] [virtualMemoryBuffer.cpp::resizePhysical::154] Error Code 2: OutOfMemory (Requested size was 8589934592 bytes.)",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert (f.facts["error_code"], f.facts["requested_bytes"]) == (2, 8589934592)


def test_the_tactic_memory_warnings_ending_alone_is_a_memory_shortage() -> None:
    f = _one("[trtexec] Device memory is insufficient to use tactic.")
    assert f["category"] == "tactic_device_memory_insufficient" and f["out_of_memory"] is True


def test_the_loggers_coded_error_under_a_bare_e_tag() -> None:
    # ILogger's "<ErrorCode>: <description>" as trtexec / Polygraphy print it, with no "[TRT]" tag.
    (f,) = classify_text("[E] 1: Myelin (Myelin error from unknown graph)")
    assert f.kind == KIND_TENSORRT_ERROR
    assert f.facts["error_code"] == 1 and f.facts["category"] == "error_code"


@pytest.mark.parametrize("line", [
    "[E] 42: not an ErrorCode",  # ErrorCode stops at 10
    "[W] 4: The timing cache will not be used!",  # a warning
    "step [E] x: 3",
])
def test_other_bracketed_e_lines_are_not_tensorrt_errors(line: str) -> None:
    assert [f for f in classify_text(line) if f.kind == KIND_TENSORRT_ERROR] == []


def test_an_error_cut_in_a_title_and_the_whole_line_are_one_fault_naming_the_whole_node(tmp_path: Path) -> None:
    whole = (f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::3728] Error Code 10: Internal Error (Could not find "
             "any implementation for node {ForeignNode[onnx::MatMul_77 + (Unnamed Layer* 12) [Shuffle].../blocks/Reshape_3]}.)")
    text = "\n".join([
        "# " + whole[:150],
        "",
        "Building the engine fails with:",
        "",
        whole,
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["error_code"] == 10
    assert f.facts["layer"] == "{ForeignNode[onnx::MatMul_77 + (Unnamed Layer* 12) [Shuffle].../blocks/Reshape_3]}"


def test_deepstreams_fallback_from_int8_without_a_calibration_file() -> None:
    f = _one("WARNING: ../nvdsinfer/nvdsinfer_model_builder.cpp:1185 INT8 calibration file not specified. Trying FP16 mode.")
    assert f["category"] == "int8_calibration_missing" and f["precision"] == "int8"


def test_an_out_of_memory_error_then_no_implementation_and_the_builds_failure_are_one_fault(tmp_path: Path) -> None:
    text = "\n".join([
        f"{STAMP} [E] Error[1]: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)",
        f"{STAMP} [W] [TRT] Requested amount of GPU memory (6442450944 bytes) could not be allocated. There may not be "
        "enough free memory for allocation to succeed.",
        f"{STAMP} [E] Error[10]: IBuilder::buildSerializedNetwork: Error Code 10: Internal Error (Could not find any "
        "implementation for node {ForeignNode[/enc/Constant_2_output_0.../enc/Slice_9]}.)",
        f"{STAMP} [E] Engine could not be created from network",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["out_of_memory"] is True and f.facts["requested_bytes"] == 6442450944


def test_a_tactic_skipped_for_memory_and_a_later_no_implementation_error_stay_two_faults(tmp_path: Path) -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [W] Skipping tactic 0 due to insuficient memory on requested size of 1073741824 detected for tactic 0.",
        f"{STAMP} [TRT] [E] 10: [optimizer.cpp::computeCosts::2011] Error Code 10: Internal Error (Could not find any "
        "implementation for node {ForeignNode[12...Reshape_40]}.)",
    ])
    assert len([f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]) == 2


# ------------------------------------------------------------------------------ no implementation, named layers


@pytest.mark.parametrize("line", [
    "Internal error: could not find any implementation for node (Unnamed Layer* 4) [Softmax], try increasing the "
    "workspace size with IBuilder::setMaxWorkspaceSize()",
    "2020-01-02 03:04:05.678901: E tensorflow/compiler/tf2tensorrt/utils/trt_logger.cc:41] DefaultLogger Internal error: "
    "could not find any implementation for node (Unnamed Layer* 4) [Softmax], try increasing the workspace size with "
    "IBuilder::setMaxWorkspaceSize()",
])
def test_the_builders_no_implementation_error_without_a_tensorrt_tag_names_its_node(line: str) -> None:
    facts = _one(line)
    assert facts["layer"] == "(Unnamed Layer* 4) [Softmax]"
    assert "error_code" not in facts  # TensorRT <= 7 prints none


def test_a_no_implementation_sentence_in_prose_is_not_read_without_internal_error() -> None:
    assert TRT.classify("If it could not find any implementation for node X, try increasing the workspace.") == []


def test_a_node_named_by_its_last_scope_in_a_title_is_the_same_fault() -> None:
    findings = [f for line in (
        "Internal error: could not find any implementation for node up_2, try increasing the workspace size",
        "E trt_logger.cc:41] DefaultLogger Internal error: could not find any implementation for node "
        "decoder/block_3/up_2, try increasing the workspace size",
    ) for f in TRT.classify(line)]
    (f,) = merge_repeats(findings)
    assert f.facts["layer"] == "decoder/block_3/up_2"  # one node: the whole name is kept


def test_network_validation_names_the_layer_before_its_possessive() -> None:
    facts = _one("[TensorRT] ERROR: Layer: Gather_77's output can not be used as shape tensor.")
    assert facts["layer"] == "Gather_77"


def test_the_onnx_parsers_invalid_node_names_the_node() -> None:
    text = ("[E] [TRT] ModelImporter.cpp:773: ERROR: ModelImporter.cpp:195 In function parseGraph:\n"
            "[6] Invalid Node - Slice_12\n"
            "Unsupported slice step")
    (f,) = [x for x in TRT.classify(text) if x.facts.get("onnx_error") == "INVALID_NODE"]
    assert f.facts["layer"] == "Slice_12"


def test_the_onnx_backends_runtime_error_without_error_prefix_is_the_parser_error() -> None:
    # onnx_tensorrt.backend: RuntimeError("While parsing node number N:\n<file>:<line> In function <f>:\n[<code>] <desc>").
    text = ("RuntimeError: While parsing node number 3:\n"
            "ModelImporter.cpp:311 In function importModel:\n"
            "[8] No importer registered for op: NonZero")
    (f,) = TRT.classify(text)
    assert f.facts["onnx_error"] == "UNSUPPORTED_NODE"
    assert f.facts["onnx_function"] == "importModel"


def test_a_file_line_in_function_without_a_code_or_error_prefix_is_not_the_parser() -> None:
    assert TRT.classify("main.cpp:12 In function main: starting TensorRT build") == []


@pytest.mark.parametrize(("env", "version"), [
    ("tensorrt           8.2.3.0", "8.2.3.0"),  # pip list
    ("- Tensorrt version:8.5.1.7", "8.5.1.7"),
    ("JetPack 4.6, tensorRT 8.0.1.6", "8.0.1.6"),
    ("Trt8.6.1 / QAT", "8.6.1"),
])
def test_a_small_report_names_its_tensorrt_in_any_spelling(tmp_path: Path, env: str, version: str) -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [E] [network.cpp::validate::3012] Error Code 4: Internal Error (Network must have at least one output)",
        "",
        "onnx-tensorrt      0.1.0",  # another package, named with the library's name inside its own
        env,
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["trt_version"] == version


def test_no_spelling_of_tensorrt_means_no_version(tmp_path: Path) -> None:
    text = "\n".join([
        f"{STAMP} [TRT] [E] [network.cpp::validate::3012] Error Code 4: Internal Error (Network must have at least one output)",
        "torch_tensorrt     1.4.0",
        "It took 1.5 ms per TRT 1.5 batch",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert "trt_version" not in f.facts


def test_the_invalid_node_description_on_its_own_line_names_the_node_through_the_gate(tmp_path: Path) -> None:
    # ModelImporter's LOG_ERROR holds a newline after "In function parseGraph:": a log shows two lines.
    text = "\n".join([
        f"{STAMP} [E] [TRT] ModelImporter.cpp:771: ERROR: ModelImporter.cpp:195 In function parseGraph:",
        "[6] Invalid Node - Gather_31",
        "Cannot gather on an empty tensor",
        f"{STAMP} [E] Failed to parse onnx file",
    ])
    (f,) = [f for f in _scan(tmp_path, text) if f.kind == KIND_TENSORRT_ERROR]
    assert f.facts["layer"] == "Gather_31"
    assert [x.facts.get("onnx_error") for x in classify_text("[6] Invalid Node - Gather_31")] == ["INVALID_NODE"]


def test_tensorrt_8_no_implementation_under_an_applications_own_error_tag_keeps_its_code() -> None:
    # TensorRT 8's logger message "<ErrorCode>: <desc>", printed by an application's ILogger as "ERROR: " + msg.
    facts = _one("ERROR: 10: Could not find any implementation for node conv_3 + relu_3.")
    assert facts["error_code"] == 10
    assert facts["layer"] == "conv_3 + relu_3"


def test_a_sentence_about_missing_implementations_is_not_the_builders_error() -> None:
    assert TRT.classify("If it could not find any implementation for node X, increase the workspace") == []


def test_a_wrappers_engine_build_failed_error_is_a_build_failure_through_the_gate() -> None:
    (f,) = classify_text('  raise RuntimeError("x")\nRuntimeError: TRT Engine build failed... Please check the logs.')
    assert f.kind == KIND_TENSORRT_ERROR and f.facts["category"] == "build_failed"


def test_tensorrt_8_skipping_a_tactic_for_an_oom_error_is_the_device_requests_same_shortage() -> None:
    findings = [f for line in (
        "[TensorRT] ERROR: Tactic Device request: 300MB Available: 256MB. Device memory is insufficient to use tactic.",
        "[TensorRT] WARNING: Skipping tactic 3 due to oom error on requested size of 300 detected for tactic 8812.",
    ) for f in TRT.classify(line)]
    assert findings[1].facts["out_of_memory"] is True
    (f,) = merge_repeats(findings)
    assert f.facts["requested_bytes"] == 300 * 1024 * 1024


# ------------------------------------------------------------------------------ the ONNX parser's INT64 cast


@pytest.mark.parametrize("line", [
    f"{STAMP} [TRT] [W] onnx2trt_utils.cpp:512: Your ONNX model has been generated with INT64 weights, while TensorRT "
    "does not natively support INT64. Attempting to cast down to INT32.",
    "WARNING: [TRT]: onnx2trt_utils.cpp:400: Your ONNX model has been generated with INT64 weights, while TensorRT does not "
    "natively support INT64. Attempting to cast down to INT32.",
    "2024-03-01 10:11:12.345 [W:onnxruntime:, tensorrt_execution_provider.h:77 log] [2024-03-01 10:11:12 WARNING] "
    "C:\\build\\onnx-tensorrt\\onnx2trt_utils.cpp:401: Your ONNX model has been generated with INT64 weights, while "
    "TensorRT does not natively support INT64. Attempting to cast down to INT32.",
    f"{STAMP} [W] [TRT] onnx2trt_utils.cpp:260: One or more weights outside the range of INT32 was clamped",
])
def test_the_onnx_parsers_int64_cast_is_a_precision_warning(line: str) -> None:
    facts = _one(line)
    assert facts["category"] == "int64_weights_cast" and facts["precision_issue"] == "int64_weights_cast_to_int32"


def test_an_import_that_only_casts_int64_weights_is_one_warning(tmp_path: Path) -> None:
    cast = (f"{STAMP} [W] [TRT] onnx2trt_utils.cpp:368: Your ONNX model has been generated with INT64 weights, while "
            "TensorRT does not natively support INT64. Attempting to cast down to INT32.\n")
    clamp = f"{STAMP} [W] [TRT] onnx2trt_utils.cpp:394: One or more weights outside the range of INT32 was clamped\n"
    (f,) = _scan(tmp_path, cast * 3 + clamp * 2)
    assert f.kind == KIND_TENSORRT_ERROR and f.facts["category"] == "int64_weights_cast"


def test_the_int64_cast_is_folded_into_the_builds_own_outcome(tmp_path: Path) -> None:
    cast = (f"{STAMP} [W] [TRT] onnx2trt_utils.cpp:368: Your ONNX model has been generated with INT64 weights, while "
            "TensorRT does not natively support INT64. Attempting to cast down to INT32.\n")
    error = f"{STAMP} [E] [TRT] 4: [network.cpp::validate::2789] Error Code 4: Internal Error (Network must have at least one output)\n"
    (f,) = _scan(tmp_path, cast + "some other line\n" + error)
    assert f.facts.get("error_code") == 4 and f.facts.get("int64_weights_cast") is True


def test_a_sentence_about_int64_weights_is_no_warning() -> None:
    assert TRT.classify("TensorRT has no native INT64 support, so the parser will cast INT64 weights to INT32.") == []


# ------------------------------------------------------------------------------ a digest of trtexec's summary


def test_a_digest_of_a_summary_with_its_passed_line_is_a_benchmark(tmp_path: Path) -> None:
    (f,) = _scan(tmp_path, (
        "Result on the Orin:\n\n"
        "Throughput: 88.125 qps\n"
        "Latency mean: 11.402 ms\n"
        "Latency percentile(99%): 12.75 ms\n"
        "GPU Compute Time median: 10.9 ms\n"
        "&&&& PASSED TensorRT.trtexec [TensorRT v8602] # trtexec --loadEngine=m.plan\n"
    ))
    assert f.kind == KIND_TRT_BENCHMARK
    assert f.facts["throughput_qps"] == 88.125 and f.facts["latency_mean_ms"] == 11.402
    assert f.facts["latency_p99_ms"] == 12.75 and f.facts["gpu_compute_median_ms"] == 10.9
    assert f.facts["result"] == "PASSED"


def test_another_tools_throughput_and_medians_are_no_trtexec_benchmark(tmp_path: Path) -> None:
    found = _scan(tmp_path, "Throughput: 1200 qps\nLatency median: 3.2 ms\nLatency max: 9.1 ms\nDone.\n")
    assert [f for f in found if f.kind == KIND_TRT_BENCHMARK] == []


# ------------------------------------------------------------------------------ a layer named first


def test_a_layers_own_error_names_its_automatic_name_first() -> None:
    facts = _one(f"{STAMP} [E] [TRT] 3: (Unnamed Layer* 57) [Deconvolution]:kernel weights has count 4096 but 2048 was expected")
    assert facts["layer"] == "(Unnamed Layer* 57) [Deconvolution]"


def test_the_uff_parsers_validator_error_names_its_node() -> None:
    facts = _one("ERROR: [TRT]: UffParser: Validator error: box_head/ResizeNearest_1: Unsupported operation _ResizeNearest_TRT")
    assert facts["layer"] == "box_head/ResizeNearest_1"


def test_format_selection_failure_names_its_layer_first() -> None:
    found = TRT.classify("[03/02/2025-10:11:12] [E] Error[9]: [pluginV2Builder.cpp::reportPluginError::23] Error Code 9: "
                         "Internal Error (/model/MyPlugin_TRT_3: could not find any supported formats consistent with "
                         "input/output data types)")
    assert found and found[0].facts["error_code"] == 9 and found[0].facts["layer"] == "/model/MyPlugin_TRT_3"


def test_one_builder_check_failing_for_several_layers_is_one_fault() -> None:
    line = ("[05/06/2024-08:09:10] [E] [TRT] 4: [shapeCompiler.cpp::evaluateShapeChecks::1180] Error Code 4: Internal "
            "Error (({}) [Concatenation]: dimensions not compatible)")
    found = merge_repeats(TRT.classify(line.format("Unnamed Layer* 12") + "\n" + line.format("Unnamed Layer* 31")))
    assert len(found) == 1 and found[0].facts["layer"] == "(Unnamed Layer* 12) [Concatenation]"
    other = ("[05/06/2024-08:09:10] [E] [TRT] 4: [graphShapeAnalyzer.cpp::analyze::900] Error Code 4: Internal Error "
             "((Unnamed Layer* 31) [Concatenation]: dimensions not compatible)")
    assert len(merge_repeats(TRT.classify(line.format("Unnamed Layer* 12") + "\n" + other))) == 2


def test_the_onnx_parsers_invalid_node_and_the_error_code_after_it_are_one_failure(tmp_path: Path) -> None:
    # trtexec importing an ONNX model: the parser names the node it failed on, then prints TensorRT's reason, an
    # "Error Code 4" naming the layer the builder could not handle; the build's end follows.
    text = "\n".join([
        "[03/14/2024-09:12:05] [E] [TRT] ModelImporter.cpp:949: While parsing node number 88 [Expand -> \"/Expand_output_0\"]:",
        "[03/14/2024-09:12:05] [E] [TRT] ModelImporter.cpp:954: ERROR: ModelImporter.cpp:195 In function parseNode:",
        "[6] Invalid Node - /Expand",
        "ITensor::getDimensions: Error Code 4: Internal Error (/Range: IFillLayer cannot be used to compute a shape tensor)",
        "[03/14/2024-09:12:05] [E] Failed to parse onnx file",
        "&&&& FAILED TensorRT.trtexec [TensorRT v8601] # trtexec --onnx=model.onnx",
    ])
    found = _scan(tmp_path, text)
    assert [(f.facts.get("error_code"), f.facts.get("layer"), f.facts.get("onnx_node")) for f in found] == [
        (4, "/Range", "/Expand")]


def test_an_error_code_cut_right_after_an_unnamed_layer_keeps_the_layer() -> None:
    # An issue's title quoting the builder's error up to the layer's automatic name.
    facts = _one("Error Code 4: Internal Error ((Unnamed Layer* 57)")
    assert facts["error_code"] == 4 and facts["layer"] == "(Unnamed Layer* 57)"


# ------------------------------------------------------- TensorRT <= 7's status line printed without its spaces


def test_status_line_without_spaces_keeps_origin_status_and_detail() -> None:
    f = _one("E0412 10:02:33.118204 88 logging.cc:43] coreReadArchive.h(271) - Serialization Error in "
             "readExternal:0(Type mismatch)")
    assert f["error_origin"] == "coreReadArchive.h:271"
    assert f["error_status"] == "Serialization Error in readExternal" and f["error_detail"] == "Type mismatch"


def test_status_line_shape_in_prose_without_error_in_is_silent() -> None:
    assert [f for f in TRT.classify("see coreReadArchive.h(271) - the serializer checks types in readExternal:0")
            if f.kind == KIND_TENSORRT_ERROR] == []


# ------------------------------------------------ the builder's no-implementation message for a Myelin-fused node


def test_no_implementation_for_a_foreign_node_is_read_without_code_or_tag() -> None:
    f = _one("build failed: Could not find any implementation for node {ForeignNode[/encoder/Add_3.../encoder/"
             "LayerNormalization_11]}.")
    assert f["layer"] == "{ForeignNode[/encoder/Add_3.../encoder/LayerNormalization_11]}"


def test_no_implementation_for_a_plain_name_without_code_or_tag_is_silent() -> None:
    assert [f for f in TRT.classify("my planner could not find any implementation for node conv1 in its table")
            if f.kind == KIND_TENSORRT_ERROR] == []


# ------------------------------------------------ Polygraphy's engine loader failing, relayed alone


def test_polygraphys_could_not_deserialize_engine_relayed_alone_is_read() -> None:
    f = _one("Error occurred when executing UpscalerTensorrt:\n\nCould not deserialize engine. See log for details.\n")
    assert f["category"] == "engine_deserialize_failed"


def test_could_not_deserialize_in_other_words_is_silent() -> None:
    assert [f for f in TRT.classify("Could not deserialize engine config from YAML. See the docs for details.")
            if f.kind == KIND_TENSORRT_ERROR] == []


def test_foreign_node_name_ends_at_its_brackets_when_a_sentence_runs_on() -> None:
    facts = _one("# Could not find any implementation for node {ForeignNode[/blocks.3/Add...Mul_77]}. failure of "
                 "TensorRT 8.6.1 when building with trtexec on an RTX 4090")
    assert facts["layer"] == "{ForeignNode[/blocks.3/Add...Mul_77]}"
    # A plain node name still runs to the message's end, and the words without a node stay silent.
    assert _one("[E] 10: Could not find any implementation for node Conv_12 + Relu_13.")["layer"] == "Conv_12 + Relu_13"
    assert TRT.classify("It could not find any implementation for node types it does not support") == []
