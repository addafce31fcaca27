"""What an event shows of the device it came from, for the classifiers that need to know.

Jetson-specific kinds need Jetson context: the Tegra SoC, its memory manager and GPU driver (NvMap,
nvgpu), an L4T or JetPack marker, a board name. A CUDA OOM whose surroundings show a Jetson says so
in its facts (``jetson``, ``jetson_evidence``, ``board``).
"""

from __future__ import annotations

import re

from fleetscope.agent.records import FactValue

__all__ = ["JETSON_MARKER", "jetson_context"]

# What shows the event happened on a Jetson: the Tegra SoC, its memory manager and GPU driver,
# the board names, the L4T / JetPack releases.
JETSON_MARKER = re.compile(
    r"\b(?:tegra|Tegra|TEGRA)|NvMap|nvmap|nvgpu|\bL4T\b|JetPack|\bJetson\b|\bjetson\b"
    r"|\b(?:AGX )?(?:Orin|Xavier)\b"
)
# "name: NVIDIA Tegra X1 major: 5 minor: 3" (TensorFlow's device line), "Hardware name: NVIDIA Jetson TX1 ...".
_BOARD = re.compile(
    r"(?:name|Hardware name|Model|Device):\s*(?P<b>(?:NVIDIA )?(?:Jetson|Tegra|Orin|Xavier)[\w -]*?)"
    r"(?=\s+major:|\s*\(|\s*,|\s*$)",
    re.MULTILINE,
)

def jetson_context(text: str) -> dict[str, FactValue]:
    """Facts saying the text shows a Jetson (empty when it does not)."""
    m = JETSON_MARKER.search(text)
    if m is None:
        return {}
    facts: dict[str, FactValue] = {"jetson": True, "jetson_evidence": m.group(0)}
    b = _BOARD.search(text)
    if b:
        facts["board"] = b["b"].strip()
    return facts
