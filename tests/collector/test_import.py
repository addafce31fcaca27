"""Importing scanned findings as incidents (fleetscope.collector.ingest.scan_import and ``scan --db``),
on SQLite and PostgreSQL. The log lines are made up from the documented formats."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.agent.tools.scan import scan_files
from fleetscope.cli import scan as scan_cli
from fleetscope.collector.ingest.scan_import import import_key, import_scan_results, incidents_from_scan
from fleetscope.collector.query import list_devices, search_incidents
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.v1 import telemetry_pb2 as pb

XID_LINE = (
    "kern  :warn  : 2025-03-02T08:15:00,000001+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4321, name=python, "
    "GPU has fallen off the bus."
)
XID_TS_NS = 1740903300000001000
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use. "
    "Of the allocated memory 21.90 GiB is allocated by PyTorch, and 250.00 MiB is reserved by PyTorch but unallocated."
)
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 88, in <module>',
    "    main()",
    OOM_LINE,
]
KILL_LINE = (
    "[ 5000.000007] Out of memory: Killed process 777 (python3) total-vm:9000000kB, anon-rss:8000000kB, "
    "file-rss:1000kB, shmem-rss:0kB, UID:1000 pgtables:16000kB oom_score_adj:0"
)
MTIME_NS = 1_735_689_600 * 10**9  # 2025-01-01T00:00:00Z: the time of findings that print none
EVERYTHING = (0, 2**62)


@pytest.fixture
def logs(tmp_path: Path) -> list[Path]:
    train = tmp_path / "train.log"
    train.write_text("\n".join(["epoch 1", *TRACEBACK, "epoch 2"]) + "\n")
    kern = tmp_path / "kern.log.1.gz"
    kern.write_bytes(gzip.compress(("\n".join(["boot", XID_LINE, KILL_LINE]) + "\n").encode()))
    for p in (train, kern):
        os.utime(p, ns=(MTIME_NS, MTIME_NS))
    return [train, kern]


def _incidents(engine, device: str | None = None):  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        return search_incidents(session=session, since_ns=EVERYTHING[0], until_ns=EVERYTHING[1], devices=[device])


def _count(engine) -> int:  # type: ignore[no-untyped-def]
    with Session(engine) as session:
        return int(session.execute(select(func.count()).select_from(Incident)).scalar_one())


def test_import_creates_device_and_incidents_appear_in_queries(db_url: str, logs: list[Path]) -> None:
    engine = make_engine(db_url)
    try:
        outcome = import_scan_results(engine, device="old-box", results=scan_files(logs))
        assert (outcome.device, outcome.created_device, outcome.inserted, outcome.already_present) == (
            "old-box",
            True,
            3,
            0,
        )
        with Session(engine) as session:
            (dev,) = list_devices(session=session, now_ns=time.time_ns())
        assert (dev.name, dev.kind, dev.labels) == ("old-box", "other", {"imported": "true"})

        by_kind = {i.kind: i for i in _incidents(engine, "old-box")}
        assert set(by_kind) == {"cuda_oom", "gpu_xid", "host_oom"}
        xid, oom, kill = by_kind["gpu_xid"], by_kind["cuda_oom"], by_kind["host_oom"]
        assert xid.device == "old-box"
        assert (xid.facts["xid"], xid.facts["pci_address"], xid.facts["process_name"]) == (
            79,
            "0000:3b:00",
            "python",
        )
        assert xid.ts_ns == XID_TS_NS and xid.facts["ts_source"] == "log_text"
        assert xid.source == str(logs[1].resolve()) and xid.facts["import_line"] == 2
        assert oom.facts["requested_bytes"] == 2 << 30 and oom.facts["import_line"] == 5  # the exception line
        assert oom.ts_ns == MTIME_NS and oom.facts["ts_source"] == "file_mtime"
        assert (kill.facts["victim_pid"], kill.facts["import_line"]) == (777, 3)
        assert oom.excerpt and "CUDA out of memory" in oom.excerpt
        assert oom.facts["import_key"] == import_key(str(logs[0].resolve()), 5, "cuda_oom", 0)
        with Session(engine) as session:
            assert search_incidents(session=session, since_ns=0, until_ns=2**62, kinds=["gpu_xid"])[0].id == xid.id
    finally:
        engine.dispose()


def test_import_twice_adds_nothing(db_url: str, logs: list[Path]) -> None:
    engine = make_engine(db_url)
    try:
        first = import_scan_results(engine, device="old-box", results=scan_files(logs))
        again = import_scan_results(engine, device="old-box", results=scan_files(logs))
        assert (first.inserted, first.already_present) == (3, 0)
        assert (again.created_device, again.inserted, again.already_present) == (False, 0, 3)
        # The same file named twice in one run, and a scan from another working directory.
        twice = import_scan_results(engine, device="old-box", results=scan_files([logs[0], logs[0]]))
        assert twice.inserted == 0
        cwd = os.getcwd()
        os.chdir(logs[0].parent)
        try:
            relative = import_scan_results(engine, device="old-box", results=scan_files([logs[0].name]))
        finally:
            os.chdir(cwd)
        assert relative.inserted == 0
        assert _count(engine) == 3
        with Session(engine) as session:
            assert len(list_devices(session=session, now_ns=time.time_ns())) == 1
    finally:
        engine.dispose()


def test_import_of_a_grown_log_adds_only_the_new_lines(db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID_LINE + "\n")
    engine = make_engine(db_url)
    try:
        assert import_scan_results(engine, device="d", results=scan_files([log])).inserted == 1
        with open(log, "a") as f:
            f.write(XID_LINE.replace("79, pid=4321", "79, pid=4322") + "\n")
        grown = import_scan_results(engine, device="d", results=scan_files([log]))
        assert (grown.inserted, grown.already_present) == (1, 1)
        assert sorted(i.facts["pid"] for i in _incidents(engine, "d")) == [4321, 4322]
    finally:
        engine.dispose()


def test_same_line_twice_in_two_devices_is_two_incidents(db_url: str, logs: list[Path]) -> None:
    engine = make_engine(db_url)
    try:
        results = scan_files(logs)
        assert import_scan_results(engine, device="a", results=results).inserted == 3
        assert import_scan_results(engine, device="b", results=results).inserted == 3
        assert len(_incidents(engine, "a")) == len(_incidents(engine, "b")) == 3
    finally:
        engine.dispose()


def test_import_into_an_agents_device_keeps_it_as_it_is(db_url: str, logs: list[Path]) -> None:
    engine = make_engine(db_url)
    try:
        req = pb.RegisterRequest(
            agent_id="agent-1",
            boot_id="b1",
            name="gpu-node-3",
            hostname="gpu-node-3",
            kind=pb.DEVICE_KIND_SERVER,
        )
        req.labels["site"] = "lab"
        reg = register_device(engine, req, received_ns=time.time_ns())
        outcome = import_scan_results(
            engine, device="gpu-node-3", results=scan_files(logs), kinds={"gpu_xid"}
        )
        assert (outcome.device_id, outcome.created_device, outcome.inserted) == (reg.device_id, False, 1)
        with Session(engine) as session:
            (dev,) = list_devices(session=session, now_ns=time.time_ns())
        assert (dev.kind, dev.labels) == ("server", {"site": "lab"})
        assert [i.kind for i in _incidents(engine, "gpu-node-3")] == ["gpu_xid"]
    finally:
        engine.dispose()


def test_keys_are_stable_and_distinct() -> None:
    class F:
        def __init__(self, line: int, kind: str) -> None:
            self.line, self.kind, self.severity, self.title = line, kind, "error", "t"
            self.facts, self.excerpt, self.ts_ns = {}, "", None

    class R:
        path, mtime_ns = "/var/log/x.log", 5
        findings = (F(1, "gpu_xid"), F(1, "gpu_xid"), F(1, "cuda_oom"), F(2, "gpu_xid"))

    keys = [i.key for i in incidents_from_scan([R()])]
    assert len(set(keys)) == 4
    assert keys == [i.key for i in incidents_from_scan([R()])]
    assert [i.ts_ns for i in incidents_from_scan([R()])] == [5] * 4


# ---------------------------------------------------------------------------------- CLI


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fleetscope")
    sub = parser.add_subparsers(dest="command", required=True)
    scan_cli.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_import_is_idempotent(db_url: str, logs: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["scan", "--db", db_url, "--device", "drone-7", *map(str, logs)]
    assert _run(argv) == 0
    out = capsys.readouterr().out
    assert (
        "imported 3 incident(s) into device 'drone-7' (device created, label imported=true); 0 were imported before"
        in out
    )
    assert _run([*argv[:1], "--json", *argv[1:]]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["inserted"], doc["already_present"], doc["created_device"]) == (0, 3, False)
    assert [f["findings"] for f in doc["files"]] == [1, 2]
    engine = make_engine(db_url, create=False)
    try:
        assert _count(engine) == 3
    finally:
        engine.dispose()


def test_cli_import_with_kind_filter_and_a_missing_file(
    db_url: str, logs: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "scan",
        "--db",
        db_url,
        "--device",
        "d",
        "--kind",
        "host_oom",
        str(logs[0].parent / "gone.log"),
        *map(str, logs),
    ]
    assert _run(argv) == 1  # one file could not be read: the rest is imported, the status says so
    cap = capsys.readouterr()
    assert "cannot read" in cap.err and "gone.log" in cap.err
    assert "imported 1 incident(s)" in cap.out
    engine = make_engine(db_url, create=False)
    try:
        assert [i.kind for i in _incidents(engine, "d")] == ["host_oom"]
    finally:
        engine.dispose()


def test_cli_import_into_unreachable_database_says_so(
    tmp_path: Path, logs: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert _run(["scan", "--db", f"sqlite:///{blocker}/sub/x.db", "--device", "d", str(logs[0])]) == 1
    assert "fleetscope scan:" in capsys.readouterr().err
