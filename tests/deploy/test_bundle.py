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

pytestmark = pytest.mark.builds_project  # pip builds this source tree (setuptools writes build/ in it)

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


def _made_bundle(tmp_path: Path) -> Path:
    """A bundle's folder as `agent bundle` lays it out, with stand-in wheels (no index needed)."""
    from fleetscope.agent.tools.bundle import write_installer

    folder = tmp_path / "fleetscope-agent-0.0.0-linux_x86_64-py"
    (folder / "wheels").mkdir(parents=True)
    for name in ("fleetscope-0.0.0-py3-none-any.whl", "pip-24.0-py3-none-any.whl"):
        (folder / "wheels" / name).write_bytes(b"PK\x03\x04 stand-in for " + name.encode())
    write_installer(folder, version="0.0.0", platform="linux_x86_64", python="%d.%d" % sys.version_info[:2])
    return folder


def _install(folder: Path, prefix: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PYTHON=sys.executable)
    return subprocess.run(["sh", str(folder / "install.sh"), str(prefix)], capture_output=True, text=True, env=env, timeout=120)


def test_install_script_checks_each_wheel_against_the_manifest(tmp_path: Path) -> None:
    folder = _made_bundle(tmp_path)
    untouched = _install(folder, tmp_path / "p0")
    assert "verified 2 wheels against MANIFEST.json" in untouched.stdout  # (the stand-ins then fail in pip)
    wheel = folder / "wheels" / "pip-24.0-py3-none-any.whl"
    data = bytearray(wheel.read_bytes())
    data[5] ^= 0x01  # one bit of one byte
    wheel.write_bytes(bytes(data))
    tampered = _install(folder, tmp_path / "p1")
    assert tampered.returncode == 1 and "verified" not in tampered.stdout
    (line,) = tampered.stderr.strip().splitlines()
    assert line.startswith("install.sh: wheels/pip-24.0-py3-none-any.whl does not match MANIFEST.json (sha256 ")
    assert line.endswith("the bundle was changed or damaged; nothing installed")
    assert not (tmp_path / "p1").exists(), "refused before the venv was made"


def test_install_script_refuses_a_wheel_the_manifest_does_not_list_or_lacks(tmp_path: Path) -> None:
    folder = _made_bundle(tmp_path)
    (folder / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"PK")
    run = _install(folder, tmp_path / "p")
    assert run.returncode == 1 and run.stderr.strip() == (
        "install.sh: wheels/evil-1.0-py3-none-any.whl is not in MANIFEST.json: the bundle was changed; nothing installed")
    (folder / "wheels" / "evil-1.0-py3-none-any.whl").unlink()
    (folder / "wheels" / "fleetscope-0.0.0-py3-none-any.whl").unlink()
    run = _install(folder, tmp_path / "p")
    assert run.returncode == 1 and "fleetscope-0.0.0-py3-none-any.whl is missing" in run.stderr
    assert not (tmp_path / "p").exists()
