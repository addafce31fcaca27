"""Who this agent is: a stable id kept on disk, the kernel boot id, and the device inventory.

Everything here reads the machine once at start-up; nothing runs at import time. Paths are
parameters (``root``) so tests can point them at a recorded tree.
"""

from __future__ import annotations

import os
import platform
import secrets
import socket
import uuid
from pathlib import Path

from fleetscope.proto.v1 import telemetry_pb2 as pb

AGENT_ID_FILE = "agent_id"


def load_or_create_agent_id(state_dir: Path) -> str:
    """The agent id in ``state_dir``, made on first start.

    It lives beside the spool, but uniqueness on the wire does not depend on the two staying
    together: see ``new_stream_id``.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / AGENT_ID_FILE
    try:
        existing = path.read_text().strip()
        if existing:
            return existing
    except FileNotFoundError:
        pass
    new_id = str(uuid.uuid4())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new_id + "\n")
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written id
    return new_id


def new_stream_id(boot_id: str) -> str:
    """The id of this agent run's stream of batches, sent in the wire's ``boot_id`` field.

    The collector stores a batch once per (agent id, boot id, seq). Sequence numbers come from
    the spool, so anything that resets or rewinds the spool while the agent id stays (a user
    deleting the spool to free a full disk, a spool restored from a backup, one that could not
    be opened and was replaced by memory, a counter whose last write was lost) would repeat
    sequence numbers; under the kernel boot id alone the collector would answer DUPLICATE for
    new data and the agent would delete it. A stream id minted at every start makes that
    impossible without trusting any file to survive intact: batches already spooled keep the
    stream id they were encoded with, so resends still deduplicate, and new batches can only
    collide with batches of this very process, whose counter lives in memory. The kernel boot
    id stays the prefix, so a reboot is still visible; 48 random bits make a repeat between two
    starts of one agent negligible, and the whole id (at most 50 characters) fits the
    collector's 64.

    Chosen over keeping the counter beside the agent id: that file would need a write (and an
    fsync) per batch or per block of numbers, and would still repeat numbers when it and the
    spool are restored or copied out of step.
    """
    return f"{boot_id}/{secrets.token_hex(6)}"


def read_boot_id(root: Path = Path("/")) -> str:
    try:
        return (root / "proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        # No boot id on this OS: a per-process one keeps (agent, boot, seq) unique all the same.
        return "proc-" + uuid.uuid4().hex


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def read_os_release(root: Path = Path("/")) -> str:
    text = _read(root / "etc/os-release") or ""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.platform()


def read_cpu_model(root: Path = Path("/")) -> str:
    text = _read(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Hardware", "Model"):
            return value.strip()
    return platform.processor() or platform.machine()


def read_jetson_model(root: Path = Path("/")) -> str | None:
    """The device-tree model when it names a Jetson/Tegra board, else None."""
    text = _read(root / "proc/device-tree/model")
    if text is None:
        return None
    model = text.rstrip("\x00").strip()
    if "jetson" in model.lower() or "tegra" in model.lower() or (root / "etc/nv_tegra_release").exists():
        return model
    return None


def detect_kind(root: Path = Path("/"), *, has_nvidia_gpu: bool = False) -> int:
    if read_jetson_model(root) is not None or (root / "etc/nv_tegra_release").exists():
        return pb.DEVICE_KIND_JETSON
    if has_nvidia_gpu:
        return pb.DEVICE_KIND_SERVER
    return pb.DEVICE_KIND_OTHER


def host_inventory(root: Path = Path("/")) -> pb.Inventory:
    import psutil

    inv = pb.Inventory(
        cpu_model=read_cpu_model(root),
        cpu_cores=psutil.cpu_count(logical=True) or 0,
        memory_total_bytes=psutil.virtual_memory().total,
        swap_total_bytes=psutil.swap_memory().total,
        os=read_os_release(root),
        kernel=platform.release(),
        python=platform.python_version(),
        arch=platform.machine(),
    )
    board = read_jetson_model(root)
    if board:
        inv.board_model = board
    return inv


def hostname() -> str:
    return socket.gethostname()
