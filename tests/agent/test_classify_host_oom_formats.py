"""host_oom / memory_alloc_failure: message formats and the wrappers pastes put around them.

Every line here is written from the producing software's format (the kernel's oom_kill.c, page_alloc.c
warn_alloc and show_mem, RHEL's kill line, kubelet's OOM watcher, Go's map printing, ECS, Nomad,
earlyoom, the DRM CMA helper); none is copied from the corpus.
"""

from __future__ import annotations

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import KIND_HOST_OOM, Finding
from fleetscope.agent.classify.host_oom import HostOomClassifier, split_kernel_prefix
from fleetscope.agent.tools.scan import scan_file
from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE

HOST = HostOomClassifier()


def _one(text: str, kind: str = KIND_HOST_OOM) -> Finding:
    found = [f for f in HOST.classify(text) if f.kind == kind]
    assert len(found) == 1, [f.title for f in found]
    return found[0]


# ------------------------------------------------------------------------------------ prefixes


def test_prefix_journal_short_precise_microseconds() -> None:
    kl = split_kernel_prefix("Feb 11 21:30:05.123456 box kernel: bash invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0")
    assert kl.body.startswith("bash invoked")
    assert kl.log_time == "Feb 11 21:30:05.123456"


def test_prefix_masked_host_name() -> None:
    f = _one("Oct  2 01:02:03 web-1.xx.*** kernel: nginx invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), "
             "order=0, oom_score_adj=0")
    assert f.facts["invoker_process"] == "nginx"


def test_prefix_relay_stamp_before_printk_level() -> None:
    line = "2025-01-05T03:04:05.678Z In(05) vcpu-1 - Guest: <6>[ 812.000100] Tasks state (memory values in pages):"
    kl = split_kernel_prefix(line)
    assert kl.body == "Tasks state (memory values in pages):"
    assert kl.uptime_s == 812.0001


def test_prefix_indented_uptime() -> None:
    kl = split_kernel_prefix("   [  42.500000] worker: page allocation failure: order:2, mode:0xcc0(GFP_KERNEL)")
    assert kl.body.startswith("worker: page allocation failure")
    assert kl.uptime_s == 42.5


# --------------------------------------------------------------------------------- kernel records


def test_rhel_taint_dashes_give_release() -> None:
    text = "\n".join([
        "[Mon Mar  3 10:00:00 2019] tomcat invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=0",
        "[Mon Mar  3 10:00:00 2019] CPU: 1 PID: 4242 Comm: tomcat Tainted: G    W   ----------- T "
        "3.10.0-1062.el7.x86_64 #1",
    ])
    f = _one(text)
    assert f.facts["kernel_release"] == "3.10.0-1062.el7.x86_64"
    assert f.facts["invoker_pid"] == 4242


def test_context_line_wrapped_before_release() -> None:
    text = "\n".join([
        "[  10.000000] mysqld invoked oom-killer: gfp_mask=0x14200ca(GFP_HIGHUSER_MOVABLE), nodemask=(null), order=0, "
        "oom_score_adj=0",
        "[  10.000010] CPU: 2 PID: 900 Comm: mysqld Tainted: G         C",
        "   5.10.11-v8+ #1399",
    ])
    f = _one(text)
    assert f.facts["kernel_release"] == "5.10.11-v8+"
    assert f.facts["invoker_process"] == "mysqld"


def test_header_fields_cut_still_names_invoker() -> None:
    # The flag list wrapped onto the next line: the order is then not on the header's line.
    f = _one("[ 300.100000] rsync invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGH\nUSER_MOVABLE), order=0, oom_score_adj=0")
    assert f.facts["invoker_process"] == "rsync"
    assert f.facts["gfp_mask"] == "0x6200ca"
    assert "order" not in f.facts  # not printed on the header's line: absent, not guessed


def test_new_header_after_previous_report_tail_is_a_second_fault() -> None:
    text = "\n".join([
        "[ 500.000001] 1000 pages RAM",
        "[ 500.000002] 20 pages reserved",
        "[ 501.000000] php invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=1, oom_score_adj=0",
    ])
    found = HOST.classify(text)
    assert len(found) == 2
    assert found[1].facts["invoker_process"] == "php"


def test_rhel7_kill_line_uid_after_name() -> None:
    f = _one("Jan  1 00:00:01 node kernel: Killed process 5151 (worker), UID 48, total-vm:20480kB, anon-rss:1024kB, "
             "file-rss:12kB, shmem-rss:0kB")
    assert f.facts["victim_pid"] == 5151
    assert f.facts["victim_process"] == "worker"
    assert f.facts["anon_rss_bytes"] == 1024 * 1024
    assert f.facts["uid"] == 48


def test_sacrifice_child_then_killed_other_pid_is_one_kill() -> None:
    text = "\n".join([
        "Memory cgroup out of memory: Kill process 2002 (GC Thread#0) score 1500 or sacrifice child",
        "Killed process 2000 (java) total-vm:4000000kB, anon-rss:300000kB, file-rss:1000kB, shmem-rss:0kB",
    ])
    f = _one(text)
    assert f.facts["victim_pid"] == 2000
    assert f.facts["victim_process"] == "java"
    assert f.facts["selected_pid"] == 2002
    assert f.facts["total_vm_bytes"] == 4000000 * 1024


def test_each_selected_and_killed_pair_is_its_own_kill() -> None:
    lines = []
    for pid in (301, 302, 303):
        lines.append(f"Memory cgroup out of memory: Kill process {pid} (stress) score 0 or sacrifice child")
        lines.append(f"Killed process {pid} (stress), UID 0, total-vm:7000kB, anon-rss:90kB, file-rss:0kB, shmem-rss:0kB")
    found = HOST.classify("\n".join(lines))
    assert [f.facts["victim_pid"] for f in found] == [301, 302, 303]


def test_kill_line_with_reworded_verb_keeps_figures() -> None:
    f = _one("[  77.000000] Out of memory: Prozess beendet 4321 (ruby) total-vm:500000kB, anon-rss:400000kB, "
             "file-rss:8kB, shmem-rss:0kB")
    assert f.facts["victim_pid"] == 4321
    assert f.facts["anon_rss_bytes"] == 400000 * 1024


def test_headless_call_trace_frames() -> None:
    text = "\n".join([
        "[ 99.000001]  dump_header+0x4a/0x1f0",
        "[ 99.000002]  oom_kill_process.cold+0xb/0x10",
        "[ 99.000003]  out_of_memory+0x1ed/0x4e0",
    ])
    f = _one(text)
    assert f.facts["oom_call_trace"] is True


def test_zone_watermark_line_alone_is_a_report() -> None:
    f = _one("[ 12.000000] Node 0 Normal free:40000kB boost:0kB min:45000kB low:56000kB high:67000kB "
             "reserved_highatomic:0KB active_anon:100kB")
    assert f.facts["zone_normal_min_bytes"] == 45000 * 1024


# ------------------------------------------------------------------------- allocation failures


def test_old_warn_alloc_period_wording() -> None:
    f = _one("Apr  1 12:00:00 kernel: ksoftirqd/0: page allocation failure. order:2, mode:0x20", KIND_MEMORY_ALLOC_FAILURE)
    assert f.facts["order"] == 2
    assert f.facts["invoker_process"] == "ksoftirqd/0"


def test_warn_alloc_quoted_inside_a_sentence() -> None:
    f = _one('We keep seeing "kswapd0: page allocation failure: order:3, mode:0x4020" on the box', KIND_MEMORY_ALLOC_FAILURE)
    assert f.facts["invoker_process"] == "kswapd0"
    assert f.facts["order"] == 3


def test_vc4_cma_failure() -> None:
    f = _one("[ 1.500000] [drm:vc4_bo_create [vc4]] *ERROR* Failed to allocate from CMA:", KIND_MEMORY_ALLOC_FAILURE)
    assert f.facts["source"] == "cma"
    assert f.facts["kernel_uptime_s"] == 1.5


def test_cma_wording_in_prose_is_silent() -> None:
    assert HOST.classify("The driver failed to allocate from CMA because the pool was too small") == []


# ------------------------------------------------------------------------ orchestrators, runtimes


def test_kubelet_cgroup_oom_event() -> None:
    f = _one("  Warning  CgroupOOM  12s  kubelet  Cgroup OOM encountered, victim process: python, pid: 8080")
    assert f.facts["victim_pid"] == 8080
    assert f.facts["victim_process"] == "python"
    assert f.facts["oom_scope"] == "memcg"


def test_go_template_map_status() -> None:
    f = _one("Last: map[terminated:map[containerID:docker://ab12 exitCode:137 finishedAt:2020-01-01T00:00:00Z "
             "reason:OOMKilled]]")
    assert f.facts["exit_code"] == 137


def test_flattened_yaml_status_names_container() -> None:
    f = _one("status: containerStatuses: - name: api ready: false restartCount: 2 state: terminated: exitCode: 137 "
             "reason: OOMKilled")
    assert f.facts["container"] == "api"
    assert f.facts["exit_code"] == 137


def test_flattened_get_row_after_header() -> None:
    f = _one("NAME READY STATUS RESTARTS AGE batch-7 0/1 OOMKilled 4 9m")
    assert f.facts["pod"] == "batch-7"


def test_commented_describe_reason_and_run_on_exit_code() -> None:
    assert _one("#       Reason:       OOMKilled").facts["k8s_reason"] == "OOMKilled"
    f = _one("Last State: Terminated\nReason: OOMKilled\nExit Code: 137Then run kubectl top")
    assert f.facts["exit_code"] == 137


def test_docker_inline_needs_the_state_object() -> None:
    assert HOST.classify('After it exits, inspect shows `"OOMKilled": true,` as expected.') == []
    f = _one('{"Status":"exited","Running":false,"OOMKilled":true,"Pid":0,"ExitCode":137}')
    assert f.facts["exit_code"] == 137


def test_ecs_stopped_reason_with_exit_code() -> None:
    f = _one("Stopped reason\tOutOfMemoryError: Container killed due to memory usage\tExit Code\t137")
    assert f.facts["source"] == "ecs"
    assert f.facts["exit_code"] == 137


def test_nomad_terminated_event() -> None:
    f = _one('2024-02-02T10:00:00Z  Terminated  Exit Code: 137, Exit Message: "OOM Killed"')
    assert f.facts["source"] == "nomad"
    assert f.facts["exit_code"] == 137


def test_nomad_other_exit_message_is_silent() -> None:
    assert HOST.classify('2024-02-02T10:00:00Z  Terminated  Exit Code: 1, Exit Message: "Docker container exited"') == []


def test_earlyoom_sysrq_mode() -> None:
    f = _one("mem avail: 200 of 4000 MiB (5 %), swap free: 0 of 0 MiB (0 %)\nInvoking oom killer: done")
    assert f.facts["source"] == "earlyoom"
    assert HOST.classify("Invoking oom killer: failed") == []


def test_registry_gate_lets_new_wordings_through() -> None:
    # The shared gate is built from the triggers: a line without "OOM" must still reach the classifier.
    kinds = [f.kind for f in classify_text("Stopped reason: OutOfMemoryError: Container killed due to memory usage")]
    assert kinds == [KIND_HOST_OOM]
    kinds = [f.kind for f in classify_text("[ 5.000000]  out_of_memory+0x1ed/0x4e0")]
    assert kinds == [KIND_HOST_OOM]


def test_prose_about_the_killer_is_silent() -> None:
    text = ("The OOM killer calls out_of_memory() and then oom_kill_process(); the kubelet reports CgroupOOM events "
            "and the reason is OOMKilled when the limit is hit.")
    assert HOST.classify(text) == []


def test_drm_cma_lines_of_one_text_are_one_fault_and_defer_to_cma_alloc() -> None:
    drm = "[ 2.000000] [drm:vc4_bo_create] *ERROR* Failed to allocate from CMA:"
    assert len(HOST.classify("\n".join([drm, drm.replace("2.0", "2.1")]))) == 1
    text = "\n".join(["[ 2.000000] cma: cma_alloc: alloc failed, req-size: 760 pages, ret: -12", drm])
    assert HOST.classify(text) == []


def test_old_kill_line_without_figures_pairs_with_selection() -> None:
    f = _one("Out of memory: kill process 700 (httpd) score 812 or a child\nKilled process 701 (httpd)")
    assert f.facts["victim_pid"] == 701
    assert f.facts["selected_pid"] == 700
    g = _one("Out of memory: Killed process 3030, UID 27, (mysqld).")
    assert g.facts["victim_process"] == "mysqld"
    assert g.facts["uid"] == 27


def test_panic_on_oom_and_deadlock() -> None:
    f = _one("[  90.000000] Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is enabled")
    assert f.facts["oom_panic"] is True
    assert f.severity == "critical"
    text = "[  90.000000] Out of memory and no killable processes...\n[  90.000001] Kernel panic - not syncing: System is deadlocked on memory"
    assert _one(text).facts["oom_panic"] is True
    assert HOST.classify("Set vm.panic_on_oom=1 so that the kernel panics when it runs out of memory.") == []


def test_slurm_step_oom_kill() -> None:
    f = _one("slurmstepd: error: Detected 3 oom-kill event(s) in step 88.0 cgroup. Some of your processes may have "
             "been killed by the cgroup out-of-memory handler.")
    assert f.facts["source"] == "slurm"
    assert f.facts["oom_kill_events"] == 3
    assert f.facts["slurm_step"] == "88.0"
    g = _one("[2024-05-05T05:05:05.005] error: Detected 1 oom_kill event in StepId=77.batch. Some of the step tasks "
             "have been OOM Killed.")
    assert g.facts["slurm_step"] == "77.batch"
    assert _one("srun: error: dgx-07: task 3: Out Of Memory").facts["node"] == "dgx-07"


def test_slurms_oom_kill_line_cut_after_its_count_is_a_kill() -> None:
    # An issue's title quoting slurmstepd's line up to "event(s)", the step left for the text below it.
    f = _one("# slurmstepd: error: Detected 2 oom-kill event(s)")
    assert f.facts["source"] == "slurm" and "slurm_step" not in f.facts


def test_slurm_wording_in_prose_is_silent() -> None:
    assert HOST.classify("If you see Detected 1 oom-kill event(s) your job needs more --mem") == []


# ------------------------------------------------------------- dump_stack()'s first line


def test_rhel_kdump_marker_is_not_part_of_the_comm() -> None:
    text = "\n".join([
        "[ 9000.000001] java invoked oom-killer: gfp_mask=0x201da, order=0, oom_score_adj=0",
        "[ 9000.000005] CPU: 1 PID: 4321 Comm: java Kdump: loaded Tainted: G        W      ------------ T "
        "3.10.0-1160.el7.x86_64 #1",
    ])
    f = _one(text)
    assert f.facts["invoker_process"] == "java"
    assert f.facts["kernel_release"] == "3.10.0-1160.el7.x86_64"


def test_a_comm_with_a_space_is_read_whole_from_the_stack_line_when_the_prefix_is_damaged() -> None:
    text = "\n".join([
        "1234.500001] Web Content invoked oom-killer: gfp_mask=0x24201ca, order=0, oom_score_adj=0",
        "[ 1234.500005] CPU: 2 PID: 777 Comm: Web Content Not tainted 4.4.0-21-generic #37-Ubuntu",
    ])
    assert _one(text).facts["invoker_process"] == "Web Content"


def test_the_stack_line_does_not_rename_a_different_header_comm() -> None:
    text = "\n".join([
        "[ 10.000001] postgres invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "[ 10.000005] CPU: 0 PID: 55 Comm: kworker/0:1 Not tainted 5.15.0-91-generic #101-Ubuntu",
    ])
    assert _one(text).facts["invoker_process"] == "postgres"


def test_a_report_pasted_from_its_stack_keeps_dump_stacks_first_line() -> None:
    text = "\n".join([
        "[  200.000100] CPU: 3 PID: 2145 Comm: node Not tainted 5.4.0-150-generic #167-Ubuntu",
        "[  200.000110] Hardware name: Xen HVM domU, BIOS 4.2.amazon 08/24/2006",
        "[  200.000120] Call Trace:",
        "[  200.000130]  dump_stack+0x6d/0x8b",
        "[  200.000140]  dump_header+0x4f/0x1eb",
        "[  200.000150]  ? find_lock_task_mm+0x3b/0x80",
        "[  200.000160]  oom_kill_process.cold+0xb/0x10",
        "[  200.000170]  out_of_memory+0x1cf/0x500",
    ])
    f = _one(text)
    assert f.facts["oom_report"] == "partial"
    assert f.facts["kernel_release"] == "5.4.0-150-generic"
    assert f.facts["invoker_pid"] == 2145


def test_a_stack_line_above_unrelated_text_is_not_taken_into_a_partial_report() -> None:
    text = "\n".join([
        "[  200.000100] CPU: 3 PID: 2145 Comm: node Not tainted 5.4.0-150-generic #167-Ubuntu",
        "[  200.000105] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "[  200.000160]  oom_kill_process.cold+0xb/0x10",
        "[  200.000170]  out_of_memory+0x1cf/0x500",
    ])
    f = _one(text)
    assert "kernel_release" not in f.facts and "invoker_pid" not in f.facts


# ------------------------------------------------------------------ output on a code fence's line


def test_output_pasted_on_the_fences_line_is_read() -> None:
    text = "\n".join([
        "``` [ 812.000100] kworker/u8:2: page allocation failure: order:3, mode:0x40cc0(GFP_KERNEL|__GFP_COMP)",
        " [ 812.000110] CPU: 1 PID: 88 Comm: kworker/u8:2 Not tainted 6.6.0 #1",
        "```",
    ])
    [f] = [f for f in classify_text(text) if f.kind == KIND_MEMORY_ALLOC_FAILURE]
    assert (f.facts["order"], f.facts["invoker_process"]) == (3, "kworker/u8:2")


def test_a_fences_language_tag_and_attributes_are_not_text() -> None:
    from fleetscope.agent.classify._normalise import undecorate

    for fence in ("```dmesg", "``` text", "~~~console", "```c++", "```shell-session", "```{.log}",
                  '```log title="kern.log"', "```python {linenos=true}"):
        assert undecorate(f"{fence}\n[ 1.0] eth0: link up\n```") == "\n[ 1.0] eth0: link up\n", fence
    # Text after a fence that is not a tag is kept as written; an inline ```span``` is left alone.
    assert undecorate("```Killed process 5 (a) total-vm:1kB\n```") == "Killed process 5 (a) total-vm:1kB\n"
    assert undecorate("run ```dmesg``` now") == "run ```dmesg``` now"


# ------------------------------------------------------------- kubectl get pod -o yaml / -o json, oomd


def _scanned(text: str) -> list[Finding]:
    from fleetscope.agent.classify.repeats import merge_repeats
    from fleetscope.agent.tools.scan import iter_events

    return merge_repeats([f for e in iter_events(text.splitlines()) for f in classify_text(e.text)])


def test_a_pod_status_in_yaml_is_read_with_its_container_and_the_kubelets_message() -> None:
    # kubectl get pod -o yaml: a container status, its lastState, quoted and block scalars, the kubelet's
    # back-off message wrapped by the YAML printer; the container's name after its states.
    text = "\n".join([
        "status:",
        "  containerStatuses:",
        "  - containerID: >-",
        "      containerd://0123abcd",
        "    lastState:",
        "      terminated:",
        "        exitCode: 137",
        "        finishedAt: '2024-03-01T10:00:00Z'",
        "        reason: OOMKilled",
        "    name: worker",
        "    restartCount: 4",
        "    state:",
        "      waiting:",
        "        message: back-off 5m0s restarting failed container=worker",
        "          pod=api-7d9f8b6c5-x2x9z_prod(0f0e0d0c-0b0a-0908-0706-050403020100)",
        "        reason: CrashLoopBackOff",
        "the pod keeps restarting",
    ])
    [f] = _scanned(text)
    assert f.kind == KIND_HOST_OOM
    assert (f.facts["container"], f.facts["pod"], f.facts["exit_code"]) == ("worker", "api-7d9f8b6c5-x2x9z", 137)
    assert (f.facts["k8s_state"], f.facts["restarts"]) == ("last", 4)
    assert f.facts["finished_at"] == "2024-03-01T10:00:00Z"  # a single-quoted YAML scalar


def test_a_status_pasted_from_its_state_key_still_names_no_key_as_the_container() -> None:
    text = "\n".join([
        "state:",
        "    waiting:",
        "      reason: CrashLoopBackOff",
        "  lastState:",
        "    terminated:",
        "      exitCode: 137",
        "      reason: OOMKilled",
    ])
    [f] = _scanned(text)
    assert "container" not in f.facts and f.facts["exit_code"] == 137


def test_a_pod_status_in_json_over_lines_names_its_container() -> None:
    text = "\n".join([
        '  "containerStatuses": [',
        "    {",
        '      "name": "cache",',
        '      "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},',
        '      "restartCount": 2',
        "    }",
        "  ]",
    ])
    [f] = _scanned(text)
    assert (f.facts["container"], f.facts["exit_code"]) == ("cache", 137)


def test_systemd_oomd_names_each_process_it_kills() -> None:
    text = "\n".join([
        "Sep 10 14:59:49 host systemd-oomd[34]: Considered 3 cgroups for killing, top candidates were:",
        "Sep 10 14:59:49 host systemd-oomd[34]: oomd attempting to kill 63 with KILL",
        "Sep 10 14:59:49 host systemd-oomd[34]: oomd attempting to kill 66 with KILL",
        "Sep 10 14:59:49 host systemd-oomd[34]: Killed /user.slice/app.service due to memory pressure for /user.slice",
    ])
    found = _scanned(text)
    assert sorted(f.facts.get("victim_pid") for f in found) == [63, 66]
    assert {f.facts["source"] for f in found} == {"systemd-oomd"}


def test_a_kill_line_is_read_field_by_field_cut_or_wrapped_by_a_terminal() -> None:
    pad = " " * 60
    f = _one(f"[86120.080672] Out of memory: Kill process 6155 (python) score 895 or sacrifice{pad}child\n"
             f"[86120.080694] Killed process 6155 (python) total-vm:1054044kB, anon-rss:832856k{pad}B, file-rss:2788kB, shmem-rss:0")
    assert (f.facts["victim_pid"], f.facts["victim_process"], f.facts["total_vm_bytes"]) == (6155, "python", 1054044 * 1024)
    assert f.facts["file_rss_bytes"] == 2788 * 1024
    assert "anon_rss_bytes" not in f.facts and "shmem_rss_bytes" not in f.facts  # not printed whole: absent
    cut = _one("[112950.724529] Killed process 29075 (python3) total-vm:33709852kB, anon-rss:")
    assert (cut.facts["victim_pid"], cut.facts["total_vm_bytes"]) == (29075, 33709852 * 1024)
    assert "anon_rss_bytes" not in cut.facts
    rhel = _one("Out of memory: Killed process 42452 (java), UID 1000, total-vm:9000kB, anon-rss:100kB, file-rss:0kB")
    assert (rhel.facts["uid"], rhel.facts["anon_rss_bytes"]) == (1000, 102400)
    new = _one("Out of memory: Killed process 7 (a (b)) total-vm:10kB, anon-rss:5kB, file-rss:1kB, shmem-rss:0kB, "
               "UID:0 pgtables:40kB oom_score_adj:-998")
    assert (new.facts["victim_process"], new.facts["uid"], new.facts["oom_score_adj"]) == ("a (b)", 0, -998)
    assert new.facts["pgtables_bytes"] == 40 * 1024
    assert HOST.classify("The kernel Killed process 12 (x) and then we rebooted") == []  # no field, no end: prose


def test_a_describe_state_shown_commented_out_under_its_command_is_read_whole() -> None:
    text = "\n".join([
        'kubectl describe pod api-7f8c9d6b4-x2k9p | grep -A5 "Last State"',
        "#     Last State:     Terminated",
        "#       Reason:       OOMKilled",
        "#       Exit Code:    137",
        "#       Finished:     Sun, 15 Mar 2026 02:17:58 +0000",
        "",
        "# Then raise the limit",
    ])
    [f] = _scanned(text)
    assert (f.facts["exit_code"], f.facts["k8s_state"], f.facts["k8s_reason"]) == (137, "last", "OOMKilled")


def test_rays_memory_monitor_linux_2_4s_fault_path_and_a_cut_slurm_step_are_kills() -> None:
    ray = _one("(raylet) [2023-07-23 15:21:29,851 E 9751 9751] (raylet) node_manager.cc:3084: 4 Workers (tasks / actors) "
               "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: ab12)")
    assert (ray.facts["source"], ray.facts["workers_killed"]) == ("ray", 4)
    vm = _one("Mar 29 10:00:01 router kernel: VM: killing process gammu-smsd      ")
    assert (vm.facts["source"], vm.facts["victim_process"]) == ("kernel", "gammu-smsd")
    slurm = _one("slurmstepd: error: Detected 1 oom_kill event in StepId=71xxxx")
    assert slurm.facts["source"] == "slurm"
    assert HOST.classify("the VM: killing process names is a bad idea, said nobody") == []


def test_a_ray_worker_killed_by_the_memory_monitor_is_one_kill_with_its_pid() -> None:
    # Ray's OutOfMemoryError text (node_manager.cc's kill details), raised at ray.get and repeated in the
    # worker's exit detail: one kill, named by the worker's pid.
    detail = ("Memory on the node (IP: 10.1.2.3, ID: 0a1b2c) where the actor (actor ID: 77ff, name=Mapper.__init__, "
              "pid=4242, memory used=3.10GB) was running was 60.00GB / 62.00GB (0.967742), which exceeds the memory "
              "usage threshold of 0.95. Ray killed this worker (ID: 99aa) because it was the most recently scheduled task")
    text = "\n".join([
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", detail,
        "exit_detail = Task was killed due to the node running low on memory.", "    " + detail,
    ])
    f = _one(text)
    assert (f.facts["source"], f.facts["victim_pid"], f.facts["node_ip"]) == ("ray", 4242, "10.1.2.3")
    assert "victim_process" not in f.facts  # a task's name is not a process name


def test_a_ray_kill_message_cut_before_its_pid_or_run_into_a_row_number_is_still_a_kill() -> None:
    f = _one("1017Memory on the node (IP: 10.9.8.7, ID: beef) where the task (task ID: 01, name=sort('par")
    assert f.facts["source"] == "ray"
    assert "victim_pid" not in f.facts
    newer = _one("ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory. "
                 "Memory on the node (IP: 10.0.0.5) was 110.41GB / 121.63GB (0.907749)")
    assert newer.facts["node_ip"] == "10.0.0.5"
    assert HOST.classify("Memory on the node is plentiful, Ray's docs say") == []


def test_a_ray_actor_killed_by_the_memory_monitor_is_one_kill_with_the_dead_actors_pid() -> None:
    # RayActorError: the actor's indented fields, then the worker's exit detail with only the first sentence of the
    # memory monitor's error; the scan keeps the fields with it.
    text = "\n".join([
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        "        class_name: Trainer", "        actor_id: 5b72974700000000", "        pid: 3117",
        "        namespace: 94d6d15c", "        ip: 10.0.7.21",
        "The actor is dead because its worker process has died. Worker exit type: USER_ERROR Worker exit detail: "
        "Task was killed due to the node running low on memory.",
    ])
    (f,) = _scanned(text)
    assert (f.kind, f.facts["source"], f.facts["victim_pid"], f.facts["node_ip"]) == (KIND_HOST_OOM, "ray", 3117, "10.0.7.21")
    # Beside the sentence that goes on with the node's figures, the first sentence is the same kill.
    both = HOST.classify("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                         "Memory on the node (IP: 10.1.2.3, ID: 77aa) where the task (task ID: 01, name=f, pid=4242, "
                         "memory used=1.2GB) was running was 30GB / 31GB (0.96), which exceeds the memory usage threshold")
    assert [g.facts.get("victim_pid") for g in both] == [4242]


def test_ray_2_0s_raylet_line_killing_the_latest_task_is_a_kill() -> None:
    f = _one("(raylet, ip=10.0.3.9) [2022-09-22 17:46:53,692 E 134 134] (raylet) node_manager.cc:2966: System memory low "
             "at node with IP 10.0.3.9. Used memory (216.78GB) / total capacity (219.60GB) (0.98715) exceeds threshold "
             "0.95, killing latest task with name f and task ID NIL_ID to avoid running out of memory.")
    assert (f.facts["source"], f.facts["node_ip"]) == ("ray", "10.0.3.9")


def test_a_panic_on_oom_panic_is_read_with_the_stack_that_names_the_kernel() -> None:
    # sysrq "f" with vm.panic_on_oom=2: the panic, the empty line its message ends in, then dump_stack()'s first line.
    text = "\n".join([
        "[  910.064760] SysRq : Manual OOM execution",
        "[  910.113950] Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is enabled",
        "[  910.113950]",
        "[  910.229545] CPU: 1 PID: 243 Comm: kworker/1:2 Tainted: G         C O  4.19.0-6-amd64 #1 Debian 4.19.67-2",
        "[  910.229600] Hardware name: Dell Inc. PowerEdge R640/0W23H8, BIOS 2.8.2 08/27/2020",
    ])
    (f,) = _scanned(text)
    assert f.facts["oom_panic"] is True and f.facts["kernel_release"] == "4.19.0-6-amd64"


def test_an_oom_kill_summary_reflowed_after_its_commas_keeps_its_memcg() -> None:
    # A report's author wrapped the summary line after a comma, a space after each comma, the rest indented below.
    text = "\n".join([
        "[  581.376828] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0",
        "[  581.507012] oom-kill:constraint=CONSTRAINT_MEMCG, oom_memcg=/sandbox/4f1c2a77/job-runner,",
        "               task=python, pid=2269, uid=0",
        "[  581.513643] Memory cgroup out of memory: Killed process 2269 (python)",
        "               total-vm:31786400kB, anon-rss:13945980kB, file-rss:11996kB,",
        "               shmem-rss:0kB, pgtables:28172kB",
    ])
    (f,) = _scanned(text)
    assert f.facts["oom_memcg"] == "/sandbox/4f1c2a77/job-runner" and f.facts["constraint"] == "CONSTRAINT_MEMCG"
    assert f.facts["victim_pid"] == 2269


def test_a_kill_line_quoted_without_its_pid_names_the_victim() -> None:
    f = _one("# Out of memory: Killed process (postgres) every night")
    assert (f.facts["source"], f.facts["victim_process"]) == ("kernel", "postgres")
    assert "victim_pid" not in f.facts
    assert _one("Out of memory: Kill process (java)").facts["victim_process"] == "java"
    # a search for several victims names none of them
    assert HOST.classify("Out of memory: Killed process (chrome) or (firefox) dmesg") == []


def test_a_pidless_kill_line_over_the_report_it_names_is_that_one_kill() -> None:
    text = "\n".join([
        "Title: Out of memory: Killed process (java)",
        "[ 10.000000] Out of memory: Killed process 4321 (java) total-vm:2000kB, anon-rss:1000kB, file-rss:0kB, "
        "shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0",
    ])
    f = _one(text)
    assert f.facts["victim_pid"] == 4321


def test_earlyooms_notification_and_its_kill_line_for_one_pid_are_one_kill_named_as_the_kill_line_prints() -> None:
    text = "\n".join([
        "* Low memory! Killing process 4711 postgres.",
        "* Error: Failed to kill process",
        "",
        '* sending SIGTERM to process 4711 uid 999 "postgres": oom_score 900, oom_score_adj 0, VmRSS 3000 MiB, '
        'cmdline "postgres -D /data"',
    ])
    [f] = [x for x in _scanned(text) if x.kind == KIND_HOST_OOM]
    assert (f.facts["victim_pid"], f.facts["victim_process"]) == (4711, "postgres")
    assert "earlyoom_notification" not in f.facts


def test_a_console_relay_with_a_tab_after_its_timestamp_reads_a_task_table() -> None:
    kl = split_kernel_prefix("2024-02-03T04:05:06Z\t[ 99.100000] [    77]  1000    77   121954     1132   131072        0"
                             "             0 worker")
    assert kl.uptime_s == 99.1
    assert kl.body.startswith("[    77]")


def test_a_syslog_task_table_indented_as_a_markdown_code_block_is_read() -> None:
    rows = [
        "Aug  1 14:20:36 kiosk kernel: [  601.273660] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents "
        "oom_score_adj name",
        "Aug  1 14:20:36 kiosk kernel: [  601.273671] [    112]     0   112     4734      446   143360       11"
        "             0 systemd-journal",
        "Aug  1 14:20:36 kiosk kernel: [  601.273677] [    142]     0   142     4500      201    49152       79"
        "         -1000 systemd-udevd",
    ]
    plain = {f.kind for f in _scanned("\n".join(rows))}
    assert plain == {KIND_HOST_OOM}
    assert {f.kind for f in _scanned("\n".join("    " + r for r in rows))} == plain
    assert split_kernel_prefix("    Aug  1 14:20:36 kiosk kernel: [  601.2] x").log_time == "Aug  1 14:20:36"
    assert split_kernel_prefix("  active_anon:1 inactive_anon:2").body == "  active_anon:1 inactive_anon:2"


def test_a_containers_current_and_last_oom_kill_at_two_times_are_two_faults() -> None:
    describe = "\n".join([
        "    State:          Terminated",
        "      Reason:       OOMKilled",
        "      Exit Code:    137",
        "      Finished:     Wed, 15 Jul 2020 15:00:57 +0800",
        "    Last State:     Terminated",
        "      Reason:       OOMKilled",
        "      Exit Code:    137",
        "      Finished:     Wed, 15 Jul 2020 15:00:22 +0800",
        "    Ready:          False",
    ])
    assert len(_scanned(describe)) == 2
    twice = describe.split("    Last State:")[0]
    assert len(_scanned(twice + "\n" + twice)) == 1  # the same state pasted twice: one kill


# earlyoom's kill line as kill.c printed it in each release (rfjakob/earlyoom, tags v0.5 to v1.9):
# the victim's pid and name read from every wording, a name split by v0.x's "%s" left out.
def test_earlyoom_kill_line_of_every_release() -> None:
    lines = {
        # v1.8+: warn("sending %s to process %d uid %d \"%s\": oom_score %d, oom_score_adj %d, VmRSS %lld MiB, cmdline \"%s\"\n")
        'earlyoom[611]: sending SIGTERM to process 3120 uid 1000 "Isolated Web Co": oom_score 845, oom_score_adj 167, '
        'VmRSS 2210 MiB, cmdline "/usr/lib/firefox/firefox -contentproc"': (3120, "Isolated Web Co"),
        # v1.4-v1.7: warn("sending %s to process %d uid %d \"%s\": badness %d, VmRSS %lld MiB\n")
        'sending SIGKILL to process 77 uid 0 "node": badness 910, VmRSS 5012 MiB': (77, "node"),
        # v1.3: warn("sending %s to process %d \"%s\": badness %d, VmRSS %lu MiB\n")
        'sending SIGTERM to process 12 "my prog": badness 500, VmRSS 800 MiB': (12, "my prog"),
        # v1.3-rc1: warn("killing process %d \"%s\" with signal %d: badness %d, VmRSS %lu MiB\n")
        'killing process 4401 "java" with signal 15: badness 702, VmRSS 3333 MiB': (4401, "java"),
        # v1.2: warn("Killing process '%s' with signal %d, pid: %d, badness: %d, VmRSS: %lu MiB\n")
        "Killing process 'chromium' with signal 9, pid: 9001, badness: 640, VmRSS: 1500 MiB": (9001, "chromium"),
        # v1.1: fprintf(stderr, "Killing process: %s, pid: %d, badness: %d, VmRSS: %lu MiB\n")
        "Killing process: gimp-2.10, pid: 5005, badness: 601, VmRSS: 2900 MiB": (5005, "gimp-2.10"),
        # v1.0's notification: "Low memory! Killing process %d %s"
        "notify-send -i dialog-warning earlyoom 'Low memory! Killing process 6006 qemu-system-x86'": (6006, "qemu-system-x86"),
    }
    for line, (pid, name) in lines.items():
        f = _one(line)
        assert f.facts["source"] == "earlyoom"
        assert (f.facts["victim_pid"], f.facts.get("victim_process")) == (pid, name), line
    # v0.5-v0.12: fprintf(stderr, "Killing process %d %s\n") with /proc/PID/stat's "(comm)" read by "%s", after
    # "Out of memory! avail: %lu MiB < min: %lu MiB"; a name holding a space is cut at it, and is left out.
    f = _one("Out of memory! avail: 98 MiB < min: 100 MiB\nKilling process 5120 (chromium-browse)")
    assert (f.facts["victim_pid"], f.facts["victim_process"]) == (5120, "chromium-browse")
    f = _one("Out of memory! avail: 98 MiB < min: 100 MiB\nKilling process 5121 (Web")
    assert f.facts["victim_pid"] == 5121 and "victim_process" not in f.facts


def test_a_bare_killing_process_line_without_earlyoom_is_silent() -> None:
    assert classify_text("supervisord: Killing process 5120 gunicorn") == []
    assert classify_text("INFO Killing process 44 (worker) after timeout") == []


def test_earlyoom_term_then_the_kernels_kill_of_that_pid_is_one_fault() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    term = classify_text('sending SIGTERM to process 27541 uid 1000 "bash": badness 550, VmRSS 7609 MiB')
    kill = classify_text("[ 812.000100] Out of memory: Killed process 27541 (bash) total-vm:8118236kB, "
                         "anon-rss:8098448kB, file-rss:3264kB, shmem-rss:0kB")
    other = classify_text('sending SIGTERM to process 999 uid 1000 "bash": badness 550, VmRSS 7609 MiB')
    merged = merge_repeats(term + kill + other)
    assert [f.facts["victim_pid"] for f in merged] == [27541, 999]
    assert merged[0].facts["occurrences"] == 2


def test_ecs_cli_ps_row_of_a_stopped_container() -> None:
    # amazon-ecs-cli compose/container/container.go: Name "<task id>/<container>", State
    # fmt.Sprintf("%s ExitCode: %d", ...) then fmt.Sprintf("%s Reason: %s", ...), then Ports and TaskDefinition.
    f = _one("0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d/api-server  STOPPED ExitCode: 137 Reason: OutOfMemoryError: "
             "Container killed due to memory usage  10.0.0.1:80->8080/tcp  api:12")
    assert (f.facts["source"], f.facts["container"], f.facts["exit_code"]) == ("ecs", "api-server", 137)
    # Without an exit code (ECS left it unset) the row names the container and no code.
    f = _one("0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d/api  STOPPED Reason: OutOfMemoryError: Container killed due to "
             "memory usage")
    assert f.facts["container"] == "api" and "exit_code" not in f.facts


def test_the_bpf_oomkill_tracers_line() -> None:
    # bcc tools/oomkill.py and bpftrace oomkill.bt: "%H:%M:%S Triggered by PID %d (\"%s\"), OOM kill of PID %d
    # (\"%s\"), %d pages, loadavg: %s"; libbpf-tools/oomkill.c since 2023 "Trigger by", and no loadavg when it
    # could not read /proc/loadavg.
    for line in (
        '09:14:02 Triggered by PID 4410 ("stress-ng-vm"), OOM kill of PID 4412 ("stress-ng-vm"), 262144 pages, '
        "loadavg: 0.52 0.31 0.20 3/211 4413",
        '09:14:02 Trigger by PID 4410 ("stress-ng-vm"), OOM kill of PID 4412 ("stress-ng-vm"), 262144 pages',
    ):
        f = _one(line)
        assert (f.facts["invoker_pid"], f.facts["invoker_process"], f.facts["victim_pid"], f.facts["victim_process"],
                f.facts["oom_total_pages"]) == (4410, "stress-ng-vm", 4412, "stress-ng-vm", 262144)
    # Cut after the victim's pid: its name and the pages are not printed, and are absent.
    f = _one('09:14:02 Triggered by PID 4410 ("java"), OOM kill of PID 4412')
    assert "victim_process" not in f.facts and "oom_total_pages" not in f.facts


def test_the_kernels_report_and_the_tracers_line_for_one_kill_are_one_fault() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    kernel = classify_text("[ 5120.000200] Out of memory: Killed process 4412 (java) total-vm:8118236kB, "
                           "anon-rss:8098448kB, file-rss:3264kB, shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0")
    tracer = classify_text('09:14:02 Triggered by PID 4410 ("java"), OOM kill of PID 4412 ("java"), 262144 pages')
    other = classify_text('09:15:40 Triggered by PID 5001 ("java"), OOM kill of PID 5003 ("java"), 262144 pages')
    merged = merge_repeats(kernel + tracer + other)
    assert [f.facts["victim_pid"] for f in merged] == [4412, 5003]


def test_flux_shell_oom_plugin() -> None:
    # flux-core src/shell/oom.c: shell_log_error("Memory cgroup out of memory: killed %lu task%s on %s.", ...) from
    # the job cgroup's memory.events oom_kill count, through the shell's logger ("flux-shell[RANK]: ERROR: oom: ").
    f = _one("1.204s: flux-shell[3]: ERROR: oom: Memory cgroup out of memory: killed 2 tasks on tioga12.")
    assert (f.facts["source"], f.facts["oom_kill_events"], f.facts["node"]) == ("flux", 2, "tioga12")
    f = _one("Memory cgroup out of memory: killed 1 task on n1")  # the message alone, its period cut
    assert (f.facts["oom_kill_events"], f.facts["node"]) == (1, "n1")
    # The kernel's own memcg kill line is the kernel's, not Flux's.
    f = _one("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:100kB, anon-rss:90kB, file-rss:0kB, "
             "shmem-rss:0kB")
    assert f.facts["source"] == "kernel" and f.facts["victim_pid"] == 4242


def test_vmalloc_failures_of_every_kernel_wording() -> None:
    # mm/vmalloc.c warn_alloc() messages, printed after the task's comm and followed by ", mode:%#x(%pGg),
    # nodemask=...": "vmalloc: allocation failure: %lu bytes"; (3.x-5.12) "vmalloc: allocation failure, allocated
    # %ld of %ld bytes"; 5.13+ "vmalloc error: size %lu, vm_struct allocation failed" and "vmalloc error: size %lu,
    # page order %u, failed to allocate pages". The size asked for is the request; a comm may hold a colon.
    for line, comm, size, order in (
        ("[ 7301.402911] kworker/u8:2: vmalloc error: size 8192, page order 0, failed to allocate pages, "
         "mode:0xdc0(GFP_KERNEL|__GFP_ZERO), nodemask=(null),cpuset=/,mems_allowed=0", "kworker/u8:2", 8192, 0),
        ("[  88.310447] modprobe: vmalloc error: size 4096, vm_struct allocation failed, mode:0xcc0(GFP_KERNEL), "
         "nodemask=(null)", "modprobe", 4096, None),
        ("[  88.310447] insmod: vmalloc: allocation failure, allocated 8192 of 16384 bytes, mode:0xd0", "insmod", 16384,
         None),
    ):
        f = _one(line, KIND_MEMORY_ALLOC_FAILURE)
        assert (f.facts["invoker_process"], f.facts["requested_bytes"], f.facts.get("order")) == (comm, size, order)
    # Prose naming the function is not a failure.
    assert classify_text("The vmalloc error path frees the area before returning.") == []


def test_systemds_unit_oom_lines_and_their_fold_into_the_kernels_report() -> None:
    # systemd src/core/unit.c and service.c on a unit whose cgroup counted an oom_kill: "<unit>: A process of this
    # unit has been killed by the OOM killer." (v243-v253), "<unit>: The kernel OOM killer killed some processes in
    # this unit." (v254+), "<unit>: systemd-oomd killed N process(es) in this unit." and "<unit>: Failed with result
    # 'oom-kill'." (service.c).
    from fleetscope.agent.classify.repeats import merge_repeats

    j = "Dec 07 03:00:01 gpu-7 systemd[1]: "
    for line, source, unit in (
        (j + "trainer.service: A process of this unit has been killed by the OOM killer.", "systemd", "trainer.service"),
        (j + "user@1000.service: The kernel OOM killer killed some processes in this unit.", "systemd", "user@1000.service"),
        (j + "run-u36.scope: systemd-oomd killed 3 process(es) in this unit.", "systemd-oomd", "run-u36.scope"),
        (j + "trainer.service: Failed with result 'oom-kill'.", "systemd", "trainer.service"),
    ):
        f = _one(line)
        assert (f.facts["source"], f.facts["systemd_unit"]) == (source, unit), line
    # The kernel's report naming the unit's cgroup, systemd's two lines for it, and another unit's kill: two faults.
    lines = [
        "[ 5120.700154] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/system.slice/trainer.service,task_memcg=/system.slice/trainer.service,task=python3,pid=4412,uid=0",
        "[ 5120.700190] Memory cgroup out of memory: Killed process 4412 (python3) total-vm:8118236kB, "
        "anon-rss:8098448kB, file-rss:3264kB, shmem-rss:0kB, UID:0 pgtables:16000kB oom_score_adj:0",
        j + "trainer.service: A process of this unit has been killed by the OOM killer.",
        j + "trainer.service: Failed with result 'oom-kill'.",
        j + "backup.service: Failed with result 'oom-kill'.",
    ]
    merged = merge_repeats([f for line in lines for f in classify_text(line)])
    assert [(f.facts["source"], f.facts.get("victim_pid")) for f in merged] == [("kernel", 4412), ("systemd", None)]
    # The words in a sentence, with no unit before them, are not a kill.
    assert classify_text("A service fails with result 'oom-kill' when a process of this unit has been killed.") == []


def test_a_page_allocation_failure_as_an_issue_title_names_its_task() -> None:
    f = _one("# rsync: page allocation failure: order:2, mode:0x104020(GFP_ATOMIC|__GFP_COMP)", KIND_MEMORY_ALLOC_FAILURE)
    assert f.facts["invoker_process"] == "rsync" and f.facts["order"] == 2


def test_two_cpus_warnings_interleaved_keep_the_order_without_a_task() -> None:
    # Two CPUs' warn_alloc lines printed in the same microsecond: one header lost its "comm: " to the other's line.
    text = "\n".join([
        "[ 9120.004101] page allocation failure: order:0, mode:0x2080020(GFP_ATOMIC)",
        "[ 9120.004109] CPU: 7 PID: 0 Comm: swapper/7 Not tainted 4.9.0-8-amd64 #1 Debian 4.9.130-2",
        "[ 9120.004110] , mode:0x2080020(GFP_ATOMIC)",
        "[ 9120.004112] swapper/3: ",
        "[ 9120.004113] Hardware name: Supermicro X10DRi/X10DRi, BIOS 2.0 12/17/2015",
    ])
    found = [f for f in classify_text(text) if f.kind == KIND_MEMORY_ALLOC_FAILURE]
    assert found and found[0].facts["order"] == 0


def test_an_allocation_warnings_stack_alone_is_a_failed_allocation() -> None:
    # warn_alloc's stack pasted without its "page allocation failure: order:N" header (RHEL 7's warn_alloc_failed).
    text = "\n".join([
        "\t\t[ 8811.204512]  <IRQ>  [<ffffffff8a761e41>] dump_stack+0x19/0x1b",
        "\t\t[ 8811.204530]  [<ffffffff8a1bcaa0>] warn_alloc_failed+0x110/0x180",
        "\t\t[ 8811.204544]  [<ffffffff8a75d44e>] __alloc_pages_slowpath+0x6b6/0x724",
        "\t\t[ 8811.204561]  [<ffffffff8a1c1105>] __alloc_pages_nodemask+0x405/0x420",
    ])
    (f,) = [f for f in classify_text(text) if f.kind == KIND_MEMORY_ALLOC_FAILURE]
    assert f.facts["header_cut"] is True


def test_a_kill_cut_to_its_stack_is_not_an_allocation_warning() -> None:
    text = "\n".join([
        "[ 91.1] [<ffffffff811a2b3c>] warn_alloc+0x13a/0x160",
        "[ 91.1] [<ffffffff81192f10>] out_of_memory+0x3f0/0x4d0",
    ])
    assert [f for f in classify_text(text) if f.kind == KIND_MEMORY_ALLOC_FAILURE] == []


def test_warn_alloc_named_in_source_code_is_not_a_stack() -> None:
    assert classify_text("\twarn_alloc(gfp_mask, ac->nodemask, \"page allocation failure: order:%u\", order);") == []


# ------------------------------------------------------------ a memory cgroup's part of the report, alone


def test_a_memcg_usage_line_at_its_limit_alone_is_an_oom_report_of_that_cgroup() -> None:
    # mem_cgroup_print_oom_meminfo()'s first line, printed by the kernel only inside an OOM report.
    f = _one("[ 5012.118822] memory: usage 2097152kB, limit 2097152kB, failcnt 88")
    assert f.facts["oom_scope"] == "memcg"
    assert f.facts["memcg_failcnt"] == 88
    assert f.facts["memcg_limit_bytes"] == 2097152 * 1024
    assert "victim_pid" not in f.facts and "oom_memcg" not in f.facts  # neither is printed


def test_memcg_stats_heading_with_its_cgroup_through_the_scan_gate() -> None:
    text = ("Mar 03 04:05:06 node7 kernel: Memory cgroup stats for /kubepods/burstable/pod1234:\n"
            "Mar 03 04:05:06 node7 kernel: anon 52428800\n")
    (f,) = [x for x in classify_text(text) if x.kind == KIND_HOST_OOM]
    assert f.facts["memcg_stats_for"] == "/kubepods/burstable/pod1234"


def test_memory_usage_words_in_other_text_are_no_oom() -> None:
    assert HOST.classify("The container's memory: usage 512kB, limit 1024kB looks fine") == []
    assert HOST.classify("memory: usage 512kB, limit 1024kB") == []  # no failcnt: not the kernel's line


def test_a_kill_line_wrapped_by_a_terminal_between_a_figure_and_its_unit_keeps_the_figure() -> None:
    line = ("[811.5] Out of memory: Killed process 4242 (trainer) total-vm:20971520" + " " * 40
            + "kB, anon-rss:16777216kB, file-rss:1024kB, shmem-rss:0kB, UID:1000 pgtables:33000kB oom_score_adj:0")
    f = _one(line)
    assert f.facts["total_vm_bytes"] == 20971520 * 1024
    assert f.facts["anon_rss_bytes"] == 16777216 * 1024


def test_a_figure_cut_by_the_wrap_is_not_joined_to_the_next_rows_digits() -> None:
    f = _one("[811.5] Out of memory: Killed process 4242 (trainer) total-vm:2097    1520kB, anon-rss:16777216kB")
    assert "total_vm_bytes" not in f.facts


def test_a_memcg_reports_memory_stat_counters_on_kernel_lines_are_that_report() -> None:
    text = ("Apr 04 05:06:07 node-1 kernel: workingset_refault_file 12\n"
            "Apr 04 05:06:07 node-1 kernel: slab_reclaimable 40960\n")
    (f,) = [x for x in classify_text(text) if x.kind == KIND_HOST_OOM]
    assert f.facts["oom_scope"] == "memcg" and f.facts["memcg_stat_lines"] == 2
    assert "victim_pid" not in f.facts


def test_memory_stat_pasted_from_a_file_without_a_kernel_prefix_is_no_oom() -> None:
    assert HOST.classify("workingset_refault_file 12\nslab_reclaimable 40960\nshmem_thp 0") == []
    # Mem-Info's own "slab_reclaimable:" figures are not these counters.
    assert HOST.classify("[ 12.0] slab_reclaimable:40960 slab_unreclaimable:1024") == []


def test_systemds_line_for_each_slice_above_a_killed_unit_is_one_kill() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    lines = [f"2026-03-01T10:00:00.1{n}+00:00 host systemd[1]: {unit}: A process of this unit has been killed by the OOM killer."
             for n, unit in enumerate(("user-1000.slice", "app-db.slice", "user@1000.service", "user.slice", "app.slice"))]
    found = [f for line in lines for f in HOST.classify(line)]
    assert len(found) == 5
    merged = merge_repeats(found)
    assert sorted(str(f.facts["systemd_unit"]) for f in merged) == ["app-db.slice", "user-1000.slice"]


def test_two_sibling_units_killed_stay_two() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats

    lines = [f"Mar 01 10:00:00 host systemd[1]: {unit}: A process of this unit has been killed by the OOM killer."
             for unit in ("user-1000.slice", "user-1001.slice")]
    assert len(merge_repeats([f for line in lines for f in HOST.classify(line)])) == 2


def test_an_allocation_that_stalled_then_invoked_the_oom_killer_is_the_kills_fault() -> None:
    from fleetscope.agent.classify.repeats import merge_repeats
    from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE

    stall = "[ 900.1] java: page allocation stalls for 12000ms, order:1, mode:0x24200ca(GFP_HIGHUSER_MOVABLE)"
    kill = ("[ 900.4] java invoked oom-killer: gfp_mask=0x24200ca(GFP_HIGHUSER_MOVABLE), nodemask=0, order=1, oom_score_adj=0\n"
            "[ 900.5] Out of memory: Kill process 811 (java) score 900 or sacrifice child\n"
            "[ 900.5] Killed process 811 (java) total-vm:4000000kB, anon-rss:3000000kB, file-rss:0kB, shmem-rss:0kB")
    found = merge_repeats([*HOST.classify(stall), *HOST.classify(kill)])
    assert [f.kind for f in found] == [KIND_HOST_OOM]
    assert found[0].facts["stall_ms"] == 12000
    # A stall of another allocation (another order) stays its own warning.
    other = merge_repeats([*HOST.classify(stall.replace("order:1", "order:3")), *HOST.classify(kill)])
    assert sorted(f.kind for f in other) == sorted([KIND_MEMORY_ALLOC_FAILURE, KIND_HOST_OOM])


def test_kill_line_wrapped_before_its_fields_keeps_them_through_the_scan(tmp_path) -> None:
    from fleetscope.agent.tools.scan import scan_file

    p = tmp_path / "notes.md"
    p.write_text(
        "The job died overnight, dmesg says:\n\n"
        "    Memory cgroup out of memory: Killed process 40211 (trainer)\n"
        "    total-vm:9123400kB, anon-rss:7011200kB, file-rss:1024kB, shmem-rss:0kB\n\n"
        "and later\n\n"
        "[ 8812.100200] Killed process 5120 (worker) total-vm:812000kB, anon-\n"
        "rss:640000kB, file-rss:2048kB\n",
        encoding="utf-8",
    )
    found = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert len(found) == 2
    first, second = found
    assert first.facts["victim_pid"] == 40211
    assert first.facts["total_vm_bytes"] == 9123400 * 1024 and first.facts["anon_rss_bytes"] == 7011200 * 1024
    assert second.facts["victim_pid"] == 5120 and second.facts["anon_rss_bytes"] == 640000 * 1024


def test_a_fields_line_after_an_unrelated_line_is_not_the_kills() -> None:
    f = _one("Killed process 777 (app)\nsomething else\ntotal-vm:100kB, anon-rss:50kB")
    assert "anon_rss_bytes" not in f.facts


def test_ecs_stop_reason_retyped_with_another_capitalisation_is_still_ecs() -> None:
    for reason in ("OutofMemoryError: Container killed due to memory usage",
                   "Status reason: OutOfMemoryError: Container killed due to memory usage  Exit Code 137"):
        f = _one(f"The task stopped: {reason}")
        assert f.facts["source"] == "ecs"


def test_kill_line_wrapped_inside_a_field_name_by_a_mailer() -> None:
    text = ("> [  812.004311] Out of memory: Killed process 4242 (gnome-shell) total-\n"
            "vm:\n"
            "> 2233440kB, anon-rss:88120kB, file-rss:1200kB, shmem-rss:0kB\n")
    f = _one(text)
    assert f.facts["victim_pid"] == 4242 and f.facts["victim_process"] == "gnome-shell"
    assert f.facts["total_vm_bytes"] == 2233440 * 1024 and f.facts["anon_rss_bytes"] == 88120 * 1024


def test_kill_line_wrapped_inside_a_field_name_stays_one_event(tmp_path) -> None:
    p = tmp_path / "mail.txt"
    p.write_text("> [  812.004311] Out of memory: Killed process 4242 (gnome-shell) anon-\n"
                 "rss:\n"
                 "> 88120kB, file-rss:1200kB, shmem-rss:0kB\n", encoding="utf-8")
    found = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert len(found) == 1 and found[0].facts["anon_rss_bytes"] == 88120 * 1024


# ------------------------------------------------------------- out_of_memory() with nothing to kill


def test_the_deadlocked_panic_alone_is_an_oom_panic() -> None:
    # A boot that stops on the panic out_of_memory() ends in when nothing could be killed: often the only
    # line a console or a forum post shows.
    for text in ("[    4.120031] Kernel panic - not syncing: System is deadlocked on memory",
                 "---[ end Kernel panic - not syncing: System is deadlocked on memory ]---"):
        (f,) = [f for f in classify_text(text) if f.kind == KIND_HOST_OOM]
        assert f.facts["oom_panic"] is True


def test_no_killable_processes_then_its_panic_and_stack_are_one_report(tmp_path) -> None:
    # mm/oom_kill.c: "Out of memory and no killable processes...", panic(), then dump_stack() naming the release.
    p = tmp_path / "dmesg.txt"
    p.write_text("[  912.400101] Out of memory and no killable processes...\n"
                 "[  912.400104] Kernel panic - not syncing: System is deadlocked on memory\n"
                 "[  912.400107] CPU: 1 PID: 388 Comm: journald Tainted: G        W         6.1.21-v8+ #1642\n"
                 "[  912.400109] Hardware name: Raspberry Pi 4 Model B Rev 1.4 (DT)\n"
                 "[  912.400111] Call trace:\n"
                 "[  912.400113]  dump_backtrace+0xe4/0x140\n", encoding="utf-8")
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert f.facts["no_killable_processes"] is True and f.facts["oom_panic"] is True
    assert f.facts["kernel_release"] == "6.1.21-v8+"
    assert f.facts["invoker_process"] == "journald"


# ------------------------------------------------------------- Slurm: the batch script's shell and slurmstepd


def test_slurm_oom_kill_names_the_job_its_batch_scripts_shell_saw_killed(tmp_path) -> None:
    # A job's stderr: bash reports the killed job ("line N: <pid> Killed <command>"), then slurmstepd the step's kill.
    p = tmp_path / "slurm-4711.err"
    p.write_text("/var/spool/slurmd/job4711/slurm_script: line 14: 30211 Killed                  "
                 "/opt/conda/bin/torchrun train.py --epochs 90\n"
                 "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4711.batch. Some of your processes may have "
                 "been killed by the cgroup out-of-memory handler.\n", encoding="utf-8")
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert f.facts["source"] == "slurm" and f.facts["slurm_step"] == "4711.batch"
    assert f.facts["victim_pid"] == 30211 and f.facts["victim_process"] == "torchrun"


def test_a_shell_kill_without_slurms_oom_line_names_no_oom_victim(tmp_path) -> None:
    p = tmp_path / "job.err"
    p.write_text("./run.sh: line 3: 30211 Killed                  python3 serve.py\nrestarting\n", encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM] == []
    # Several kills in the step: which one bash saw is not the step's only victim.
    many = _one("run.sh: line 3: 30211 Killed   python3 a.py\n"
                "slurmstepd: error: Detected 3 oom-kill event(s) in StepId=12.batch.\n")
    assert "victim_pid" not in many.facts


# ------------------------------------------------------------- kernel lines quoted with their fields elided


def test_summary_and_kill_line_flattened_and_elided_read_as_the_kill() -> None:
    # A note quoting the 4.19+ summary and the kill line after it as one line, elided with "...".
    f = _one("`oom-kill: ... global_oom, task_memcg=/system.slice/pgsql.service ... Killed process 4242 (postgres) "
             "total-vm:1024000kB, anon-rss:512000kB`")
    assert f.facts["victim_pid"] == 4242 and f.facts["victim_process"] == "postgres"
    assert f.facts["anon_rss_bytes"] == 512000 * 1024 and f.facts["total_vm_bytes"] == 1024000 * 1024


def test_prose_naming_the_summary_and_kill_lines_is_no_kill() -> None:
    assert [f for f in HOST.classify("Look for the oom-kill: summary, then the Killed process line after it.")
            if f.kind == KIND_HOST_OOM] == []


def test_kill_line_elided_after_its_name_keeps_pid_and_name() -> None:
    f = _one("07:41:02.118 Out of memory: Killed process 3141 (firefox) ...")
    assert f.facts["victim_pid"] == 3141 and f.facts["victim_process"] == "firefox"


def test_kill_line_elided_then_prose_is_no_kill() -> None:
    assert [f for f in HOST.classify("Killed process 3141 (firefox) ... and then it came back by itself")
            if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------------------- Nomad's client wait result, systemd-oomd unit-less


def test_nomad_client_wait_result_oom_killed_gives_exit_code() -> None:
    f = _one('2020/11/03 14:22:07.512001 [INFO] client: task "api" for alloc "0d9f2a6e-51c3-4b7a-9e2f-7a1c2b3d4e5f" '
             "failed: Wait returned exit code 137, signal 0, and error OOM Killed")
    assert f.facts["source"] == "nomad" and f.facts["exit_code"] == 137


def test_nomad_client_wait_result_without_oom_is_no_kill() -> None:
    line = ('2020/11/03 14:22:07.512001 [INFO] client: task "api" for alloc "0d9f2a6e-51c3-4b7a-9e2f-7a1c2b3d4e5f" '
            "failed: Wait returned exit code 137, signal 0, and error <nil>")
    assert [f for f in HOST.classify(line) if f.kind == KIND_HOST_OOM] == []


def test_systemd_oomd_kill_line_without_its_unit_is_a_kill() -> None:
    f = _one("    14:03:11  systemd-oomd killed 27 process(es) in this unit")
    assert f.facts["source"] == "systemd-oomd" and f.facts["processes_killed"] == 27


def test_systemd_oomd_named_in_prose_is_no_kill() -> None:
    assert [f for f in HOST.classify("When systemd-oomd killed processes in this unit, the tab crashed.")
            if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------------------- ECS describe-tasks JSON over lines


_ECS_TASK = """{
    "tasks": [
        {
            "clusterArn": "arn:aws:ecs:eu-west-1:111122223333:cluster/batch",
            "containers": [
                {
                    "containerArn": "arn:aws:ecs:eu-west-1:111122223333:container/batch/0a1b2c3d/4e5f",
                    "name": "report-worker",
                    "image": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/report-worker:42",
                    "lastStatus": "STOPPED",
                    "exitCode": 137,
                    "reason": "%s",
                    "networkBindings": []
                }
            ],
            "desiredStatus": "STOPPED"
        }
    ]
}
"""


def test_ecs_describe_tasks_json_names_the_container_and_its_exit_code(tmp_path) -> None:
    p = tmp_path / "describe-tasks.json"
    p.write_text(_ECS_TASK % "OutOfMemoryError: Container killed due to memory usage", encoding="utf-8")
    (f,) = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert f.facts["source"] == "ecs" and f.facts["container"] == "report-worker" and f.facts["exit_code"] == 137


def test_ecs_describe_tasks_json_stopped_for_another_reason_is_no_kill(tmp_path) -> None:
    p = tmp_path / "describe-tasks.json"
    p.write_text(_ECS_TASK % "Essential container in task exited", encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------- a system-wide kill and systemd's line on the unit it ended


def _journal(tmp_path, victim: str, unit: str):
    p = tmp_path / "journal.txt"
    p.write_text(f"Mar 04 09:12:40 desk kernel: Out of memory: Killed process 5120 ({victim}) total-vm:9120400kB, "
                 "anon-rss:6100200kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:14000kB oom_score_adj:0\n"
                 f"Mar 04 09:12:41 desk systemd[1020]: {unit}: Failed with result 'oom-kill'.\n", encoding="utf-8")
    return [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]


def test_unit_named_for_the_process_killed_system_wide_is_that_kill(tmp_path) -> None:
    (f,) = _journal(tmp_path, "gnome-shell", "org.gnome.Shell@wayland.service")
    assert f.facts["victim_pid"] == 5120
    (f,) = _journal(tmp_path, "mysqld", "mysql.service")
    assert f.facts["victim_process"] == "mysqld"


def test_unit_named_for_another_program_is_another_fault(tmp_path) -> None:
    assert len(_journal(tmp_path, "postgres", "nginx.service")) == 2
    assert len(_journal(tmp_path, "userd", "user@1000.service")) == 2  # a word that names no program


# ------------------------------------------------------------- systemctl status on a unit the OOM killer ended


_STATUS = """\u00d7 batch-import.service - nightly import
     Loaded: loaded (/etc/systemd/system/batch-import.service; static)
     Active: failed (Result: {result}) since Tue 2025-06-10 02:14:09 UTC; 3min ago
   Duration: 41.2s
    Process: 7713 ExecStart=/opt/import/run (code=killed, signal=KILL)
   Main PID: 7713 (code=killed, signal=KILL)
        CPU: 38.901s
"""


def test_systemctl_status_failed_with_oom_kill_names_unit_and_time(tmp_path) -> None:
    p = tmp_path / "status.txt"
    p.write_text(_STATUS.format(result="oom-kill") + "\n" + _STATUS.format(result="oom-kill").replace("02:14:09", "03:20:47"),
                 encoding="utf-8")
    found = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert len(found) == 2  # two runs, told apart by when each failed
    assert {f.facts["systemd_unit"] for f in found} == {"batch-import.service"}
    assert found[0].facts["finished_at"] == "Tue 2025-06-10 02:14:09 UTC"


def test_systemctl_status_failed_for_another_result_is_no_kill(tmp_path) -> None:
    p = tmp_path / "status.txt"
    p.write_text(_STATUS.format(result="exit-code"), encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------------------- lines a note wrapped with a backslash


def test_lines_wrapped_with_a_backslash_are_read_whole(tmp_path) -> None:
    p = tmp_path / "notes.md"
    p.write_text(
        'level=warn time=2023-09-02T07:10:44Z msg="DockerGoClient: process within container '
        '4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c \\\n'
        '    (name: "ecs-api-3-web-a1b2c3d4e5f6a7b8c9d0") died due to OOM" \\\n'
        "    module=docker_client.go\n"
        "\n"
        "Sep  2 07:12:01 ip-10-0-1-5 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),\\\n"
        "    cpuset=web.scope,mems_allowed=0,oom_memcg=/ecstasks.slice/ecstasks-77aa.slice,\\\n"
        "    task_memcg=/ecstasks.slice/ecstasks-77aa.slice/web.scope,task=node,pid=8812,uid=1000\n"
        "Sep  2 07:12:01 ip-10-0-1-5 kernel: Memory cgroup out of memory: Killed process 8812 (node) "
        "total-vm:1204400kB, anon-rss:512000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1400kB oom_score_adj:0\n",
        encoding="utf-8")
    found = [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM]
    assert {f.facts.get("container") for f in found} >= {"ecs-api-3-web-a1b2c3d4e5f6a7b8c9d0"}
    (kill,) = [f for f in found if f.facts.get("victim_pid") == 8812]
    assert kill.facts["oom_memcg"] == "/ecstasks.slice/ecstasks-77aa.slice"


def test_a_command_wrapped_with_a_backslash_is_no_kill(tmp_path) -> None:
    p = tmp_path / "run.md"
    p.write_text("$ docker run --memory=512m --oom-kill-disable=false \\\n"
                 "    --name web -e OOM_SCORE=500 \\\n"
                 "    nginx:1.25\n", encoding="utf-8")
    assert [f for f in scan_file(p).findings if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------------------- a kill line quoted in an inline code span


def test_kill_line_in_an_inline_code_span_ends_at_the_span() -> None:
    f = _one('the journal shows "`Out of memory: Killed process 7781 (java)`" right before the restart')
    assert f.facts["victim_pid"] == 7781 and f.facts["victim_process"] == "java"


def test_kill_words_in_an_inline_code_span_without_a_pid_are_no_kill() -> None:
    assert [f for f in HOST.classify("grep for `Killed process` to find the victim (java) in the log")
            if f.kind == KIND_HOST_OOM] == []


# ------------------------------------------------------- a summary with fields elided by its writer


_KILL = ("Mar 11 02:40:17 kernel: Memory cgroup out of memory: Killed process 48213 (postgres) total-vm:8812344kB, "
         "anon-rss:4190208kB, file-rss:10420kB, shmem-rss:0kB, UID:999 pgtables:8660kB oom_score_adj:0")


def test_an_elided_summary_keeps_the_fields_either_side_whole() -> None:
    f = _one("Mar 11 02:40:17 kernel: oom-kill:constraint=CONSTRAINT_MEMCG ... task=postgres,pid=48213\n" + _KILL)
    assert f.facts["constraint"] == "CONSTRAINT_MEMCG"


def test_a_field_without_an_elision_is_not_split() -> None:
    f = _one("Mar 11 02:40:17 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),task=post gres,pid=48213\n"
             + _KILL)
    assert f.facts["constraint"] == "CONSTRAINT_MEMCG" and "..." not in str(f.facts.get("victim_process"))


def test_batch_schedulers_memory_limit_kills() -> None:
    # LSF's job report: the exit reason, then the exit status a line or two below it.
    text = "\n".join([
        "Job <4242> was submitted from host <login02> by user <ana> in cluster <hpc>.",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
        "Exited with exit code 137.",
    ])
    f = _one(text)
    assert (f.facts["source"], f.facts["exit_code"]) == ("lsf", 137)
    # PBS Pro's MoM writing into the job's stderr.
    assert _one("=>> PBS: job killed: vmem 9120344kb exceeded limit 8388608kb").facts["source"] == "pbs"
    # Torque's job mail, its exit status a few lines later.
    text = "\n".join([
        "PBS Job Id: 991.head01",
        "Job Name:   align",
        "Aborted by PBS Server",
        "Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted",
        "See Administrator for help",
        "Exit_status=-10",
    ])
    g = _one(text)
    assert (g.facts["source"], g.facts["exit_code"]) == ("pbs", -10)


def test_batch_scheduler_memory_limit_words_in_prose_are_silent() -> None:
    assert HOST.classify("LSF sets TERM_MEMLIMIT when a job goes over its -M value; raise it and resubmit.") == []
    assert HOST.classify("PBS: job killed: walltime 3605 exceeded limit 3600") == []
    assert HOST.classify("Your job exceeded a memory resource limit, so ask for more with -l vmem=.") == []


def test_kill_line_cut_inside_its_first_fields_name_keeps_the_victim() -> None:
    f = _one("Out of memory: Killed process 40112 (mpirun) total")
    assert (f.facts["victim_pid"], f.facts["victim_process"]) == (40112, "mpirun")
    assert _one("[ 812.004411] Out of memory: Killed process 40113 (python3) anon").facts["victim_pid"] == 40113


def test_kill_line_with_prose_after_the_name_stays_silent() -> None:
    assert HOST.classify("Out of memory: Killed process 40112 (mpirun) totally froze the node") == []
