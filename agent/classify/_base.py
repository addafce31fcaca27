"""What every log classifier returns, and the one interface classifiers share.

A classifier is a pure function of text: it never reads files, clocks or hardware. It is
given one *event* (a single log line, or a multi-line block such as a Python traceback that
the log source grouped) and returns the findings in it. A finding becomes an incident on the
collector; its ``facts`` are what a user queries ("requested bytes", "victim pid", "xid").

Facts are checked against each other when a finding is made (requested <= total capacity, free
<= total, figures in their units): what a finding breaks is in its ``consistency_flags`` fact.

Units live in fact names (``requested_bytes``, ``total_capacity_bytes``, ``temp_c``) and sizes
are converted to integer bytes; the text as printed stays available in ``excerpt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from fleetscope.agent.classify._consistency import consistency_flags
from fleetscope.agent.records import FactValue

# The kinds and severities are defined in the shared vocabulary (the collector reads the same
# strings); they are re-exported here, where the classifiers have always imported them from.
from fleetscope.proto.vocabulary import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    KIND_TENSORRT_ERROR,
    KIND_TRT_BENCHMARK,
    SEVERITIES,
)

__all__ = [
    "FactValue",
    "Finding",
    "Classifier",
    "KIND_CUDA_OOM",
    "KIND_GPU_XID",
    "KIND_HOST_OOM",
    "KIND_JETSON_MEMORY",
    "KIND_TENSORRT_ERROR",
    "KIND_TRT_BENCHMARK",
    "SEVERITIES",
]


@dataclass(frozen=True)
class Finding:
    """One thing a classifier recognised in an event."""

    kind: str
    severity: str
    title: str  # one line a person reads in a list, e.g. "CUDA OOM on cuda:0: tried to allocate 2.00 GiB"
    facts: Mapping[str, FactValue] = field(default_factory=dict)
    excerpt: str = ""  # the line(s) the finding was read from, as printed
    ts_ns: int | None = None  # time printed in the text itself, when there is one

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        # Facts are checked against each other before the finding is stored: a broken rule is
        # kept as a flag on the finding, and no figure is dropped (see _consistency).
        flags = consistency_flags(self.facts)
        if flags:
            object.__setattr__(self, "facts", {**self.facts, "consistency_flags": ",".join(flags)})


class Classifier(Protocol):
    """One kind of recogniser. ``name`` is unique in the registry."""

    name: str

    def classify(self, text: str) -> list[Finding]:
        """Return every finding in ``text`` (one event); an empty list when there is none."""
        ...
