"""Starting and stopping for real: SIGTERM to a collector mid-stream, SIGTERM to an agent, the
query commands a user runs, and `fleetscope demo` on the embedded default."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from fleetscope.agent.daemon.spool import Spool
from tests.conftest import free_port, wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent, sample_count, table_count

CLI = [sys.executable, "-m", "fleetscope.cli"]


def test_collector_sigterm_acks_only_what_it_committed(tmp_path: Path, db_url: str, collector_process) -> None:
    sampler = CountingSampler(total=8_000, per_tick=40)
    c = collector_process(db_url).start()
    agent = make_agent(tmp_path, [c.address], sampler)
    agent.start()
    try:
        wait_until(lambda: agent.uplink.status.acked >= 20, message="streaming")
        assert c.terminate() == 0, "a graceful stop exits 0"
        acked_before_restart = agent.uplink.status.acked
        stored_at_stop = len(gpu_sequence_numbers(db_url))
        assert stored_at_stop > 0, "what was acknowledged before the stop is in the database"
        c.start()
        wait_until(sampler.done, timeout_s=60, message="sampling done")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 8_000, timeout_s=60, message="everything stored")
    finally:
        agent.stop()
    assert acked_before_restart >= 20
    assert sorted(gpu_sequence_numbers(db_url)) == list(range(8_000))
    log = c.log_path.read_text()
    assert "collector stopping: acknowledging in-flight batches" in log and "collector stopped" in log


def test_agent_cli_stops_cleanly_on_sigterm_and_keeps_what_it_could_not_send(tmp_path: Path, sqlite_url: str,
                                                                            collector_process) -> None:
    c = collector_process(sqlite_url).start()
    spool_dir = tmp_path / "agent-state"
    logfile = tmp_path / "train.log"
    logfile.touch()
    agent = subprocess.Popen(
        [*CLI, "agent", "--collector", c.address, "--token", "test-token", "--name", "cli-agent", "--spool", str(spool_dir),
         "--interval", "200ms", "--label", "site=lab", "--log-file", str(logfile)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_until(lambda: sample_count(sqlite_url, "host", device="cli-agent") >= 5, timeout_s=30, message="host samples")
        with open(logfile, "a") as f:
            f.write("epoch 3 done\n")
        wait_until(lambda: table_count(sqlite_url, "log_events") >= 1, message="log line stored")
        c.kill()  # the collector goes away; what the agent samples now stays in its spool
        time.sleep(1.0)
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, out
    left = Spool(spool_dir).stats().batches
    assert left > 0, "unsent batches are kept for the next start"
    assert f"{left} batches left in the spool" in out
    # Restarted, the same agent (same id from its state dir) delivers the rest.
    before = sample_count(sqlite_url, "host", device="cli-agent")
    c.start()
    agent2 = subprocess.Popen([*CLI, "agent", "--collector", c.address, "--token", "test-token", "--name", "cli-agent",
                               "--spool", str(spool_dir), "--interval", "1s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: Spool(spool_dir).stats().batches == 0 and sample_count(sqlite_url, "host", device="cli-agent") > before,
                   timeout_s=30, message="backlog delivered")
    finally:
        agent2.terminate()
        agent2.wait(30)
    assert table_count(sqlite_url, "devices") == 1, "the restarted agent is the same device"


def test_query_commands_json_and_tables(tmp_path: Path, db_url: str, collector) -> None:
    sampler = CountingSampler(total=300, per_tick=30, incidents_every=2)
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler, name="node-a")
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "node-a")) >= 300, message="stored")
    finally:
        agent.stop()

    def run(*args: str) -> str:
        return subprocess.run([*CLI, *args, "--db", db_url], capture_output=True, text=True, check=True).stdout

    devices = json.loads(run("devices", "--json"))["devices"]
    assert [d["name"] for d in devices] == ["node-a"] and devices[0]["labels"] == {"site": "test"}
    assert "node-a" in run("devices") and "stopped" in run("devices"), "its agent stopped cleanly above"
    metrics = json.loads(run("metrics", "--device", "node-a", "--since", "10m", "--json"))
    assert len(metrics["gpu"]) == 300 and {p["gpu_index"] for p in metrics["gpu"]} == set(range(8))
    incidents = json.loads(run("incidents", "--device", "node-a", "--kind", "cuda_oom", "--json"))["incidents"]
    # The sampler's OOMs repeat every other tick: one incident whose count is all of them.
    assert [(i["kind"], i["count"]) for i in incidents] == [("cuda_oom", sampler.incidents)]
    assert json.loads(run("incidents", "--kind", "gpu_xid", "--json"))["incidents"] == []
    table = run("metrics", "--device", "node-a", "--since", "10m")
    assert "300 GPU samples" in table
    bad = subprocess.run([*CLI, "metrics", "--device", "ghost", "--db", db_url], capture_output=True, text=True)
    assert bad.returncode == 1 and "no device named 'ghost'" in bad.stderr and "node-a" in bad.stderr


def test_every_command_has_help() -> None:
    for cmd in ([], ["agent"], ["collector"], ["simulate"], ["demo"], ["devices"], ["metrics"], ["logs"], ["incidents"]):
        out = subprocess.run([*CLI, *cmd, "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "usage: fleetscope" in out.stdout, cmd


def test_demo_runs_on_sqlite_and_stores_a_fleet(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "demo", "--dir", str(tmp_path / "demo"), "--duration", "8s", "--devices", "2", "--no-dashboard",
                          "--port", str(free_port())], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fleetscope is running" in out.stderr and "fleetscope devices --db sqlite:///" in out.stderr
    assert "stored: 3 devices" in out.stdout
    assert (tmp_path / "demo" / "fleetscope.db").exists()


def test_collector_workers_share_one_port_and_store_once(tmp_path: Path, db_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen([*CLI, "collector", "--listen", f"127.0.0.1:{port}", "--db", db_url, "--token", "test-token",
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samplers = [CountingSampler(total=2_000, per_tick=40) for _ in range(4)]
    agents = [make_agent(tmp_path, [f"127.0.0.1:{port}"], s, name=f"w{i}") for i, s in enumerate(samplers)]

    def stored(name: str) -> int:
        try:
            return len(gpu_sequence_numbers(db_url, name))
        except DBAPIError:  # the workers have not created the schema yet (agents spool meanwhile)
            return 0

    try:
        for a in agents:
            a.start()
        for i, s in enumerate(samplers):
            wait_until(s.done, timeout_s=60, message="sampling")
            wait_until(lambda i=i: stored(f"w{i}") >= 2_000, timeout_s=60, message="stored")
    finally:
        for a in agents:
            a.stop()
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    for i in range(4):
        assert sorted(gpu_sequence_numbers(db_url, f"w{i}")) == list(range(2_000))
    assert out.count("collector stopped") == 2, "both workers stopped gracefully"
