"""A clean stop is not an outage, and "offline" means one thing everywhere, for real processes.

Two real agents stream to a real collector process started with ``--offline-after 4s``. One is
stopped with SIGTERM (a drone landing: its agent says so in its last batch), the other killed
with SIGKILL (a drone lost). The killed one gets an ``agent_offline`` incident, and at that
moment `fleetscope devices`, the status summary and the fleet exposition's
``fleetscope_device_up`` all call it offline (before: "online" for a minute, next to an incident
saying it was silent); the stopped one is "stopped" everywhere and no incident is opened for it
(before: an error-severity incident on every landing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select

from fleetscope.collector.storage.engine import normalise_url
from fleetscope.collector.storage.schema import Device, Incident
from tests.conftest import free_port, wait_until

CLI = [sys.executable, "-m", "fleetscope.cli"]


def start_agent(tmp_path: Path, address: str, name: str) -> subprocess.Popen:
    with open(tmp_path / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [*CLI, "agent", "--token", "test-token", "--name", name, "--collector", address,
             "--spool", str(tmp_path / name), "--interval", "250ms", "--batch-interval", "1s", "--no-gpu", "--no-kernel-log"],
            stdout=out, stderr=subprocess.STDOUT)


def cli_json(*args: str) -> dict:
    out = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def fleet_metrics(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics/fleet", timeout=10) as r:
        body = r.read().decode()
    return {(s.name, s.labels.get("fleetscope_device", "")): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_a_clean_stop_is_stopped_and_a_lost_agent_is_offline_everywhere_at_once(
        tmp_path: Path, sqlite_url: str, collector_process) -> None:
    metrics_port = free_port()
    c = collector_process(sqlite_url, extra_args=("--offline-after", "4s",
                                                  "--metrics-listen", f"127.0.0.1:{metrics_port}")).start()
    landed = start_agent(tmp_path, c.address, "drone-landed")
    lost = start_agent(tmp_path, c.address, "drone-lost")
    engine = create_engine(normalise_url(sqlite_url))
    try:
        def states() -> dict[str, tuple[bool, bool]]:
            return {d["name"]: (d["online"], d["stopped"]) for d in cli_json("devices", "--db", sqlite_url)["devices"]}

        wait_until(lambda: states() == {"drone-landed": (True, False), "drone-lost": (True, False)}, timeout_s=30,
                   interval_s=0.5, message="both agents online")
        with engine.connect() as conn:
            intervals = {r.name: r.inventory.get("batch_interval_s") for r in conn.execute(select(Device.name, Device.inventory))}
        assert intervals == {"drone-landed": 1.0, "drone-lost": 1.0}, "each agent says how often it sends"

        landed.terminate()  # SIGTERM: a clean stop
        assert landed.wait(30) == 0
        lost.kill()  # SIGKILL: no word from it
        lost.wait(10)

        def offline_incidents() -> dict[str, str]:
            with engine.connect() as conn:
                rows = conn.execute(select(Device.name, Incident.severity).join(Device, Device.id == Incident.device_id)
                                    .where(Incident.kind == "agent_offline"))
                return {r.name: r.severity for r in rows}

        wait_until(lambda: "drone-lost" in offline_incidents(), timeout_s=30, interval_s=0.25,
                   message="the lost drone's agent_offline incident")
        # The moment the detector calls it offline, so does everything else.
        assert states() == {"drone-landed": (False, True), "drone-lost": (False, False)}
        text = subprocess.run([*CLI, "devices", "--db", sqlite_url], capture_output=True, text=True, check=True).stdout
        rows = {line.split()[0]: line.split()[2] for line in text.splitlines()[1:] if line.strip()}
        assert rows["drone-landed"] == "stopped" and rows["drone-lost"] == "OFFLINE", text
        status = cli_json("status", "--db", sqlite_url)["devices"]
        assert status["offline"] == ["drone-lost"] and status["stopped"] == ["drone-landed"]

        def exposed() -> dict[tuple[str, str], float]:
            return fleet_metrics(metrics_port)

        time.sleep(1.1)  # past the exposition's one-second cache
        m = exposed()
        assert m[("fleetscope_device_up", "drone-lost")] == 0 and m[("fleetscope_device_stopped", "drone-lost")] == 0
        assert m[("fleetscope_device_up", "drone-landed")] == 0 and m[("fleetscope_device_stopped", "drone-landed")] == 1

        time.sleep(5.0)  # more detector passes (every 2 s with a 4 s threshold), well past the threshold
        assert offline_incidents() == {"drone-lost": "error"}, "a clean stop opens no incident"
    finally:
        engine.dispose()
        for p in (landed, lost):
            if p.poll() is None:
                p.kill()
                p.wait(10)
