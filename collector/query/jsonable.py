"""Query results as plain JSON-able structures, for ``--json`` output and for tests."""

from __future__ import annotations

import math
from dataclasses import asdict, is_dataclass
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested), lists, tuples and dicts of them to dicts, lists and plain values.

    A float that is NaN or infinite becomes None: JSON has no such numbers, and ``json.dumps``
    would print a bare ``NaN`` that strict parsers (and other languages) refuse. Validation
    keeps them out of new data; this covers rows stored before it did.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    return obj
