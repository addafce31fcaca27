"""``fleetscope scan`` and a live agent read the same text into the same events and findings.

The agent's side is its real log path: a :class:`FileFollower` on a file that appears, polled
by the runner's :class:`LogPipeline` (one grouper, the classifiers). The scan's side is
:func:`scan_file` and :func:`iter_events` on the same file. Every corpus sample is compared
(skipped when ``../shared/corpus`` is absent), and a made-up log with every kind of block.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_event
from fleetscope.agent.daemon import LogPipeline
from fleetscope.agent.logs import EventGrouper
from fleetscope.agent.logs.files import FileFollower
from fleetscope.agent.tools.scan import MAX_LINE_BYTES, iter_events, scan_file
from tests.corpus import sample_files

FOLDERS = ("jetson-nvmap", "kernel-oom", "nvidia-smi", "oom-other", "oom-pytorch", "tegrastats", "tensorrt", "xid")

P = "[03/04/2025-10:00:00] [I] "
EVERY_BLOCK = [
    "epoch 3 step 100 loss 0.41",
    # a torchrun rank's traceback, then a chained one printed without the prefix
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/srv/train.py", line 88, in <module>',
    "[rank0]:     main()",
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.02 GiB is free.",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 90, in <module>',
    "    save_checkpoint()",
    "KeyError: 'optimizer'",
    # a pasted tail, and PyTorch's advice after the message
    '  File "/srv/infer.py", line 40, in <module>',
    "    out = model(x.cuda())",
    "RuntimeError: CUDA error: out of memory",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    # a TensorFlow glog block
    "2019-07-21 23:23:08.310300: E tensorflow/core/common_runtime/executor.cc:641] Executor failed to create kernel. "
    "Resource exhausted: 2 root error(s) found.",
    "  (0) Resource exhausted: OOM when allocating tensor with shape[32,64,112,112] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    # a kernel OOM burst
    "[ 5000.000001] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "[ 5000.000002] CPU: 3 PID: 777 Comm: python3 Not tainted 5.15.0-100-generic #110-Ubuntu",
    "",
    "[ 5000.000007] Out of memory: Killed process 777 (python3) total-vm:9000000kB, anon-rss:8000000kB, file-rss:1000kB, "
    "shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0",
    "[ 5000.000008] oom_reaper: reaped process 777 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python, GPU has fallen off the bus.",
    # trtexec: the device block joins the summary after it
    P + "=== Device Information ===",
    P + "Selected Device: NVIDIA L4",
    P + "Compute Capability: 8.9",
    P,
    P + "Starting inference",
    P + "=== Performance summary ===",
    P + "Throughput: 512.5 qps",
    P + "Latency: min = 1.9 ms, max = 2.1 ms, mean = 1.95 ms, median = 1.95 ms, percentile(99%) = 2.08 ms",
    P,
    # kubectl describe
    "    Last State:     Terminated",
    "      Reason:       OOMKilled",
    "      Exit Code:    137",
    "    Ready:          True",
    "done",
]


class FakeClock:
    def __call__(self) -> int:
        return 0  # a file read in one poll: nothing waits long enough to be let go


def _agent(data: bytes, path: Path) -> tuple[list[str], Counter[str]]:
    """The events and findings of the agent following ``path`` as ``data`` is written to it."""
    follower = FileFollower([str(path)], read_limit_bytes=len(data) + 1)  # before it exists: read from its start
    path.write_bytes(data)
    logs = LogPipeline([follower], classify=classify_event, grouper=EventGrouper(clock=FakeClock()))
    read, held = logs.read(1), logs.close()
    events = [e.message for e in read.logs + held.logs]
    return events, Counter(_key(i.kind, i.severity, i.title, i.facts) for i in read.incidents + held.incidents)


def _scan(path: Path) -> tuple[list[str], Counter[str]]:
    result = scan_file(path)
    assert result.error is None
    # The lines as scan_file reads them: cut at MAX_LINE_BYTES, decoded one by one.
    raw_lines = path.read_bytes().split(b"\n")[:-1]  # what follows the last newline: nothing here
    lines = [raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r") for raw in raw_lines]
    events = [e.text for e in iter_events(lines)]
    return events, Counter(_key(f.kind, f.severity, f.title, f.facts) for f in result.findings)


def _key(kind: str, severity: str, title: str, facts: object) -> str:
    return json.dumps([kind, severity, title, facts], sort_keys=True, default=str)


def _same(data: bytes, where: Path, name: str = "") -> Counter[str]:
    if not data.endswith(b"\n"):
        data += b"\n"  # a followed file's last line waits for its newline; a scan reads it at once
    where.mkdir(exist_ok=True)
    scanned = where / "scanned.log"
    scanned.write_bytes(data)
    agent_events, agent_findings = _agent(data, where / "followed.log")
    scan_events, scan_findings = _scan(scanned)
    assert agent_events == scan_events, name
    assert agent_findings == scan_findings, name
    return scan_findings


def test_every_kind_of_block_gives_the_same_events_and_findings(tmp_path: Path) -> None:
    findings = _same(("\n".join(EVERY_BLOCK) + "\n").encode(), tmp_path)
    kinds = Counter(json.loads(k)[0] for k in findings.elements())
    assert kinds == Counter({"cuda_oom": 3, "host_oom": 2, "gpu_xid": 1, "trt_benchmark": 1})


def test_crlf_bad_bytes_and_a_runaway_line_read_alike(tmp_path: Path) -> None:
    data = b"\xff\xfe junk\r\n" + b"x" * 40000 + b"\r\n" + "\r\n".join(EVERY_BLOCK[1:12]).encode() + b"\r\n"
    _same(data, tmp_path)


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_corpus_sample_gives_the_same_events_and_findings(folder: str, tmp_path: Path) -> None:
    for sample in sample_files(folder):
        _same(sample.read_bytes(), tmp_path / sample.stem, sample.name)
