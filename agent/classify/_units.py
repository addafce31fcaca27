"""Size strings as printed by frameworks and drivers, turned into integer bytes."""

from __future__ import annotations

import re

_UNITS = {
    "b": 1,
    "bytes": 1,
    "byte": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    # Frameworks print "K"/"M"/"G" and mean powers of two (TensorFlow's BFC allocator, PyTorch).
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, *, decimal_kb_mb: bool = False) -> int:
    """``"12.50 MiB"`` -> 13107200. ``decimal_kb_mb`` reads KB/MB/GB as powers of 1000.

    PyTorch prints binary units with IEC names; TensorFlow prints "MiB"/"GiB" too; the kernel
    prints "kB" meaning KiB. Callers pass what their source means; the default treats KB/MB/GB
    as binary because that is what GPU tools almost always mean.
    """
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit in ("kb", "mb", "gb", "tb") and not decimal_kb_mb:
        unit = unit[0] + "ib"
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit {m.group(2)!r} in {text!r}")
    return int(round(number * _UNITS[unit]))
