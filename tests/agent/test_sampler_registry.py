"""Which samplers a device gets: the registry over recorded device trees (no GPU, a Jetson board,
an NVIDIA driver replayed by the fake NVML), the ``agent`` flags that feed it, and what it costs
to import."""

from __future__ import annotations

import argparse
import importlib.machinery
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.agent import cli as agent_cli
from fleetscope.agent.samplers import (
    Sampler,
    SamplerRegistry,
    SamplerSettings,
    SourceUnavailable,
    default_samplers,
)
from fleetscope.agent.testing.fake_nvml import FakeNvml, example_recording, replicate
from tests.agent.test_jetson_sysfs import ORIN_NANO, ORIN_NANO_LINKS, build_tree


@pytest.fixture
def server(tmp_path: Path) -> dict[str, Path]:
    """Roots of a machine with no NVIDIA driver and no Jetson board."""
    roots = {"proc_root": tmp_path / "proc", "dev_root": tmp_path / "dev", "sysfs_root": tmp_path / "sys"}
    for root in roots.values():
        root.mkdir()
    return roots


@pytest.fixture
def nvidia_driver(server: dict[str, Path], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The machine gets a driver: its /proc entry, and pynvml replaced by the fake (the real one
    is what NvmlSampler imports when it is not handed a module)."""
    (server["proc_root"] / "driver" / "nvidia").mkdir(parents=True)
    (server["proc_root"] / "driver" / "nvidia" / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07\n")

    def install(fake: FakeNvml) -> FakeNvml:
        fake.__spec__ = importlib.machinery.ModuleSpec("pynvml", None)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


def _build(**settings: object) -> list[Sampler]:
    return default_samplers().build(SamplerSettings(**settings))  # type: ignore[arg-type]


def _names(samplers: list[Sampler]) -> list[str]:
    names = [s.name for s in samplers]
    for s in samplers:
        s.close()
    return names


@pytest.fixture
def tegrastats_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "tegrastats"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


# ------------------------------------------------------------------------------ the registry


def test_the_agents_samplers_are_registered_by_name_in_order() -> None:
    assert default_samplers().names() == ["host", "nvml", "tegrastats", "jetson-sysfs"]


def test_a_second_sampler_with_a_taken_name_is_refused() -> None:
    registry = SamplerRegistry()
    registry.register("host", lambda settings: None)
    with pytest.raises(ValueError, match="'host' is already registered"):
        registry.register("host", lambda settings: None)
    assert registry.names() == ["host"]


def test_a_source_that_cannot_work_is_said_once_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    def broken(settings: SamplerSettings) -> Sampler | None:
        raise SourceUnavailable("driver/library version mismatch")

    registry = SamplerRegistry()
    registry.register("broken", broken)
    registry.register("none-here", lambda settings: None)
    with caplog.at_level(logging.INFO, logger="fleetscope.agent.samplers.registry"):
        assert registry.build(SamplerSettings()) == []
    assert [r.getMessage() for r in caplog.records] == ["sampler broken is off: driver/library version mismatch"]


def test_an_unknown_jetson_source_names_the_setting() -> None:
    with pytest.raises(ValueError, match="jetson_source"):
        SamplerSettings(jetson_source="jtop")


# ------------------------------------------------------------------------------ per device


def test_a_server_without_a_driver_gets_the_host_only(server: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fleetscope.agent.samplers.registry"):
        assert _names(_build(**server)) == ["host"]
    assert [r.getMessage() for r in caplog.records] == ["no NVIDIA driver here: GPU sampling through NVML is off"]


def test_flags_turn_the_host_and_the_gpus_off(server: dict[str, Path], nvidia_driver) -> None:  # type: ignore[no-untyped-def]
    fake = nvidia_driver(FakeNvml([example_recording()]))
    assert _build(host=False, nvml=False, **server) == []
    assert fake.calls["nvmlInit"] == 0, "a source turned off is not even started"


def test_a_server_with_a_driver_gets_nvml(server: dict[str, Path], nvidia_driver, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    nvidia_driver(FakeNvml(replicate(example_recording(), 4)))
    with caplog.at_level(logging.INFO, logger="fleetscope.agent.samplers.registry"):
        samplers = _build(**server)
    try:
        assert [s.name for s in samplers] == ["host", "nvml"]
        assert len(samplers[1].inventory()) == 4
    finally:
        _names(samplers)
    assert any(r.getMessage().startswith("NVML: 4 GPU(s), driver ") for r in caplog.records)


def test_a_driver_nvml_cannot_use_is_said_once_and_skipped(server: dict[str, Path], nvidia_driver, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    fake = nvidia_driver(FakeNvml([example_recording()], library_missing=True))
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.samplers.registry"):
        assert _names(_build(**server)) == ["host"]
    (said,) = caplog.records
    assert said.getMessage().startswith("sampler nvml is off: ")
    assert fake.calls["nvmlInit"] >= 1


def test_a_jetson_gets_sysfs(server: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    server["sysfs_root"] = build_tree(server["sysfs_root"], ORIN_NANO, ORIN_NANO_LINKS)
    with caplog.at_level(logging.INFO, logger="fleetscope.agent.samplers.registry"):
        assert _names(_build(host=False, **server)) == ["jetson-sysfs"]
    assert any("NVIDIA Jetson Orin Nano Developer Kit (L4T 36.4.3, JetPack 6.2): reading sysfs" in r.getMessage()
               for r in caplog.records)


@pytest.mark.processes
def test_a_jetson_asked_for_tegrastats_runs_it_where_installed(server: dict[str, Path], tegrastats_installed: None) -> None:
    server["sysfs_root"] = build_tree(server["sysfs_root"], ORIN_NANO, ORIN_NANO_LINKS)
    assert _names(_build(host=False, jetson_source="tegrastats", **server)) == ["tegrastats"]


def test_a_jetson_asked_for_tegrastats_reads_sysfs_where_it_is_missing(server: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    server["sysfs_root"] = build_tree(server["sysfs_root"], ORIN_NANO, ORIN_NANO_LINKS)
    monkeypatch.setenv("PATH", str(server["dev_root"]))  # no tegrastats on it
    assert _names(_build(host=False, jetson_source="tegrastats", **server)) == ["jetson-sysfs"]


def test_a_server_asked_for_tegrastats_gets_none(server: dict[str, Path], tegrastats_installed: None) -> None:
    assert _build(host=False, jetson_source="tegrastats", **server) == []


@pytest.mark.processes
def test_a_tegrastats_command_is_read_on_any_device(server: dict[str, Path], tmp_path: Path) -> None:
    recording = tmp_path / "flight.log"
    recording.write_text("")
    assert _names(_build(host=False, tegrastats_cmd=f"cat {recording}", **server)) == ["tegrastats"]


@pytest.mark.processes
def test_a_tegrastats_command_that_cannot_run_leaves_the_board_unread(server: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    # As before the registry: the command was asked for, so sysfs does not stand in for it.
    server["sysfs_root"] = build_tree(server["sysfs_root"], ORIN_NANO, ORIN_NANO_LINKS)
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.samplers.registry"):
        assert _build(host=False, tegrastats_cmd="/nonexistent/tegrastats", **server) == []
    (said,) = caplog.records
    assert said.getMessage().startswith("sampler tegrastats is off: cannot run '/nonexistent/tegrastats'")


# ------------------------------------------------------------------------------ the command line


def _agent_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    agent_cli.register(sub)
    return parser.parse_args(["agent", *argv])


def test_the_agent_flags_become_sampler_settings() -> None:
    assert agent_cli.sampler_settings(_agent_args()) == SamplerSettings()
    args = _agent_args("--no-host", "--no-gpu", "--jetson-source", "tegrastats", "--tegrastats-cmd", "cat x", "--interval", "2s")
    assert agent_cli.sampler_settings(args) == SamplerSettings(
        host=False, nvml=False, jetson_source="tegrastats", tegrastats_cmd="cat x", interval_s=2.0
    )


@pytest.mark.processes
def test_importing_the_registry_probes_and_loads_nothing() -> None:
    code = (
        "import sys\n"
        "from fleetscope.agent.samplers import default_samplers\n"
        "default_samplers()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pynvml', 'psutil')"
        " or m.startswith(('fleetscope.agent.samplers.nvml', 'fleetscope.agent.samplers.host',"
        " 'fleetscope.agent.samplers.jetson', 'fleetscope.agent.samplers.tegrastats')))\n"
        "assert not loaded, loaded\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
