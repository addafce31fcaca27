"""Pieces of Prometheus' text exposition format (0.0.4), as bytes: label sets and sample values.

``/metrics/fleet`` writes about 1.5 million lines for 10,000 devices; these are the parts its
lines are joined from, so that a line costs a few C-level steps, not Python string formatting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_set(pairs: Iterable[tuple[str, str]]) -> bytes:
    """``{k="v",...} `` with the space that separates it from the value."""
    return ("{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs) + "} ").encode()


def number(v: float) -> str:
    """A sample value: whole numbers without a fraction ("42", not "42.0"), others as repr."""
    if -1e15 < v < 1e15:  # finite and not NaN (every comparison with NaN is false): the common case
        i = int(v)
        return str(i) if v == i else repr(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


class NumberTexts(dict[float, bytes]):
    """``texts[v]``: ``number(v)`` and the line's newline, as bytes, remembered: most readings
    repeat across a fleet and from one scrape to the next (utilisations, temperatures, clocks,
    zero error counts), and a dictionary hit costs a tenth of formatting the number.

    Only values within ±1e15 are kept: there an int and the float equal to it (which share a
    key) have the same text, and NaN (never equal to itself, a new key each time) is left out.
    At ``limit`` values it starts again, so unique values (energy counters) cannot grow it."""

    def __init__(self, limit: int = 200_000) -> None:
        super().__init__()
        self.limit = limit

    def __missing__(self, v: float) -> bytes:
        text = (number(v) + "\n").encode()
        if -1e15 < v < 1e15:
            if len(self) >= self.limit:
                self.clear()
            self[v] = text
        return text
