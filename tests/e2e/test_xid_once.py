"""One GPU fault, one incident: the NVML Xid event and the driver's kernel-log line of the same Xid,
reported separately by one agent, are stored as ONE ``gpu_xid`` incident naming both sources.

Everything is real except the hardware: an Agent whose NVML sampler runs its Xid event thread over
the fake NVML replaying a recorded ``nvidia-smi -q -x`` capture (an A100 on bus 00000000:01:00.0, MIG on),
and whose kernel log source reads a /dev/kmsg record file holding a recorded driver line (an Xid 31
on PCI 0000:01:00, from ``../shared/corpus/xid``); the agent registers its GPU inventory and
streams over gRPC to an in-process collector writing SQLite or PostgreSQL.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from fleetscope.agent.classify import classify_event
from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.logs.kernel_log import KernelLogSource
from fleetscope.agent.records import GpuInfo
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.samplers.nvml import NvmlSampler
from fleetscope.agent.testing.fake_nvml import FakeNvml, recording_from_nvidia_smi_xml
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.collector.storage.schema import Device, Incident
from tests.conftest import wait_until
from tests.corpus import CORPUS_DIR, sample_files, sample_text

A100 = "xml-telegraf-a100-sxm4-v12.xml.txt"
XID_SAMPLE = "ogkm-1030-xid-31-595.txt"  # "[  365.969681] NVRM: Xid (PCI:0000:01:00): 31, pid=13705, name=UnrealEditor, ..."
_DMESG = re.compile(r"^\[\s*(?P<sec>\d+)\.(?P<usec>\d{6})\]\s*(?P<msg>.*)$")


def kmsg_record(dmesg_line: str, seq: int) -> bytes:
    """The /dev/kmsg record dmesg printed as ``dmesg_line``: ``PRI,SEQ,TS_USEC,FLAGS;message``
    (priority 4: the driver logs Xids at KERN_WARNING)."""
    m = _DMESG.match(dmesg_line)
    assert m, dmesg_line
    return f"4,{seq},{int(m['sec']) * 10**6 + int(m['usec'])},-;{m['msg']}\n".encode()


class NvmlAndKernelLog:
    """An NVML sampler and a kernel log source on one agent: the two Xid reporters of a server.

    The agent classifies a source's log lines like its followed files' (``SampleSet.logs``), so
    the kernel log's lines go through the same grouping and classifiers as the real ``--kernel-log``.
    """

    name = "nvml"

    def __init__(self, nvml: NvmlSampler, kernel: KernelLogSource) -> None:
        self.nvml, self.kernel = nvml, kernel

    def inventory(self) -> list[GpuInfo]:
        return self.nvml.inventory()

    def sample(self, now_ns: int) -> SampleSet:
        out = self.nvml.sample(now_ns)
        out.logs.extend(self.kernel.poll(now_ns))
        return out

    def close(self) -> None:
        self.kernel.close()
        self.nvml.close()


def _xid_incidents(db_url: str) -> list[Incident]:
    engine = create_engine(normalise_url(db_url))
    try:
        with Session(engine) as s:
            rows = list(s.scalars(select(Incident).where(Incident.kind == "gpu_xid").order_by(Incident.id)))
            s.expunge_all()
            return rows
    finally:
        engine.dispose()


def _registered_gpus(db_url: str) -> list[dict]:
    engine = create_engine(normalise_url(db_url))
    try:
        with Session(engine) as s:
            inventories = list(s.scalars(select(Device.inventory)))
        return [g for inv in inventories for g in (inv or {}).get("gpus", [])]
    finally:
        engine.dispose()


def test_nvml_event_and_kernel_line_of_one_xid_are_one_incident(tmp_path: Path, db_url: str, collector) -> None:
    capture = CORPUS_DIR / "nvidia-smi" / A100
    if not capture.is_file():
        pytest.skip(f"parser corpus not found at {capture}")
    files = {p.name: p for p in sample_files("xid")}
    line = next(ln for ln in sample_text(files[XID_SAMPLE]).splitlines() if "Xid (" in ln)

    fake = FakeNvml(recording_from_nvidia_smi_xml(sample_text(capture)))
    nvml = NvmlSampler(nvml=fake, proc_root=tmp_path / "no-proc", xid_events=True, xid_poll_ms=20)
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"")
    # The record says 365.969681 s after boot; boot is put where that lands a second ago.
    boot_ns = time.time_ns() - 365_969_681_000 - 10**9
    kernel = KernelLogSource(kmsg_path=str(kmsg), journalctl_cmd=None, boot_wall_ns=lambda: boot_ns)
    settings = AgentSettings(collectors=(f"127.0.0.1:{collector.port}",), spool_dir=tmp_path / "spool",
                             token="test-token", name="a100-node", interval_s=0.05, batch_interval_s=0.1,
                             backoff_initial_s=0.1, backoff_max_s=1.0)
    # No inventory passed: the agent builds it from its samplers and registers the GPU's bus id.
    agent = Agent(settings, samplers=[NvmlAndKernelLog(nvml, kernel)], classify=classify_event)
    agent.start()
    try:
        wait_until(lambda: agent.uplink.status.acked >= 1, message="the agent to register and stream")
        # The NVML event arrives first and is stored on its own...
        assert fake.inject_xid(0, 31)
        wait_until(lambda: len(_xid_incidents(db_url)) == 1, message="the NVML report stored")
        (alone,) = _xid_incidents(db_url)
        assert alone.source == "nvml" and "sources" not in alone.facts
        # ... then the driver's line reaches the kernel log and joins it.
        with open(kmsg, "ab") as f:
            f.write(kmsg_record(line, seq=5120))
        wait_until(lambda: "sources" in _xid_incidents(db_url)[0].facts, message="the kernel line merged")
        time.sleep(0.5)  # nothing more is coming: the agent would have sent a second incident by now
    finally:
        agent.stop()
        fake.release()

    (inc,) = _xid_incidents(db_url)
    f = inc.facts
    assert inc.id == alone.id and f["sources"] == "kernel_log,nvml"
    assert inc.ts_ns == alone.ts_ns == min(f["kernel_log_ts_ns"], f["nvml_ts_ns"])
    # The line's details (process, message) and the event's (which GPU) in one incident.
    assert f["xid"] == 31 and f["pci_address"] == "0000:01:00"
    assert (f["pid"], f["process_name"]) == (13705, "UnrealEditor")
    assert f["gpu_index"] == 0 and f["pci_bus_id"] == "00000000:01:00.0" and f["gpu_uuid"].startswith("GPU-")
    assert inc.severity == "error" and inc.source == "kmsg" and f["meaning"] == "GPU memory page fault"
    assert "NVRM: Xid (PCI:0000:01:00): 31" in inc.excerpt and "NVML Xid critical error event" in inc.excerpt
    # The capture has MIG on: the instances the agent registered share their parent's bus, and
    # the incident names the physical GPU.
    gpus = _registered_gpus(db_url)
    assert {g["pci_bus_id"] for g in gpus} == {"00000000:01:00.0"}
    assert [g["index"] for g in gpus if not g["mig_parent_uuid"]] == [0] and len(gpus) > 1
