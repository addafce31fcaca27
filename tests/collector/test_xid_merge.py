"""Xid once: the NVML event and the kernel-log line of one Xid are stored as ONE incident.

Real parts on both databases: the kernel-log incidents come from the Xid classifier reading
recorded driver lines (``../shared/corpus/xid``), the NVML incidents from the NVML sampler's event
thread over the fake NVML replaying a recorded ``nvidia-smi -q -x`` capture (an A100 at PCI
00000000:01:00.0), and both go through the agent's batcher, the collector's validation and the
group-commit writer (or a scan import) into SQLite and PostgreSQL. Only the timestamps are set by
the tests, to place the two reports inside or outside the merge window.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.agent.classify import classify_event
from fleetscope.agent.daemon.batcher import Pending, build_batches
from fleetscope.agent.records import GpuInfo, IncidentRecord, LogEvent
from fleetscope.agent.samplers.nvml import NvmlSampler
from fleetscope.agent.testing.fake_nvml import FakeNvml, recording_from_nvidia_smi_xml
from fleetscope.agent.tools.scan import scan_files
from fleetscope.collector.ingest.scan_import import import_scan_results
from fleetscope.collector.ingest.validation import Limits, validate_batch
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.incidents import XID_MERGE_WINDOW_NS, pci_bus_key
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.schema import Incident
from fleetscope.collector.storage.writer import BatchWriter, WriteItem
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.corpus import CORPUS_DIR, sample_files, sample_text

S = 10**9
A100 = "xml-telegraf-a100-sxm4-v12.xml.txt"  # one GPU, bus 00000000:01:00.0
_DMESG_PREFIX = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def _xid_line(sample: str, code: int, nth: int = 0) -> str:
    """The ``nth`` driver line of Xid ``code`` in a corpus sample, as /dev/kmsg hands it over
    (without dmesg's ``[sec.usec]`` prefix, which dmesg adds from the record's timestamp)."""
    files = {p.name: p for p in sample_files("xid")}  # skips when the corpus is absent
    lines = [ln for ln in sample_text(files[sample]).splitlines() if re.search(rf"Xid \([^)]*\): {code}\b", ln)]
    return _DMESG_PREFIX.sub("", lines[nth])


# The recorded lines these tests use (all read from the corpus, see its MANIFEST).
def line_xid31_bus01() -> str:  # pid 13705 / UnrealEditor on PCI 0000:01:00, the A100's bus
    return _xid_line("ogkm-1030-xid-31-595.txt", 31)


def line_xid31_bus0a() -> str:  # the same code on another GPU (PCI 0000:0a:00)
    return _xid_line("chia-301-xid-31-62-45.txt", 31)


def line_xid13_bus01(nth: int = 0) -> str:  # Xid 13 on PCI 0000:01:00 (a burst of four)
    return _xid_line("dxvk-1027-xid-31-13-32-block.txt", 13, nth)


def line_xid145_redacted_bus() -> str:  # "Xid (PCI:...): 145": the bus was redacted
    return _xid_line("nccl-2241-redacted-xid-145-137.txt", 145)


def kernel_report(line: str, ts_ns: int) -> IncidentRecord:
    (inc,) = classify_event(LogEvent(ts_ns=ts_ns, source="kmsg", message=line, level="warning"))
    return inc


class NvmlReporter:
    """The NVML sampler's event thread over the fake NVML replaying the A100 capture."""

    def __init__(self, tmp_path: Path) -> None:
        capture = CORPUS_DIR / "nvidia-smi" / A100
        if not capture.is_file():
            pytest.skip(f"parser corpus not found at {capture}")
        self.fake = FakeNvml(recording_from_nvidia_smi_xml(sample_text(capture)))
        self.sampler = NvmlSampler(nvml=self.fake, proc_root=tmp_path / "no-proc", xid_events=True, xid_poll_ms=20)
        self.gpus: list[GpuInfo] = self.sampler.inventory()  # also starts the event thread

    def report(self, code: int, ts_ns: int, gpu: int = 0) -> IncidentRecord:
        assert self.fake.inject_xid(gpu, code)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            got = self.sampler.sample(time.time_ns()).incidents
            if got:
                (inc,) = got
                return dataclasses.replace(inc, ts_ns=ts_ns)
            time.sleep(0.01)
        raise AssertionError("no NVML Xid event")

    def close(self) -> None:
        self.fake.release()
        self.sampler.close()


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[NvmlReporter]:
    r = NvmlReporter(tmp_path)
    yield r
    r.close()


@pytest.fixture
def engine(db_url: str):  # type: ignore[no-untyped-def]
    e = make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def writer(engine) -> Iterator[BatchWriter]:  # type: ignore[no-untyped-def]
    w = BatchWriter(engine)
    w.start()
    yield w
    w.stop()


AGENT = "agent-xid"


def register(engine, gpus: list[GpuInfo]) -> int:  # type: ignore[no-untyped-def]
    """The device as the agent registers it: its GPU inventory carries each GPU's bus id."""
    req = pb.RegisterRequest(agent_id=AGENT, boot_id="boot", name="gpu-node-1", kind=pb.DEVICE_KIND_SERVER,
                             sent_ns=time.time_ns())
    for g in gpus:
        req.inventory.gpus.add(index=g.index, name=g.name, uuid=g.uuid or "", pci_bus_id=g.pci_bus_id or "",
                               mig_parent_uuid=g.mig_parent_uuid or "")
    return register_device(engine, req, received_ns=time.time_ns()).device_id


def item(device_id: int, seq: int, incidents: list[IncidentRecord]) -> WriteItem:
    now = time.time_ns()
    batch = pb.Batch(agent_id=AGENT, boot_id="boot", seq=seq, created_ns=now, sent_ns=now)
    for bb in build_batches(Pending(incidents=list(incidents)), now_ns=now):
        batch.MergeFrom(bb.batch)
    batch.seq = seq
    return WriteItem(batch=batch, device_id=device_id, agent_id=AGENT, boot_id="boot", seq=seq, received_ns=now,
                     correction_ns=0, clock_skew_ns=0, decoded=validate_batch(batch, Limits()))


def write(writer: BatchWriter, device_id: int, seq: int, *incidents: IncidentRecord):  # type: ignore[no-untyped-def]
    return writer.submit(item(device_id, seq, list(incidents))).result(30)


def stored(engine) -> list[Incident]:  # type: ignore[no-untyped-def]
    with Session(engine) as s:
        rows = list(s.scalars(select(Incident).order_by(Incident.id)))
        s.expunge_all()
        return rows


def assert_one_merged(rows: list[Incident], kernel: IncidentRecord, event: IncidentRecord) -> Incident:
    (inc,) = rows
    f = inc.facts
    assert inc.kind == "gpu_xid" and f["sources"] == "kernel_log,nvml"
    assert inc.ts_ns == min(kernel.ts_ns, event.ts_ns), "the merged incident keeps the earlier time"
    assert (f["kernel_log_ts_ns"], f["nvml_ts_ns"]) == (kernel.ts_ns, event.ts_ns)
    # Each reporter's details are kept: the line's process and message, the event's GPU.
    for key, value in kernel.facts.items():
        assert f[key] == value, key
    for key in ("gpu_index", "gpu_uuid", "gpu_name", "pci_bus_id"):
        assert f[key] == event.facts[key], key
    assert inc.severity == kernel.severity and inc.title == kernel.title and inc.source == "kmsg"
    assert kernel.excerpt in inc.excerpt and event.excerpt in inc.excerpt
    return inc


# ---------------------------------------------------------------------------- one incident


@pytest.mark.parametrize("nvml_first", [True, False], ids=["nvml-first", "kernel-first"])
def test_both_reports_in_one_batch_are_one_incident(engine, writer, nvml, nvml_first: bool) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    kernel = kernel_report(line_xid31_bus01(), t)
    event = nvml.report(31, t + 2 * S)  # the event thread stamped it a little later
    write(writer, device_id, 1, *((event, kernel) if nvml_first else (kernel, event)))
    inc = assert_one_merged(stored(engine), kernel, event)
    assert inc.facts["pid"] == 13705 and inc.facts["process_name"] == "UnrealEditor"
    assert inc.facts["gpu_index"] == 0 and pci_bus_key(inc.facts["pci_bus_id"]) == pci_bus_key(inc.facts["pci_address"])


@pytest.mark.parametrize("nvml_first", [True, False], ids=["nvml-stored-first", "kernel-stored-first"])
def test_report_arriving_after_the_other_was_stored_joins_it(engine, writer, nvml, nvml_first: bool) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    # The later arrival carries the earlier time: the merged incident takes it.
    kernel = kernel_report(line_xid31_bus01(), t + (5 * S if nvml_first else 0))
    event = nvml.report(31, t + (0 if nvml_first else 5 * S))
    first, second = (event, kernel) if nvml_first else (kernel, event)
    write(writer, device_id, 1, first)
    (alone,) = stored(engine)
    write(writer, device_id, 2, second)
    inc = assert_one_merged(stored(engine), kernel, event)
    assert inc.id == alone.id, "the stored incident is updated, not replaced"


@pytest.mark.parametrize("nvml_first", [True, False], ids=["nvml-first", "kernel-first"])
def test_reports_in_two_batches_of_one_writer_group_are_one_incident(db_url: str, engine, nvml, nvml_first: bool) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    kernel = kernel_report(line_xid31_bus01(), t + S)
    event = nvml.report(31, t)
    first, second = (event, kernel) if nvml_first else (kernel, event)
    w = BatchWriter(engine)
    # Queued before the writer thread starts, so it takes both batches in one transaction.
    futures = [w.submit(item(device_id, 1, [first])), w.submit(item(device_id, 2, [second]))]
    w.start()
    try:
        for f in futures:
            assert not f.result(30).duplicate
        assert w.groups == 1
    finally:
        w.stop()
    assert_one_merged(stored(engine), kernel, event)


def test_replayed_batch_does_not_merge_again(engine, writer, nvml) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    kernel = kernel_report(line_xid31_bus01(), t)
    event = nvml.report(31, t + S)
    write(writer, device_id, 1, event)
    write(writer, device_id, 2, kernel)
    before = stored(engine)
    assert write(writer, device_id, 2, kernel).duplicate  # the agent resent it after a lost ack
    after = stored(engine)
    assert [(i.id, i.facts, i.ts_ns) for i in after] == [(i.id, i.facts, i.ts_ns) for i in before]
    assert_one_merged(after, kernel, event)


def test_a_burst_pairs_one_event_with_one_line(engine, writer, nvml) -> None:  # type: ignore[no-untyped-def]
    # Four Xid 13 lines and four NVML events of the same fault burst: four occurrences, each named
    # by both, grouped into one open incident with a count of four (not eight).
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    lines = [kernel_report(line_xid13_bus01(n), t + n * 10**6) for n in range(4)]
    events = [nvml.report(13, t + n * 10**6 + S) for n in range(4)]
    write(writer, device_id, 1, *lines[:2], *events)
    write(writer, device_id, 2, *lines[2:])
    (inc,) = stored(engine)
    assert (inc.count, inc.state, inc.group_key, inc.gpu_index) == (4, "open", "xid:13", 0)
    assert inc.last_seen_ns == lines[3].ts_ns and inc.ts_ns == lines[0].ts_ns
    # Paired in order: the first line of the burst with the first event, the last with the last.
    f, last = inc.facts, inc.facts["last"]
    assert (f["sources"], f["message"], f["nvml_ts_ns"]) == ("kernel_log,nvml", lines[0].facts["message"], events[0].ts_ns)
    assert (last["sources"], last["message"], last["nvml_ts_ns"]) == (
        "kernel_log,nvml", lines[3].facts["message"], events[3].ts_ns
    )
    assert inc.context["xid_pending"] == [], "every report found its pair"


def test_a_line_whose_bus_cannot_be_read_falls_back_to_device_code_and_window(engine, writer, nvml) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    kernel = kernel_report(line_xid145_redacted_bus(), t)
    assert pci_bus_key(kernel.facts["pci_address"]) is None
    event = nvml.report(145, t + S)
    write(writer, device_id, 1, kernel, event)
    (inc,) = stored(engine)
    assert inc.facts["sources"] == "kernel_log,nvml" and inc.facts["gpu_index"] == 0


def test_an_event_without_a_bus_id_is_placed_by_the_registered_inventory(engine, writer, nvml) -> None:  # type: ignore[no-untyped-def]
    # An agent whose event names its GPU by index only (no bus id): the inventory the agent
    # registered says GPU 0 is on bus 01:00, so it joins the line from 01:00 and not the one from 0a:00.
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    event = nvml.report(31, t)
    event = dataclasses.replace(event, facts={k: x for k, x in event.facts.items() if k not in ("pci_bus_id", "gpu_uuid")})
    other_gpu = kernel_report(line_xid31_bus0a(), t + S)
    this_gpu = kernel_report(line_xid31_bus01(), t + 2 * S)
    write(writer, device_id, 1, event, other_gpu, this_gpu)
    rows = stored(engine)
    assert len(rows) == 2
    merged = next(r for r in rows if "sources" in r.facts)
    alone = next(r for r in rows if "sources" not in r.facts)
    assert merged.facts["pci_address"] == this_gpu.facts["pci_address"] and merged.facts["gpu_index"] == 0
    assert alone.facts["pci_address"] == other_gpu.facts["pci_address"]


# ------------------------------------------------------------------------- two incidents


@pytest.mark.parametrize("apart", ["code", "gpu", "window"])
def test_reports_of_different_faults_stay_two_incidents(engine, writer, nvml, apart: str) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    if apart == "code":  # Xid 13 from NVML, Xid 31 in the log, same GPU, same second
        kernel, event = kernel_report(line_xid31_bus01(), t), nvml.report(13, t)
    elif apart == "gpu":  # Xid 31 on both, but the line is about the GPU on bus 0a:00
        kernel, event = kernel_report(line_xid31_bus0a(), t), nvml.report(31, t)
    else:  # the same code on the same GPU, farther apart than the window
        kernel, event = kernel_report(line_xid31_bus01(), t), nvml.report(31, t + XID_MERGE_WINDOW_NS + S)
    write(writer, device_id, 1, event)
    write(writer, device_id, 2, kernel)
    rows = stored(engine)
    assert not any("sources" in r.facts for r in rows)
    if apart == "window":
        # Two faults of one code on one GPU, minutes apart at most: one incident, two occurrences.
        (inc,) = rows
        assert (inc.count, inc.ts_ns, inc.last_seen_ns) == (2, kernel.ts_ns, event.ts_ns)
        return
    assert len(rows) == 2 and all(r.count == 1 for r in rows)
    assert sorted(r.source for r in rows) == ["kmsg", "nvml"]


def test_two_devices_never_merge(engine, writer, nvml) -> None:  # type: ignore[no-untyped-def]
    device_id = register(engine, nvml.gpus)
    req = pb.RegisterRequest(agent_id="agent-other", boot_id="boot", name="gpu-node-2", kind=pb.DEVICE_KIND_SERVER)
    other = register_device(engine, req, received_ns=time.time_ns()).device_id
    t = time.time_ns()
    write(writer, device_id, 1, nvml.report(31, t))
    it = item(other, 1, [kernel_report(line_xid31_bus01(), t)])
    it.agent_id = "agent-other"
    writer.submit(it).result(30)
    assert len(stored(engine)) == 2


# ------------------------------------------------------------------------------ scan import


def test_an_imported_kernel_log_joins_the_nvml_report(engine, writer, nvml, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # `fleetscope scan --db`: kern.log read after the fact. Its syslog times carry no zone, so the
    # import dates the line by the file's modification time, which here is right after the event.
    device_id = register(engine, nvml.gpus)
    t = time.time_ns()
    event = nvml.report(31, t)
    write(writer, device_id, 1, event)
    log = tmp_path / "kern.log"
    log.write_text(f"Mar  3 10:11:12 gpu-node-1 kernel: {line_xid31_bus01()}\n")
    os.utime(log, ns=(t + S, t + S))
    outcome = import_scan_results(engine, device="gpu-node-1", results=scan_files([log]))
    assert outcome.inserted == 1 and not outcome.created_device
    (inc,) = stored(engine)
    assert inc.facts["sources"] == "kernel_log,nvml" and inc.ts_ns == t
    assert inc.source == str(log.resolve()) and inc.facts["import_key"] and inc.facts["gpu_uuid"] == event.facts["gpu_uuid"]
    again = import_scan_results(engine, device="gpu-node-1", results=scan_files([log]))
    assert (again.inserted, again.already_present) == (0, 1) and len(stored(engine)) == 1
