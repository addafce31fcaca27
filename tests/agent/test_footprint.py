"""The agent's allocator settings (agent/daemon/footprint.py) on this machine's C library."""

from __future__ import annotations

import platform

import pytest

from fleetscope.agent.daemon.footprint import limit_malloc_arenas, release_free_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt/malloc_trim are glibc's")


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@glibc
def test_arena_cap_is_accepted() -> None:
    assert limit_malloc_arenas(2) is True


@glibc
def test_freed_memory_in_the_middle_of_the_heap_goes_back_to_the_kernel() -> None:
    blocks = [bytearray(4000) for _ in range(50_000)]  # ~200 MB in malloc'd chunks
    pinned = blocks[::500]  # survivors scattered through the heap: its top cannot just shrink
    del blocks
    before = _rss_bytes()
    release_free_memory()
    after = _rss_bytes()
    assert len(pinned) == 100
    assert before - after > 100 << 20, f"RSS {before >> 20} MiB -> {after >> 20} MiB"


# ------------------------------------------------------------------------------ what the agent imports

_AGENT_THEN_MODULES = """
import sys
from fleetscope.cli import main
rc = main(sys.argv[1:])
print("--- modules ---")
print("\\n".join(sorted(sys.modules)))
sys.exit(rc)
"""


@pytest.mark.processes
def test_a_plain_agent_loads_none_of_the_modules_it_does_not_need(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real agent (host sampling, a followed log, a real collector over loopback) runs for a few
    seconds; then every module in NOT_LOADED_BY_PLAIN_AGENT, and every module under one, must still
    be absent. An import added at the top of a module the agent loads fails here."""
    import subprocess
    import sys

    from fleetscope.agent.daemon.footprint import NOT_LOADED_BY_PLAIN_AGENT
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                            tokens=frozenset(["test-token"]), grace_s=2.0))
    collector.start()
    logfile = tmp_path / "app.log"
    logfile.write_text("2026-12-03 10:00:00 INFO step 1 loss 0.5\n")
    try:
        run = subprocess.run(
            [sys.executable, "-c", _AGENT_THEN_MODULES, "agent", "--collector", f"127.0.0.1:{collector.port}",
             "--token-file", str(_token_file(tmp_path)), "--spool", str(tmp_path / "spool"), "--interval", "0.5s",
             "--log-file", str(logfile), "--no-kernel-log", "--duration", "3s"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        collector.stop()
    assert run.returncode == 0, run.stderr[-2000:]
    assert "0 batches left in the spool" in run.stderr, run.stderr[-2000:]  # it did deliver: a real run
    loaded = set(run.stdout.split("--- modules ---", 1)[1].split())
    assert "grpc" in loaded and "fleetscope.agent.daemon.runner" in loaded  # the list is the agent's
    unwanted = sorted(m for m in loaded for cut in NOT_LOADED_BY_PLAIN_AGENT if m == cut or m.startswith(cut + "."))
    assert not unwanted, f"a plain agent imported {unwanted}: defer them (agent/daemon/footprint.py)"


def _token_file(tmp_path):  # type: ignore[no-untyped-def]
    path = tmp_path / "token"
    path.write_text("test-token\n")
    path.chmod(0o600)
    return path


def test_the_agent_commands_are_exactly_what_the_agent_registers() -> None:
    """cli/__init__.py builds only the agent's parsers for AGENT_COMMANDS: a command the agent's
    registrar adds but the list lacks would lose its parser's options; one the list has but the
    registrar lacks would be an unknown command."""
    import argparse

    from fleetscope.agent import cli as agent_cli
    from fleetscope.cli import AGENT_COMMANDS

    sub = argparse.ArgumentParser().add_subparsers()
    agent_cli.register(sub)
    assert tuple(sub.choices) == AGENT_COMMANDS


@pytest.mark.processes
def test_fleetscope_help_still_lists_every_command_and_version_still_answers() -> None:
    import subprocess
    import sys

    from fleetscope.cli import build_parser

    everything = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"][0].choices
    assert {"agent", "collector", "scan", "dashboard", "db", "demo", "config"} <= set(everything)
    shown = subprocess.run([sys.executable, "-m", "fleetscope.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    assert all(f"    {name}" in shown.stdout for name in everything), shown.stdout
    version = subprocess.run([sys.executable, "-m", "fleetscope.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("fleetscope ") and "Python" in version.stdout
    agent_version = subprocess.run([sys.executable, "-m", "fleetscope.cli", "-v", "agent", "--help"], capture_output=True,
                                   text=True, timeout=60)
    assert agent_version.returncode == 0 and "--metrics-listen" in agent_version.stdout and "--config" in agent_version.stdout


def test_an_agent_with_a_shared_config_file_still_accepts_the_other_commands_tables(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Only the agent's parsers are built for `fleetscope agent`, except with --config: one file
    holds [agent] and [collector], and its [collector] table must still be checked, not refused."""
    from fleetscope.cli import main

    cfg = tmp_path / "fleetscope.toml"
    cfg.write_text('[agent]\ninterval = "2s"\n[collector]\nlisten = "127.0.0.1:4317"\n')
    assert main(["config", "show", "--config", str(cfg), "agent"]) == 0
    assert "2" in capsys.readouterr().out
    cfg.write_text('[agent]\n[collector]\nlissen = "x"\n')
    with pytest.raises(SystemExit):
        main(["agent", "--config", str(cfg), "--collector", "127.0.0.1:1"])
    assert "'lissen'" in capsys.readouterr().err  # the collector's table was read with the collector's parser
