"""Exact times read from log text: ISO-8601 stamps and datetimes as nanoseconds since the epoch.

Shared by the classifiers (``host_oom``, ``cuda_oom``) and the file follower
(``fleetscope.agent.logs.files``), which reads each line's stamp with :func:`iso_ns` and so must not
import a classifier for it (the agent imports the classifiers only when a line needs them).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["dt_ns", "iso_ns"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def dt_ns(dt: datetime) -> int:
    """Exact nanoseconds since the epoch (float ``timestamp()`` loses the microseconds).

    A time printed without a zone is the host's wall clock; fleet hosts log in UTC.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


_ISO = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d)[T ](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?:(?P<z>Z)|(?P<sign>[+-])(?P<oh>\d\d):?(?P<om>\d\d))?$"
)


def iso_ns(text: str) -> int | None:
    """ISO-8601 time -> exact ns since the epoch, or None; a time without a zone is read as UTC.

    Parsed by hand: Python 3.10's ``fromisoformat`` rejects "Z", "+0000", "," and nanosecond
    fractions (Docker prints 9 digits), all of which logs contain.
    """
    m = _ISO.match(text.strip())
    if not m:
        return None
    try:
        dt = datetime.strptime(f"{m['d']} {m['t']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    ns = dt_ns(dt) + int((m["frac"] or "0")[:9].ljust(9, "0"))
    if m["sign"]:
        offset = (int(m["oh"]) * 60 + int(m["om"])) * 60 * 1_000_000_000
        ns -= offset if m["sign"] == "+" else -offset
    return ns
