"""KernelLogSource on real file descriptors: a regular file and a FIFO holding /dev/kmsg records
(Documentation/ABI/testing/dev-kmsg), a stand-in journalctl for the fallback, and the real
/dev/kmsg where this machine lets us read it."""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_event
from fleetscope.agent.classify._base import KIND_GPU_XID
from fleetscope.agent.logs.kernel_log import KernelLogSource, parse_kmsg_record
from fleetscope.agent.records import LogEvent

BOOT_NS = 1_714_500_000_000_000_000  # wall time of boot the tests pin


def boot() -> int:
    return BOOT_NS


# Records as read() returns them: prefix, ";", message, then " KEY=value" context lines.
RECORDS = (
    b"6,1201,5140900,-;NET: Registered PF_INET6 protocol family\n"
    b"4,1202,88123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    b" SUBSYSTEM=pci\n"
    b" DEVICE=+pci:0000:3b:00.0\n"
    b"3,1203,88123457001,-,caller=T4242;Out of memory: Killed process 4242 (python3) total-vm:98765432kB, "
    b"anon-rss:65432100kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:130000kB oom_score_adj:0\n"
    b"0,1204,88123460000,-;Kernel panic - not syncing: Fatal exception\n"
    b"2,1205,88123460001,-;mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400\n"
    b"1,1206,88123460002,-;EXT4-fs (nvme0n1p2): alert\n"
    b"5,1207,88123460003,-;audit: type=1400 notice\n"
    b"7,1208,88123460004,-;nvgpu: debug line\n"
    b"30,1209,88123460005,-;systemd[1]: Started fleetscope-agent.service.\n"  # facility 3, level 6
    b"12,1210,88123460006,-;fleet\\x5cscope caf\\xc3\\xa9\\x09tab\n"  # escaped backslash, UTF-8, TAB
)
EXPECTED = [
    ("info", "NET: Registered PF_INET6 protocol family", 5140900),
    (
        "warning",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        88123456789,
    ),
    (
        "error",
        "Out of memory: Killed process 4242 (python3) total-vm:98765432kB, anon-rss:65432100kB, file-rss:0kB, "
        "shmem-rss:0kB, UID:1000 pgtables:130000kB oom_score_adj:0",
        88123457001,
    ),
    ("critical", "Kernel panic - not syncing: Fatal exception", 88123460000),
    ("critical", "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400", 88123460001),
    ("critical", "EXT4-fs (nvme0n1p2): alert", 88123460002),
    ("info", "audit: type=1400 notice", 88123460003),
    ("debug", "nvgpu: debug line", 88123460004),
    ("info", "systemd[1]: Started fleetscope-agent.service.", 88123460005),
    ("warning", "fleet\\scope café\ttab", 88123460006),
]


def source(path: Path, **kw: object) -> KernelLogSource:
    kw.setdefault("journalctl_cmd", None)
    return KernelLogSource(kmsg_path=str(path), boot_wall_ns=boot, **kw)  # type: ignore[arg-type]


def triples(events: list[LogEvent]) -> list[tuple[str, str, int]]:
    return [(e.level, e.message, (e.parsed_ts_ns or 0) - BOOT_NS) for e in events]


def expected_triples() -> list[tuple[str, str, int]]:
    return [(level, msg, usec * 1000) for level, msg, usec in EXPECTED]


# ------------------------------------------------------------------------------- the format


def test_parse_record() -> None:
    rec = parse_kmsg_record(b"3,1203,88123457001,-,caller=T4242;a;b")
    assert rec is not None and (rec.priority, rec.seq, rec.ts_usec, rec.message) == (
        3,
        1203,
        88123457001,
        "a;b",
    )
    assert parse_kmsg_record(b"[ 5.140900] NET: Registered") is None
    assert parse_kmsg_record(b"x,1,2,-;bad") is None


# ------------------------------------------------------------------------ a recorded file


def test_recorded_file_levels_times_and_context_lines(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(RECORDS)
    src = source(path, start_at_end=False)
    try:
        assert src.mode == "kmsg"
        got = src.poll(now_ns=7)
        assert triples(got) == expected_triples()
        assert all(e.source == "kmsg" and e.ts_ns == 7 for e in got)
        assert not any("SUBSYSTEM=" in e.message or "DEVICE=" in e.message for e in got)
        assert src.poll() == []
        assert src.stats().records == len(EXPECTED) and src.stats().missed_records == 0
    finally:
        src.close()


def test_kernel_events_reach_the_classifiers(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(RECORDS)
    src = source(path, start_at_end=False)
    try:
        incidents = [i for e in src.poll() for i in classify_event(e)]
    finally:
        src.close()
    xid = [i for i in incidents if i.kind == KIND_GPU_XID]
    assert len(xid) == 1 and xid[0].facts["xid"] == 79 and xid[0].source == "kmsg"
    assert any(i.kind == "host_oom" for i in incidents)


def test_starts_at_the_end_and_reads_what_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(b"6,1,100,-;from before the agent started\n")
    src = source(path)
    try:
        assert src.poll() == []
        with open(path, "ab") as f:
            f.write(b"4,2,200,-;new one\n")
        assert [e.message for e in src.poll()] == ["new one"]
    finally:
        src.close()


def test_sequence_gap_is_counted_and_non_records_pass_as_text(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(
        b"6,10,1,-;a\n6,11,2,-;b\n6,15,3,-;after a gap\n[  12.000001] a dmesg line, not a record\n"
    )
    src = source(path, start_at_end=False)
    try:
        got = src.poll()
        assert [e.message for e in got] == [
            "a",
            "b",
            "after a gap",
            "[  12.000001] a dmesg line, not a record",
        ]
        assert got[-1].parsed_ts_ns is None
        stats = src.stats()
        assert (stats.missed_records, stats.malformed) == (3, 1)
    finally:
        src.close()


def test_poll_takes_at_most_max_records(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(b"".join(b"6,%d,%d,-;line %d\n" % (i, i, i) for i in range(100)))
    src = source(path, start_at_end=False, max_records_per_poll=30)
    try:
        # A file hands over all 100 records in one read(); the rest wait for the next polls.
        batches = [src.poll() for _ in range(5)]
        assert [len(b) for b in batches] == [30, 30, 30, 10, 0]
        assert [e.message for b in batches for e in b] == [f"line {i}" for i in range(100)]
    finally:
        src.close()


# ------------------------------------------------------------------------------------ FIFO


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    return path


def test_fifo_eagain_partial_records_and_eof(fifo: Path) -> None:
    src = source(fifo)
    try:
        assert src.mode == "kmsg"
        assert src.poll() == []  # no writer yet: EOF, not a wait
        wfd = os.open(fifo, os.O_WRONLY)  # does not block: the source holds the read end
        try:
            start = time.monotonic()
            for _ in range(10):
                assert src.poll() == []  # a writer but no data: EAGAIN
            assert time.monotonic() - start < 0.5
            os.write(wfd, b"3,1,100,-;first\n SUBSYSTEM=pci\n4,2,200,-;sec")
            assert triples(src.poll()) == [("error", "first", 100_000)]
            os.write(wfd, b"ond\n")
            assert triples(src.poll()) == [("warning", "second", 200_000)]
        finally:
            os.close(wfd)
        assert src.poll() == []  # the writer went away
    finally:
        src.close()


class OverrunSource(KernelLogSource):
    """Reads fail with EPIPE once, as /dev/kmsg's do when the ring buffer overran the reader."""

    overrun_at = 1

    def _read_once(self) -> bytes:
        self.overrun_at -= 1
        if self.overrun_at == 0:
            raise BrokenPipeError(32, "Broken pipe")
        return super()._read_once()


def test_epipe_is_skipped_and_counted(fifo: Path) -> None:
    src = OverrunSource(kmsg_path=str(fifo), journalctl_cmd=None, boot_wall_ns=boot)
    wfd = os.open(fifo, os.O_WRONLY)
    try:
        os.write(wfd, b"6,7,1,-;before\n")
        src.overrun_at = 2  # the read after "before" reports the overrun
        assert [e.message for e in src.poll()] == ["before"]
        os.write(wfd, b"6,12,2,-;after the overrun\n")
        assert [e.message for e in src.poll()] == ["after the overrun"]
        stats = src.stats()
        assert (stats.overwritten, stats.missed_records) == (1, 4)
    finally:
        os.close(wfd)
        src.close()


# -------------------------------------------------------------------------------- fallback


def fake_journalctl(tmp_path: Path, lines: list[dict], *, exit_code: int | None = None) -> list[str]:
    data = tmp_path / "journal.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    script = tmp_path / "journalctl"
    end = f"exit {exit_code}" if exit_code is not None else "exec sleep 60"
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {shlex.quote(str(tmp_path / "args.txt"))}\ncat {shlex.quote(str(data))}\n{end}\n'
    )
    script.chmod(0o755)
    return [str(script)]


def kernel_entry(message: object, priority: str, realtime_us: int, mono_us: int) -> dict:
    """An entry as journald stores a kernel message (journalctl -k -o json)."""
    return {
        "__CURSOR": f"s=5b2c1f0e8a7d4f4e9c3b2a1908f7e6d5;i=2f{mono_us:x};b=0f1e2d3c4b5a69788796a5b4c3d2e1f0;m={mono_us:x};t={realtime_us:x};x=9",
        "__REALTIME_TIMESTAMP": str(realtime_us),
        "__MONOTONIC_TIMESTAMP": str(mono_us),
        "_BOOT_ID": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "_MACHINE_ID": "7d6c5b4a39281706f5e4d3c2b1a09f8e",
        "_HOSTNAME": "gpu-node-07",
        "_TRANSPORT": "kernel",
        "SYSLOG_FACILITY": "0",
        "SYSLOG_IDENTIFIER": "kernel",
        "_SOURCE_MONOTONIC_TIMESTAMP": str(mono_us - 120),
        "PRIORITY": priority,
        "MESSAGE": message,
    }


def poll_until(src: KernelLogSource, count: int, timeout_s: float = 10.0) -> list[LogEvent]:
    out: list[LogEvent] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out.extend(src.poll())
        time.sleep(0.01)
    return out


@pytest.mark.processes
def test_falls_back_to_journalctl_when_kmsg_is_unreadable(tmp_path: Path) -> None:
    lines = [
        kernel_entry(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "4",
            1714560000123456,
            88123456789,
        ),
        kernel_entry(list(b"nvme nvme0: name \xffbad"), "3", 1714560000200000, 88123533333),
        kernel_entry("Kernel panic - not syncing: Fatal exception", "0", 1714560000300000, 88123633333),
    ]
    src = KernelLogSource(
        kmsg_path=str(tmp_path / "missing-kmsg"), journalctl_cmd=fake_journalctl(tmp_path, lines)
    )
    try:
        assert src.mode == "journal"
        got = poll_until(src, 3)
        assert [(e.source, e.level, e.message, e.parsed_ts_ns) for e in got] == [
            ("journal:kernel", "warning", lines[0]["MESSAGE"], 1714560000123456000),
            ("journal:kernel", "error", "nvme nvme0: name \ufffdbad", 1714560000200000000),
            (
                "journal:kernel",
                "critical",
                "Kernel panic - not syncing: Fatal exception",
                1714560000300000000,
            ),
        ]
        assert (tmp_path / "args.txt").read_text().split() == [
            "-k",
            "-f",
            "-o",
            "json",
            "--all",
            "--no-pager",
            "--since",
            "now",
        ]
    finally:
        src.close()


def test_kmsg_is_preferred_over_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(b"")
    src = KernelLogSource(
        kmsg_path=str(path), journalctl_cmd=fake_journalctl(tmp_path, []), boot_wall_ns=boot
    )
    try:
        assert src.mode == "kmsg"
        assert not (tmp_path / "args.txt").exists()
    finally:
        src.close()


@pytest.mark.processes
def test_nothing_readable_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.logs.kernel_log"):
        src = KernelLogSource(
            kmsg_path=str(tmp_path / "missing-kmsg"), journalctl_cmd=[str(tmp_path / "no-journalctl")]
        )
        try:
            assert src.mode == "none"
            for _ in range(5):
                start = time.monotonic()
                assert src.poll() == []
                assert time.monotonic() - start < 0.5  # a wait would be seconds; this is slack for a busy CI
        finally:
            src.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "no kernel log is readable" in said[0]
    assert "missing-kmsg" in said[0] and "no-journalctl" in said[0]


@pytest.mark.processes
def test_journalctl_that_ends_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = [kernel_entry("usb 1-1: new high-speed USB device", "6", 1714560000123456, 88123456789)]
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.logs.kernel_log"):
        src = KernelLogSource(
            kmsg_path=str(tmp_path / "missing-kmsg"),
            journalctl_cmd=fake_journalctl(tmp_path, lines, exit_code=1),
        )
        try:
            assert [e.message for e in poll_until(src, 1)] == ["usb 1-1: new high-speed USB device"]
            deadline = time.monotonic() + 10
            while src.mode != "none" and time.monotonic() < deadline:
                assert src.poll() == []
                time.sleep(0.01)
            for _ in range(3):
                assert src.poll() == []
        finally:
            src.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "no kernel log is readable" in said[0] and "exit status 1" in said[0]


def test_fallback_off_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.logs.kernel_log"):
        src = KernelLogSource(kmsg_path=str(tmp_path / "missing-kmsg"), journalctl_cmd=None)
        src.close()
    assert ["fallback is off" in r.getMessage() for r in caplog.records] == [True]


# ------------------------------------------------------------------------------ the device


def test_real_dev_kmsg_starts_at_its_end_and_never_waits() -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    src = KernelLogSource(journalctl_cmd=None)
    try:
        if src.mode != "kmsg":
            pytest.skip("/dev/kmsg cannot be opened here")
        start = time.monotonic()
        got = src.poll()
        assert time.monotonic() - start < 0.5
        # Started at the end: the boot messages ("Linux version ...", seq 0) are not sent again.
        assert not any(e.message.startswith("Linux version") for e in got)
        now = time.time_ns()
        assert all(
            e.source == "kmsg" and e.parsed_ts_ns is not None and e.parsed_ts_ns <= now + 10**9 for e in got
        )
    finally:
        src.close()
