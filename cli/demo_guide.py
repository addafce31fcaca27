"""What ``fleetscope demo`` tells its user, and the dashboard it starts: commands that run as printed.

* ``fleetscope_command()`` is how *this* installation is invoked from the user's shell:
  ``fleetscope`` when that name on PATH is this installation, else the venv's script
  (``.venv/bin/fleetscope`` after ``make demo``), else ``python -m fleetscope.cli``.
* ``start_dashboard`` serves the demo's database on the wanted port, or on a free one when that
  is taken, and waits until it answers; it returns the URL that really serves it or raises
  ``DashboardFailed`` with the dashboard's own last lines.
* ``join_text`` and ``hints_text`` are the printed instructions: the collector's address, the
  token file, and the exact ``agent`` and query commands.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["DashboardFailed", "fleetscope_command", "free_port", "hints_text", "join_text", "start_dashboard",
           "write_token_file"]


class DashboardFailed(RuntimeError):
    """The demo's dashboard did not come up; the message says why."""


def _shown(path: Path, cwd: Path) -> str:
    """A path as short as it can be while still working from ``cwd``."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def fleetscope_command(*, cwd: Path | None = None, executable: str | None = None) -> str:
    """The command line prefix that runs this installation's ``fleetscope`` from ``cwd``."""
    cwd = (cwd or Path.cwd()).resolve()
    python = Path(executable or sys.executable)
    bindir = python.parent  # not resolved: a venv's python is a link to the system's
    script = bindir / "fleetscope"
    on_path = shutil.which("fleetscope")
    if on_path and script.exists() and Path(on_path).resolve() == script.resolve():
        return "fleetscope"
    if script.exists():
        shown = _shown(script.absolute(), cwd)
        return shlex.quote(shown if "/" in shown else f"./{shown}")
    return f"{shlex.quote(_shown(python.absolute(), cwd))} -m fleetscope.cli"


def write_token_file(root: Path, token: str) -> Path:
    """The demo collector's token in ``root/agent-token`` (mode 0600), for ``--token-file``."""
    path = root / "agent-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def free_port(wanted: int, host: str = "127.0.0.1") -> int:
    """``wanted`` when nothing listens there, else a free port the system picks."""
    for port in (wanted, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise DashboardFailed(f"no free port on {host}")


def start_dashboard(db_url: str, wanted_port: int, log_path: Path, *, timeout_s: float = 60.0
                    ) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start the dashboard on ``db_url``; (process, URL, note). The note says when the port moved."""
    port = free_port(wanted_port)
    note = "" if port == wanted_port else f"port {wanted_port} is taken: the dashboard uses {port}"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.dashboard", "--db", db_url, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise DashboardFailed(f"the dashboard exited with status {proc.returncode}: {' | '.join(tail) or 'no output'}"
                                  f" (log: {log_path})")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url, note
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.terminate()
            raise DashboardFailed(f"the dashboard did not answer on {url} within {timeout_s:.0f} s (log: {log_path})")
        time.sleep(0.25)


def join_text(*, exe: str, address: str, token_file: Path, root: Path, tls_ca: Path | None, cwd: Path | None = None) -> str:
    """How to attach an agent of one's own to the demo's collector."""
    cwd = (cwd or Path.cwd()).resolve()
    parts = [exe, "agent", "--collector", address, "--token-file", shlex.quote(_shown(token_file, cwd))]
    if tls_ca is not None:
        parts += ["--tls-ca", shlex.quote(_shown(tls_ca, cwd))]
    parts += ["--name", "my-device", "--spool", shlex.quote(_shown(root / "my-device", cwd)), "--no-kernel-log"]
    tls = f", TLS (CA {_shown(tls_ca, cwd)})" if tls_ca is not None else ""
    return (f"Join it with an agent of your own (collector {address}{tls}, token in {_shown(token_file, cwd)}):\n"
            f"  {' '.join(parts)}")


def hints_text(*, exe: str, db_url: str, device: str, demo_log: Path, latency_device: str | None = None,
               cwd: Path | None = None) -> str:
    """The query commands to try, each runnable as printed."""
    cwd = (cwd or Path.cwd()).resolve()
    db = shlex.quote(db_url)
    oom = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)"
    lines = [
        f"  {exe} devices --db {db}",
        f"  {exe} metrics --db {db} --device {shlex.quote(device)} --since 5m",
        f"  {exe} incidents --db {db}",
    ]
    if latency_device:
        lines.append(f"  {exe} latency --db {db} --device {shlex.quote(latency_device)} --since 5m")
    lines.append(f"  echo {shlex.quote(oom)} >> {shlex.quote(_shown(demo_log, cwd))}")
    return "\n".join(lines)
