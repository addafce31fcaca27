"""`fleetscope agent bundle`: a wheelhouse that installs with no index (pip download needs the index once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fleetscope.agent.tools.bundle import pip_platforms

FLEETSCOPE = str(Path(sys.executable).with_name("fleetscope"))


def bundle(out: Path, *argv: str) -> dict[str, object]:
    done = subprocess.run([FLEETSCOPE, "agent", "bundle", "--out", str(out), *argv], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0 and "pip download failed" in done.stderr:
        pytest.skip(f"the package index is not reachable: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        top = tar.getnames()[0].split("/")[0]
        return json.load(tar.extractfile(f"{top}/MANIFEST.json"))  # type: ignore[arg-type]


def test_platform_tags_cover_jetpack_6() -> None:
    tags = pip_platforms("linux_aarch64")
    assert "manylinux_2_35_aarch64" in tags and "manylinux2014_aarch64" in tags and "manylinux_2_36_aarch64" not in tags


def test_local_bundle_installs_offline_into_a_fresh_venv(tmp_path: Path) -> None:
    archive = tmp_path / "agent.tar.gz"
    manifest = bundle(archive)
    wheels = manifest["wheels"]
    assert isinstance(wheels, dict) and any(w.startswith("fleetscope-") for w in wheels) and any(w.startswith("pip-") for w in wheels)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (script,) = (tmp_path / "x").glob("*/install.sh")
    # No index, no pip configuration, no network: only what the bundle holds.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PYTHON=sys.executable)
    done = subprocess.run(["sh", str(script), str(tmp_path / "prefix")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    venv = tmp_path / "prefix/venv/bin"
    check = "import fleetscope.agent.daemon.runner, psutil, grpc, pynvml, sys; assert 'sqlalchemy' not in sys.modules"
    subprocess.run([str(venv / "python"), "-c", check], check=True, timeout=60)
    out = subprocess.run([str(venv / "fleetscope"), "agent", "install", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--token-file" in out.stdout


def test_install_script_refuses_another_python(tmp_path: Path) -> None:
    archive = tmp_path / "agent.tar.gz"
    bundle(archive, "--python", "3.10", "--platform", "linux_aarch64")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (script,) = (tmp_path / "x").glob("*/install.sh")
    done = subprocess.run(["sh", str(script), str(tmp_path / "p")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable})
    if sys.version_info[:2] != (3, 10):
        assert done.returncode == 1 and "this bundle is for Python 3.10" in done.stderr


def test_jetson_bundle_holds_only_aarch64_cp310_wheels(tmp_path: Path) -> None:
    manifest = bundle(tmp_path / "jetson.tar.gz", "--platform", "linux_aarch64", "--python", "3.10")
    assert manifest["platform"] == "linux_aarch64" and manifest["python"] == "3.10"
    names = list(manifest["wheels"])  # type: ignore[call-overload]
    assert any(n.startswith("grpcio-") for n in names) and any(n.startswith("psutil-") for n in names)
    for name in names:
        tags = name[:-4].split("-")[-3:]
        assert tags[2] == "any" or "aarch64" in tags[2], name
        assert tags[0].startswith(("py3", "cp310", "cp36", "cp37", "cp38", "cp39")) or tags[1] == "abi3", name


def test_bad_python_version_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([FLEETSCOPE, "agent", "bundle", "--out", str(tmp_path / "b.tgz"), "--python", "three"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--python 'three'" in done.stderr
