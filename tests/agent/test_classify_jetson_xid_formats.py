"""Jetson memory and Xid wordings read from their producers' formats: synthetic lines only.

NvMap's lone ``NvMapMemHandleAlloc: error 0``, nvgpu's DMA failure with its prefix cut, the kernel's
CMA reservation failure, gpud's own Xid wording, GSP failures printed with no Xid line, an RM call
failing on a lost GPU, an RmInitAdapter note naming two GPUs; and the same words as a title, a
template or a string literal in code, which are not output.
"""

from __future__ import annotations

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier
from fleetscope.agent.classify.xid import XidClassifier, in_code_literal, literal_line
from fleetscope.proto.vocabulary import KIND_GPU_XID, KIND_JETSON_MEMORY, KIND_MEMORY_ALLOC_FAILURE

JETSON = JetsonMemoryClassifier()
XID = XidClassifier()


# ------------------------------------------------------------------------------ NvMap


def test_a_lone_handle_alloc_error_0_beside_a_failure_is_an_nvmap_failure_with_no_errno() -> None:
    (f,) = JETSON.classify("loading weights\nNvMapMemHandleAlloc: error 0\nNvRmStream: Buffer allocation failed (err=6)")
    assert f.kind == KIND_JETSON_MEMORY
    assert f.facts["source"] == "nvmap"
    assert f.facts["nvmap_call"] == "NvMapMemHandleAlloc"
    assert "errno" not in f.facts  # "error 0" reports none
    assert f.severity == "error"


def test_error_0_with_nothing_failing_beside_it_says_nothing() -> None:
    assert JETSON.classify("NvMapMemHandleAlloc: error 0") == []
    assert JETSON.classify("model loaded\nNvMapMemHandleAlloc: error 0\nserving on :8080") == []


def test_error_0_after_a_cuda_oom_is_that_nvmap_failure() -> None:
    (f,) = JETSON.classify("RuntimeError: CUDA error: out of memory\nNvMapMemHandleAlloc: error 0")
    assert f.facts["source"] == "nvmap"


def test_a_symbolic_errno_after_error_0_is_the_one_printed() -> None:
    (f,) = JETSON.classify("NvMapMemHandleAlloc: error 0 (ENOMEM)")
    assert f.facts["errno"] == 12
    assert f.facts["out_of_memory"] is True


def test_error_0_after_the_tagged_failure_stays_its_follow_up() -> None:
    text = "NvMapMemAllocInternalTagged: 1075772419 error 12\nNvMapMemHandleAlloc: error 0"
    (f,) = JETSON.classify(text)
    assert f.facts["errno"] == 12
    assert f.facts["followed_by"] == "NvMapMemHandleAlloc: error 0"


def test_the_message_as_a_heading_or_a_glossary_term_is_not_a_failure() -> None:
    assert JETSON.classify("### `NvMapMemAllocInternalTagged: error 12`") == []
    assert JETSON.classify("- **`NvMapMemAllocInternalTagged: ... error 12`** - the allocator ran dry") == []
    assert JETSON.classify("**`NvMapMemHandleAlloc failed: error 12`**: see below") == []


def test_the_message_as_a_string_literal_in_code_is_not_a_failure() -> None:
    assert JETSON.classify('NVMAP_OOM = "NvMapMemAllocInternalTagged: 1075772419 error 12"') == []
    assert JETSON.classify("    patterns = ['x', 'NvMapMemHandleAlloc failed: error 12']") == []


def test_a_message_quoted_on_a_line_of_its_own_is_still_output() -> None:
    (f,) = JETSON.classify('probe said:\n        "NvRmMemInitNvmap failed: error Permission denied"')
    assert f.facts["nvmap_call"] == "NvRmMemInitNvmap"
    assert f.facts["errno"] == 13



def test_a_notes_tables_cell_that_opens_with_the_message_and_goes_on_is_output() -> None:
    notes = (
        "| Change | Result | Kept |\n|---|---|---|\n"
        "| Learner on GPU | `NvMapMemAllocInternalTagged: error 12` \u2014 OOM in unified memory | CPU |\n"
        "| 2026-07-19 | brain crash loop | `NvMapMemAllocInternalTagged: 1075072515 error 12`; burst from the test lanes | lock |"
    )
    found = [f for f in classify_text(notes) if f.kind == KIND_JETSON_MEMORY]
    assert [f.facts["errno"] for f in found] == [12]
    assert found[0].facts["occurrences"] == 2


def test_a_lookup_tables_message_cell_is_not_a_failure_even_beside_a_narrating_cell() -> None:
    lookup = (
        "| Error | Cause | Fix |\n|---|---|---|\n"
        "| `NvMapMemHandleAlloc failed: error 12` | Out of GPU memory | Kill other processes |\n"
        "| `cudaMalloc failed: out of memory` | Context too large | `jetson-infer models` shows the maximum |\n"
        "| `NvMapMemAllocInternalTagged: error 12` \u2014 unified memory | Lower the batch | - |\n"
        "| GPU out of memory | `NvMapMemHandleAlloc failed: error 12` error | Reboot |"
    )
    assert classify_text(lookup) == []


# ------------------------------------------------------------------------------ nvgpu, CMA


def test_nvgpu_dma_failure_with_its_prefix_cut_is_still_nvgpu() -> None:
    text = 'at power-on the comptag buffer fails ("DMA alloc FAILED: [sysmem] size=33554432 ... PHYS")'
    (f,) = JETSON.classify(text)
    assert f.kind == KIND_JETSON_MEMORY
    assert f.facts["source"] == "nvgpu"
    assert f.facts["requested_bytes"] == 33554432
    assert "nvgpu_device" not in f.facts and "aligned_bytes" not in f.facts


def test_nvgpu_dma_failure_with_its_prefix_keeps_device_and_alignment() -> None:
    line = "[   12.500000] nvgpu: 17000000.gpu  nvgpu_dma_alloc_flags_sys:250 [ERR]  DMA alloc FAILED: [sysmem] size=4096 aligned=8192 flags:0x0"
    (f,) = JETSON.classify(line)
    assert f.facts["nvgpu_device"] == "17000000.gpu"
    assert f.facts["aligned_bytes"] == 8192


def test_a_cma_reservation_failure_on_a_tegra_boot_is_jetson_memory() -> None:
    text = (
        "[    0.000000] Machine model: NVIDIA Jetson AGX Orin\n"
        "[    0.000000] cma: Failed to reserve 1024 MiB"
    )
    (f,) = JETSON.classify(text)
    assert f.kind == KIND_JETSON_MEMORY
    assert f.facts["source"] == "cma"
    assert f.facts["requested_bytes"] == 1 << 30
    assert f.facts["kernel_uptime_s"] == 0.0


def test_a_cma_reservation_failure_elsewhere_is_a_generic_kernel_failure() -> None:
    (f,) = JETSON.classify("[    0.000000] cma: Failed to reserve 512 MiB on node 1")
    assert f.kind == KIND_MEMORY_ALLOC_FAILURE
    assert f.facts["numa_node"] == 1
    assert f.facts["jetson"] is False


def test_a_cma_reservation_quoted_in_prose_with_no_board_is_silent() -> None:
    assert JETSON.classify('passing cma=4G made it fail ("cma: Failed to reserve 4096 MiB") on my PC') == []


def test_the_gate_lets_the_new_jetson_wordings_through() -> None:
    kinds = [f.kind for f in classify_text("NvMapMemHandleAlloc: error 0 (ENOMEM)")]
    assert kinds == [KIND_JETSON_MEMORY]
    kinds = [f.kind for f in classify_text("tegra boot: DMA alloc FAILED: [sysmem] size=1048576 aligned=1048576")]
    assert kinds == [KIND_JETSON_MEMORY]


# ------------------------------------------------------------------------------ gpud's wording


def test_gpud_older_reason_with_the_name_in_parentheses() -> None:
    (f,) = XID.classify("XID 48(Double Bit ECC Error) detected on PCI:0000:17:00")
    assert f.kind == KIND_GPU_XID
    assert f.facts["xid"] == 48
    assert f.facts["pci_address"] == "PCI:0000:17:00"
    assert f.facts["relayed_by"] == "gpud"


def test_gpud_newer_reason_with_gpu_and_uuid() -> None:
    (f,) = XID.classify(
        "reason: XID 13 (Graphics Engine Exception) detected on GPU 0000:cb:00.0 UUID:GPU-0a1b2c3d-0000-1111-2222-333344445555"
    )
    assert f.facts["xid"] == 13
    assert f.facts["pci_address"] == "0000:cb:00.0"
    assert f.facts["gpu_uuid"] == "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def test_gpud_reason_without_a_name_and_with_a_sub_code() -> None:
    (a,) = XID.classify("XID 94 detected on GPU 0000:3b:00")
    assert a.facts["xid"] == 94
    (b,) = XID.classify("XID 145.3 (err status 0x00000010) detected on GPU 0000:3b:00")
    assert b.facts["xid"] == 145


def test_the_word_xid_without_a_gpu_named_is_not_a_relay() -> None:
    assert XID.classify("the XID 79 handler is detected on startup by the plugin") == []
    assert classify_text("XID errors are documented at docs.nvidia.com") == []


# ------------------------------------------------------------------------------ GSP, lost GPU


def test_an_rpc_history_dump_is_one_gsp_failure_per_gpu() -> None:
    text = (
        "[  90.1] NVRM: GPU2 RPC history (CPU -> GSP):\n"
        "[  90.1] NVRM:     entry function                   sequence data0\n"
        "[  90.1] NVRM:      0    76   GSP_RM_CONTROL           0 0x0000000000000000\n"
        "[  90.2] NVRM: GPU2 RPC event history (CPU <- GSP):\n"
        "[  90.2] NVRM:      0    4108 UCODE_LIBOS_PRINT        0 0x0000000000000000\n"
    )
    (f,) = XID.classify(text)
    assert f.facts["gsp_failure"] == "rpc_history"
    assert f.facts["gpu"] == "GPU2"
    assert f.severity == "critical"


def test_a_falcon_core_dump_is_one_finding() -> None:
    text = "\n".join(f"[ 55.{i}] NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: {i:02d} = 0x00000000012345{i:02d}" for i in range(5))
    (f,) = XID.classify(text)
    assert f.facts["gsp_failure"] == "core_dump"


def test_an_rpc_timeout_printed_on_its_own() -> None:
    (f,) = XID.classify(
        "[ 301.5] NVRM: _kgspRpcRecvPoll: Timeout waiting for RPC from GSP1! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x8)."
    )
    assert f.facts["gsp_failure"] == "rpc_timeout"
    assert f.facts["implied_xid"] == 119
    assert f.facts["gsp_function"] == "GSP_RM_CONTROL"
    assert f.facts["gpu"] == "GSP1"


def test_an_rpc_timeout_inside_an_xid_119_line_is_that_xid_only() -> None:
    (f,) = XID.classify(
        "NVRM: Xid (PCI:0000:41:00): 119, pid=812, name=python, Timeout after 6s of waiting for RPC response "
        "from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x2080 0x4)."
    )
    assert f.facts["xid"] == 119
    assert f.facts["gsp_timeout_s"] == 6.0


def test_rm_calls_failing_on_a_lost_gpu_are_one_fallen_off_the_bus_finding() -> None:
    line = "Mar 02 10:00:00 node kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from x @ y.c:10"
    (f,) = XID.classify("\n".join([line] * 3))
    assert f.facts["implied_xid"] == 79
    assert f.facts["fallen_off_bus"] is True
    assert f.facts["timestamp_style"] == "syslog"


def test_an_rm_init_note_naming_two_gpus_is_two_faults() -> None:
    found = XID.classify("NVRM: GPU 0000:00:05.0 / 0000:00:0a.0: RmInitAdapter failed! (0x62:0x40:2028)")
    assert [f.facts["pci_address"] for f in found] == ["0000:00:05.0", "0000:00:0a.0"]
    assert all(f.facts["rm_init_status"] == "0x62:0x40:2028" for f in found)


def test_a_reset_required_assertion_alone_is_one_gpu_fault() -> None:
    lines = [
        "[Tue Mar  3 08:10:11 2026] NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d00001; hClass=0x0000c86f; status=0x00000062",
        "[Tue Mar  3 08:10:11 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2901",
        "[Tue Mar  3 08:10:12 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2901",
    ]
    (f,) = classify_text("\n".join(lines))
    assert f.kind == KIND_GPU_XID
    assert f.facts["gsp_failure"] == "reset_required"
    assert f.facts["error_status"] == "NV_ERR_RESET_REQUIRED"
    assert f.facts["timestamp_style"] == "dmesg_ctime"


def test_an_assertion_in_the_gsp_code_is_a_gsp_failure() -> None:
    (f,) = XID.classify("[   41.002211] NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ kernel_gsp_gb100.c:812")
    assert f.facts["gsp_failure"] == "gsp_assertion"
    assert f.facts["assertion_file"] == "kernel_gsp_gb100.c"


def test_an_assertion_after_an_xid_line_is_that_xids_fault() -> None:
    text = (
        "NVRM: Xid (PCI:0000:41:00): 62, pid=2210, name=python3, 1f2d0000 00000000 00000000 00000000\n"
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from x @ y.c:1"
    )
    (f,) = XID.classify(text)
    assert f.facts["xid"] == 62


def test_an_assertion_elsewhere_in_the_rm_is_a_driver_fault_but_asks_no_reset() -> None:
    (f,) = XID.classify("[   41.0] NVRM: nvAssertFailedNoLog: Assertion failed: pGpu != NULL @ os_init.c:95")
    assert f.severity == "error" and f.facts["needs_gpu_reset"] is False
    assert "gsp_failure" not in f.facts


def test_rm_init_adapters_own_note_without_its_failed_line() -> None:
    (f,) = XID.classify("[  812.400113] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM")
    assert f.facts["init_failed"] is True
    assert f.facts["init_failure_reason"] == "Cannot initialize GSP firmware RM"
    assert f.facts["timestamp_style"] == "dmesg_monotonic"


def test_rm_init_adapters_note_beside_its_failed_line_is_that_one_fault() -> None:
    text = (
        "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM\n"
        "NVRM: GPU 0000:65:00.0: RmInitAdapter failed! (0x62:0x65:1860)"
    )
    (f,) = XID.classify(text)
    assert f.facts["rm_init_status"] == "0x62:0x65:1860"


# ------------------------------------------------------------------------------ templates, code


def test_a_template_pid_is_not_the_drivers_output() -> None:
    assert XID.classify("NVRM: Xid (PCI:0000:65:00): 109, pid=XXXXX, name=game, channel 0x0000000a") == []
    assert XID.classify("NVRM: Xid (PCI:0000:65:00): 43, pid=<pid>, name=<name>, Ch 00000010") == []


def test_an_elided_pid_in_a_real_paste_is_still_read() -> None:
    (f,) = XID.classify("NVRM: Xid (PCI:0000:02:00): 31, pid=…, name=probe, channel 0x00000004")
    assert f.facts["xid"] == 31
    assert f.facts["process_name"] == "probe"


def test_xid_lines_in_string_literals_are_code_not_output() -> None:
    assert XID.classify("  'gpu-xid': 'Jan  1 00:00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.',") == []
    assert XID.classify('    >>> line = "[12.5] NVRM: Xid (PCI:0000:0a:00): 94, pid=77, name=x, Ch 00000001"') == []


def test_an_xid_line_quoted_in_prose_is_still_output() -> None:
    (f,) = XID.classify('dmesg printed ("NVRM: Xid (PCI:0000:0a:00): 94, pid=77, name=x, Ch 00000001") twice')
    assert f.facts["xid"] == 94


def test_literal_line_reads_what_precedes_the_opening_quote() -> None:
    assert literal_line('x = "NVRM: Xid (PCI:0000:01:00): 13"', 5)
    assert literal_line("call(\"NvMapMemHandleAlloc: error 0\")", 6)
    assert not literal_line('it failed ("NvMapMemHandleAlloc: error 0")', 11)
    assert not literal_line('   "NvMapMemHandleAlloc: error 0"', 4)
    text = "a\n>>> s = 'NVRM: Xid (PCI:0000:01:00): 13, pid=1'\nb"
    assert in_code_literal(text, text.index("NVRM"))


def test_an_nvmap_op_joined_to_its_argument_by_a_colon() -> None:
    (f,) = JETSON.classify("[gstreamer] capture\nNvMapMemCacheMaint:1075334600 failed [14]")
    assert f.facts["nvmap_call"] == "NvMapMemCacheMaint"
    assert f.facts["errno"] == 14
    assert f.facts["out_of_memory"] is False
    assert f.severity == "warning"


def test_dcgm_health_failure_text_names_the_xid_and_the_gpu() -> None:
    (f,) = XID.classify("| Health Monitor | Error | Detected XID 63 for GPU 2 |")
    assert f.facts["xid"] == 63
    assert f.facts["gpu_index"] == 2
    assert f.facts["relayed_by"] == "dcgm"
    assert XID.classify("Detected XIDs are listed below") == []



def test_gpuds_json_event_for_an_xid_it_read() -> None:
    [f] = XID.classify('        "message": "xid 119 detected by dmesg (47 minutes ago)",')
    assert (f.kind, f.facts["xid"], f.facts["relayed_by"], f.facts["detected_by"]) == (KIND_GPU_XID, 119, "gpud", "dmesg")
    assert XID.classify("the xid 119 detected by dmesglike tools") == []


# ------------------------------------------------------------------------------ RM assertions, redacted pids


def test_an_rm_assertion_anywhere_in_the_driver_is_a_driver_fault_with_its_file() -> None:
    (f,) = XID.classify("[ 1021.554301] NVRM: GPU1 nvAssertFailedNoLog: Assertion failed: pKernelBus != NULL @ kern_bus.c:912")
    assert f.kind == KIND_GPU_XID
    assert f.facts["rm_assertion"] == "nvAssertFailedNoLog"
    assert f.facts["assertion_file"] == "kern_bus.c"
    assert f.facts["assertion"] == "pKernelBus != NULL"
    assert "xid" not in f.facts and "pci_address" not in f.facts  # neither is printed


def test_a_burst_of_rm_assertions_is_one_report_and_keeps_the_status() -> None:
    text = (
        "Jan 02 03:04:05 node kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: Invalid state [NV_ERR_INVALID_STATE]"
        " (0x00000040) returned from memmgrFree(pGpu) @ mem_mgr.c:301\n"
        "Jan 02 03:04:05 node kernel: NVRM: nvAssertFailedNoLog: Assertion failed: NV_OK == status @ rs_server.c:259\n"
    )
    (f,) = XID.classify(text)
    assert f.facts["error_status"] == "NV_ERR_INVALID_STATE"
    assert f.facts["timestamp_style"] == "syslog"


def test_an_rm_assertion_cut_after_its_function_or_as_a_title_is_still_read() -> None:
    assert [f.kind for f in classify_text("NVRM: nvAssertFailedNoLog:")] == [KIND_GPU_XID]
    assert [f.kind for f in classify_text("NVRM nvAssertOkFailedNoLog: Assertion failed: Generic failure")] == [KIND_GPU_XID]


def test_an_rm_assertion_about_memory_running_out_is_left_to_cuda_oom() -> None:
    line = ("[ 88.1] NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"
            " returned from allocVa(pVAS) @ va_alloc.c:77")
    assert XID.classify(line) == []


def test_an_rm_assertion_beside_an_xid_adds_no_second_fault() -> None:
    text = ("NVRM: Xid (PCI:0000:41:00): 31, pid=77, name=python, Ch 00000008\n"
            "NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ channel.c:10\n")
    assert [f.facts.get("xid") for f in XID.classify(text)] == [31]


def test_a_stamped_xid_line_with_its_pid_redacted_is_output() -> None:
    (f,) = XID.classify("Apr 01 10:00:00 host kernel: NVRM: Xid (PCI:0000:17:00): 45, pid=XXXX, name=trainer, Ch 00000010")
    assert f.facts["xid"] == 45 and "pid" not in f.facts and f.facts["process_known"] is False
    assert f.facts["process_name"] == "trainer"
    # The same line with no log's stamp is a template, as guides write it.
    assert XID.classify("NVRM: Xid (PCI:0000:17:00): 45, pid=XXXX, name=trainer, Ch 00000010") == []


def test_the_probe_notice_re_wrapped_without_its_tag_still_reports_the_gpu_lost() -> None:
    (f,) = XID.classify("has fallen off the bus and is not responding to commands.")
    assert f.facts["fallen_off_bus"] is True and f.facts["implied_xid"] == 79
    assert "pci_address" not in f.facts  # on the line before, not on this one


def test_fallen_off_the_bus_in_a_sentence_without_the_drivers_words_is_nothing() -> None:
    assert XID.classify("2) GPU has fallen off the bus") == []


def test_two_hand_redacted_addresses_of_one_xid_are_one_gpu() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    found = XID.classify(
        "kernel: NVRM: Xid (...): 31, pid=1201, name=game.exe, Ch 00000028, intr 00000000. MMU Fault: ENGINE GRAPHICS\n"
        "kernel: NVRM: Xid (.): 31, pid=1201, name=game.exe, Ch 00000028, intr 00000000. MMU Fault: ENGINE GRAPHICS\n"
    )
    assert [f.facts["pci_address"] for f in found] == ["...", "."]  # as printed
    assert len(merge_repeats(found)) == 1
    # Two GPUs named are two faults still.
    two = XID.classify("NVRM: Xid (PCI:0000:41:00): 31, pid=7, name=a, Ch 1\nNVRM: Xid (PCI:0000:42:00): 31, pid=7, name=a, Ch 1")
    assert len(merge_repeats(two)) == 2


def test_rm_init_adapter_failing_after_an_xid_on_that_gpu_is_a_second_fault() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    lines = (
        "[  98.1] NVRM: Xid (PCI:0000:00:07): 119, pid=1120, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x0 0x0).",
        "[ 101.2] NVRM: GPU 0000:00:07.0: RmInitAdapter failed! (0x22:0x56:731)",
        "[ 101.3] NVRM: GPU 0000:00:07.0: rm_init_adapter failed, device minor number 0",
    )
    merged = merge_repeats([f for line in lines for f in XID.classify(line)])
    assert [(f.facts.get("xid"), f.facts.get("init_failed")) for f in merged] == [(119, None), (None, True)]


def test_error_0_and_the_failures_on_the_lines_after_it_are_read_as_one_event_by_scan(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "camera.log"
    p.write_text(
        "pipeline started\n"
        "NvMapMemHandleAlloc: error 0\n"
        "nvbufsurface: Failed to allocate surface memory\n"
        "gst: Error InsufficientMemory while creating the buffer pool\n"
        "pipeline restarted\n",
        encoding="utf-8",
    )
    found = [f for f in scan_file(p).findings if f.kind == KIND_JETSON_MEMORY]
    assert len(found) == 1 and found[0].facts["source"] == "nvmap" and "errno" not in found[0].facts


def test_error_0_followed_by_ordinary_lines_stays_alone_in_a_scan(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "camera.log"
    p.write_text("NvMapMemHandleAlloc: error 0\nframe 120 decoded\nframe 121 decoded\n", encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_JETSON_MEMORY] == []


def test_error_0_printed_right_after_a_cuda_error_line_is_read_with_it_by_scan(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "orin.log"
    p.write_text("step 40\nCUDA error: out of memory\nNvMapMemHandleAlloc: error 0\nstep 41\n", encoding="utf-8")
    kinds = sorted(f.kind for f in scan_file(p).findings)
    assert kinds == sorted(["cuda_oom", KIND_JETSON_MEMORY])


def test_an_xid_154_line_trimmed_of_its_pci_part_is_still_that_xid() -> None:
    found = XidClassifier().classify(
        "after the crash: Xid 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    )
    assert len(found) == 1
    f = found[0]
    assert f.facts["xid"] == 154 and "pci_address" not in f.facts and f.facts["needs_gpu_reset"] is True


def test_a_sentence_naming_an_xid_number_is_not_a_trimmed_xid_line() -> None:
    assert XidClassifier().classify("We saw Xid 79, the GPU fell off the bus, twice last week.") == []


def test_the_probe_notice_over_its_three_nvrm_lines_names_its_gpu_through_a_scan(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    # The driver prints the notice over three lines; a note may re-wrap it over two without the later tags.
    for name, text in (
        ("dmesg.txt", "[   17.220913] NVRM: The NVIDIA GPU 0000:3b:00.0\n"
                      "[   17.220915] NVRM: (PCI ID: 10de:2204) installed in this system has\n"
                      "[   17.220916] NVRM: fallen off the bus and is not responding to commands.\n"
                      "[   17.221004] nvidia: probe of 0000:3b:00.0 failed with error -1\n"),
        ("notes.md", "dmesg says, again and again:\n\nNVRM: The NVIDIA GPU 0000:3b:00.0\n"
                     "has fallen off the bus and is not responding to commands.\n\n"),
    ):
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        (f,) = [f for f in scan_file(p).findings if f.kind == KIND_GPU_XID]
        assert f.facts["pci_address"] == "0000:3b:00.0"
        assert f.facts["fallen_off_bus"] is True


def test_nvrm_refusing_a_gpu_whose_bar_is_invalid_is_a_gpu_fault_with_its_address() -> None:
    # nv_pci_probe over two lines (a GPU back from falling off the bus after a PCI rescan); the scan keeps them as one.
    from fleetscope.agent.tools.scan import iter_events

    text = ("[  301.552013] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
            "[  301.552016] NVRM: BAR1 is 0M @ 0x0 (PCI:0000:01:00.0)\n"
            "[  301.552030] nvidia: probe of 0000:01:00.0 failed with error -1\n")
    found = [f for e in iter_events(text.splitlines()) for f in classify_text(e.text)]
    assert [(f.kind, f.facts.get("pci_address"), f.facts.get("bar")) for f in found] == [(KIND_GPU_XID, "0000:01:00.0", 1)]
    assert found[0].facts["init_failed"] is True


# ------------------------------------------------------- an Xid line a note says the run's log showed


def test_an_xid_line_a_note_says_the_kernel_log_showed_is_read_whole() -> None:
    found = [f for f in classify_text(
        "- The worker exited before its first batch.\n"
        "- dmesg reported `NVRM: Xid (PCI:0000:41:00): 13, pid=50122, name=vllm-worker`.\n") if f.kind == KIND_GPU_XID]
    assert len(found) == 1
    f = found[0]
    assert f.facts["xid"] == 13 and f.facts["pid"] == 50122 and f.facts["process_name"] == "vllm-worker"


def test_an_xid_line_a_manual_says_the_log_shows_stays_a_citation() -> None:
    assert [f for f in classify_text(
        "When a kernel faults, the kernel log shows `NVRM: Xid (PCI:0000:41:00): 13, pid=50122, name=vllm-worker` "
        "and the process exits.\n") if f.kind == KIND_GPU_XID] == []
