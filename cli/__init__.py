"""The ``fleetscope`` command. Each component owns its subcommands; this only routes.

A component whose extra is not installed still lists its subcommands, and running one says
which extra to install (``pip install 'fleetscope[collector]'``) instead of a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from fleetscope.cli.extras import MissingExtra, require

__all__ = ["main", "build_parser", "MissingExtra", "require"]


def build_parser() -> argparse.ArgumentParser:
    from fleetscope.agent import cli as agent_cli
    from fleetscope.cli import demo, usage
    from fleetscope.cli import scan as scan_cli
    from fleetscope.collector import cli as collector_cli
    from fleetscope.collector import db_cli
    from fleetscope.dashboard import cli as dashboard_cli

    parser = usage.Parser(  # an unknown flag prints the usage of the subcommand it was given to
        prog="fleetscope",
        description="Telemetry and incidents for fleets that train and run AI models.",
        epilog="Run 'fleetscope COMMAND --help' for a command's options.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("--version", action="version", version=usage.version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    agent_cli.register(sub)
    scan_cli.register(sub)
    collector_cli.register(sub)
    db_cli.register(sub)
    dashboard_cli.register(sub)
    demo.register(sub)
    from fleetscope.cli import config  # last: --config and --log-format for every long-running command

    config.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
        import os

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
