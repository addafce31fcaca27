"""``fleetscope certs``, ``token`` and ``device``: certificates for TLS, enrolment tokens, revoking a device.

* ``certs init --dir DIR [--host NAME ...] [--agent NAME ...] [--days N]``: a CA, the
  collector's certificate and key, agents' certificates (``collector/commands/certs.py``).
* ``token create --fleet NAME [--expires 30d]``: an enrolment token, printed once (the last
  line of the output); only its SHA-256 is stored. ``token list``, ``token revoke ID``.
* ``device revoke NAME``: the device's credential is revoked; collectors close its open
  streams within a second and refuse its agent id from then on, and the same device (its name,
  its GPUs) cannot enrol again under a new agent id until ``device allow NAME``.

Parsers are built without importing SQLAlchemy or cryptography, so ``--help`` works anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from fleetscope.cli.args import duration_ns, format_ns, whole_number_at_least
from fleetscope.cli.terminal import visible
from fleetscope.collector.commands.output import db_url_arg, needs_extra

MAX_FLEET_CHARS = 200


def _expiry(text: str) -> int | None:
    if text.strip().lower() in ("never", "none", "0"):
        return None
    value = duration_ns(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration: {text!r}")
    return value


_count = whole_number_at_least(0)


def _fleet(text: str) -> str:
    if not text.strip() or len(text) > MAX_FLEET_CHARS or "\x00" in text:
        raise argparse.ArgumentTypeError(f"a fleet is 1 to {MAX_FLEET_CHARS} characters, without NUL")
    return text.strip()


def register(sub: Any) -> None:
    p = sub.add_parser("certs", help="certificates for TLS between agents and collectors",
                       description="Make a CA and the certificates a self-hosted fleet needs for TLS and mutual TLS.")
    certs_sub = p.add_subparsers(dest="certs_command", metavar="COMMAND", required=True)
    c = certs_sub.add_parser(
        "init", help="make a CA, the collector's certificate and key, and agents' certificates",
        description="Write ca.pem/ca.key, collector.pem/collector.key (for the --host names, localhost and 127.0.0.1) "
                    "and agent-NAME.pem/.key per --agent into DIR; keys are readable by their owner only. An existing "
                    "CA in DIR is reused, existing certificates are kept (--force makes them anew). Collector: "
                    "--tls-cert DIR/collector.pem --tls-key DIR/collector.key [--tls-client-ca DIR/ca.pem]; agent: "
                    "--tls-ca DIR/ca.pem [--tls-cert DIR/agent-NAME.pem --tls-key DIR/agent-NAME.key].")
    c.add_argument("--dir", type=Path, required=True, metavar="DIR", help="folder to write into (made mode 0700)")
    c.add_argument("--host", action="append", default=[], metavar="NAME",
                   help="a DNS name or IP address agents use to reach the collector (repeatable)")
    c.add_argument("--agent", action="append", default=[], metavar="NAME", help="also make a client certificate for this agent (repeatable)")
    c.add_argument("--days", type=int, default=825, metavar="N", help="validity of the certificates (default %(default)s; the CA: 10 years)")
    c.add_argument("--force", action="store_true", help="make the collector's and agents' certificates anew even if present")
    c.set_defaults(func=needs_extra(run_certs_init, "cryptography"))

    p = sub.add_parser("token", help="enrolment tokens: create, list, revoke",
                       description="An enrolment token lets agents enrol into one fleet; each enrolled agent gets its own "
                                   "credential, bound to its agent id. Only the tokens' SHA-256 digests are stored.")
    token_sub = p.add_subparsers(dest="token_command", metavar="COMMAND", required=True)
    t = token_sub.add_parser("create", help="make an enrolment token (printed once, as the last line)")
    t.add_argument("--fleet", type=_fleet, required=True, metavar="NAME", help="the fleet agents enrolled with it join")
    t.add_argument("--expires", type=_expiry, default=30 * 86400 * 10**9, metavar="DURATION",
                   help="no enrolment with it after this long (default 30d; 'never' for no expiry)")
    t.add_argument("--comment", default="", help="a note shown by 'token list'")
    t.add_argument("--max-devices", type=_count, default=10_000, metavar="N",
                   help="the most devices it enrols; then it is refused (default %(default)s; 0: no limit)")
    t.add_argument("--max-enrolments", type=_count, default=1_000, metavar="N",
                   help="enrolments per minute; more wait (RESOURCE_EXHAUSTED with a retry-after) (default %(default)s; 0: no limit)")
    db_url_arg(t)
    t.set_defaults(func=needs_extra(run_token_create, "sqlalchemy"))
    t = token_sub.add_parser("list", help="the enrolment tokens (never their secrets)")
    t.add_argument("--fleet", help="only this fleet's tokens")
    db_url_arg(t)
    t.set_defaults(func=needs_extra(run_token_list, "sqlalchemy"))
    t = token_sub.add_parser("revoke", help="revoke an enrolment token (agents it enrolled keep their credentials)")
    t.add_argument("id", metavar="ID", help="the token's id (the ID column of 'token list')")
    db_url_arg(t)
    t.set_defaults(func=needs_extra(run_token_revoke, "sqlalchemy"))

    p = sub.add_parser("device", help="a device's identity: revoke it (a lost or stolen device), allow it back",
                       description="Revoke a device's credential: collectors close its streams within a second, refuse its "
                                   "agent id, and refuse the same device (name, GPUs) under a new agent id until 'device allow'.")
    device_sub = p.add_subparsers(dest="device_command", metavar="COMMAND", required=True)
    d = device_sub.add_parser("revoke", help="revoke a device's credential and close its open streams")
    d.add_argument("name", metavar="NAME", help="the device's name or agent id")
    d.add_argument("--all", action="store_true", help="revoke every device of that name (when several share it)")
    db_url_arg(d)
    d.set_defaults(func=needs_extra(run_device_revoke, "sqlalchemy"))
    d = device_sub.add_parser("allow", help="let a revoked device enrol again, as a new agent id (an operator's approval)")
    d.add_argument("name", metavar="NAME", help="the revoked device's name or agent id")
    db_url_arg(d)
    d.set_defaults(func=needs_extra(run_device_allow, "sqlalchemy"))


def _fail(command: str, message: str, code: int = 1) -> int:
    print(f"fleetscope {command}: {visible(message)}", file=sys.stderr)
    return code


def run_certs_init(args: argparse.Namespace) -> int:
    from fleetscope.collector.commands.certs import CertError, init_certs

    try:
        files = init_certs(args.dir, hosts=args.host, agents=args.agent, days=args.days, force=args.force)
    except CertError as exc:
        return _fail("certs init", str(exc), 2)
    except OSError as exc:
        return _fail("certs init", f"{args.dir}: {exc.strerror or exc}")
    for path in files.written:
        print(f"wrote {path}")
    for path in files.kept:
        print(f"kept  {path}")
    d = args.dir
    print(f"collector: --tls-cert {d / 'collector.pem'} --tls-key {d / 'collector.key'}"
          + (f" --tls-client-ca {d / 'ca.pem'}" if args.agent else ""))
    print(f"agent:     --tls-ca {d / 'ca.pem'}"
          + (f" --tls-cert {d / ('agent-' + args.agent[0] + '.pem')} --tls-key {d / ('agent-' + args.agent[0] + '.key')}" if args.agent else ""))
    return 0


def _engine(args: argparse.Namespace, command: str, *, write: bool) -> Any:
    from fleetscope.collector.errors import StoreUnavailable
    from fleetscope.collector.storage.engine import ensure_schema, make_engine

    try:
        engine = make_engine(args.db, create=False)
    except ValueError as exc:
        raise SystemExit(_fail(command, str(exc), 2)) from None
    try:
        if write:
            ensure_schema(engine, upgrade=True)
        else:
            from fleetscope.collector import query

            problem = query.schema_problem(engine) if query.has_schema(engine) else f"no fleetscope data in {args.db}"
            if problem:
                engine.dispose()
                raise SystemExit(_fail(command, problem))
    except StoreUnavailable as exc:
        engine.dispose()
        raise SystemExit(_fail(command, str(exc))) from None
    return engine


def run_token_create(args: argparse.Namespace) -> int:
    from fleetscope.collector.storage.credentials import create_enrolment_token

    engine = _engine(args, "token create", write=True)
    now = time.time_ns()
    try:
        row, token = create_enrolment_token(engine, fleet=args.fleet, now_ns=now,
                                            expires_ns=None if args.expires is None else now + args.expires, comment=args.comment,
                                            max_devices=args.max_devices or None, max_enrolments_per_min=args.max_enrolments or None)
    finally:
        engine.dispose()
    expires = "never expires" if row.expires_ns is None else f"expires {format_ns(row.expires_ns)}"
    devices = "any number of devices" if row.max_devices is None else f"at most {row.max_devices} devices"
    rate = "" if row.max_enrolments_per_min is None else f", {row.max_enrolments_per_min} a minute"
    print(f"enrolment token {row.id} for fleet {visible(row.fleet)}, {expires}, enrols {devices}{rate}.")
    print("Give it to agents in a file only they can read: fleetscope agent --token-file FILE (or FLEETSCOPE_TOKEN).")
    print("It is shown this once; only its digest is stored.")
    print(token)
    return 0


def run_token_list(args: argparse.Namespace) -> int:
    from fleetscope.collector import query

    engine = _engine(args, "token list", write=False)
    now = time.time_ns()
    try:
        with query.session_scope(engine) as session:
            rows = query.list_enrolment_tokens(session=session, fleet=args.fleet)
    finally:
        engine.dispose()
    if not rows:
        print("no enrolment tokens: make one with 'fleetscope token create --fleet NAME'")
        return 0
    table = [["ID", "FLEET", "STATE", "CREATED", "EXPIRES", "USES", "COMMENT"]]
    for r in rows:
        table.append([r.id, r.fleet, r.state(now), format_ns(r.created_ns), "never" if r.expires_ns is None else format_ns(r.expires_ns),
                      str(r.uses), r.comment])
    table = [[visible(c) for c in row] for row in table]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


def run_token_revoke(args: argparse.Namespace) -> int:
    from fleetscope.collector.storage.credentials import revoke_enrolment_token

    engine = _engine(args, "token revoke", write=True)
    try:
        found = revoke_enrolment_token(engine, args.id, now_ns=time.time_ns())
    finally:
        engine.dispose()
    if not found:
        return _fail("token revoke", f"no enrolment token {args.id!r} (see 'fleetscope token list')")
    print(f"enrolment token {visible(args.id)} revoked: no agent can enrol with it (agents it enrolled keep their credentials)")
    return 0


def run_device_revoke(args: argparse.Namespace) -> int:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from fleetscope.collector.storage.credentials import revoke_devices
    from fleetscope.collector.storage.schema import Device, device_credentials

    engine = _engine(args, "device revoke", write=True)
    try:
        with Session(engine) as session:
            same_name = list(session.scalars(select(Device.agent_id).where(Device.name == args.name)))
        if len(same_name) > 1 and not args.all:
            return _fail("device revoke", f"{len(same_name)} devices are named {args.name!r} (agent ids {', '.join(same_name)}): "
                                          "give one agent id, or --all")
        revoked = revoke_devices(engine, args.name, now_ns=time.time_ns())
        with Session(engine) as session:
            vias = dict(session.execute(select(device_credentials.c.agent_id, device_credentials.c.via)
                                        .where(device_credentials.c.agent_id.in_(revoked))).all())
        revoked_via = [(a, str(vias.get(a, ""))) for a in revoked]
    finally:
        engine.dispose()
    if not revoked_via:
        return _fail("device revoke", f"no device named {args.name!r} (see 'fleetscope devices')")
    for agent_id, via in revoked_via:
        print(f"revoked agent {visible(agent_id)}: collectors close its streams and refuse it from now on; the same device "
              f"(name, GPUs) cannot enrol again until 'fleetscope device allow {visible(args.name)}'")
        if via.startswith("token:"):
            token_id = via.split(":", 1)[1]
            print(f"it enrolled with enrolment token {visible(token_id)}: if the device holds that token's file, "
                  f"revoke it ('fleetscope token revoke {visible(token_id)}'; enrolled devices keep working) "
                  "and give new devices a new one")
    return 0


def run_device_allow(args: argparse.Namespace) -> int:
    from fleetscope.collector.storage.credentials import allow_devices

    engine = _engine(args, "device allow", write=True)
    try:
        allowed = allow_devices(engine, args.name, now_ns=time.time_ns())
    finally:
        engine.dispose()
    if not allowed:
        return _fail("device allow", f"no revoked device {args.name!r} waits to be allowed")
    print(f"{visible(args.name)} may enrol again, as a new agent id: its old one stays revoked (on the device, delete "
          "agent_id and device_key in the agent's state directory, then start it with an enrolment token)")
    return 0


# ---------------------------------------------------------------- the collector's flags


def add_collector_arguments(p: argparse.ArgumentParser) -> None:
    """``fleetscope collector``'s TLS and per-agent limit flags."""
    tls = p.add_argument_group("TLS", "with --tls-cert and --tls-key the port speaks only TLS ('fleetscope certs init' makes the files)")
    tls.add_argument("--tls-cert", type=Path, metavar="FILE", help="the collector's certificate (PEM, with its chain)")
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="its private key (PEM; keep it readable by the collector only)")
    tls.add_argument("--tls-client-ca", type=Path, metavar="FILE",
                     help="mutual TLS: require every agent to present a certificate signed by this CA")
    lim = p.add_argument_group("limits per agent", "a noisy agent is slowed down and reported; the rest of the fleet is not")
    lim.add_argument("--agent-max-batches", type=float, default=200.0, metavar="N",
                     help="batches per second per agent before its stream is read more slowly (default %(default)g; 0: no limit)")
    lim.add_argument("--agent-max-bytes", type=_size, default=32 << 20, metavar="SIZE",
                     help="bytes per second per agent, likewise (default 32MiB; 0: no limit)")
    lim.add_argument("--agent-max-series", type=int, default=2000, metavar="N",
                     help="distinct latency and metric series per agent; points of further series are dropped and counted "
                          "(default %(default)s; 0: no limit)")
    lim.add_argument("--agent-max-registrations", type=float, default=30.0, metavar="N",
                     help="registrations per minute per agent; more are refused with a retry-after (default %(default)g)")
    lim.add_argument("--token-max-bytes", type=_size, default=16 << 20, metavar="SIZE",
                     help="bytes per second of all the devices one enrolment token enrolled together (devices without one: "
                          "per fleet), so that identities minted with a stolen token share one rate (default 16MiB; 0: no limit)")
    lim.add_argument("--max-refusals", type=float, default=60.0, metavar="N",
                     help="refused calls per minute per caller (address, token) before its calls are refused unread "
                          "(default %(default)g; 0: no limit)")
    auth = p.add_argument_group("authentication", "by default only agents with a credential get in: a static token, an "
                                                  "enrolment token ('fleetscope token create') or their enrolled device key")
    auth.add_argument("--allow-unauthenticated", action="store_true",
                      help="let agents that present no credential at all enrol and send (a loopback demo; never on a network)")


def _size(text: str) -> int:
    from fleetscope.cli.args import size_bytes

    return size_bytes(text)


def collector_security(args: argparse.Namespace) -> dict[str, Any]:
    """CollectorSettings' ``tls`` and ``agent_limits`` from the flags; a TLS file that cannot be
    used ends the command with one line naming it (exit 2)."""
    from fleetscope.collector.ingest.agent_limits import AgentLimits
    from fleetscope.collector.ingest.tls import ServerTLS, TLSConfigError

    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise SystemExit(_fail("collector", "--tls-cert and --tls-key go together", 2))
        tls = ServerTLS(args.tls_cert, args.tls_key, args.tls_client_ca)
        try:
            tls.read()
        except TLSConfigError as exc:
            raise SystemExit(_fail("collector", str(exc), 2)) from None
    elif args.tls_client_ca:
        raise SystemExit(_fail("collector", "--tls-client-ca needs --tls-cert and --tls-key", 2))
    limits = AgentLimits(batches_per_s=max(0.0, args.agent_max_batches), bytes_per_s=float(max(0, args.agent_max_bytes)),
                         max_series=max(0, args.agent_max_series), registrations_per_min=max(0.0, args.agent_max_registrations),
                         token_bytes_per_s=float(max(0, args.token_max_bytes)), refusals_per_min=max(0.0, args.max_refusals))
    if args.allow_unauthenticated and (getattr(args, "token", None) or getattr(args, "tokens_file", None)):
        raise SystemExit(_fail("collector", "--allow-unauthenticated lets agents in without the --token it was also given: choose one", 2))
    return {"tls": tls, "agent_limits": limits, "allow_unauthenticated": bool(args.allow_unauthenticated)}


def print_auth_notice(args: argparse.Namespace, tokens: frozenset[str] | None) -> None:
    """Who may enrol, said once at start: an open collector is a warning, never a default."""
    if args.allow_unauthenticated:
        print(f"warning: --allow-unauthenticated: any client that reaches {args.listen} may enrol and send, with no token",
              file=sys.stderr)
    elif tokens is None:
        print("no --token: agents enrol with an enrolment token ('fleetscope token create --fleet NAME'); "
              "agents without a credential are refused", file=sys.stderr)


def _loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def print_warnings(args: argparse.Namespace) -> None:
    """Said once the collector has opened its database (a refusal before that stays one line):
    a secret on the command line, and plaintext beyond loopback."""
    import os

    if getattr(args, "token", None) and os.environ.get("FLEETSCOPE_TOKEN") != args.token:
        print("warning: --token shows in /proc/PID/cmdline to every local user; prefer --tokens-file or FLEETSCOPE_TOKEN",
              file=sys.stderr)
    if not args.tls_cert and not _loopback(args.listen):
        print(f"warning: no --tls-cert: agents' data and tokens reach {args.listen} in plaintext "
              "('fleetscope certs init' makes certificates)", file=sys.stderr)
