"""The dashboard's pure parts: hints, units, the command line, resolution choice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleetscope.collector import query
from fleetscope.dashboard import fmt, hints
from fleetscope.dashboard.cli import build_command, is_loopback

GIB = 1024**3


def test_cuda_oom_hints_follow_the_facts() -> None:
    fragmented = hints.hints_for(
        "cuda_oom",
        {
            "requested_bytes": 2 * GIB,
            "free_bytes": GIB,
            "total_capacity_bytes": 80 * GIB,
            "reserved_unallocated_bytes": int(1.5 * GIB),
            "batch_size": 64,
        },
    )
    assert any("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in h for h in fragmented)
    assert any("it was 64" in h for h in fragmented)
    tight = hints.hints_for(
        "cuda_oom", {"requested_bytes": 2 * GIB, "reserved_unallocated_bytes": 20 * 1024**2}
    )
    assert not any("expandable_segments" in h for h in tight), "no fragmentation advice when little is cached"


def test_xid_and_other_hints() -> None:
    reset = hints.hints_for("gpu_xid", {"xid": 48, "meaning": "DBE", "needs_gpu_reset": True})
    assert any("nvidia-smi -r" in h for h in reset)
    reboot = hints.hints_for("gpu_xid", {"xid": 79, "needs_reboot": True, "needs_gpu_reset": False})
    assert any("reboot" in h for h in reboot) and not any("nvidia-smi -r" in h for h in reboot)
    assert any("num_workers" in h for h in hints.hints_for("host_oom", {}))
    assert hints.hints_for("something_new", {})[0].startswith("No specific advice")


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("requested_bytes", 2 * GIB, "2.00 GiB"),
        ("latency_p99_ms", 4.5, "4.50 ms"),
        ("temp_c", 83.4, "83 °C"),
        ("power_w", 250.0, "250 W"),
        ("needs_gpu_reset", True, "yes"),
        ("throughput_qps", 1250.5, "1,250 qps"),
    ],
)
def test_fact_units(key: str, value: object, shown: str) -> None:
    assert fmt.fact(key, value) == shown


def test_fact_labels_and_durations() -> None:
    assert fmt.fact_label("reserved_unallocated_bytes") == "Reserved unallocated"
    assert fmt.fact_label("gpu_compute_mean_ms") == "GPU compute mean"
    assert fmt.ago(0, 3 * 3600 * 10**9) == "3 h ago" and fmt.ago(0, 2 * 10**9) == "just now"
    assert fmt.used_of(61.2 * GIB, 80 * GIB) == "61.2 / 80.0 GiB" and fmt.used_of(None, 1) == fmt.MISSING


def test_resolution_follows_the_range() -> None:
    assert query.resolution_for(15 * 60 * 10**9) == 2
    assert query.resolution_for(3600 * 10**9) == 5
    assert query.resolution_for(24 * 3600 * 10**9) == 60
    assert query.resolution_for(7 * 86400 * 10**9) == 600
    assert query.resolution_for(30 * 86400 * 10**9) == 3600


def test_command_binds_localhost_and_passes_the_database() -> None:
    cmd = build_command(db="sqlite:///x.db", port=8600, address="127.0.0.1", password_env="PW")
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("dashboard/app.py")
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert flags["--server.address"] == "127.0.0.1" and flags["--server.port"] == "8600"
    assert flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"
    assert cmd[cmd.index("--") :] == ["--", "--db", "sqlite:///x.db", "--password-env", "PW"]
    assert (
        is_loopback("127.0.0.1")
        and is_loopback("::1")
        and is_loopback("localhost")
        and not is_loopback("0.0.0.0")
    )


@pytest.mark.processes
def test_cli_parses_without_importing_streamlit() -> None:
    code = (
        "import argparse, sys\n"
        "from fleetscope.dashboard import cli\n"
        "p = argparse.ArgumentParser(); sub = p.add_subparsers(dest='command')\n"
        "cli.register(sub)\n"
        "a = p.parse_args(['dashboard', '--db', 'sqlite:///d.db'])\n"
        "assert (a.port, a.address, a.password_env) == (8501, '127.0.0.1', None)\n"
        "assert 'streamlit' not in sys.modules and 'sqlalchemy' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.processes
def test_module_entry_point_refuses_an_unset_password_variable() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetscope.dashboard",
            "--db",
            "sqlite:///d.db",
            "--password-env",
            "FS_NOPE_X",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "FS_NOPE_X: that environment variable is empty or unset" in out.stderr


@pytest.mark.processes
def test_serve_last_after_takes_seconds_or_off_and_reaches_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad value is one clear line; a good one is in the environment the command hands
    Streamlit (it replaces itself with it), where the app reads it."""
    bad = subprocess.run([sys.executable, "-m", "fleetscope.cli", "dashboard", "--serve-last-after", "soon"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "'soon': a number of seconds, or 'off'" in bad.stderr
    assert "Traceback" not in bad.stderr
    import argparse

    from fleetscope.dashboard import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert p.parse_args(["--serve-last-after", "off"]).serve_last_after == float("inf")
    assert p.parse_args(["--serve-last-after", "2.5"]).serve_last_after == 2.5
    assert p.parse_args([]).serve_last_after is None
    with pytest.raises(SystemExit):
        p.parse_args(["--serve-last-after", "-1"])

    handed: dict[str, str] = {}

    def execv(path: str, argv: list[str]) -> None:
        handed.update(os.environ)
        raise SystemExit(0)

    monkeypatch.setattr(cli.os, "execv", execv)
    monkeypatch.delenv(cli.SERVE_LAST_ENV, raising=False)
    with pytest.raises(SystemExit):
        cli.run_dashboard(p.parse_args(["--db", "sqlite:///d.db", "--serve-last-after", "off"]))
    assert handed[cli.SERVE_LAST_ENV] == "inf"
    from fleetscope.dashboard import data

    assert data.serve_last_after_s() == float("inf")
