"""A real Alertmanager (Debian's ``prometheus-alertmanager``) keeps a fleetscope alert firing for
as long as it fires, far past its ``resolve_timeout``, and resolves it when it resolves.

Alertmanager resolves an alert by itself at its ``endsAt``, or ``resolve_timeout`` after it last
heard of it when it has none; a collector that POSTed a firing alert once saw it resolved in
Alertmanager five minutes later while ``fleetscope alerts`` still said firing. Here the
Alertmanager's ``resolve_timeout`` is 20 s and the alert fires for 70 s (three and a half
timeouts): a real agent, a real collector with a rules file whose Alertmanager notifier re-sends
every 3 s, and the Alertmanager's own API asked every second whether the alert is still active.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_until

CLI = [sys.executable, "-m", "fleetscope.cli"]
BINARY = "prometheus-alertmanager"
RESOLVE_TIMEOUT_S = 20
FIRING_FOR_S = 70


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on a free loopback port, clustering off; yields its base URL."""
    binary = shutil.which(BINARY)
    if binary is None:
        if _in_ci():
            pytest.fail(f"{BINARY} is not installed; .ci/run installs it (apt-get install prometheus-alertmanager)")
        pytest.skip(f"{BINARY} is not installed (apt-get install prometheus-alertmanager); CI runs this test")
    config = tmp_path / "alertmanager.yml"
    config.write_text(f"""
global:
  resolve_timeout: {RESOLVE_TIMEOUT_S}s
route:
  receiver: "null"
  group_wait: 1s
receivers:
  - name: "null"
""")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "alertmanager.log", "ab") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_until(ready, timeout_s=30, message="alertmanager ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def active_alerts(am_url: str, alertname: str) -> list[dict]:
    """The alerts Alertmanager holds as not resolved (its API leaves out those past ``endsAt``)."""
    with urllib.request.urlopen(f"{am_url}/api/v2/alerts?filter=alertname%3D%22{alertname}%22", timeout=5) as resp:
        return [a for a in json.loads(resp.read()) if a["status"]["state"] != "resolved"]


def test_a_firing_alert_stays_firing_in_alertmanager_past_its_resolve_timeout(
        tmp_path: Path, sqlite_url: str, alertmanager: str, collector_process) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(f"""
[[notifier]]
name = "am"
type = "alertmanager"
url = "{alertmanager}"
resend = "3s"

[[rule]]
name = "host-up"
metric = "host.cpu_percent"
above = -1                      # always true while the agent sends
lookback = "4s"
notify = ["am"]
""")
    c = collector_process(sqlite_url, extra_args=("--alerts", str(rules), "--no-detectors")).start()
    agent_log = tmp_path / "agent.log"
    with open(agent_log, "ab") as out:
        agent = subprocess.Popen(
            [*CLI, "agent", "--token", "test-token", "--name", "drone-am", "--collector", c.address,
             "--spool", str(tmp_path / "agent"), "--interval", "500ms", "--batch-interval", "1s", "--no-gpu", "--no-kernel-log"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: len(active_alerts(alertmanager, "host-up")) == 1, timeout_s=30,
                   message="the alert firing in Alertmanager")
        fired = time.monotonic()
        while time.monotonic() - fired < FIRING_FOR_S:
            held = active_alerts(alertmanager, "host-up")
            assert len(held) == 1, (f"Alertmanager dropped the alert {time.monotonic() - fired:.0f} s after it fired "
                                    f"(resolve_timeout {RESOLVE_TIMEOUT_S} s) while fleetscope still has it firing")
            assert held[0]["labels"]["device"] == "drone-am"
            time.sleep(1.0)
        out = subprocess.run([*CLI, "alerts", "--json", "--db", sqlite_url], capture_output=True, text=True, check=True)
        assert [a["state"] for a in json.loads(out.stdout)["alerts"]] == ["firing"]
        # The agent stops: no sample inside the lookback, the alert resolves, and Alertmanager
        # hears the resolution (``endsAt`` = when it resolved) well before any timeout of its own.
        agent.terminate()
        agent.wait(30)
        stopped = time.monotonic()
        wait_until(lambda: active_alerts(alertmanager, "host-up") == [], timeout_s=15,
                   message="the resolution reaching Alertmanager")
        assert time.monotonic() - stopped < RESOLVE_TIMEOUT_S
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
