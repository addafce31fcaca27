"""What every query command shares: the ``--db``/``--json``/``--csv`` flags, the read-only session,
tables (CSV with ``--csv``), JSON (ISO times beside ``*_ns`` with ``print_json_with_times``), and an
empty result that says which filter emptied it.

Parsers are built without importing SQLAlchemy, so ``fleetscope --help`` works on a drone; a
handler checks for the collector extra first (``needs_collector``). Everything reads through the
query API (``fleetscope.collector.query``), as the dashboard does.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from fleetscope.cli.terminal import visible

DEFAULT_DB = os.environ.get("FLEETSCOPE_DB", "sqlite:///fleetscope-data/fleetscope.db")


def db_url_arg(p: argparse.ArgumentParser) -> None:
    """``--db URL``, as every command that opens the database takes it."""
    p.add_argument("--db", default=DEFAULT_DB, metavar="URL",
                   help="database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (env FLEETSCOPE_DB; default %(default)s)")


def db_arg(p: argparse.ArgumentParser) -> None:
    """A query command's flags: ``--db``, ``--json`` and ``--csv``."""
    db_url_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON document (for jq) instead of a table")
    add_csv_flag(p)


def needs_extra(handler: Any, *modules: str) -> Any:
    """``handler``, run only once the collector extra's ``modules`` are importable (a drone has none)."""

    def run(args: argparse.Namespace) -> int:
        from fleetscope.cli.extras import require

        for module in modules:
            require("collector", module)
        return int(handler(args))

    return run


def needs_collector(handler: Any) -> Any:
    """Check for the collector extra before the handler imports SQLAlchemy."""

    def run(args: argparse.Namespace) -> int:
        from fleetscope.cli.extras import require

        require("collector", "sqlalchemy")
        OUTPUT["csv"] = bool(getattr(args, "csv", False))  # table prints CSV for every query command
        if OUTPUT["csv"] and getattr(args, "json", False):
            print(f"fleetscope {args.command}: --json and --csv: choose one", file=sys.stderr)
            return 2
        if problem := reversed_range(args):
            print(f"fleetscope {args.command}: {problem}", file=sys.stderr)
            return 2
        return handler(args)

    return run


OUTPUT = {"csv": False}


def reversed_range(args: argparse.Namespace) -> str | None:
    """A ``--since`` that is not before ``--until``, said as such (the query would find nothing and
    explain it as a gap in the data); None when the range is right or the command has none."""
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    if not isinstance(since, str) or not isinstance(until, str):
        return None
    from fleetscope.cli.args import format_ns, time_ns

    now = time.time_ns()  # one "now" for both, so that "--since now --until now" is an empty range
    since_ns, until_ns = time_ns(since, now_ns=now), time_ns(until, now_ns=now)
    if since_ns < until_ns:
        return None
    if since_ns == until_ns:
        return f"--since {since} and --until {until} are the same time ({format_ns(since_ns)} UTC): the range is empty"
    return (f"--since {since} ({format_ns(since_ns)} UTC) is after --until {until} ({format_ns(until_ns)} UTC): "
            "the range is reversed; the earlier time goes in --since (--since 2h --until 1h is the hour before the last)")


@contextmanager
def open_session(url: str) -> Iterator[Any]:
    """A read-only session on the database at ``url``; exits with a hint when it holds no fleetscope data."""
    from fleetscope.collector import query

    missing = query.missing_sqlite_file(url)
    if missing is not None:  # opening it would create an empty file
        print(f"no database file at {missing}: start a collector with --db {url} first, or give the --db "
              "the collector writes to", file=sys.stderr)
        raise SystemExit(1)
    engine = query.open_database(url)
    try:
        if not query.has_schema(engine):
            print(f"no fleetscope data in {url}: start a collector with --db {url} first", file=sys.stderr)
            raise SystemExit(1)
        problem = query.schema_problem(engine)
        if problem:
            print(problem, file=sys.stderr)
            raise SystemExit(1)
        with query.session_scope(engine) as session:
            yield session
    finally:
        engine.dispose()  # a command run in-process (tests, scripts) leaves no connection behind


def print_json(doc: Any) -> None:
    from fleetscope.collector import query

    json.dump(query.to_jsonable(doc), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list[str]]) -> None:
    """Rows of text, every cell made visible: names, labels and titles come from devices (CSV with --csv)."""
    if OUTPUT["csv"]:
        print_csv(headers, rows)
        return
    rows = [[visible(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))



def unknown_device(exc: Exception) -> int:
    print(visible(str(exc)), file=sys.stderr)
    return 1



def print_empty(message: str, headers: list[str]) -> None:
    """An empty result: CSV gets its header row (and the reason on stderr), a table the reason."""
    if OUTPUT["csv"]:
        table(headers, [])
        print(message, file=sys.stderr)
    else:
        print(message)


def fmt_value(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"



# ------------------------------------------------------------------------------ output forms


def add_csv_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--csv", action="store_true", help="print CSV (a header row, then one row per line of the table)")


def print_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows as CSV on stdout; cells are written as given (no terminal escaping: CSV quotes them)."""
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(list(headers))
    for r in rows:
        w.writerow(["" if c is None else c for c in r])


def iso(ts_ns: int) -> str:
    """``2026-12-03T10:00:00.123456Z``: what JSON carries beside every ``ts_ns``."""
    return datetime.fromtimestamp(ts_ns / 1e9, tz=timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def with_iso_times(doc: Any) -> Any:
    """A JSON-ready document with an ISO 8601 time (UTC) beside each integer ``*_ns`` time field:
    ``ts_ns`` gets ``ts``, ``last_seen_ns`` gets ``last_seen``, and so on (durations like
    ``clock_skew_ns`` are not times and are left alone)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out[k] = with_iso_times(v)
            if isinstance(k, str) and k.endswith("_ns") and _is_time_key(k) and isinstance(v, int) and not isinstance(v, bool):
                name = k[: -len("_ns")]
                if name not in doc and v > 0:
                    out[name] = iso(v)
        return out
    if isinstance(doc, list):
        return [with_iso_times(x) for x in doc]
    return doc


_TIME_WORDS = ("ts", "seen", "since", "until", "started", "ended", "start", "end", "received", "at", "step_ts", "first", "last")


def _is_time_key(key: str) -> bool:
    stem = key[: -len("_ns")]
    if stem.endswith(("skew", "duration", "span", "window", "after", "before", "gap", "step", "offset", "latency", "age")):
        return False
    return stem == "ts" or any(stem == w or stem.endswith("_" + w) or stem.startswith(w + "_") for w in _TIME_WORDS)


def print_json_with_times(doc: Any) -> None:
    from fleetscope.collector import query

    json.dump(with_iso_times(query.to_jsonable(doc)), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# ------------------------------------------------------------------------------ empty results


def explain_empty(what: str, flags: Sequence[str], has_rows: Callable[[int], bool], *, hint: str = "") -> str:
    """One line for an empty result that names the filter that emptied it. ``flags`` are the filters
    as typed, in the order they narrow; ``has_rows(k)`` says whether the query with only the first
    ``k`` of them has rows. The first filter after which nothing is left is named; when even none
    leaves nothing, the range itself holds no data, and ``hint`` says how to get some."""
    for k in range(len(flags) - 1, -1, -1):
        if has_rows(k):
            before = f" among the {what} with {' '.join(flags[:k])}" if k else ""
            after = f" (and {' '.join(flags[k + 1 :])} after it)" if k + 1 < len(flags) else ""
            return f"no {what}: {flags[k]} matched none{before} in that range{after}; without it there are some"
    scope = f" even without {' '.join(flags)}" if flags else ""
    return f"no {what} in that range{scope}{(': ' + hint) if hint else ''}"


def print_csv_rows(rows: Sequence[Sequence[Any]]) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    for r in rows:
        w.writerow(["" if c is None else c for c in r])
