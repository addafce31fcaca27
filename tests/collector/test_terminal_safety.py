"""Text an agent sends cannot drive the operator's terminal: the CLI's text output shows
control characters as escapes (``\\x1b``), while ``--json`` keeps them exact."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from fleetscope.agent.records import IncidentRecord, LogEvent  # noqa: E402
from fleetscope.agent.samplers._base import SampleSet  # noqa: E402
from fleetscope.cli.terminal import visible  # noqa: E402
from fleetscope.collector.ingest.server import Collector, CollectorSettings  # noqa: E402
from tests.helpers import IdleSampler, make_agent  # noqa: E402

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\rfake line\x9b31m\u202eevil"
DEVICE = "edge\x1b[31m-7"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def test_visible_escapes_controls_and_keeps_text() -> None:
    assert visible("a\x1b[2J\x07\r\nb\tc") == "a\\x1b[2J\\x07\\x0d\\x0ab\\x09c"
    assert visible("a\x1b\r\nb\tc", keep_line_breaks=True) == "a\\x1b\\x0d\nb\tc"
    assert visible("\u202eevil\x7f\x9b") == "\\u202eevil\\x7f\\x9b"
    assert visible("GPU 0 — 日本 ünïcode C:\\path") == "GPU 0 — 日本 ünïcode C:\\path"


@pytest.fixture
def hostile_db(tmp_path: Path, sqlite_url: str) -> Iterator[str]:
    """A device whose name, log line and incident title carry escape sequences, stored
    through a real agent and collector."""
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=sqlite_url, tokens=frozenset(["test-token"]), grace_s=2.0))
    port = collector.start()
    try:
        now = time.time_ns()
        agent = make_agent(tmp_path, [f"127.0.0.1:{port}"], IdleSampler(), name=DEVICE)
        agent.add(SampleSet(
            logs=[LogEvent(ts_ns=now - 10**9, source="job\x1b[8m.log", message=f"before {HOSTILE}\nsecond line\x07", level="info")],
            incidents=[IncidentRecord(ts_ns=now - 10**9, kind="cuda_oom", severity="error", title=f"OOM {HOSTILE}")],
        ))
        agent.flush()
        agent.uplink.start()
        try:
            assert agent.uplink.drain(30), "batches not acknowledged"
        finally:
            agent.uplink.stop()
            agent.spool.close()
    finally:
        collector.stop()
    yield sqlite_url


def _fleetscope(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", *args], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


@pytest.mark.processes
@pytest.mark.parametrize("command", [["logs", "--device", DEVICE], ["incidents"], ["devices"]])
def test_text_output_shows_control_characters(hostile_db: str, command: list[str]) -> None:
    printed = _fleetscope(*command, "--db", hostile_db)
    for raw in RAW:
        assert raw not in printed, f"{command[0]} printed a raw {raw!r}"
    assert "\\x1b" in printed, "the escape is shown, not dropped"
    if command[0] == "logs":
        assert "\\x1b[2J\\x1b]0;pwned\\x07\\x0dfake line" in printed
        assert "\n    second line\\x07" in printed, "a continuation line is indented, never a log line of its own"
    else:
        assert "edge\\x1b[31m-7" in printed


@pytest.mark.processes
def test_json_output_stays_exact(hostile_db: str) -> None:
    logs = json.loads(_fleetscope("logs", "--device", DEVICE, "--db", hostile_db, "--json"))["logs"]
    assert logs[0]["message"] == f"before {HOSTILE}\nsecond line\x07"
    devices = json.loads(_fleetscope("devices", "--db", hostile_db, "--json"))["devices"]
    assert devices[0]["name"] == DEVICE
