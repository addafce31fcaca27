"""``fleetscope logs``: a device's log events, filtered by level and text, and ``--follow``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from fleetscope.cli.args import format_ns, time_ns, time_text
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import (
    db_arg,
    explain_empty,
    iso,
    needs_collector,
    open_session,
    print_csv,
    print_csv_rows,
    print_json,
    unknown_device,
    with_iso_times,
)
from fleetscope.proto.vocabulary import LOG_LEVELS


def register(sub: Any) -> None:
    p = sub.add_parser("logs", help="a device's log events")
    db_arg(p)
    p.add_argument("--device", required=True, help="device name (every install of it) or agent id (one install)")
    p.add_argument("--grep", help="only lines containing this text")
    p.add_argument("--level", choices=list(LOG_LEVELS), help="only this level")
    p.add_argument("--since", default="24h", type=time_text, help="start (default 24h ago)")
    p.add_argument("--until", default="now", type=time_text, help="end (default now)")
    p.add_argument("--limit", type=int, default=1000, help="most lines, newest kept (default %(default)s)")
    p.add_argument("-f", "--follow", action="store_true", help="then print new events as they arrive, until Ctrl-C")
    p.set_defaults(func=needs_collector(run_logs))


def _print_log_line(ln: Any) -> None:
    # A multi-line event (a traceback) keeps its line breaks; its continuation lines are
    # indented so that no line of a message can pass for a log line of its own.
    message = visible(ln.message, keep_line_breaks=True).replace("\n", "\n    ")
    print(f"{format_ns(ln.ts_ns)} {visible(ln.level.upper()):8} {visible(ln.source)}: {message}")


def run_logs(args: argparse.Namespace) -> int:
    from fleetscope.collector.errors import UnknownDevice
    from fleetscope.collector.query.installs import search_logs_all_installs

    since, until = time_ns(args.since), time_ns(args.until)
    flags = [f for f in (f"--level {args.level}" if args.level else "", f"--grep {args.grep!r}" if args.grep else "") if f]
    with open_session(args.db) as session:
        try:
            lines = search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=until,
                                      levels=[args.level] if args.level else None, text=args.grep, limit=args.limit)

            def has_rows(k: int) -> bool:
                level = args.level if k >= 1 and args.level else None
                grep = args.grep if (k >= 2 or (k >= 1 and not args.level)) and args.grep else None
                return bool(search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=until,
                                              levels=[level] if level else None, text=grep, limit=1))

            empty = None if lines else explain_empty(
                "log events", flags, has_rows, hint="an agent sends its device's kernel log, journal and --log-file files")
        except UnknownDevice as exc:
            return unknown_device(exc)
    if args.json and not args.follow:
        print_json({"logs": lines})
        return 0
    if args.csv and not args.follow:
        print_csv(["ts_ns", "ts", "device", "level", "source", "message"],
                               [[ln.ts_ns, iso(ln.ts_ns), ln.device, ln.level, ln.source, ln.message] for ln in lines])
        if empty:
            print(visible(empty), file=sys.stderr)
        return 0
    if args.follow:
        if args.csv:
            print_csv(["ts_ns", "ts", "device", "level", "source", "message"], [])
        try:
            return follow_logs(args, open_session, _print_log_line)
        except KeyboardInterrupt:
            return 0
    for ln in lines:
        _print_log_line(ln)
    if empty:
        print(visible(empty))
    return 0


# ------------------------------------------------------------------------------ logs --follow


def follow_logs(args: argparse.Namespace, open_session: Any, print_line: Callable[[Any], None],
                *, poll_s: float = 1.0, stop: Callable[[], bool] = lambda: False) -> int:
    """Print new log events of the device as they arrive, until interrupted (Ctrl-C)."""
    from fleetscope.collector import query
    from fleetscope.collector.query.installs import search_logs_all_installs

    since = time_ns(args.since)
    seen: set[tuple[int, str, str]] = set()  # events at the newest printed time, to print each once
    while not stop():
        now = time.time_ns()
        with open_session(args.db) as session:
            lines = search_logs_all_installs(session=session, device=args.device, since_ns=since, until_ns=now + 1,
                                      levels=[args.level] if args.level else None, text=args.grep, limit=args.limit)
        for ln in lines:
            key = (ln.ts_ns, ln.source, ln.message)
            if key in seen:
                continue
            if args.csv:
                print_csv_rows([[ln.ts_ns, iso(ln.ts_ns), ln.device, ln.level, ln.source, ln.message]])
            elif args.json:
                print(json.dumps(with_iso_times(query.to_jsonable(ln)), default=str))  # one object a line
            else:
                print_line(ln)
        if lines:
            newest = lines[-1].ts_ns
            seen = {(ln.ts_ns, ln.source, ln.message) for ln in lines if ln.ts_ns == newest}
            since = newest  # rows at the same time are caught by ``seen``
        sys.stdout.flush()
        time.sleep(poll_s)
    return 0

