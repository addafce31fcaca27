"""A drone gets the agent and nothing heavy: install ``fleetscope[agent]`` into a fresh virtualenv
from a built wheel, check what pip installed, and run the agent's commands there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.builds_project  # pip builds this source tree (setuptools writes build/ in it)

REPO = Path(__file__).resolve().parents[2]
HEAVY = {"sqlalchemy", "streamlit", "pandas", "torch", "numpy", "psycopg", "tensorrt", "pyarrow"}


@pytest.fixture(scope="module")
def agent_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("FLEETSCOPE_SKIP_INSTALL_TEST"):
        pytest.skip("FLEETSCOPE_SKIP_INSTALL_TEST is set")
    root = tmp_path_factory.mktemp("agent-venv")
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)], check=True)
    (wheel,) = wheels.glob("fleetscope-*.whl")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[agent]"], check=True)
    return py


@pytest.mark.processes
def test_agent_extra_installs_nothing_heavy(agent_env: Path) -> None:
    out = subprocess.run([str(agent_env), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    names = {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}
    assert {"fleetscope", "grpcio", "protobuf", "psutil", "nvidia-ml-py"} <= names
    assert not (names & HEAVY), f"heavy packages in an agent install: {names & HEAVY}"


@pytest.mark.processes
def test_agent_runs_from_the_wheel_without_collector_deps(agent_env: Path, tmp_path: Path) -> None:
    code = (
        "import sys, fleetscope.agent.daemon.runner, fleetscope.agent.samplers.host, fleetscope.agent.samplers.nvml, "
        "fleetscope.agent.classify, fleetscope.agent.sdk, fleetscope.cli\n"
        "fleetscope.agent.classify.classify_text('NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in %r)\n"
        "assert not bad, bad\n" % sorted(HEAVY | {"pynvml", "streamlit"})
    )
    subprocess.run([str(agent_env), "-c", code], check=True, cwd=tmp_path)
    bin_dir = agent_env.parent
    help_out = subprocess.run([str(bin_dir / "fleetscope"), "agent", "--help"], capture_output=True, text=True, check=True)
    assert "--collector" in help_out.stdout
    missing = subprocess.run([str(bin_dir / "fleetscope"), "devices"], capture_output=True, text=True)
    assert missing.returncode == 2 and "pip install 'fleetscope[collector]'" in missing.stderr


def test_wheel_holds_every_package() -> None:
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    mapping = {"cli": "fleetscope.cli", "proto": "fleetscope.proto", "agent": "fleetscope.agent", "collector": "fleetscope.collector",
               "dashboard": "fleetscope.dashboard"}
    found = set()
    for top, pkg in mapping.items():
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / top)
            found.add(".".join([pkg, *rel.parts]))
    assert found == listed, f"pyproject packages out of date: missing {found - listed}, extra {listed - found}"
