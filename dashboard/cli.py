"""``fleetscope dashboard``: serve the Streamlit app over one database.

Nothing here imports Streamlit (or SQLAlchemy): the parser is built on a drone too, where
``fleetscope --help`` must work without the dashboard extra. The command replaces this
process with ``python -m streamlit run app.py ...`` (``os.execv``), so a supervisor that
stops "the dashboard" (``fleetscope demo`` does, with SIGTERM) stops Streamlit itself rather
than a wrapper that would leave it running.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

DB_ENV = "FLEETSCOPE_DB"
DEFAULT_DB = "sqlite:///fleetscope-data/fleetscope.db"
DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"
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
        help="address to bind (default %(default)s: this machine only; 0.0.0.0 exposes it, use --password-env then)",
    )
    p.add_argument(
        "--password-env",
        default=None,
        metavar="NAME",
        help="require sign-in with the password held in environment variable NAME (the password never goes on the command line)",
    )


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


def build_command(*, db: str, port: int, address: str, password_env: str | None) -> list[str]:
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
        "--",
        "--db",
        db,
    ]
    if password_env:
        cmd += ["--password-env", password_env]
    return cmd


def check(args: argparse.Namespace) -> str | None:
    """A reason not to start, or None."""
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        return "needs the 'dashboard' extra (streamlit is not installed): pip install 'fleetscope[dashboard]'"
    if args.password_env and not os.environ.get(args.password_env):
        return f"--password-env {args.password_env}: that environment variable is empty or unset"
    return None


def run_dashboard(args: argparse.Namespace) -> int:
    problem = check(args)
    if problem:
        print(f"fleetscope dashboard: {problem}", file=sys.stderr)
        return 2
    if not is_loopback(args.address) and not args.password_env:
        print(
            f"warning: serving on {args.address} without --password-env: anyone who can reach this port sees the fleet",
            file=sys.stderr,
        )
    cmd = build_command(db=args.db, port=args.port, address=args.address, password_env=args.password_env)
    host = "localhost" if args.address in ("127.0.0.1", "::1") else args.address
    print(f"fleetscope dashboard: http://{host}:{args.port} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(sys.executable, cmd)
    return 0  # not reached: execv replaced this process
