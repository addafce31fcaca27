"""``fleetscope alerts`` (the alerts, live and history; ``--check FILE`` validates a rules file) and
``fleetscope silence add|list|expire``. Reads go through the read API
(``fleetscope.collector.query``); silences are written by ``fleetscope.collector.alerting.silences``.
Like the other collector commands, the parsers are built without importing SQLAlchemy.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from pathlib import Path
from typing import Any

from fleetscope.cli.args import duration_ns, format_ago, format_ns, label
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import db_arg, needs_collector, open_session, print_json, table
from fleetscope.proto.vocabulary import format_reading


def register(sub: Any) -> None:
    p = sub.add_parser("alerts", help="alerts: firing, pending and (with --all) resolved",
                       description="The alerts the collector's rules raised (see 'fleetscope collector --alerts'), "
                       "newest first. Without a filter: the firing and pending ones.")
    db_arg(p)
    state = p.add_mutually_exclusive_group()
    state.add_argument("--firing", action="store_true", help="only firing alerts")
    state.add_argument("--all", action="store_true", help="also resolved alerts (the history)")
    p.add_argument("--rule", metavar="NAME", help="only this rule's alerts")
    p.add_argument("--device", metavar="NAME", help="only this device's alerts")
    p.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE", help="only alerts with this label")
    p.add_argument("--limit", type=int, default=200, help="most alerts (default %(default)s)")
    p.add_argument("--check", type=Path, metavar="FILE",
                   help="only validate this rules file: print what it holds, or the line and the reason it is refused")
    p.set_defaults(func=needs_collector(run_alerts))

    p = sub.add_parser("silence", help="silence alerts for a while: add, list, expire",
                       description="A silence holds back the notifications of the alerts it matches "
                       "(rule, device, labels) until it expires; the alerts are still recorded.")
    ssub = p.add_subparsers(dest="silence_command", metavar="ACTION", required=True)
    a = ssub.add_parser("add", help="add a silence", description="Silence matching alerts for a duration.")
    a.add_argument("--db", default=_default_db(), metavar="URL", help="database URL (env FLEETSCOPE_DB)")
    a.add_argument("--rule", metavar="NAME", help="only this rule's alerts (default: any rule)")
    a.add_argument("--device", metavar="NAME", help="only this device's alerts (default: any device)")
    a.add_argument("--label", type=label, action="append", default=[], metavar="KEY=VALUE",
                   help="only alerts with this label (repeatable; all must match)")
    a.add_argument("--for", dest="duration", type=duration_ns, required=True, metavar="DURATION",
                   help="how long, e.g. 30m, 2h, 1d")
    a.add_argument("--comment", default="", help="why (shown in 'silence list')")
    a.add_argument("--by", default=None, help="who (default: your user name)")
    a.set_defaults(func=needs_collector(run_silence_add))
    ls = ssub.add_parser("list", help="list silences in force (--all: also expired ones)")
    db_arg(ls)
    ls.add_argument("--all", action="store_true", help="also expired silences")
    ls.set_defaults(func=needs_collector(run_silence_list))
    e = ssub.add_parser("expire", help="end a silence now", description="End a silence now, by its id ('silence list').")
    e.add_argument("--db", default=_default_db(), metavar="URL", help="database URL (env FLEETSCOPE_DB)")
    e.add_argument("id", type=int, help="the silence's id")
    e.set_defaults(func=needs_collector(run_silence_expire))


def _default_db() -> str:
    from fleetscope.collector.commands.output import DEFAULT_DB

    return DEFAULT_DB


# ---------------------------------------------------------------- alerts


def run_alerts(args: argparse.Namespace) -> int:
    if args.check is not None:
        return _check(args.check, as_json=args.json)
    from fleetscope.collector import query

    states = ["firing"] if args.firing else None if args.all else ["pending", "firing"]
    now = time.time_ns()
    with open_session(args.db) as session:
        try:
            rows = query.list_alerts(session=session, states=states, rule=args.rule, device=args.device,
                                     labels=dict(args.label) or None, now_ns=now, limit=args.limit)
        except query.UnknownDevice as exc:
            print(visible(str(exc)), file=sys.stderr)
            return 1
        if args.json:
            print_json({"alerts": [{**query.to_jsonable(a), "notifications": query.alert_notifications(a.id, session=session)}
                                    for a in rows]})
            return 0
    if not rows:
        what = "alerts" if args.all else "firing alerts" if args.firing else "firing or pending alerts"
        print(f"no {what}")
        return 0
    cells = []
    for a in rows:
        state = a.state + (" (silenced)" if a.silenced else "")
        since = a.resolved_ns if a.state == "resolved" and a.resolved_ns else a.firing_ns or a.pending_ns
        cells.append([str(a.id), state, a.rule, a.device_name or "-", a.severity, format_ago(since, now), a.summary])
    table(["ID", "STATE", "RULE", "DEVICE", "SEVERITY", "SINCE", "SUMMARY"], cells)
    return 0


def _check(path: Path, *, as_json: bool) -> int:
    from fleetscope.collector.alerting.rules import RulesError, load_rules

    try:
        rules = load_rules(path)
    except RulesError as exc:
        print(visible(str(exc)), file=sys.stderr)
        return 1
    if as_json:
        print_json({"file": str(path), "valid": True, "rules": [r.name for r in rules.rules],
                     "notifiers": sorted(rules.notifiers), "slos": sorted(rules.slo_names)})
        return 0
    print(f"{visible(str(path))}: valid: {len(rules.rules)} rules, {len(rules.notifiers)} notifiers, "
          f"{len(rules.slo_names)} objectives")
    for r in rules.rules:
        cond = _condition(r)
        extra = f" for {r.for_s:g} s" if r.for_s else ""
        print(f"  {visible(r.name)}: {visible(cond)}{extra} -> {', '.join(r.notify) or 'no one'}")
    return 0


def _condition(r: Any) -> str:
    if r.kind == "incident":
        return "incidents " + ", ".join(r.incidents)
    if r.kind == "metric":
        return (f"{r.metric} above {format_reading(r.metric, r.above)}" if r.above is not None
                else f"{r.metric} below {format_reading(r.metric, r.below)}")
    if r.kind == "absent":
        return f"no data for {r.absent_s:g} s"
    return f"objective {r.slo}"


# ---------------------------------------------------------------- silences


def run_silence_add(args: argparse.Namespace) -> int:
    from fleetscope.collector.alerting.silences import add_silence

    if args.rule is None and args.device is None and not args.label:
        print("fleetscope silence add: name a --rule, a --device or a --label (a silence of everything is refused)",
              file=sys.stderr)
        return 2
    if args.duration <= 0:
        print("fleetscope silence add: --for must be more than 0", file=sys.stderr)
        return 2
    with _write_session(args.db) as session:
        sid = add_silence(session=session, duration_s=args.duration / 1e9, rule=args.rule, device=args.device,
                          labels=dict(args.label), created_by=args.by or _user(), comment=args.comment)
    until = time.time_ns() + args.duration
    print(f"silence {sid} added, until {format_ns(until)} UTC")
    return 0


def run_silence_list(args: argparse.Namespace) -> int:
    from fleetscope.collector import query

    now = time.time_ns()
    with open_session(args.db) as session:
        rows = query.list_silences(session=session, active_at_ns=None if args.all else now)
    if args.json:
        print_json({"silences": rows})
        return 0
    if not rows:
        print("no silences" if args.all else "no silences in force")
        return 0
    cells = []
    for s in rows:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) or "-"
        left = f"expires {format_ns(s.expires_ns)} UTC" if s.expires_ns > now else f"expired {format_ago(s.expires_ns, now)}"
        cells.append([str(s.id), s.rule or "*", s.device or "*", labels, left, s.created_by, s.comment])
    table(["ID", "RULE", "DEVICE", "LABELS", "EXPIRY", "BY", "COMMENT"], cells)
    return 0


def run_silence_expire(args: argparse.Namespace) -> int:
    from fleetscope.collector.alerting.silences import UnknownSilence, expire_silence

    try:
        with _write_session(args.db) as session:
            ended = expire_silence(args.id, session=session)
    except UnknownSilence as exc:
        print(f"fleetscope silence expire: {exc}", file=sys.stderr)
        return 1
    print(f"silence {args.id} expired" if ended else f"silence {args.id} had expired already")
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        return ""


class _write_session:
    """A writing session on the database at ``url``, committed on success; exits 1 when it holds no fleetscope data."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> Any:
        from sqlalchemy.orm import Session

        from fleetscope.collector import query
        from fleetscope.collector.errors import StoreUnavailable
        from fleetscope.collector.storage.engine import make_engine

        if query.missing_sqlite_file(self.url):
            print(f"no fleetscope data in {self.url}: start a collector with --db {self.url} first", file=sys.stderr)
            raise SystemExit(1)
        try:
            self.engine = make_engine(self.url, create=False)
        except StoreUnavailable as exc:
            print(visible(str(exc)), file=sys.stderr)
            raise SystemExit(1) from None
        if not query.has_schema(self.engine) or query.schema_problem(self.engine):
            self.engine.dispose()
            print(f"no fleetscope data (or an older schema) in {query.hide_password(self.url)}: "
                  f"start a collector with --db on it first", file=sys.stderr)
            raise SystemExit(1)
        self.session = Session(self.engine)
        return self.session

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.session.commit()
            else:
                self.session.rollback()
        finally:
            self.session.close()
            self.engine.dispose()
