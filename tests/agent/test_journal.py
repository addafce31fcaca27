"""JournalSource against a stand-in journalctl: a script that records its arguments, prints
journal JSON lines (written from the documented Journal JSON Format) and then sleeps, as
``journalctl -f`` does. The child process, its pipes and its reader threads are real."""

from __future__ import annotations

import json
import logging
import shlex
import time
from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_event
from fleetscope.agent.classify._base import KIND_CUDA_OOM
from fleetscope.agent.logs.grouping import EventGrouper
from fleetscope.agent.logs.journal import JournalSource, field_text, parse_entry, priority_level
from fleetscope.agent.records import LogEvent

T0_US = 1714560000123456  # __REALTIME_TIMESTAMP: microseconds since the epoch, as a string


def entry(
    message: object, *, unit: str = "trainer.service", priority: str | None = "6", n: int = 0, **extra: object
) -> dict:
    """One entry with the fields journald gives a service's stdout line."""
    e: dict[str, object] = {
        "__CURSOR": f"s=5b2c1f0e8a7d4f4e9c3b2a1908f7e6d5;i={0x1A2B + n:x};b=0f1e2d3c4b5a69788796a5b4c3d2e1f0;m={88_000_000 + n:x};t={T0_US + n:x};x=1c2d3e4f5a6b7c8d",
        "__REALTIME_TIMESTAMP": str(T0_US + n),
        "__MONOTONIC_TIMESTAMP": str(88_000_000 + n),
        "_BOOT_ID": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "_MACHINE_ID": "7d6c5b4a39281706f5e4d3c2b1a09f8e",
        "_HOSTNAME": "gpu-node-07",
        "_TRANSPORT": "stdout",
        "SYSLOG_FACILITY": "3",
        "SYSLOG_IDENTIFIER": "python3",
        "_PID": "4242",
        "_UID": "1000",
        "_COMM": "python3",
        "_SYSTEMD_UNIT": unit,
        "_SYSTEMD_CGROUP": f"/system.slice/{unit}",
        "MESSAGE": message,
    }
    if priority is not None:
        e["PRIORITY"] = priority
    e.update(extra)
    return e


def fake_journalctl(
    tmp_path: Path, lines: list[dict | str], *, exit_code: int | None = None, stderr: str = ""
) -> list[str]:
    """The command for a script that prints ``lines``, then sleeps (or exits with ``exit_code``)."""
    data = tmp_path / "journal.jsonl"
    data.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    script = tmp_path / "journalctl"
    body = [
        f'printf "%s\\n" "$@" > {shlex.quote(str(tmp_path / "args.txt"))}',
        f"cat {shlex.quote(str(data))}",
    ]
    if stderr:
        body.append(f"echo {shlex.quote(stderr)} >&2")
    # exec: the sleeping process is the child itself, so terminating it closes the pipe.
    body.append(f"exit {exit_code}" if exit_code is not None else "exec sleep 60")
    script.write_text("#!/bin/sh\n" + "\n".join(body) + "\n")
    script.chmod(0o755)
    return [str(script)]


def poll_until(source: JournalSource, count: int, timeout_s: float = 10.0) -> list[LogEvent]:
    out: list[LogEvent] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out.extend(source.poll(now_ns=42))
        time.sleep(0.01)
    return out


def args_seen(tmp_path: Path, timeout_s: float = 10.0) -> list[str]:
    path = tmp_path / "args.txt"
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.read_text().splitlines()


# ------------------------------------------------------------------------------- the format


def test_field_values_as_the_json_format_writes_them() -> None:
    assert field_text("Hello World") == "Hello World"
    # Non-printable or non-UTF-8 data comes as an array of byte values (a newline counts).
    assert field_text(list(b"line one\nline two")) == "line one\nline two"
    assert field_text(list(b"bad \xff byte")) == "bad \ufffd byte"
    # Several values of one field: an array of values, each a string or a byte array.
    assert field_text(["/dev/alias1", list(b"/dev/alias\x072")]) == "/dev/alias1\n/dev/alias\x072"
    assert field_text(None) is None  # a field too large for the serializer


def test_parse_entry_keeps_what_the_agent_needs() -> None:
    e = parse_entry(entry("loss 0.5", priority="3", n=7))
    assert e is not None
    assert (e.message, e.priority, e.realtime_us, e.units) == ("loss 0.5", 3, T0_US + 7, ("trainer.service",))
    assert parse_entry(entry(None)) is None and parse_entry(entry("")) is None and parse_entry([1, 2]) is None
    assert parse_entry(entry("x" * 100), max_message_chars=10).message == "x" * 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("priority", "level"),
    [
        (0, "critical"),
        (1, "critical"),
        (2, "critical"),
        (3, "error"),
        (4, "warning"),
        (5, "info"),
        (6, "info"),
        (7, "debug"),
        (30, "info"),
    ],
)
def test_priority_levels(priority: int, level: str) -> None:
    assert priority_level(priority) == level


# ---------------------------------------------------------------------------- following units


@pytest.mark.processes
def test_units_are_followed_with_sources_levels_and_times(tmp_path: Path) -> None:
    lines: list[dict | str] = [
        entry("epoch 3 step 1200 loss 1.873", n=0),
        entry("ERROR trainer: checkpoint upload failed", n=1),  # stdout: priority 6 whatever it says
        entry("dataloader worker 3 is slow", priority="4", n=2),
        entry(list(b"progress \x1b[32m80%\x1b[0m"), n=3),  # colour codes make it a byte array
        entry(
            "trainer.service: Main process exited, code=killed, status=9/KILL",
            unit="init.scope",
            priority="5",
            n=4,
            UNIT="trainer.service",
            _PID="1",
            _COMM="systemd",
            _TRANSPORT="journal",
        ),
        entry("Persistence mode is enabled", unit="nvidia-persistenced.service", priority="6", n=5),
        entry(None, n=6),  # a field over 4096 bytes without --all: nothing to report
        '{"MESSAGE": "cut off mid-line',  # not JSON: skipped, counted
        entry("no priority field", priority=None, n=8),
    ]
    cmd = fake_journalctl(tmp_path, lines)
    src = JournalSource(["trainer", "nvidia-persistenced.service"], journalctl_cmd=cmd)
    try:
        got = poll_until(src, 7)
        assert args_seen(tmp_path) == [
            "-f",
            "-o",
            "json",
            "--all",
            "--no-pager",
            "--since",
            "now",
            "-u",
            "trainer",
            "-u",
            "nvidia-persistenced.service",
        ]
        assert [(e.source, e.level, e.message) for e in got] == [
            ("journal:trainer", "info", "epoch 3 step 1200 loss 1.873"),
            ("journal:trainer", "error", "ERROR trainer: checkpoint upload failed"),
            ("journal:trainer", "warning", "dataloader worker 3 is slow"),
            ("journal:trainer", "info", "progress \x1b[32m80%\x1b[0m"),
            ("journal:trainer", "info", "trainer.service: Main process exited, code=killed, status=9/KILL"),
            ("journal:nvidia-persistenced.service", "info", "Persistence mode is enabled"),
            ("journal:trainer", "info", "no priority field"),
        ]
        assert [e.parsed_ts_ns for e in got] == [(T0_US + n) * 1000 for n in (0, 1, 2, 3, 4, 5, 8)]
        assert all(e.ts_ns == 42 for e in got)  # when the agent read it
        assert src._proc is not None and src._proc.malformed_lines == 1
    finally:
        src.close()


@pytest.mark.processes
def test_glob_units_name_the_matching_unit(tmp_path: Path) -> None:
    cmd = fake_journalctl(
        tmp_path, [entry("rank 0 up", unit="trainer@0.service"), entry("rank 1 up", unit="trainer@1.service")]
    )
    src = JournalSource(["trainer@*.service"], journalctl_cmd=cmd)
    try:
        assert [e.source for e in poll_until(src, 2)] == [
            "journal:trainer@0.service",
            "journal:trainer@1.service",
        ]
    finally:
        src.close()


@pytest.mark.processes
def test_a_traceback_from_the_journal_groups_into_one_oom_incident(tmp_path: Path) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/train.py", line 88, in <module>\n'
        "    loss.backward()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity of "
        "23.65 GiB of which 301.56 MiB is free. Including non-PyTorch memory, this process has 23.34 GiB memory in use. "
        "Of the allocated memory 22.10 GiB is allocated by PyTorch, and 812.44 MiB is reserved by PyTorch but unallocated."
    )
    lines: list[dict | str] = [entry(line, n=i) for i, line in enumerate(text.splitlines())]
    lines.append(
        entry(
            "trainer.service: Main process exited, code=exited, status=1/FAILURE",
            unit="init.scope",
            UNIT="trainer.service",
            n=9,
        )
    )
    src = JournalSource(["trainer"], journalctl_cmd=fake_journalctl(tmp_path, lines))
    try:
        got = poll_until(src, 5)
    finally:
        src.close()
    grouped = EventGrouper().feed(got)
    assert [e.message for e in grouped] == [
        text,
        "trainer.service: Main process exited, code=exited, status=1/FAILURE",
    ]
    assert grouped[0].level == "error" and grouped[0].parsed_ts_ns == T0_US * 1000
    incidents = classify_event(grouped[0])
    assert [i.kind for i in incidents] == [KIND_CUDA_OOM]
    assert incidents[0].facts["requested_bytes"] == 512 << 20 and incidents[0].source == "journal:trainer"


# ------------------------------------------------------------------------ bounds and failures


@pytest.mark.processes
def test_bounded_queue_and_poll_size_lose_nothing(tmp_path: Path) -> None:
    lines: list[dict | str] = [entry(f"line {i}", n=i) for i in range(50)]
    src = JournalSource(
        ["trainer"], journalctl_cmd=fake_journalctl(tmp_path, lines), queue_max=4, max_events_per_poll=3
    )
    try:
        got: list[LogEvent] = []
        deadline = time.monotonic() + 10
        while len(got) < 50 and time.monotonic() < deadline:
            batch = src.poll()
            assert len(batch) <= 3
            got.extend(batch)
            time.sleep(0.005)
        assert [e.message for e in got] == [f"line {i}" for i in range(50)]
    finally:
        src.close()


@pytest.mark.processes
def test_oversized_line_is_skipped_whole(tmp_path: Path) -> None:
    big = entry("x" * 5000)
    lines: list[dict | str] = [big, entry("after the big one", n=1)]
    src = JournalSource(["trainer"], journalctl_cmd=fake_journalctl(tmp_path, lines), max_line_bytes=1024)
    try:
        assert [e.message for e in poll_until(src, 1)] == ["after the big one"]
        assert src._proc is not None and src._proc.oversized_lines == 1
    finally:
        src.close()


@pytest.mark.processes
def test_poll_never_waits(tmp_path: Path) -> None:
    src = JournalSource(["trainer"], journalctl_cmd=fake_journalctl(tmp_path, []))
    try:
        for _ in range(20):
            start = time.monotonic()
            assert src.poll() == []
            assert time.monotonic() - start < 0.5  # a wait would be seconds; this is slack for a busy CI
    finally:
        src.close()


@pytest.mark.processes
def test_missing_journalctl_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.logs.journal"):
        src = JournalSource(["trainer"], journalctl_cmd=[str(tmp_path / "no-such-journalctl")])
        assert [src.poll() for _ in range(3)] == [[], [], []]
        src.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "journal of trainer is not followed" in said[0] and "No such file" in said[0]


@pytest.mark.processes
def test_journalctl_that_ends_is_said_once_with_its_stderr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cmd = fake_journalctl(
        tmp_path, [entry("last words")], exit_code=1, stderr="Failed to open journal: Permission denied"
    )
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.logs.journal"):
        src = JournalSource(["trainer"], journalctl_cmd=cmd)
        try:
            assert [e.message for e in poll_until(src, 1)] == ["last words"]  # what it printed still counts
            deadline = time.monotonic() + 10
            while not caplog.records and time.monotonic() < deadline:
                assert src.poll() == []
                time.sleep(0.01)
            for _ in range(3):
                assert src.poll() == []
        finally:
            src.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "exit status 1" in said[0] and "Permission denied" in said[0]


@pytest.mark.processes
def test_close_stops_the_child(tmp_path: Path) -> None:
    src = JournalSource(["trainer"], journalctl_cmd=fake_journalctl(tmp_path, []))
    proc = src._proc
    assert proc is not None and proc._proc.poll() is None
    src.close()
    assert proc._proc.returncode is not None
    assert not proc._reader.is_alive()
    src.close()  # twice is fine


def test_units_are_required() -> None:
    with pytest.raises(ValueError):
        JournalSource([])
