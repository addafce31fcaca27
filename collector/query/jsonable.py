"""Query results as plain JSON-able structures, for ``--json`` output and for tests."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested), lists, tuples and dicts of them to dicts, lists and plain values."""
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return obj
