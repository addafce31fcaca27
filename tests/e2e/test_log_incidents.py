"""A job's log line becomes a queryable incident: the agent follows the file, groups the
traceback, classifies it and the collector stores it with its facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fleetscope.agent.classify import classify_event
from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent, table_count

TRACEBACK = """Traceback (most recent call last):
  File "/opt/train/train.py", line 88, in <module>
    loss = model(batch).sum()
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1736, in _call_impl
    return forward_call(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated.
"""
XID = "[ 4821.331907] NVRM: Xid (PCI:0000:3b:00): 79, pid=2841, name=python3, GPU has fallen off the bus.\n"


def test_traceback_and_xid_in_followed_logs_become_incidents(tmp_path: Path, db_url: str, collector) -> None:
    log = tmp_path / "train.log"
    log.write_text("epoch 1 step 10 loss 0.52\n")
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], CountingSampler(total=50, per_tick=5), name="trainer",
                       log_files=(str(tmp_path / "*.log"),), classify=classify_event)
    agent.start()
    try:
        with open(log, "a") as f:
            f.write(TRACEBACK)
        (tmp_path / "kern.log").write_text(XID)  # a file that appears later
        wait_until(lambda: table_count(db_url, "incidents") >= 2, timeout_s=30, message="incidents stored")
    finally:
        agent.stop()
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "incidents", "--db", db_url, "--json"],
                         capture_output=True, text=True, check=True)
    incidents = json.loads(out.stdout)["incidents"]
    by_kind = {}
    for i in incidents:
        by_kind.setdefault(i["kind"], []).append(i)
    assert len(by_kind["cuda_oom"]) == 1, "the whole traceback is one incident"
    oom = by_kind["cuda_oom"][0]
    assert oom["facts"]["requested_bytes"] == 2 * 1024**3
    assert oom["facts"]["device_index"] == 0
    assert oom["source"] == str(log)
    (xid,) = by_kind["gpu_xid"]
    assert xid["facts"]["xid"] == 79 and xid["severity"] == "critical"
    assert "context" not in oom, "incidents --json lists the incidents; `incident ID --json` has the samples around one"
    whole = subprocess.run([sys.executable, "-m", "fleetscope.cli", "incident", str(oom["id"]), "--db", db_url, "--json"],
                           capture_output=True, text=True, check=True)
    assert json.loads(whole.stdout)["context"]["incident_id"] == oom["id"]
