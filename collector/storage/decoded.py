"""A validated batch's value columns, decoded once: what ingest hands the writer beside the batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Decoded"]


@dataclass
class Decoded:
    """The value columns of a validated batch, decoded once (None at null rows) for the writer."""

    host: dict[str, Sequence[float | None]] = field(default_factory=dict)
    gpu: dict[str, Sequence[float | None]] = field(default_factory=dict)
    sample_rows: int = 0
