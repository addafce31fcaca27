"""EventGrouper on realistic multi-line output: PyTorch OOM tracebacks (written out, and made by
Python's own traceback module), chained and exception-group tracebacks, torchrun rank prefixes,
glog/TensorFlow blocks, interleaved sources, holding across polls, timeouts and size limits."""

from __future__ import annotations

import builtins
import sys
import time
import traceback

import pytest

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import KIND_CUDA_OOM
from fleetscope.agent.logs.files import guess_level
from fleetscope.agent.logs.grouping import EventGrouper
from fleetscope.agent.records import LogEvent

GiB = 1 << 30

# A PyTorch >= 2.5 OOM as a training script prints it (sentence wording, 3.11 caret lines).
PYTORCH_OOM_TRACEBACK = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 212, in <module>
    main()
  File "/workspace/train.py", line 198, in main
    loss = model(**batch).loss
           ^^^^^^^^^^^^^^^
  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1736, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1747, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/conda/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", line 1190, in forward
    logits = logits.float()
             ^^^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB \
of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use. Of the allocated \
memory 74.21 GiB is allocated by PyTorch, and 2.35 GiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  \
See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"""

OOM_MESSAGE = PYTORCH_OOM_TRACEBACK.splitlines()[-1].split(": ", 1)[1]

# PyTorch's "CUDA error" wording: the exception message goes on over three unindented lines.
CUDA_ERROR_TRACEBACK = """\
Traceback (most recent call last):
  File "/srv/infer.py", line 40, in <module>
    out = model(x.cuda())
                ^^^^^^^^
RuntimeError: CUDA error: out of memory
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."""

# TensorFlow's C++ log: a glog header, then the status message's indented lines.
TF_GLOG_BLOCK = """\
2019-07-21 23:23:08.310300: E tensorflow/core/common_runtime/executor.cc:641] Executor failed to create kernel. Resource exhausted: 2 root error(s) found.
  (0) Resource exhausted: OOM when allocating tensor with shape[32,64,112,112] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
\t [[{{node conv1/Conv2D}}]]
  (1) Resource exhausted: OOM when allocating tensor with shape[32,64,112,112] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
\t [[{{node conv1/Conv2D}}]]"""


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


def events(
    text: str, source: str = "/var/log/train.log", ts0: int = 1_700_000_000_000_000_000
) -> list[LogEvent]:
    """One LogEvent per line, as FileFollower makes them (blank lines are not sent)."""
    return [
        LogEvent(
            ts_ns=ts0 + i, source=source, message=line, level=guess_level(line), parsed_ts_ns=ts0 + i - 5
        )
        for i, line in enumerate(x for x in text.splitlines() if x)
    ]


def one(text: str, **kw: object) -> LogEvent:
    return events(text, **kw)[0]  # type: ignore[arg-type]


def _oom_error_class() -> type[RuntimeError]:
    class OutOfMemoryError(RuntimeError):
        pass

    # Printed as "torch.OutOfMemoryError", as PyTorch's is (not "...<locals>.OutOfMemoryError").
    OutOfMemoryError.__module__ = "torch"
    OutOfMemoryError.__qualname__ = "OutOfMemoryError"
    return OutOfMemoryError


def real_chained_traceback(*, cause: bool) -> str:
    """A chained OOM traceback in the running Python's own format: an OOM raised while handling one."""
    oom = _oom_error_class()

    def forward() -> None:
        raise oom(OOM_MESSAGE)

    def train_step() -> None:
        try:
            forward()
        except oom as first:
            if cause:
                raise oom(OOM_MESSAGE) from first
            forward()  # the retry with a smaller batch fails the same way

    try:
        train_step()
    except oom:
        return traceback.format_exc().rstrip("\n")
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------ one traceback


def test_pytorch_oom_traceback_becomes_one_event_and_one_finding() -> None:
    g = EventGrouper(clock=FakeClock())
    lines = events("epoch 3 step 1200 loss 1.873\n" + PYTORCH_OOM_TRACEBACK + "\nrestarting worker 0")
    out = g.feed(lines)
    assert len(out) == 3
    before, tb, after = out
    assert before is lines[0] and after is lines[-1]  # lines outside a block pass unchanged
    assert tb.message == PYTORCH_OOM_TRACEBACK
    assert tb.level == "error" and tb.source == "/var/log/train.log"
    assert tb.ts_ns == lines[1].ts_ns and tb.parsed_ts_ns == lines[1].parsed_ts_ns
    assert g.held_lines() == 0

    findings = classify_text(tb.message)
    assert [f.kind for f in findings] == [KIND_CUDA_OOM]
    facts = findings[0].facts
    assert facts["requested_bytes"] == 2 * GiB
    assert facts["device_index"] == 0
    assert facts["python_traceback"] is True  # only visible with the whole traceback in one event
    assert facts["traceback_frames"] == 5
    assert str(facts["innermost_frame"]).endswith("modeling_llama.py:1190 in forward")


def test_line_by_line_the_same_traceback_loses_its_frames() -> None:
    # Why the grouper exists: the OOM line alone is found, but nothing about where it happened.
    per_line = [f for e in events(PYTORCH_OOM_TRACEBACK) for f in classify_text(e.message)]
    assert len(per_line) == 1 and "python_traceback" not in per_line[0].facts


@pytest.mark.parametrize("cause", [False, True], ids=["during-handling", "direct-cause"])
@pytest.mark.parametrize("keep_blank_lines", [False, True], ids=["file", "journal"])
def test_chained_traceback_is_one_event_and_one_finding(cause: bool, keep_blank_lines: bool) -> None:
    text = real_chained_traceback(cause=cause)
    marker = (
        "The above exception was the direct cause of the following exception:"
        if cause
        else "During handling of the above exception, another exception occurred:"
    )
    assert marker in text and text.count("Traceback (most recent call last):") == 2
    lines = [
        LogEvent(ts_ns=100 + i, source="journal:trainer", message=line)
        for i, line in enumerate(text.splitlines())
        if keep_blank_lines or line
    ]
    g = EventGrouper(clock=FakeClock())
    out = g.feed([*lines, LogEvent(ts_ns=999, source="journal:trainer", message="worker exited with code 1")])
    assert len(out) == 2
    expected = text if keep_blank_lines else "\n".join(line for line in text.splitlines() if line)
    assert out[0].message == expected and out[0].ts_ns == 100 and out[0].level == "error"
    findings = classify_text(out[0].message)
    assert len(findings) == 1 and findings[0].kind == KIND_CUDA_OOM
    assert findings[0].facts["requested_bytes"] == 2 * GiB
    assert findings[0].facts["occurrences"] == 2  # the same failure printed twice, counted once


def test_exception_message_continuation_lines_stay_with_the_traceback() -> None:
    g = EventGrouper(clock=FakeClock())
    out = g.feed(events(CUDA_ERROR_TRACEBACK + "\nserving request 17"))
    assert [e.message for e in out] == [CUDA_ERROR_TRACEBACK, "serving request 17"]
    findings = classify_text(out[0].message)
    assert [f.kind for f in findings] == [KIND_CUDA_OOM]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_exception_group_traceback_is_one_event() -> None:
    def fail(n: int) -> None:
        raise ValueError(f"shard {n} failed")

    errors: list[Exception] = []
    for n in range(2):
        try:
            fail(n)
        except ValueError as exc:
            errors.append(exc)
    group_type = getattr(builtins, "ExceptionGroup")  # noqa: B009 (a name Python 3.10 lacks)
    try:
        raise group_type("loading shards", errors)
    except Exception:
        text = traceback.format_exc().rstrip("\n")
    assert text.lstrip().startswith("+ Exception Group Traceback")
    out = EventGrouper(clock=FakeClock()).feed(events(text + "\nretrying"))
    assert [e.message for e in out] == [text, "retrying"]


def test_truncated_traceback_ends_at_an_unrelated_line() -> None:
    g = EventGrouper(clock=FakeClock())
    text = 'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in <module>\n    run()'
    out = g.feed(events(text + "\n[12:00:01] worker 2 started"))
    assert [e.message for e in out] == [text, "[12:00:01] worker 2 started"]


def test_two_tracebacks_back_to_back_are_two_events() -> None:
    a = "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'lr'"
    b = 'Traceback (most recent call last):\n  File "b.py", line 2, in <module>\nValueError: bad shape'
    out = EventGrouper(clock=FakeClock()).feed(events(a + "\n" + b + "\ndone"))
    assert [e.message for e in out] == [a, b, "done"]


def test_marker_after_other_text_takes_the_following_frames() -> None:
    # logger.error("step failed: %s", traceback.format_exc()) prints the marker after the message.
    text = (
        "ERROR trainer: step failed: Traceback (most recent call last):\n"
        '  File "/srv/train.py", line 88, in step\n'
        "    optimizer.step()\n"
        "RuntimeError: NCCL communicator was aborted"
    )
    out = EventGrouper(clock=FakeClock()).feed(events(text + "\nINFO trainer: resuming"))
    assert [e.message for e in out] == [text, "INFO trainer: resuming"]


# ------------------------------------------------------------------------- sources and ranks


def test_interleaved_sources_never_mix() -> None:
    a = events(PYTORCH_OOM_TRACEBACK, source="/var/log/a.log")
    b = events(CUDA_ERROR_TRACEBACK, source="journal:infer")
    mixed: list[LogEvent] = []
    for i in range(max(len(a), len(b))):
        mixed.extend(a[i : i + 1] + b[i : i + 1])
    g = EventGrouper(clock=FakeClock())
    out = g.feed(mixed) + g.feed(
        [one("next a", source="/var/log/a.log"), one("next b", source="journal:infer")]
    )
    by_source = {e.source: e.message for e in out if "\n" in e.message}
    assert by_source == {"/var/log/a.log": PYTORCH_OOM_TRACEBACK, "journal:infer": CUDA_ERROR_TRACEBACK}


def test_torchrun_rank_prefixes_keep_each_ranks_traceback_apart() -> None:
    ranks = {
        r: "\n".join(f"[rank{r}]: {line}" for line in PYTORCH_OOM_TRACEBACK.splitlines()) for r in (0, 1)
    }
    r0, r1 = events(ranks[0]), events(ranks[1])
    mixed = [e for pair in zip(r0, r1) for e in pair]
    g = EventGrouper(clock=FakeClock())
    out = g.feed([*mixed, one("[rank0]: done"), one("[rank1]: done")])
    assert [e.message for e in out] == [ranks[0], "[rank0]: done", ranks[1], "[rank1]: done"]
    for e in out[::2]:
        (finding,) = classify_text(e.message)
        assert finding.facts["requested_bytes"] == 2 * GiB


def test_docker_compose_prefix_is_followed() -> None:
    text = "\n".join(f"trainer-1  | {line}" for line in CUDA_ERROR_TRACEBACK.splitlines())
    g = EventGrouper(clock=FakeClock())
    # Another service's line leaves the block open; the next line of its own service ends it.
    assert [e.message for e in g.feed(events(text + "\nloader-1   | epoch 4"))] == ["loader-1   | epoch 4"]
    assert [e.message for e in g.feed(events("trainer-1  | restarting"))] == [text, "trainer-1  | restarting"]


# ------------------------------------------------------------------------------------ glog


def test_glog_block_with_indented_lines_is_one_event() -> None:
    lines = events(TF_GLOG_BLOCK + "\n2019-07-21 23:23:08.311000: I tensorflow/core/kernels/x.cc:10] next")
    g = EventGrouper(clock=FakeClock())
    out = g.feed(lines)
    assert [e.message for e in out] == [TF_GLOG_BLOCK, lines[-1].message]
    assert out[0].level == "error"  # from the "E" in the header, though no word says ERROR
    assert out[0].ts_ns == lines[0].ts_ns
    assert out[1] is lines[-1]  # a lone glog line goes on unchanged, not held
    assert g.held_lines() == 0
    assert any(f.kind == KIND_CUDA_OOM for f in classify_text(out[0].message))


def test_classic_glog_block_and_lone_glog_lines() -> None:
    block = (
        "E0421 10:03:12.123456  4242 ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Watchdog caught collective operation timeout:\n"
        "    WorkNCCL(SeqNum=81, OpType=ALLREDUCE, NumelIn=1048576, Timeout(ms)=600000) ran for 600021 milliseconds\n"
        "    before timing out."
    )
    lone = "I0421 10:03:12.200000  4242 ProcessGroupNCCL.cpp:900] [PG 0 Rank 3] destroying"
    g = EventGrouper(clock=FakeClock())
    out = g.feed(events(block + "\n" + lone))
    assert [e.message for e in out] == [block, lone]
    assert out[0].level == "error" and out[1].level == "info"


def test_lone_glog_line_at_the_end_of_a_poll_is_not_held() -> None:
    g = EventGrouper(clock=FakeClock())
    line = one("W0421 10:00:00.000001  77 allocator.cc:12] low on memory")
    assert g.feed([line]) == [line]


# ---------------------------------------------------------------------- holding and limits


def test_block_open_at_the_end_of_a_poll_is_held_until_the_next() -> None:
    clock = FakeClock()
    g = EventGrouper(clock=clock)
    lines = events(PYTORCH_OOM_TRACEBACK)
    assert g.feed(lines[:7]) == []  # cut mid-frames, as a read of a growing file can
    assert g.held_lines() == 7
    clock.advance(1.0)
    assert g.feed(lines[7:]) == []  # ended, but a chained traceback may still follow
    clock.advance(0.5)
    later = one("restarting")
    out = g.feed([later])
    assert [e.message for e in out] == [PYTORCH_OOM_TRACEBACK, "restarting"]


def test_held_block_is_flushed_after_max_wait() -> None:
    clock = FakeClock()
    # Without the settle time (tests/agent/test_grouping_settle.py), an ended traceback is held too.
    g = EventGrouper(clock=clock, max_wait_s=2.0, settle_s=None)
    assert g.feed(events(PYTORCH_OOM_TRACEBACK)) == []
    clock.advance(1.9)
    assert g.feed([]) == []
    clock.advance(0.2)
    out = g.feed([])
    assert [e.message for e in out] == [PYTORCH_OOM_TRACEBACK]
    assert g.held_lines() == 0


def test_a_traceback_that_never_ends_is_not_held_forever() -> None:
    clock = FakeClock()
    g = EventGrouper(clock=clock)
    lines = events('Traceback (most recent call last):\n  File "/srv/x.py", line 1, in <module>')
    assert g.feed(lines) == []
    clock.advance(2.0)
    assert [e.message for e in g.feed([])] == ["\n".join(e.message for e in lines)]


def test_max_lines_splits_a_huge_traceback() -> None:
    frames = "".join(
        f'  File "/srv/deep.py", line {n}, in f{n}\n    return f{n + 1}(x)\n' for n in range(150)
    )
    text = (
        "Traceback (most recent call last):\n" + frames + "RecursionError: maximum recursion depth exceeded"
    )
    g = EventGrouper(clock=FakeClock(), max_lines=200)
    lines = events(text)
    assert len(lines) == 302
    out = g.feed([*lines, one("after")])
    assert [len(e.message.splitlines()) for e in out] == [200, 102, 1]
    assert "\n".join(e.message for e in out[:2]) == text


def test_flush_all_returns_what_is_held() -> None:
    g = EventGrouper(clock=FakeClock())
    assert g.feed(events(PYTORCH_OOM_TRACEBACK, source="a")) == []
    assert g.feed(events(CUDA_ERROR_TRACEBACK, source="b")) == []
    assert sorted(e.message for e in g.flush_all()) == sorted([PYTORCH_OOM_TRACEBACK, CUDA_ERROR_TRACEBACK])
    assert g.held_lines() == 0 and g.flush_all() == []


def test_max_lines_must_allow_a_block() -> None:
    with pytest.raises(ValueError):
        EventGrouper(max_lines=1)


def test_plain_lines_are_cheap() -> None:
    # The agent runs the grouper over every line: 100k ordinary lines must be a small cost. The
    # speed is a benchmark's; this bound, far above it even on a loaded machine, catches work that
    # grows with the lines already seen (a quadratic grouper takes minutes here).
    lines = [
        LogEvent(ts_ns=i, source=f"/var/log/app{i % 4}.log", message=f"step {i} loss 0.{i % 97}")
        for i in range(100_000)
    ]
    g = EventGrouper()
    start = time.perf_counter()
    out = g.feed(lines)
    elapsed = time.perf_counter() - start
    assert len(out) == len(lines)
    assert elapsed < 10.0, f"{elapsed:.2f} s for 100k lines"


# ------------------------------------------------------- the rules the agent shares with scan

KERNEL_OOM = [
    "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "CPU: 3 PID: 777 Comm: python3 Not tainted 5.15.0-100-generic #110-Ubuntu",
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,"
    "task=python3,pid=777,uid=1000",
    "Out of memory: Killed process 777 (python3) total-vm:9000000kB, anon-rss:8000000kB, file-rss:1000kB, "
    "shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0",
    "oom_reaper: reaped process 777 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
]


def kmsg(lines: list[str]) -> list[LogEvent]:
    return [LogEvent(ts_ns=10 + i, source="kmsg", message=m, level="error") for i, m in enumerate(lines)]


def test_kernel_oom_burst_from_the_kernel_log_is_one_event_and_one_finding() -> None:
    g = EventGrouper(clock=FakeClock())
    out = g.feed(kmsg([*KERNEL_OOM, "eth0: link up"]))
    assert [e.message for e in out] == ["\n".join(KERNEL_OOM), "eth0: link up"]
    findings = classify_text(out[0].message)
    assert [(f.kind, f.facts.get("victim_pid")) for f in findings] == [("host_oom", 777)]


def test_a_kill_waits_one_poll_for_its_reaper_line() -> None:
    clock = FakeClock()
    g = EventGrouper(clock=clock)
    assert g.feed(kmsg(KERNEL_OOM[3:4])) == []
    clock.advance(0.5)
    assert [e.message for e in g.feed(kmsg(KERNEL_OOM[4:]))] == ["\n".join(KERNEL_OOM[3:])]
    assert g.feed(kmsg(KERNEL_OOM[3:4])) == []
    clock.advance(2.0)
    assert [e.message for e in g.feed([])] == [KERNEL_OOM[3]], "no reaper line: the kill alone, after max_wait"


def test_trtexec_device_block_joins_a_summary_in_the_same_poll_and_waits_no_longer() -> None:
    p = "[03/04/2025-10:00:00] [I] "
    device = [p + "=== Device Information ===", p + "Selected Device: NVIDIA L4", p + "SMs: 58"]
    summary = [p + "=== Performance summary ===", p + "Throughput: 512.5 qps", p + "Latency: min = 1.9 ms, max = 2.1 ms"]
    clock = FakeClock()
    g = EventGrouper(clock=clock)
    out = g.feed(events("\n".join([*device, p, p + "Starting inference", *summary, p])))
    # The summary's trailing blank "[I] " line is its blank tail (a summary may be spaced with
    # blank lines): dropped with it, and the summary released at the end of the poll.
    assert [e.message for e in out] == [p, p + "Starting inference", "\n".join(device + summary)]
    assert [f.kind for f in classify_text(out[2].message)] == ["trt_benchmark"]
    assert [e.message for e in g.feed(events("\n".join([*device, p])))] == [p]
    clock.advance(2.0)
    assert [e.message for e in g.feed([])] == ["\n".join(device)], "the engine build outlasted max_wait"


def test_pasted_traceback_tail_is_one_event() -> None:
    tail = "\n".join(PYTORCH_OOM_TRACEBACK.splitlines()[1:])
    out = EventGrouper(clock=FakeClock()).feed(events(tail + "\nnext"))
    assert [e.message for e in out] == [tail, "next"]
    assert classify_text(out[0].message)[0].facts["traceback_frames"] == 5


def test_a_blank_line_among_the_frames_ends_the_traceback() -> None:
    head = 'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in <module>'
    lines = [LogEvent(ts_ns=i, source="journal:app", message=m) for i, m in enumerate([*head.splitlines(), "", "Error: cut here"])]
    out = EventGrouper(clock=FakeClock()).feed(lines)
    assert [e.message for e in out] == [head, "Error: cut here"], "the blank line is no event"


def test_a_chain_printed_without_the_ranks_prefix_stays_with_its_first_part() -> None:
    first = "\n".join(f"[rank0]: {line}" for line in CUDA_ERROR_TRACEBACK.splitlines()[:5])
    chained = 'Traceback (most recent call last):\n  File "/srv/infer.py", line 44, in <module>\nKeyError: \'cache\''
    text = first + "\n\nDuring handling of the above exception, another exception occurred:\n\n" + chained
    lines = [LogEvent(ts_ns=i, source="journal:infer", message=m) for i, m in enumerate(text.splitlines())]
    out = EventGrouper(clock=FakeClock()).feed([*lines, LogEvent(ts_ns=99, source="journal:infer", message="exit 1")])
    assert [e.message for e in out] == [text, "exit 1"]


def test_max_chars_splits_a_huge_block() -> None:
    frames = "".join(f'  File "/srv/deep.py", line {n}, in f{n}\n' for n in range(100))
    g = EventGrouper(clock=FakeClock(), max_chars=2000)
    out = g.feed(events("Traceback (most recent call last):\n" + frames + "RecursionError: too deep\nafter"))
    assert len(out) > 2 and all(len(e.message) < 2100 for e in out)
    assert out[-1].message == "after"


def test_blank_lines_outside_a_block_are_no_event() -> None:
    lines = [LogEvent(ts_ns=i, source="a.log", message=m) for i, m in enumerate(["one", "", "   ", "two"])]
    assert [e.message for e in EventGrouper(clock=FakeClock()).feed(lines)] == ["one", "two"]


# ------------------------------------------------------------------ a kernel report from its stack

STACK_REPORT = [
    "[  310.000100] CPU: 1 PID: 4242 Comm: redis-server Not tainted 5.10.0-28-amd64 #1 Debian 5.10.209-2",
    "[  310.000110] Hardware name: Generic KVM guest, BIOS 1.16.0 04/01/2014",
    "[  310.000120] Call Trace:",
    "[  310.000130]  dump_stack+0x6b/0x83",
    "[  310.000140]  dump_header+0x4a/0x1f4",
    "[  310.000150]  oom_kill_process.cold+0xb/0x10",
    "[  310.000160]  out_of_memory+0x1bd/0x4e0",
]


def test_a_report_pasted_from_its_stack_is_one_event_with_the_kernels_release() -> None:
    out = EventGrouper(clock=FakeClock()).feed(kmsg([*STACK_REPORT, "eth0: link up"]))
    assert [e.message for e in out] == ["\n".join(STACK_REPORT), "eth0: link up"]
    [f] = classify_text(out[0].message)
    assert (f.kind, f.facts["kernel_release"], f.facts["invoker_pid"]) == ("host_oom", "5.10.0-28-amd64", 4242)


def test_an_arm64_stack_under_a_syslog_prefix_opens_the_same_way() -> None:
    p = "Mar  3 10:00:00 board kernel: "
    lines = [p + "[ 50.1] CPU: 0 PID: 9 Comm: python3 Tainted: G        W  4.9.253-tegra #1", p + "[ 50.1] Call trace:",
             p + "[ 50.1] [<ffffff800808a8a0>] dump_backtrace+0x0/0x1c8"]
    out = EventGrouper(clock=FakeClock()).feed(kmsg([*lines, "eth0: link up"]))
    assert [e.message for e in out] == ["\n".join(lines), "eth0: link up"]


def test_a_stack_head_followed_by_anything_else_is_a_line_of_its_own() -> None:
    lines = [STACK_REPORT[0], "[  310.000105] usb 1-1: new high-speed USB device number 2 using xhci_hcd", *STACK_REPORT[3:]]
    out = EventGrouper(clock=FakeClock()).feed(kmsg(lines))
    assert out[0].message == STACK_REPORT[0] and out[1].message == lines[1]
    assert "kernel_release" not in classify_text("\n".join(e.message for e in out[2:]))[0].facts


def test_a_warnings_stack_is_no_finding_and_leaves_the_xid_after_it_alone() -> None:
    # WARN() prints "WARNING: CPU: N PID: N at file:line", then the same stack header: not an OOM.
    lines = [
        "[  77.000001] WARNING: CPU: 3 PID: 123 at drivers/gpu/drm/drm_vblank.c:1096 drm_wait_one_vblank+0x1a/0x20",
        "[  77.000002] CPU: 3 PID: 123 Comm: kworker/3:1 Not tainted 6.1.0-18-amd64 #1 Debian 6.1.76-1",
        "[  77.000003] Hardware name: ASUS System Product Name/PRIME B550-PLUS, BIOS 2803 04/27/2022",
        "[  77.000004] Call Trace:",
        "[  77.000005]  <TASK>",
        "[  77.000006]  drm_wait_one_vblank+0x1a/0x20",
        "[  77.000007]  </TASK>",
        "[  77.000010] NVRM: Xid (PCI:0000:0a:00): 79, pid=0, GPU has fallen off the bus.",
    ]
    out = EventGrouper(clock=FakeClock()).feed(kmsg(lines))
    assert [len(e.message.splitlines()) for e in out] == [1, 6, 1]
    assert [f.kind for e in out for f in classify_text(e.message)] == ["gpu_xid"]


# ------------------------------------------------------------------ kubectl describe pod

DESCRIBE_POD = [
    "Name:         batch-worker-6d9f7c8b5-q2xlm",
    "Namespace:    jobs",
    "Priority:     0",
    "Node:         node-7/10.0.3.7",
    "Labels:       app=batch-worker",
    "              pod-template-hash=6d9f7c8b5",
    "Status:       Running",
    "Containers:",
    "  sidecar:",
    "    Image:          envoyproxy/envoy:v1.29",
    "    State:          Running",
    "      Started:      Tue, 02 Apr 2024 09:00:00 +0000",
    "    Ready:          True",
    "  worker:",
    "    Image:          registry.local/worker:3.1",
    "    State:          Running",
    "      Started:      Tue, 02 Apr 2024 10:12:40 +0000",
    "    Last State:     Terminated",
    "      Reason:       OOMKilled",
    "      Exit Code:    137",
    "      Started:      Tue, 02 Apr 2024 09:58:01 +0000",
    "      Finished:     Tue, 02 Apr 2024 10:12:38 +0000",
    "    Restart Count:  4",
    "QoS Class:       Burstable",
    "Events:          <none>",
]


def test_a_describe_pod_is_one_event_naming_the_pod_and_the_killed_container() -> None:
    out = EventGrouper(clock=FakeClock()).feed(events("\n".join([*DESCRIBE_POD, "$ kubectl get pods"])))
    assert [e.message for e in out] == ["\n".join(DESCRIBE_POD), "$ kubectl get pods"]
    [f] = classify_text(out[0].message)
    assert (f.facts["pod"], f.facts["container"], f.facts["exit_code"]) == ("batch-worker-6d9f7c8b5-q2xlm", "worker", 137)


def test_a_name_line_that_is_not_a_pods_describe_takes_nothing_after_it() -> None:
    # pip show prints "Name:" then fields kubectl's pod describe does not have; a traceback after a
    # Name: line is read as one; a name with spaces (a GPU's) is no pod's.
    text = "\n".join([
        "Name: torch", "Version: 2.3.0",
        "Name: trainer",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
        "Name:   NVIDIA A100-SXM4-80GB", "    Serial: 1324",
    ])
    out = EventGrouper(clock=FakeClock()).feed(events(text))
    assert [e.message for e in out] == text.splitlines()
    assert [f.kind for e in out for f in classify_text(e.message)] == ["cuda_oom"]


def test_earlyoom_v0_report_is_read_with_its_kill_line() -> None:
    # earlyoom v0.x: "Out of memory! avail: N MiB < min: N MiB", candidates' debug lines, then the bare kill line.
    text = ("Out of memory! avail: 201 MiB < min: 240 MiB\n"
            "    [311] badness=512\n"
            "Killing process 311 ffmpeg\n"
            "service restarted")
    out = EventGrouper(clock=FakeClock()).feed(events(text))
    assert [e.message.count("\n") for e in out] == [2, 0]
    (f,) = [f for f in classify_text(out[0].message) if f.kind == "host_oom"]
    assert (f.facts["victim_pid"], f.facts["victim_process"], f.facts["source"]) == (311, "ffmpeg", "earlyoom")
    # The kill line alone names no earlyoom: nothing to report.
    assert [f.kind for f in classify_text("Killing process 311 ffmpeg")] == []
