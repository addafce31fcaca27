"""``fleetscope agent bundle``: an offline installer for devices without internet (drones).

The archive (``.tar.gz``) holds one folder::

    fleetscope-agent-<version>-<platform>-py<X.Y>/
        wheels/        fleetscope's wheel (built from this source tree), fleetscope[agent]'s
                       dependencies for the platform and Python, and pip itself
        install.sh     checks each wheel against MANIFEST.json's sha256 (a changed, missing or
                       extra wheel: nothing is installed), then a venv at $PREFIX (default
                       /opt/fleetscope/venv) and pip install --no-index --find-links wheels 'fleetscope[agent]'
        MANIFEST.json  platform, Python, each wheel's sha256

``pip download`` needs the package index when the bundle is made; installing needs nothing but
the device's ``python3`` (the venv is made ``--without-pip`` and pip runs from its wheel, so
Ubuntu's missing ``python3-venv``/ensurepip does not matter). Runs on the build machine, never on
the drone's hot path: it calls pip in a subprocess.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform as _platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fleetscope.agent.tools.install_args import add_bundle_arguments  # its options, apart from this module

__all__ = ["BundleError", "add_bundle_arguments", "build_bundle", "pip_platforms", "run_bundle", "source_tree",
           "write_installer"]

# Jetson: JetPack 6 is Ubuntu 22.04 (glibc 2.35); servers are assumed to be at least as new as manylinux2014.
_MANYLINUX_MAX_MINOR = 35
_COMPONENT_FOLDERS = ("agent", "cli", "collector", "dashboard", "proto")

INSTALL_SH = """\
#!/bin/sh
# Install fleetscope's agent from this bundle, with no network: a venv, then pip from ./wheels.
#   sudo ./install.sh [PREFIX]          (default PREFIX: /opt/fleetscope)
# then: sudo PREFIX/venv/bin/fleetscope agent install --collector HOST:PORT --token-file FILE
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/opt/fleetscope}
python=${PYTHON:-python3}
want="@PYTHON@"
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
    echo "install.sh: $python not found: this bundle needs Python $want" >&2; exit 1; }
if [ "$have" != "$want" ]; then
    echo "install.sh: this bundle is for Python $want, $python is $have (set PYTHON=python$want)" >&2; exit 1
fi
# Every wheel as MANIFEST.json lists it (sha256), and no other, before anything is installed.
"$python" - "$here" <<'VERIFY' || exit 1
import hashlib, json, pathlib, sys
here = pathlib.Path(sys.argv[1])
try:
    listed = json.loads((here / "MANIFEST.json").read_text(encoding="utf-8"))["wheels"]
except (OSError, ValueError, KeyError) as exc:
    sys.exit(f"install.sh: cannot read MANIFEST.json ({exc}): nothing installed")
present = sorted(p.name for p in (here / "wheels").glob("*.whl"))
for name in sorted(set(present) - set(listed)):
    sys.exit(f"install.sh: wheels/{name} is not in MANIFEST.json: the bundle was changed; nothing installed")
for name, want in sorted(listed.items()):
    path = here / "wheels" / name
    if not path.is_file():
        sys.exit(f"install.sh: wheels/{name} is missing: the bundle is incomplete; nothing installed")
    have = hashlib.sha256(path.read_bytes()).hexdigest()
    if have != want:
        sys.exit(f"install.sh: wheels/{name} does not match MANIFEST.json (sha256 {have}, listed {want}): "
                 "the bundle was changed or damaged; nothing installed")
print(f"verified {len(listed)} wheels against MANIFEST.json")
VERIFY
"$python" -m venv --without-pip "$prefix/venv" || {
    echo "install.sh: '$python -m venv' failed: the venv module is missing (Debian/Ubuntu: python$want-venv)" >&2; exit 1; }
pip_wheel=$(ls "$here"/wheels/pip-*.whl | head -n 1)
"$prefix/venv/bin/python" "$pip_wheel/pip" install --isolated --quiet --no-index --find-links "$here/wheels" \\
    --disable-pip-version-check "fleetscope[agent]==@VERSION@" pip
"$prefix/venv/bin/fleetscope" --help >/dev/null
echo "installed fleetscope @VERSION@ in $prefix/venv"
echo "next: sudo $prefix/venv/bin/fleetscope agent install --collector HOST:PORT --token-file FILE"
"""


class BundleError(Exception):
    """Why a bundle could not be made, in one line."""


def pip_platforms(name: str) -> list[str]:
    """``linux_aarch64`` -> the platform tags pip should accept for it (manylinux up to glibc 2.35)."""
    m = re.fullmatch(r"(?:manylinux\w*?|linux)_(x86_64|aarch64)", name)
    if not m:
        return [name]
    arch = m.group(1)
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(_MANYLINUX_MAX_MINOR, 16, -1)]
    return tags + [f"manylinux2014_{arch}", f"linux_{arch}"]


def local_platform() -> str:
    return f"linux_{_platform.machine()}"


def source_tree(start: Path | None = None) -> Path:
    """The source tree fleetscope runs from (an editable install), found from this file upwards."""
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file() and 'name = "fleetscope"' in pyproject.read_text(encoding="utf-8"):
            return parent
    raise BundleError("fleetscope is not running from a source tree: pass --source DIR (a checkout of fleetscope)")


def _pip(*argv: str, quiet: bool = True) -> None:
    cmd = [sys.executable, "-m", "pip", *argv, "--disable-pip-version-check"]
    if quiet:
        cmd.append("--quiet")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [ln for ln in (result.stderr or result.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise BundleError(f"pip {argv[0]} failed: {lines[-1] if lines else 'exit ' + str(result.returncode)}")


def build_wheel(source: Path, dest: Path) -> Path:
    """fleetscope's wheel from a copy of the source tree (the tree itself gets no build/ or egg-info)."""
    with tempfile.TemporaryDirectory(prefix="fleetscope-src-") as tmp:
        copy = Path(tmp) / "src"
        copy.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (source / name).exists():
                shutil.copy2(source / name, copy / name)
        for folder in _COMPONENT_FOLDERS:
            shutil.copytree(source / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        _pip("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dest), str(copy))
    wheels = sorted(dest.glob("fleetscope-*.whl"))
    if not wheels:
        raise BundleError("building fleetscope's wheel produced no wheel")
    return wheels[-1]


def build_bundle(out: Path, *, platform: str | None, python: str | None, source: Path | None = None) -> dict[str, object]:
    """Make the archive at ``out``; returns its manifest."""
    py = python or "%d.%d" % sys.version_info[:2]
    if not re.fullmatch(r"3\.\d+", py):
        raise BundleError(f"--python {py!r}: expected a version such as 3.10")
    plat = platform or local_platform()
    src = source_tree(source / "pyproject.toml") if source else source_tree()
    with tempfile.TemporaryDirectory(prefix="fleetscope-bundle-") as tmp:
        wheel = build_wheel(src, Path(tmp) / "own")
        version = wheel.name.split("-")[1]
        top = f"fleetscope-agent-{version}-{plat}-py{py}"
        wheels = Path(tmp) / top / "wheels"
        wheels.mkdir(parents=True)
        shutil.copy2(wheel, wheels / wheel.name)
        target = ["--only-binary=:all:", "--python-version", py, "--implementation", "cp"]
        target += [f"--platform={tag}" for tag in pip_platforms(plat)]
        _pip("download", "--dest", str(wheels), *target, "--find-links", str(wheels), f"{wheel}[agent]", "pip")
        manifest = write_installer(wheels.parent, version=version, platform=plat, python=py)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        import tarfile  # here, not at the top: every agent process registers this command, few run it (1.4 MiB RSS)

        with tarfile.open(partial, "w:gz") as tar:
            tar.add(wheels.parent, arcname=top)
        os.replace(partial, out)
    return manifest


def write_installer(folder: Path, *, version: str, platform: str, python: str) -> dict[str, object]:
    """``install.sh`` and ``MANIFEST.json`` (each wheel under ``folder/wheels`` with its sha256) in
    ``folder``; returns the manifest."""
    wheels = folder / "wheels"
    script = INSTALL_SH.replace("@PYTHON@", python).replace("@VERSION@", version)
    (folder / "install.sh").write_text(script, encoding="utf-8")
    os.chmod(folder / "install.sh", 0o755)
    manifest: dict[str, object] = {
        "fleetscope": version,
        "platform": platform,
        "python": python,
        "wheels": {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in sorted(wheels.glob("*.whl"))},
    }
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def run_bundle(args: argparse.Namespace) -> int:
    try:
        manifest = build_bundle(args.out, platform=args.platform, python=args.python, source=args.source)
    except BundleError as exc:
        print(f"fleetscope agent bundle: {exc}", file=sys.stderr)
        return 2 if str(exc).startswith("--") else 1
    wheels = manifest["wheels"]
    assert isinstance(wheels, dict)
    print(f"wrote {args.out}: fleetscope {manifest['fleetscope']} for {manifest['platform']}, Python {manifest['python']}, "
          f"{len(wheels)} wheels")
    print(f"sha256 of the archive: {hashlib.sha256(args.out.read_bytes()).hexdigest()} (compare it on the device: "
          f"sha256sum {args.out.name}; install.sh checks each wheel against MANIFEST.json)")
    print(f"on the device: tar xzf {args.out.name} && sudo ./fleetscope-agent-*/install.sh")
    return 0
