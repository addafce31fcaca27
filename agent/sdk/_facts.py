"""Python values to the wire's FactValue and Level, in one place so every record agrees."""

from __future__ import annotations

import math
from collections.abc import Mapping

from fleetscope.proto.v1 import telemetry_pb2 as pb

LEVELS: Mapping[str, pb.Level] = {
    "debug": pb.LEVEL_DEBUG,
    "info": pb.LEVEL_INFO,
    "warning": pb.LEVEL_WARNING,
    "error": pb.LEVEL_ERROR,
    "critical": pb.LEVEL_CRITICAL,
}

# A fact is a short value a person queries by; long text belongs in an excerpt.
_MAX_TEXT = 4096


def level(name: str) -> pb.Level:
    return LEVELS.get(name.lower(), pb.LEVEL_INFO)


def set_fact(target: pb.FactValue, value: object) -> None:
    # bool before int: bool is an int subclass and must stay a flag.
    if isinstance(value, bool):
        target.flag = value
    elif isinstance(value, int):
        if -(2**63) <= value < 2**63:
            target.integer = value
        else:
            target.text = str(value)
    elif isinstance(value, float):
        if math.isfinite(value):
            target.real = value
        else:
            # The wire never carries NaN as a number; the text keeps what was seen.
            target.text = repr(value)
    else:
        text = str(value)
        target.text = text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def fill_facts(field: object, facts: Mapping[str, object]) -> None:
    """Copy ``facts`` into a protobuf ``map<string, FactValue>`` field, skipping None values."""
    for key, value in facts.items():
        if value is None:
            continue
        set_fact(field[str(key)], value)  # type: ignore[index]


def fact_value(value: pb.FactValue) -> str | int | float | bool | None:
    """The Python value of a FactValue (for tests and for the agent's side)."""
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "unknown size"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(size) < 1024.0 or unit == "PiB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024.0
    return f"{n} B"  # unreachable; keeps type checkers calm
