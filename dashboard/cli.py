"""``fleetscope dashboard``: serve the Streamlit app over one database.

Nothing here imports Streamlit (or SQLAlchemy): the parser is built on a drone too, where
``fleetscope --help`` must work without the dashboard extra. The command replaces this
process with ``python -m streamlit run app.py ...`` (``os.execv``), so a supervisor that
stops "the dashboard" (``fleetscope demo`` does, with SIGTERM) stops Streamlit itself rather
than a wrapper that would leave it running.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

DB_ENV = "FLEETSCOPE_DB"
DEFAULT_DB = "sqlite:///fleetscope-data/fleetscope.db"
DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"
PASSWORD_ENV = "FLEETSCOPE_DASHBOARD_PASSWORD"  # used when set and no other sign-in is chosen
SERVE_LAST_ENV = "FLEETSCOPE_DASHBOARD_SERVE_LAST_AFTER"  # how --serve-last-after reaches the app
DEFAULT_SERVE_LAST_AFTER_S = 0.5
APP = Path(__file__).resolve().with_name("app.py")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        default=os.environ.get(DB_ENV, DEFAULT_DB),
        metavar="URL",
        help=f"database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB (env {DB_ENV}; default %(default)s)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (default %(default)s)")
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help="address to bind (default %(default)s: this machine only; any other address needs sign-in: "
        "--password-env, --password-file or --oidc)",
    )
    p.add_argument(
        "--password-env",
        default=None,
        metavar="NAME",
        help=f"require sign-in with the password held in environment variable NAME (default {PASSWORD_ENV} when it "
        "is set; the password never goes on the command line)",
    )
    p.add_argument("--password-file", default=None, metavar="FILE",
                   help="require sign-in with the password on this file's first line (e.g. a container secret)")
    p.add_argument("--oidc", action="store_true",
                   help="sign in with Streamlit's OIDC login (st.login): needs an [auth] section in "
                   ".streamlit/secrets.toml and the Authlib package")
    p.add_argument("--serve-last-after", type=_seconds_or_off, default=None, metavar="SECONDS",
                   help="a fleet summary that took this long to read is shown as last read, with its age, while the "
                        f"next is read in the background (default {DEFAULT_SERVE_LAST_AFTER_S:g}; 'off': every page "
                        "load past the 5 s cache waits for a fresh one)")
    p.add_argument("--tls-cert", default=None, metavar="FILE", help="serve HTTPS with this certificate (PEM; with --tls-key)")
    p.add_argument("--tls-key", default=None, metavar="FILE", help="the certificate's private key (PEM file)")


def _seconds_or_off(text: str) -> float:
    if text.strip().lower() == "off":
        return float("inf")
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of seconds, or 'off'") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of seconds, or 'off'")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dashboard",
        help="serve the web dashboard (Streamlit) over a collector's database",
        description="A read-only web dashboard: fleet, devices, comparisons and incidents.",
    )
    add_arguments(p)
    p.set_defaults(func=run_dashboard)


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def build_command(
    *,
    db: str,
    port: int,
    address: str,
    password_env: str | None,
    password_file: str | None = None,
    oidc: bool = False,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        # Operators keep this open all day: no reloads on file changes, no tracebacks to viewers.
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--client.showErrorDetails",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
    if tls_cert and tls_key:
        cmd += ["--server.sslCertFile", str(Path(tls_cert).resolve()), "--server.sslKeyFile", str(Path(tls_key).resolve())]
    cmd += [
        "--",
        "--db",
        db,
    ]
    if password_env:
        cmd += ["--password-env", password_env]
    if password_file:
        cmd += ["--password-file", str(Path(password_file).resolve())]
    if oidc:
        cmd += ["--oidc"]
    return cmd


def _readable(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "is a directory"
    except PermissionError:
        return "cannot read it (permission denied)"
    return None


def _oidc_configured() -> bool:
    """An [auth] table in a secrets.toml Streamlit reads (this folder's .streamlit/, then the home one)."""
    import re

    for path in (Path.cwd() / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"):
        try:
            if re.search(r"^\s*\[auth(\.[^\]]+)?\]", path.read_text(encoding="utf-8"), re.MULTILINE):
                return True
        except OSError:
            continue
    return False


def resolve_password_env(args: argparse.Namespace) -> None:
    """No sign-in chosen but FLEETSCOPE_DASHBOARD_PASSWORD is set: use it."""
    if not (args.password_env or args.password_file or args.oidc) and os.environ.get(PASSWORD_ENV):
        args.password_env = PASSWORD_ENV


def check(args: argparse.Namespace) -> str | None:
    """A reason not to start, or None."""

    if importlib.util.find_spec("streamlit") is None:
        return "needs the 'dashboard' extra (streamlit is not installed): pip install 'fleetscope[dashboard]'"
    if args.password_env and not os.environ.get(args.password_env):
        return f"--password-env {args.password_env}: that environment variable is empty or unset"
    if args.password_file:
        why = _readable(args.password_file)
        if why is None and not Path(args.password_file).read_text(encoding="utf-8", errors="replace").strip():
            why = "the file is empty"
        if why:
            return f"--password-file {args.password_file}: {why}"
    if args.oidc:
        if importlib.util.find_spec("authlib") is None:
            return "--oidc needs Authlib (pip install Authlib), which Streamlit's login uses"
        if not _oidc_configured():
            return "--oidc: no [auth] section in .streamlit/secrets.toml (here or in your home folder); see Streamlit's st.login"
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together"
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        why = _readable(path) if path else None
        if why:
            return f"{flag} {path}: {why}"
    if not is_loopback(args.address) and not (args.password_env or args.password_file or args.oidc):
        return (
            f"refusing to serve on {args.address} without sign-in: set {PASSWORD_ENV} (or --password-env NAME), "
            "--password-file FILE, or --oidc; or bind 127.0.0.1"
        )
    return None


def run_dashboard(args: argparse.Namespace) -> int:
    resolve_password_env(args)
    problem = check(args)
    if problem:
        print(f"fleetscope dashboard: {problem}", file=sys.stderr)
        return 2
    cmd = build_command(
        db=args.db, port=args.port, address=args.address, password_env=args.password_env,
        password_file=args.password_file, oidc=args.oidc, tls_cert=args.tls_cert, tls_key=args.tls_key,
    )
    host = "localhost" if args.address in ("127.0.0.1", "::1") else args.address
    scheme = "https" if args.tls_cert else "http"
    print(f"fleetscope dashboard: {scheme}://{host}:{args.port} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if getattr(args, "log_format", "text") == "json":  # Streamlit's own log lines as JSON too
        cmd = [sys.executable, "-m", "fleetscope.cli.streamlit_json", *cmd[3:]]
    if args.serve_last_after is not None:
        os.environ[SERVE_LAST_ENV] = repr(args.serve_last_after)  # read by the app (data.py)
    os.execv(sys.executable, cmd)
    return 0  # not reached: execv replaced this process
