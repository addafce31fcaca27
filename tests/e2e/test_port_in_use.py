"""Two collectors on one port (issue 27, item 1): gRPC sets SO_REUSEPORT by default, so a second
collector on a busy port used to print "listening" and take some of the agents into its own
database. Now a lone collector's port is its own: the second exits with one line; only the
workers of one ``--workers N`` collector share a port, and nobody else can join them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port, wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

CLI = [sys.executable, "-m", "fleetscope.cli"]


def _second_collector(port: int, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "collector", "--listen", f"127.0.0.1:{port}", "--db", db, "--token", "test-token",
                           "--metrics-listen", "off"], capture_output=True, text=True, timeout=60)


def _refused(run: subprocess.CompletedProcess[str], port: int) -> None:
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [
        f"fleetscope collector: cannot listen on 127.0.0.1:{port}: the port is in use (another collector?); stop it or "
        "give another --listen port (one collector runs several processes on one port with --workers N)"
    ], run.stderr
    assert "listening" not in run.stderr


def test_a_second_collector_on_a_busy_port_exits_with_one_line(tmp_path: Path, collector_process) -> None:
    first_db, second_db = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'second.db'}"
    first = collector_process(first_db, extra_args=("--metrics-listen", "off")).start()
    _refused(_second_collector(first.port, second_db), first.port)
    assert not (tmp_path / "second.db").exists() or not gpu_sequence_numbers(second_db, "after")
    # The first keeps serving: an agent that starts now stores into the first database.
    sampler = CountingSampler(total=200, per_tick=20)
    agent = make_agent(tmp_path, [first.address], sampler, name="after")
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(first_db, "after")) >= 200, timeout_s=60, message="stored by the first")
    finally:
        agent.stop()
    assert first.proc is not None and first.proc.poll() is None


def test_workers_share_their_own_port_and_no_one_else_joins(tmp_path: Path, db_url: str) -> None:
    port = free_port()
    workers = subprocess.Popen([*CLI, "collector", "--listen", f"127.0.0.1:{port}", "--db", db_url, "--token", "test-token",
                                "--workers", "2", "--metrics-listen", "off"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = ""
    try:
        lines: list[str] = []

        def both_listening() -> bool:
            assert workers.poll() is None, "".join(lines)
            assert workers.stdout is not None
            lines.append(workers.stdout.readline())
            return sum("collector listening" in ln for ln in lines) == 2

        wait_until(both_listening, timeout_s=60, message="two workers listening on one port")
        # A lone collector and another --workers group are refused, each with one line.
        _refused(_second_collector(port, f"sqlite:///{tmp_path / 'other.db'}"), port)
        group = subprocess.run([*CLI, "collector", "--listen", f"127.0.0.1:{port}", "--db", f"sqlite:///{tmp_path / 'g.db'}",
                                "--token", "test-token", "--workers", "2", "--metrics-listen", "off"],
                               capture_output=True, text=True, timeout=60)
        _refused(group, port)
        assert workers.poll() is None, "the workers keep serving"
    finally:
        workers.terminate()
        out = workers.communicate(timeout=60)[0]
    assert workers.returncode == 0, out


def test_a_listen_address_without_a_port_number_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run([*CLI, "collector", "--listen", "127.0.0.1:notaport", "--db", f"sqlite:///{tmp_path / 'x.db'}"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1] == ("fleetscope collector: error: argument --listen: not an address: "
                                          "'127.0.0.1:notaport' (examples: 127.0.0.1:4317, 0.0.0.0:4317, [::1]:4317)")


def test_workers_say_a_rules_reload_error_and_their_warnings_once(tmp_path: Path) -> None:
    # Before: each worker of --workers N logged the reload error (and the start's warnings) itself.
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "hot"\nmetric = "gpu.temp_c"\nabove = 80\n')
    log_path = tmp_path / "workers.log"
    port = free_port()
    with open(log_path, "ab") as log:
        workers = subprocess.Popen([*CLI, "collector", "--listen", f"127.0.0.1:{port}", "--db", f"sqlite:///{tmp_path / 'w.db'}",
                                    "--workers", "2", "--metrics-listen", "off", "--alerts", str(rules)],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: log_path.read_text().count("collector listening") == 2, timeout_s=60, message="two workers")
        rules.write_text('[[rule]]\nname = "hot"\nmetric = "gpu.temp_cc"\nabove = 80\n')
        wait_until(lambda: "alert rules not reloaded" in log_path.read_text(), timeout_s=30, message="the reload error")
        import time

        time.sleep(3)  # both workers look at the file every second (alerts_interval_s)
    finally:
        workers.terminate()
        workers.wait(60)
    text = log_path.read_text()
    assert text.count("alert rules not reloaded") == 1, text
    assert text.count("no --token: agents enrol with an enrolment token") == 1, text
