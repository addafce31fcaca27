"""Whether a device could have a source, asked before its sampler's module is imported.

The NVML sampler (``nvml.py`` with ``_nvml.py``) and the Jetson one (``jetson.py`` with the sysfs
parser) are a few hundred KiB of resident memory each: a Jetson drone should not carry the NVML
code, a GPU server not the Jetson parser, and a machine with neither none of it. These checks read
only the files the samplers' own checks read, so a "no" here is the samplers' "no".
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["maybe_jetson", "nvml_present"]


def nvml_present(proc_root: Path | str = "/proc", dev_root: Path | str = "/dev") -> bool:
    """Cheap and side-effect free: ``pynvml`` is installed (located, not imported) and a
    discrete-GPU driver is present (its /proc entry, its control node, or WSL's GPU node).
    Jetsons have neither and use the tegrastats source instead (``NvmlSampler.available``)."""
    try:
        if importlib.util.find_spec("pynvml") is None:
            return False
    except (ImportError, ValueError, AttributeError):
        return False
    return any(
        os.path.exists(p)
        for p in (f"{proc_root}/driver/nvidia/version", f"{dev_root}/nvidiactl", f"{dev_root}/dxg")
    )


# What ``parsers.jetson_sysfs.detect_jetson`` reads to say a board is a Jetson: the L4T release
# file, and the device tree's model and compatible strings (procfs or sysfs).
_JETSON_MARKS = (
    "etc/nv_tegra_release",
    "proc/device-tree/model",
    "proc/device-tree/compatible",
    "sys/firmware/devicetree/base/model",
    "sys/firmware/devicetree/base/compatible",
)


def maybe_jetson(root: Path | str = Path("/")) -> bool:
    """False when none of the files that could say Jetson exists under ``root`` (an x86 server, a
    VM, a container): then ``detect_jetson`` is None and the Jetson sampler need not be imported.
    True means "look closer" (``JetsonSampler.available``)."""
    return any(os.path.exists(os.path.join(root, mark)) for mark in _JETSON_MARKS)
