"""The ``fleetscope`` command. Each component owns its subcommands; this only routes.

A component whose extra is not installed still lists its subcommands, and running one says
which extra to install (``pip install 'fleetscope[collector]'``) instead of a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from fleetscope.cli.extras import MissingExtra, require

__all__ = ["main", "build_parser", "MissingExtra", "require"]


# The commands ``fleetscope.agent.cli.register`` adds. When one of them runs, only the agent's
# parsers are built: building every command's imports the collector's, the dashboard's and the
# demo's modules: with --version's lookup (now lazy) about 2 MiB of a drone's memory
# (tests/agent/test_footprint.py checks this list against the registrar).
AGENT_COMMANDS = ("agent", "simulate", "doctor")


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named on a command line: the first word that is not a top-level option
    (those are -v/--verbose, --version and --help, none of which takes a value). None when a
    config file is given: one file holds every command's table ([agent] beside [collector]), and
    it is checked against every command's parser."""
    if os.environ.get("FLEETSCOPE_CONFIG") or any(w == "--config" or w.startswith("--config=") for w in argv):
        return None
    return next((word for word in argv if not word.startswith("-")), None)


class _LazyVersion(argparse._VersionAction):
    """``--version`` that looks the version up only when asked: ``importlib.metadata`` (with the
    email, zipfile and csv modules it loads) costs a third of a second and about 1 MiB that every
    command, the agent first, would otherwise pay at start."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: str | None = None) -> None:
        from fleetscope.cli import usage

        self.version = usage.version()
        super().__call__(parser, namespace, values, option_string)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``fleetscope`` parser: every command's, or with ``command`` one of ``AGENT_COMMANDS``,
    only the agent's (``fleetscope --help`` and any other command still see them all)."""
    from fleetscope.agent import cli as agent_cli
    from fleetscope.cli import usage

    parser = usage.Parser(  # an unknown flag prints the usage of the subcommand it was given to
        prog="fleetscope",
        description="Telemetry and incidents for fleets that train and run AI models.",
        epilog="Run 'fleetscope COMMAND --help' for a command's options.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("--version", action=_LazyVersion, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    agent_cli.register(sub)
    if command not in AGENT_COMMANDS:
        from fleetscope.cli import demo
        from fleetscope.cli import scan as scan_cli
        from fleetscope.collector import commands as collector_commands
        from fleetscope.dashboard import cli as dashboard_cli

        scan_cli.register(sub)
        collector_commands.register(sub)
        dashboard_cli.register(sub)
        demo.register(sub)
    from fleetscope.cli import config  # last: --config and --log-format for every long-running command

    config.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # gRPC's C core writes lines of its own straight to stderr ("I1204 ... ssl_transport_security.cc]
    # Handshake failed ..." on each TLS mismatch, "E... add_port.cc" for a busy port), in a format of
    # its own; each of those is said once in fleetscope's words (the agent's "does it use TLS? give
    # --tls-ca", the collector's "cannot listen"). Read when grpc is first imported, which building
    # the parser does; GRPC_VERBOSITY=ERROR (or INFO, DEBUG) in the environment brings them back.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    parser = build_parser(_command_in(argv))
    from fleetscope.cli import config, logging_setup

    args = config.parse(parser, argv)  # flags > environment > --config file > defaults
    level = logging.WARNING - 10 * min(args.verbose, 2)
    if args.command in ("agent", "collector", "demo", "simulate"):
        level = min(level, logging.INFO)
    logging_setup.configure(level, getattr(args, "log_format", "text"))
    from fleetscope.cli import usage

    if problem := usage.db_problem(args):  # a --db of the wrong form: before anything is opened
        print(f"fleetscope {args.command}: {problem}", file=sys.stderr)
        logging_setup.restore()
        return 2
    try:
        return int(args.func(args) or 0)
    except MissingExtra as exc:
        print(f"fleetscope {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a database that cannot be reached: one line; anything else is a bug
        line = usage.failure_line(exc, args)
        if line is None:
            raise
        print(f"fleetscope {args.command}: {line}", file=sys.stderr)
        return 1
    finally:
        logging_setup.restore()  # a command run in-process (tests) gets its stderr back
