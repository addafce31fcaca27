"""From an OOM line to a webhook, for real: a real agent process follows a log file, a real
collector process (two on one PostgreSQL in one test) stores the incident, evaluates the rules
file given with ``--alerts`` and POSTs to a receiver this test runs on loopback. Exactly one
"firing" notification, and exactly one "resolved" when the incident resolves after its quiet
period; retries while the receiver is down, then one delivery."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from fleetscope.collector.storage.engine import normalise_url
from fleetscope.collector.storage.schema import notification_attempts
from tests.alert_receiver import Receiver
from tests.conftest import wait_until

CLI = [sys.executable, "-m", "fleetscope.cli"]
QUIET_S = 3

OOM = """Traceback (most recent call last):
  File "/opt/train/train.py", line 88, in <module>
    loss = model(batch).sum()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated.
"""


def rules_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(f"""
[[notifier]]
name = "ops"
type = "webhook"
url = "{url}"
timeout = "2s"

[[rule]]
name = "gpu-oom"
incident = ["cuda_oom", "host_oom", "jetson_memory"]
labels = {{ site = "field" }}
notify = ["ops"]

[detectors]
quiet_period = "{QUIET_S}s"
""")
    return path


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def start_agent(tmp_path: Path, addresses: list[str], log: Path) -> subprocess.Popen:
    # The log appears after the agent started, so it is read from its start: a file that exists at
    # start is followed from its end, and an agent slow to start (a busy machine) would miss a line
    # written before it looked.
    assert not log.exists()
    args = [*CLI, "agent", "--token", "test-token", "--name", "drone-7", "--spool", str(tmp_path / "agent"),
            "--interval", "200ms", "--label", "site=field", "--log-file", str(log), "--no-kernel-log", "--no-gpu"]
    for a in addresses:
        args += ["--collector", a]
    agent_log = tmp_path / "agent.log"
    with open(agent_log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    # Until the agent has looked for the file (it says the file will be followed from its start):
    # a line written before that, by a test that guessed at the agent's start-up time, was missed
    # on a loaded machine when the file was there by the time the agent looked.
    wait_until(lambda: "followed from its start" in agent_log.read_text(errors="replace") or proc.poll() is not None,
               timeout_s=60, message="the agent to look for its log file")
    assert proc.poll() is None, agent_log.read_text(errors="replace")[-2000:]
    return proc


def states(receiver: Receiver) -> list[str]:
    return [b["state"] for b in receiver.bodies()]


def run_oom_to_webhook(tmp_path: Path, db_url: str, receiver: Receiver, collectors: list) -> None:
    log = tmp_path / "train.log"
    agent = start_agent(tmp_path, [c.address for c in collectors], log)
    try:
        time.sleep(1.0)
        with open(log, "a") as f:
            f.write(OOM)
        wait_until(lambda: "firing" in states(receiver), timeout_s=30, message="the firing notification")
        # The detector job's lifecycle step resolves the incident after the rules file's quiet period.
        wait_until(lambda: "resolved" in states(receiver), timeout_s=40 + QUIET_S, message="the resolved notification")
        time.sleep(2.5)  # time for a duplicate to show up, if any would
    finally:
        agent.terminate()
        agent.wait(30)
    assert states(receiver) == ["firing", "resolved"]
    firing, resolved = receiver.bodies()
    assert firing["rule"] == "gpu-oom" and firing["device"] == "drone-7" and firing["kind"] == "cuda_oom"
    assert firing["labels"]["site"] == "field" and firing["facts"]["requested_bytes"] == 2 << 30
    assert resolved["alert_id"] == firing["alert_id"] and resolved["ended"] is not None
    out = subprocess.run([*CLI, "alerts", "--all", "--json", "--db", db_url], capture_output=True, text=True, check=True)
    (alert,) = json.loads(out.stdout)["alerts"]
    assert alert["state"] == "resolved" and alert["device_name"] == "drone-7"
    assert sorted(n["transition"] for n in alert["notifications"]) == ["firing", "resolved"]
    assert all(n["state"] == "delivered" for n in alert["notifications"])


def test_an_oom_line_gives_one_firing_and_one_resolved_webhook(tmp_path: Path, db_url: str, receiver: Receiver,
                                                                  collector_process) -> None:
    rules = rules_file(tmp_path, receiver.url())
    c = collector_process(db_url, extra_args=("--alerts", str(rules), "--dashboard-url", "http://dash:8501")).start()
    run_oom_to_webhook(tmp_path, db_url, receiver, [c])
    assert receiver.bodies()[0]["dashboard_url"] == "http://dash:8501/alerts?rule=gpu-oom&device=drone-7"


def test_two_collectors_on_one_postgresql_notify_once(tmp_path: Path, pg_url: str, receiver: Receiver,
                                                      collector_process) -> None:
    rules = rules_file(tmp_path, receiver.url())
    a = collector_process(pg_url, extra_args=("--alerts", str(rules))).start()
    b = collector_process(pg_url, extra_args=("--alerts", str(rules))).start()
    run_oom_to_webhook(tmp_path, pg_url, receiver, [a, b])


def test_a_receiver_down_for_a_while_gets_retries_then_one_delivery(tmp_path: Path, sqlite_url: str,
                                                                     receiver: Receiver, collector_process) -> None:
    rules = rules_file(tmp_path, receiver.url())
    port = receiver.port
    receiver.stop()  # down: the port refuses connections
    c = collector_process(sqlite_url, extra_args=("--alerts", str(rules))).start()
    log = tmp_path / "train.log"
    agent = start_agent(tmp_path, [c.address], log)
    engine = create_engine(normalise_url(sqlite_url))

    def failed_attempts() -> int:
        with engine.connect() as conn:
            return len(conn.execute(select(notification_attempts.c.id).where(notification_attempts.c.ok.is_(False))).all())

    try:
        time.sleep(1.0)
        with open(log, "a") as f:
            f.write(OOM)
        wait_until(lambda: failed_attempts() >= 2, timeout_s=40, message="failed attempts recorded")
        receiver.port = port
        receiver.start()
        wait_until(lambda: "firing" in states(receiver), timeout_s=30, message="the delivery after the receiver came back")
        time.sleep(2.0)
    finally:
        agent.terminate()
        agent.wait(30)
        engine.dispose()
    assert states(receiver) == ["firing"], "one delivery, however many attempts"
    assert failed_attempts() >= 2
