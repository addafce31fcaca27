"""Argument types shared by every subcommand: durations, sizes, labels, times."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone

from fleetscope.proto.vocabulary import BINARY_BYTE_UNITS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d|w)?\s*$")
_DURATION_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9, "w": 7 * 86400 * 10**9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def duration_ns(text: str) -> int:
    """``"1s"``, ``"500ms"``, ``"7d"`` -> nanoseconds. A bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 500ms, 1s, 15m, 24h, 7d)")
    return int(float(m.group(1)) * _DURATION_NS[m.group(2) or "s"])


def duration_s(text: str) -> float:
    return duration_ns(text) / 1e9


def positive_duration_s(text: str) -> float:
    """A duration that must be more than nothing (a sampling interval): ``"0"`` would spin."""
    seconds = duration_s(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 (examples: 500ms, 1s, 15m)")
    return seconds


COLLECTOR_PORT = 4317  # the port `fleetscope collector` listens on by default


def collector_address_problem(address: str) -> str | None:
    """What is wrong with a ``--collector`` value, or None. HOST:PORT (``[::1]:PORT`` for IPv6);
    a gRPC target with a scheme (``dns:///HOST:PORT``, ``unix:PATH``) is taken as it is. A host
    without a port is refused rather than guessed: gRPC would silently use 443."""
    text = address.strip()
    if "://" in text or text.startswith("unix:"):
        return None
    host, sep, port = text.rpartition(":")
    if sep and host.startswith("[") and not host.endswith("]"):  # "[::1" with a colon inside the brackets
        host, sep, port = text, "", ""
    if not sep or (":" in host and not host.startswith("[")):
        bare = text if text and ":" not in text else "HOST"
        return f"--collector {address!r} has no port: write HOST:PORT, e.g. {bare}:{COLLECTOR_PORT} (the collector's default)"
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"--collector {address!r}: expected HOST:PORT, e.g. collector.example.org:{COLLECTOR_PORT}"
    return None


def collector_address(text: str) -> str:
    """An argparse ``type=`` for a single ``--collector HOST:PORT`` (see ``collector_address_problem``)."""
    if problem := collector_address_problem(text):
        raise argparse.ArgumentTypeError(problem.split(" ", 1)[1])  # argparse names the flag itself
    return text


def whole_number_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number, ``minimum`` or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"not {minimum} or more: {text!r}")
        return value

    return parse


def size_bytes(text: str) -> int:
    """``"256MiB"``, ``"1G"``, ``"4096"`` -> bytes (powers of two)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 64MiB, 1GiB, 500M)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _SIZE_MULT[unit])


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kKMG])(i?))?(bit/s|bps|B/s)\s*$")
_RATE_PREFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}
_RATE_BINARY = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
RATE_FORMS = ("bits: 32kbit/s, 1.5Mbit/s, 64kbps, 512Kibit/s; bytes: 500B/s, 4KB/s (= 4kB/s), 2MB/s, 64KiB/s, 1MiB/s; "
              "k, M, G are powers of 1000, Ki, Mi, Gi of 1024; 0 means unlimited")
MIN_RATE_BYTES_PER_S = 125.0  # 1 kbit/s: below that a gRPC stream's registration and keepalives barely fit


def rate_bytes_per_s(text: str) -> float:
    """A link rate -> bytes a second: ``"32kbit/s"`` -> 4000.0, ``"4KiB/s"`` -> 4096.0; ``"0"`` -> 0 (unlimited)."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    m = _RATE.match(text)
    if not m:
        if re.search(r"\db/s|[kKMG]i?b/s", text):
            raise argparse.ArgumentTypeError(f"{text!r}: write bit/s for bits or B/s for bytes (a lone 'b' is taken for either); "
                                             f"{RATE_FORMS}")
        raise argparse.ArgumentTypeError(f"not a rate: {text!r} ({RATE_FORMS})")
    number, prefix, binary, unit = m.groups()
    scale = (_RATE_BINARY if binary else _RATE_PREFIX)[prefix or ""]
    rate = float(number) * scale / (1 if unit == "B/s" else 8)
    if rate == 0:
        return 0.0
    if rate < MIN_RATE_BYTES_PER_S:
        raise argparse.ArgumentTypeError(f"{text!r} is below 1kbit/s (125B/s), too slow for a gRPC stream; 0 means unlimited")
    return rate


def label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"a label is key=value, got {text!r}")
    return key.strip(), value.strip()


def time_ns(text: str, *, now_ns: int | None = None) -> int:
    """An absolute time (ISO 8601, or epoch seconds) or a duration ago (``"2h"`` = two hours ago)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    if text == "now":
        return now_ns
    if _DURATION.match(text) and not text.strip().isdigit():
        return now_ns - duration_ns(text)
    try:
        if text.strip().isdigit():
            return int(text) * 10**9
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} ({TIME_FORMS})") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 10**9)


TIME_FORMS = ("accepted: a duration ago (30s, 15m, 2h, 7d, 1w), ISO 8601 (2026-12-01, 2026-12-01T10:00, "
              "2026-12-01T10:00:00Z, +02:00 for a zone; UTC when none), epoch seconds (1764583200), or now")


def time_text(text: str) -> str:
    """An argparse ``type=`` for ``--since``/``--until``: checks the text (see ``time_ns``) and keeps
    it, so that "now" and "2h" are read when the command runs; a mistake is a usage error."""
    time_ns(text)
    return text


DB_URL_FORMS = ("accepted: sqlite:///RELATIVE/PATH.db, sqlite:////ABSOLUTE/PATH.db, a plain file path, "
                "postgresql+psycopg://USER[:PASSWORD]@HOST[:PORT]/DB (postgresql:// means the same)")


def db_url_problem(url: str) -> str | None:
    """What is wrong with a ``--db`` value, as one line naming the accepted forms; None when its
    form is right (whether the database can be reached is found out when it is opened).
    Plain text checks: this runs before SQLAlchemy is imported, on any install."""
    text = url.strip()
    url = hide_url_password(text)
    if not text:
        return f"--db is empty; {DB_URL_FORMS}"
    if "://" not in text:
        return None  # a file path: SQLite
    scheme, rest = text.split("://", 1)
    backend, _, driver = scheme.lower().partition("+")
    if backend == "sqlite":
        if driver:
            return f"cannot use {url}: SQLite takes no driver ('{scheme}'); {DB_URL_FORMS}"
        if rest and not rest.startswith("/"):
            host = rest.split("/", 1)[0]
            return (f"not a database URL: {url!r}: one slash missing: 'sqlite://{host}/...' names a host; write sqlite:///{rest} "
                    f"(relative) or sqlite:////{rest} (absolute); {DB_URL_FORMS}")
        if rest in ("", "/"):
            return f"not a database URL: {url!r}: no file named (an in-memory database would hold nothing); {DB_URL_FORMS}"
        return None
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            return f"cannot use {url}: the PostgreSQL driver is psycopg (version 3), not {driver!r}; {DB_URL_FORMS}"
        hostpart = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        port = hostpart.rsplit(":", 1)[1] if ":" in hostpart and not hostpart.endswith("]") else ""
        if port and not port.isdigit():
            return f"not a database URL: {url!r}: the port {port!r} is not a number; {DB_URL_FORMS}"
        return None
    return f"unsupported database {backend!r} in --db {url}; {DB_URL_FORMS}"


def hide_url_password(url: str) -> str:
    """``scheme://user:secret@host/db`` as ``scheme://user:***@host/db``: for messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.partition("@")
    if not sep or not at or ":" not in userinfo or "/" in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{hostpart}"


def format_ns(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def format_ago(ts_ns: int, now_ns: int) -> str:
    s = max(0, (now_ns - ts_ns) // 10**9)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    if s < 86400:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in BINARY_BYTE_UNITS:
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def listen_address(text: str) -> str | None:
    """A ``--metrics-listen`` value: ``HOST:PORT`` (``[::1]:PORT`` for IPv6, ``:PORT`` for every
    interface), or ``off`` (None)."""
    value = text.strip()
    if value.lower() in ("off", "none", "no", ""):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535 or (":" in host and not (host.startswith("[") and host.endswith("]"))):
        raise argparse.ArgumentTypeError(f"not an address: {text!r} (examples: 127.0.0.1:9464, :9464, [::1]:9464, off)")
    return value
