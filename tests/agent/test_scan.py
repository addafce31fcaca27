"""The offline scanner (fleetscope.agent.tools.scan) and its subcommand (fleetscope.cli.scan).

Corpus tests read ../shared/corpus where it lies (skipped when absent). The made-up log lines
below are written from the documented formats; no corpus text is copied here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._base import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
)
from fleetscope.agent.classify.repeats import merge_repeats
from fleetscope.agent.tools import scan
from fleetscope.agent.tools.scan import iter_events, scan_file, scan_files
from fleetscope.cli import scan as scan_cli
from tests.corpus import CORPUS_DIR, sample_files, sample_text

# Per corpus folder: the kinds of which each sample must yield at least one.
EXPECTED = {
    "oom-pytorch": {KIND_CUDA_OOM},
    "oom-other": {KIND_CUDA_OOM},
    "kernel-oom": {KIND_HOST_OOM},
    "xid": {KIND_GPU_XID},
    "tensorrt": {KIND_TENSORRT_ERROR, KIND_TRT_BENCHMARK},  # either one
    "jetson-nvmap": {KIND_JETSON_MEMORY},
}
# jetson-nvmap/MANIFEST.md: "CONFOUNDER ... not an OOM" (a CUDA arch mismatch).
NOT_INCIDENTS = {
    ("jetson-nvmap", "libsgm-30-tx2-gpumat-allocate.txt"),
    ("tensorrt", "build-log-fuzzylabs-device-info.txt"),  # a device block alone measured nothing
}
# Telemetry dumps: read by parsers, never incidents.
NO_INCIDENT_FOLDERS = ("nvidia-smi", "tegrastats")

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use. "
    "Of the allocated memory 21.90 GiB is allocated by PyTorch, and 250.00 MiB is reserved by PyTorch but unallocated."
)
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 88, in <module>',
    "    main()",
    '  File "/srv/train.py", line 61, in main',
    "    loss = model(batch).sum()",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1511, in _wrapped_call_impl',
    "    return self._call_impl(*args, **kwargs)",
    OOM_LINE,
]
XID_LINE = (
    "kern  :warn  : 2025-03-02T08:15:00,000001+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python, "
    "GPU has fallen off the bus."
)
OOM_BURST = [
    "[ 5000.000001] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "[ 5000.000002] CPU: 3 PID: 777 Comm: python3 Not tainted 5.15.0-100-generic #110-Ubuntu",
    "[ 5000.000003] Call Trace:",
    "[ 5000.000004]  <TASK>",
    "[ 5000.000005]  dump_stack_lvl+0x4a/0x63",
    "[ 5000.000006] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=777,uid=1000",
    "[ 5000.000007] Out of memory: Killed process 777 (python3) total-vm:9000000kB, anon-rss:8000000kB, file-rss:1000kB, shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0",
    "[ 5000.000008] oom_reaper: reaped process 777 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _kinds(result: scan.ScanResult) -> Counter[str]:
    return Counter(f.kind for f in result.findings)


# ------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_every_corpus_sample_yields_its_kind(folder: str) -> None:
    files = sample_files(folder)
    results = scan_files(files)
    assert [r.path for r in results] == [str(p) for p in files]
    missing = []
    for path, result in zip(files, results):
        assert result.error is None, (path.name, result.error)
        kinds = set(_kinds(result))
        if (folder, path.name) in NOT_INCIDENTS:
            assert not kinds & {KIND_CUDA_OOM, KIND_JETSON_MEMORY, KIND_HOST_OOM, KIND_TRT_BENCHMARK}, (path.name, kinds)
        elif not kinds & EXPECTED[folder]:
            missing.append((path.name, sorted(kinds)))
    assert not missing, f"samples without a {EXPECTED[folder]} finding: {missing}"


@pytest.mark.parametrize("folder", NO_INCIDENT_FOLDERS)
def test_telemetry_dumps_are_not_incidents(folder: str) -> None:
    for result in scan_files(sample_files(folder)):
        assert result.error is None and result.findings == (), (result.path, result.findings)


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_grouping_loses_no_kind_the_whole_sample_has(folder: str) -> None:
    # Each sample is one excerpt: classified whole, it is the most context a classifier can get.
    # Events (smaller) must still find every kind found in the whole (one fault once in both).
    for path in sample_files(folder):
        whole = {f.kind for f in merge_repeats(classify_text(sample_text(path)))}
        assert whole <= set(_kinds(scan_file(path))), path.name


def test_corpus_findings_point_at_lines_inside_the_file() -> None:
    for folder in EXPECTED:
        for result in scan_files(sample_files(folder)):
            for f in result.findings:
                assert 1 <= f.line <= f.end_line <= result.lines, (result.path, f)


def test_kernel_oom_burst_is_one_incident_per_kill() -> None:
    # docker-for-linux sample: four "Killed process" lines, each followed by its oom_reaper line.
    path = next(p for p in sample_files("kernel-oom") if p.name.startswith("docker-for-linux-1001"))
    findings = scan_file(path).findings
    assert [(f.line, f.end_line) for f in findings] == [(1, 2), (3, 4), (5, 6), (7, 8)]


def test_trtexec_summary_without_header_is_one_benchmark() -> None:
    path = next(p for p in sample_files("tensorrt") if p.name.endswith("noheader.txt"))
    (f,) = scan_file(path).findings
    assert f.kind == KIND_TRT_BENCHMARK and f.facts.get("summary_complete") is not False


# ------------------------------------------------------------------------------ grouping


def test_traceback_yields_exactly_one_incident(tmp_path: Path) -> None:
    log = _write(
        tmp_path / "train.log", ["epoch 3 step 100 loss 0.41", *TRACEBACK, "epoch 3 step 101 loss 0.40"]
    )
    (f,) = scan_file(log).findings
    assert f.kind == KIND_CUDA_OOM
    assert f.line == 1 + len(TRACEBACK)  # the exception line
    assert f.end_line == 1 + len(TRACEBACK)
    assert f.facts["requested_bytes"] == 2 << 30
    events = list(iter_events(log.read_text().splitlines()))
    assert [len(e.lines) for e in events] == [1, len(TRACEBACK), 1]


def test_traceback_with_logger_prefix_and_chain_is_one_event() -> None:
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/srv/train.py", line 88, in <module>',
        "[rank0]:     main()",
        f"[rank0]: {OOM_LINE}",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/srv/train.py", line 90, in <module>',
        "    save_checkpoint()",
        "KeyError: 'optimizer'",
        "next line",
    ]
    events = list(iter_events(lines))
    assert [e.line_numbers for e in events] == [tuple(range(1, 12)), (12,)]
    assert [f.kind for f in classify_text(events[0].text)] == [KIND_CUDA_OOM]


def test_kernel_oom_burst_is_one_event() -> None:
    events = list(iter_events(["boot ok", *OOM_BURST, "later line"]))
    assert [e.line_numbers for e in events] == [
        (1,),
        tuple(range(2, 2 + len(OOM_BURST))),
        (2 + len(OOM_BURST),),
    ]
    findings = [f for e in events for f in classify_text(e.text)]
    assert [(f.kind, f.facts.get("victim_pid")) for f in findings] == [(KIND_HOST_OOM, 777)]


def test_trtexec_device_block_joins_its_summary() -> None:
    p = "[03/04/2025-10:00:00] [I] "
    lines = [
        "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --loadEngine=model.engine",
        p + "=== Device Information ===",
        p + "Selected Device: NVIDIA L4",
        p + "Compute Capability: 8.9",
        p + "SMs: 58",
        p + "Device Global Memory: 22478 MiB",
        p,
        p + "TensorRT version: 10.3.0",
        p + "Starting inference",
        p + "=== Performance summary ===",
        p + "Throughput: 512.5 qps",
        p
        + "Latency: min = 1.9 ms, max = 2.1 ms, mean = 1.95 ms, median = 1.95 ms, percentile(90%) = 2.0 ms, "
        "percentile(95%) = 2.05 ms, percentile(99%) = 2.08 ms",
        p + "Total Host Walltime: 3.0 s",
        p + "Total GPU Compute Time: 2.9 s",
        p,
        "&&&& PASSED TensorRT.trtexec [TensorRT v100300]",
    ]
    benches = [
        (e, f) for e in iter_events(lines) for f in classify_text(e.text) if f.kind == KIND_TRT_BENCHMARK
    ]
    assert len(benches) == 1
    event, bench = benches[0]
    # The "&&&& PASSED" line after the summary (past its blank line) is the run's result: kept.
    assert event.line_numbers == (2, 3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16)
    assert bench.facts["result"] == "PASSED"
    assert bench.facts["device_name"] == "NVIDIA L4"
    assert bench.facts["throughput_qps"] == 512.5


def test_kubectl_describe_state_block_is_one_event() -> None:
    lines = [
        "    State:          Running",
        "      Started:      Mon, 03 Mar 2025 10:00:20 +0000",
        "    Last State:     Terminated",
        "      Reason:       OOMKilled",
        "      Exit Code:    137",
        "      Finished:     Mon, 03 Mar 2025 10:00:17 +0000",
        "    Ready:          True",
    ]
    events = list(iter_events(lines))
    assert [e.line_numbers for e in events] == [(1, 2), (3, 4, 5, 6), (7,)]
    findings = [f for e in events for f in classify_text(e.text)]
    assert [(f.kind, f.facts.get("exit_code")) for f in findings] == [(KIND_HOST_OOM, 137)]


def test_glog_block_and_an_exceptions_message_lines_are_one_event_each() -> None:
    # The agent's rules, which scan shares: a glog header with its indented lines, and the
    # advice PyTorch prints after a "CUDA error" message.
    lines = [
        "2019-07-21 23:23:08.310300: E tensorflow/core/common_runtime/executor.cc:641] Executor failed to create "
        "kernel. Resource exhausted: 2 root error(s) found.",
        "  (0) Resource exhausted: OOM when allocating tensor with shape[32,64,112,112] and type float",
        "Traceback (most recent call last):",
        '  File "/srv/infer.py", line 40, in <module>',
        "RuntimeError: CUDA error: out of memory",
        "CUDA kernel errors might be asynchronously reported at some other API call.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "[12:00:01] serving",
    ]
    assert [e.line_numbers for e in iter_events(lines)] == [(1, 2), (3, 4, 5, 6, 7), (8,)]


def test_a_cut_traceback_ends_at_a_line_that_is_no_exception() -> None:
    lines = ["Traceback (most recent call last):", '  File "/srv/app.py", line 3, in <module>', "[12:00:01] worker 2 up"]
    assert [e.line_numbers for e in iter_events(lines)] == [(1, 2), (3,)]


def test_other_lines_are_one_event_each_and_blank_lines_none() -> None:
    events = list(iter_events([XID_LINE, "", "   ", XID_LINE]))
    assert [e.line_numbers for e in events] == [(1,), (4,)]


def test_unterminated_burst_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "MAX_EVENT_LINES", 10)
    events = list(iter_events([OOM_BURST[0], *(f"[ 1.0] filler {i}" for i in range(25))]))
    assert max(len(e.lines) for e in events) == 10


def test_runaway_line_is_cut_and_numbering_kept(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * (scan.MAX_LINE_BYTES * 5) + b"\n" + XID_LINE.encode() + b"\n")
    result = scan_file(log)
    assert result.lines == 2
    assert [(f.kind, f.line) for f in result.findings] == [(KIND_GPU_XID, 2)]


def test_crlf_and_bad_utf8_are_read(tmp_path: Path) -> None:
    log = tmp_path / "win.log"
    log.write_bytes(b"\xff\xfe junk\r\n" + OOM_LINE.encode() + b"\r\n")
    (f,) = scan_file(log).findings
    assert f.kind == KIND_CUDA_OOM and f.line == 2


# ------------------------------------------------------------------------------ files


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    lines = ["start", *TRACEBACK, XID_LINE, *OOM_BURST]
    plain = _write(tmp_path / "kern.log", lines)
    packed = tmp_path / "kern.log.2.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = scan_files([plain, packed])
    assert not a.compressed and b.compressed
    assert b.error is None and b.lines == a.lines == len(lines)
    assert b.bytes_read == packed.stat().st_size
    strip = [(f.line, f.kind, f.title, dict(f.facts)) for f in a.findings]
    assert strip == [(f.line, f.kind, f.title, dict(f.facts)) for f in b.findings]
    assert _kinds(b) == Counter({KIND_CUDA_OOM: 1, KIND_GPU_XID: 1, KIND_HOST_OOM: 1})


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    rotated = tmp_path / "kern.log.1"
    rotated.write_bytes(gzip.compress((XID_LINE + "\n").encode()))
    result = scan_file(rotated)
    assert result.compressed and _kinds(result) == Counter({KIND_GPU_XID: 1})


def test_unreadable_files_are_reported_and_the_others_scanned(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.log", [XID_LINE])
    truncated = tmp_path / "cut.log.gz"
    truncated.write_bytes(gzip.compress(("\n".join([XID_LINE] * 2000) + "\n").encode())[:-200])
    paths = [tmp_path / "missing.log", tmp_path, truncated, good]
    missing, folder, cut, ok = scan_files(paths)
    assert missing.error == "No such file or directory" and missing.findings == ()
    assert folder.error == "Is a directory"
    assert cut.error is not None and "truncated" in cut.error
    # What was read before the cut is kept: one fault (the same line, no time printed), counted.
    assert len(cut.findings) == 1 and int(cut.findings[0].facts["occurrences"]) > 1000
    assert ok.error is None and _kinds(ok) == Counter({KIND_GPU_XID: 1})


def test_progress_is_reported_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "PROGRESS_EVERY_BYTES", 50_000)
    log = _write(tmp_path / "long.log", [f"step {i} loss 0.1 " + "." * 40 for i in range(20_000)])
    calls: list[tuple[str, int, int]] = []
    scan_file(log, progress=lambda p, done, total: calls.append((p, done, total)))
    size = log.stat().st_size
    assert len(calls) >= 10
    assert all(p == str(log) and t == size for p, _, t in calls)
    assert [d for _, d, _ in calls] == sorted(d for _, d, _ in calls)
    assert calls[-1][1] == size  # the last report says the whole file was read
    quiet: list[object] = []
    scan_file(_write(tmp_path / "short.log", ["one line"]), progress=lambda *a: quiet.append(a))
    assert quiet == []  # small files say nothing


# ------------------------------------------------------------------------------ CLI


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleetscope")
    sub = parser.add_subparsers(dest="command", required=True)
    scan_cli.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_json_has_every_finding_with_its_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _write(tmp_path / "kern.log", ["start", XID_LINE, *TRACEBACK])
    assert _run(["scan", "--json", str(log)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"] == 2
    (f,) = doc["files"]
    assert f["path"] == str(log) and f["error"] is None and f["lines"] == 2 + len(TRACEBACK)
    xid, oom = f["findings"]
    assert (xid["line"], xid["kind"], xid["facts"]["xid"], xid["facts"]["pci_address"]) == (
        2,
        KIND_GPU_XID,
        79,
        "0000:3b:00",
    )
    assert xid["ts_ns"] == 1740903300000001000
    assert (oom["line"], oom["kind"], oom["facts"]["requested_bytes"]) == (
        2 + len(TRACEBACK),
        KIND_CUDA_OOM,
        2 << 30,
    )


def test_cli_table_and_kind_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path / "kern.log", [XID_LINE, *OOM_BURST])
    assert _run(["scan", str(log)]) == 0
    out = capsys.readouterr().out
    header, xid_row, oom_row = out.splitlines()[:3]
    assert header.split() == ["FILE:LINE", "KIND", "SEVERITY", "TITLE"]
    assert xid_row.startswith(f"{log}:1 ") and KIND_GPU_XID in xid_row and "Xid 79" in xid_row
    assert oom_row.startswith(f"{log}:2 ") and KIND_HOST_OOM in oom_row  # where the burst starts
    assert "2 finding(s) in 1 file(s)" in out
    assert _run(["scan", "--kind", KIND_HOST_OOM, str(log)]) == 0
    out = capsys.readouterr().out
    assert KIND_HOST_OOM in out and KIND_GPU_XID not in out


def test_cli_reports_unreadable_file_and_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path / "good.log", [XID_LINE])
    assert _run(["scan", str(tmp_path / "nope.log"), str(good)]) == 1
    cap = capsys.readouterr()
    assert f"fleetscope scan: cannot read {tmp_path / 'nope.log'}: No such file or directory" in cap.err
    assert f"{good}:1" in cap.out


def test_cli_nothing_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["scan", str(_write(tmp_path / "a.log", ["all quiet"]))]) == 0
    assert capsys.readouterr().out.strip() == "no incidents found in 1 file(s)"


def test_cli_db_needs_device_and_help_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path / "a.log", [XID_LINE])
    assert _run(["scan", "--db", f"sqlite:///{tmp_path / 'x.db'}", str(log)]) == 2
    assert "--db and --device go together" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        _run(["scan", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--device NAME" in out and "--json" in out and "imported=true" in out and "gzip" in out


def test_cli_db_without_collector_extra_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from fleetscope.cli import MissingExtra

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a)
    )
    log = _write(tmp_path / "a.log", [XID_LINE])
    with pytest.raises(MissingExtra, match=r"pip install 'fleetscope\[collector\]'"):
        _run(["scan", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--device", "d", str(log)])


@pytest.mark.processes
def test_scanning_imports_no_sqlalchemy(tmp_path: Path) -> None:
    log = _write(tmp_path / "a.log", [XID_LINE])
    code = (
        "import argparse, sys\n"
        "from fleetscope.cli import scan as scan_cli\n"
        "p = argparse.ArgumentParser(); s = p.add_subparsers(); scan_cli.register(s)\n"
        "a = p.parse_args(['scan', '--json', sys.argv[1]])\n"
        "assert a.func(a) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'psycopg', 'numpy'))\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(log)], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["findings"] == 1


def test_skipping_quiet_runs_changes_no_result(tmp_path: Path) -> None:
    # The shortcut over runs of quiet lines must give what feeding every line gives.
    quiet = [f"step {i} loss 0.{i % 97} lr 3e-4" for i in range(3000)]
    lines = [*quiet[:700], *TRACEBACK, *quiet[700:1500], XID_LINE, *OOM_BURST, *quiet[1500:], "State:  odd"]
    mixed = _write(tmp_path / "mixed.log", lines)
    # Without the corpus the made-up file is still checked.
    corpus = sorted(p for folder in EXPECTED for p in (CORPUS_DIR / folder).glob("*.txt"))
    paths = [mixed, *corpus]
    fast = scan_files(paths)
    slow = scan_files(paths, classify=lambda text: classify_text(text))  # not the registry's: no shortcut
    assert fast == slow
    assert _kinds(fast[0]) == Counter({KIND_CUDA_OOM: 1, KIND_GPU_XID: 1, KIND_HOST_OOM: 1})


_TRICKY = [
    '  File "/srv/train.py", line 88, in <module>',
    'File "/srv/train.py", line 9, in f',
    "    out = model(x)",
    "ValueError: bad shape",
    "KeyboardInterrupt",
    "WARNING: slow loader",
    "RuntimeError: CUDA error: out of memory",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "CUDA kernel errors might be asynchronously reported at some other API call",
    "During handling of the above exception, another exception occurred:",
    "Traceback (most recent call last):",
    "",
    "   ",
    "I1202 10:00:01.123456  77 infer.cc:12] request done",
    "E0421 10:03:12.123456  1234 bfc_allocator.cc:123] Allocator ran out of memory trying to allocate",
    "2022-04-17 14:04:31.889463: W tensorflow/core/x.cc:275] Error reported to Coordinator: OOM",
    "\tindented with a tab",
    "step 10 loss 0.5",
    "2026-12-02 10:00:00,123 INFO trainer: epoch 1",
    XID_LINE,
    "Throughput: 512.5 qps",
    "State:  Running",
    "ValueError: x\r",
]


@pytest.mark.parametrize("seed", range(40))
def test_passing_over_blocks_in_bulk_changes_no_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    # Lone frames and glog headers skipped, quiet tracebacks and glog blocks passed over whole,
    # pieces cut anywhere: the findings and line numbers are those of feeding every line.
    import random

    from fleetscope.agent.tools import scan as scan_mod

    rng = random.Random(seed)
    monkeypatch.setattr(scan_mod, "BLOCK_BYTES", rng.choice([4096, 1 << 20]))
    monkeypatch.setattr(scan_mod, "SAMPLE_MIN", rng.choice([1, 4096]))
    lines = [rng.choice(_TRICKY) for _ in range(rng.randrange(50, 3000))]
    path = tmp_path / "mix.log"
    path.write_bytes("\n".join(lines).encode() + (b"\n" if seed % 2 else b""))
    fast = scan_file(path)
    slow = scan_file(path, classify=lambda text: classify_text(text))
    assert fast == slow
    events = [scan_mod._place(f, e) for e in iter_events(lines) for f in classify_text(e.text)]
    events.sort(key=lambda f: (f.line, f.end_line))
    assert [(f.end_line, f.kind) for f in fast.findings] == [(f.end_line, f.kind) for f in merge_repeats(events)]
