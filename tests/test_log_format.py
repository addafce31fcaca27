"""--log-format json: one JSON object per line on stderr, and nothing else there."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from fleetscope.cli import logging_setup
from tests.conftest import free_port
from tests.helpers import sample_count

KEYS = {"ts", "level", "logger", "message"}


def records(stderr: str) -> list[dict]:
    """Every line parsed as JSON; fails on the first that is not an object with the four keys."""
    out = []
    for line in stderr.splitlines():
        doc = json.loads(line)  # raises on any non-JSON line
        assert isinstance(doc, dict) and KEYS <= doc.keys(), line
        assert doc["ts"].endswith("Z") and datetime.fromisoformat(doc["ts"].replace("Z", "+00:00")).tzinfo
        assert doc["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), line
        out.append(doc)
    return out


def test_formatter_writes_one_line_with_the_exception() -> None:
    fmt = logging_setup.JsonFormatter()
    try:
        raise ValueError("bad \"quoted\"\nvalue")
    except ValueError:
        record = logging.getLogger("fleetscope.test").makeRecord(
            "fleetscope.test", logging.ERROR, __file__, 1, "failed on %s", ("dev-1",), sys.exc_info())
    line = fmt.format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "ERROR" and doc["logger"] == "fleetscope.test" and doc["message"] == "failed on dev-1"
    assert "Traceback" in doc["exception"] and 'ValueError: bad "quoted"' in doc["exception"]


@pytest.mark.processes
def test_json_mode_turns_all_of_stderr_into_records(tmp_path: Path) -> None:
    """Prints to stderr, warnings, uncaught exceptions in threads: all JSON lines (in a child)."""
    script = tmp_path / "child.py"
    script.write_text(
        "import logging, sys, threading, warnings\n"
        "from fleetscope.cli import logging_setup\n"
        "logging_setup.configure(logging.INFO, 'json')\n"
        "logging.getLogger('fleetscope.x').info('hello %s', 'world')\n"
        "print('warning: no --token', file=sys.stderr)\n"
        "print('progress ', end='', file=sys.stderr, flush=True); print('done', file=sys.stderr)\n"
        "warnings.warn('careful')\n"
        "t = threading.Thread(target=lambda: 1 / 0, name='worker'); t.start(); t.join()\n"
        "raise RuntimeError('the end')\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    recs = records(proc.stderr)
    msgs = [(r["level"], r["logger"], r["message"]) for r in recs]
    assert ("INFO", "fleetscope.x", "hello world") in msgs
    assert ("WARNING", "fleetscope.stderr", "warning: no --token") in msgs
    assert ("INFO", "fleetscope.stderr", "progress done") in msgs
    assert any(r["logger"] == "py.warnings" and "careful" in r["message"] for r in recs)
    thread = [r for r in recs if "in thread worker" in r["message"]]
    assert thread and "ZeroDivisionError" in thread[0]["exception"]
    crash = [r for r in recs if r["level"] == "CRITICAL"]
    assert crash and "RuntimeError: the end" in crash[0]["exception"]


def _wait_listening(port: int, process: subprocess.Popen[str], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the collector exited before it listened"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no collector listening on port {port} after {timeout_s:.0f} s")


@pytest.mark.processes
def test_an_agent_and_a_collector_log_only_json(tmp_path: Path) -> None:
    """A real collector (log format from its config file) and a real agent (from the flag)."""
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("psutil")
    port = free_port()
    db = f"sqlite:///{tmp_path / 'fleetscope.db'}"
    cfg = tmp_path / "fleetscope.toml"
    cfg.write_text(f'[collector]\nlisten = "127.0.0.1:{port}"\ndb = "{db}"\nlog-format = "json"\n'
                   f'[agent]\ncollector = ["127.0.0.1:{port}"]\nname = "json-dev"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETSCOPE_")}
    env["FLEETSCOPE_TOKEN"] = "tok"
    collector = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--config", str(cfg)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # The agent runs 4 s: it must not spend them waiting for a collector still starting on a
        # loaded machine (it would keep its samples in its spool and the test would see none).
        _wait_listening(port, collector)
        agent = subprocess.run(
            [sys.executable, "-m", "fleetscope.cli", "-v", "agent", "--config", str(cfg), "--log-format", "json",
             "--spool", str(tmp_path / "spool"), "--no-gpu", "--no-kernel-log", "--interval", "0.2s",
             "--duration", "4s"],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert agent.returncode == 0, agent.stderr[-2000:]
        deadline = time.monotonic() + 20
        while sample_count(db, "host") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sample_count(db, "host", device="json-dev") > 0
    finally:
        collector.terminate()
        _, collector_err = collector.communicate(timeout=60)
    assert collector.returncode == 0, collector_err[-2000:]
    agent_recs = records(agent.stderr)
    collector_recs = records(collector_err)
    assert any("json-dev" in r["message"] or "agent" in r["message"] for r in agent_recs)
    assert any(r["message"].startswith("agent stopped") for r in agent_recs)
    assert any(r["logger"].startswith("fleetscope.collector") for r in collector_recs)
    assert any("json-dev" in r["message"] for r in collector_recs)  # the registration it logged


def test_restore_gives_stderr_back() -> None:
    before = sys.stderr
    hook = threading.excepthook
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        logging_setup.configure(logging.INFO, "json")
        assert sys.stderr is not before
    finally:
        logging_setup.restore()
        root.handlers[:] = handlers
    assert sys.stderr is before and threading.excepthook is hook


@pytest.mark.processes
def test_the_dashboard_logs_only_json(tmp_path: Path) -> None:
    """The wrapper's line and Streamlit's own (its server runs under fleetscope.cli.streamlit_json)."""
    pytest.importorskip("streamlit")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETSCOPE_")}
    cfg = tmp_path / "fleetscope.toml"
    cfg.write_text(f'[dashboard]\nport = {port}\ndb = "sqlite:///{tmp_path / "x.db"}"\n')
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "dashboard", "--config", str(cfg),
                                 "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 60
        while "server started" not in err_path.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
    recs = records(err_path.read_text())
    assert any(r["message"].startswith(f"fleetscope dashboard: http://localhost:{port}") for r in recs)
    assert any(r["logger"].startswith("streamlit") and "server started" in r["message"] for r in recs)
