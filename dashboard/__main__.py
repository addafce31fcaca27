"""``python -m fleetscope.dashboard --db URL --port N``: what ``fleetscope demo`` starts."""

from __future__ import annotations

import argparse
import sys

from fleetscope.dashboard.cli import add_arguments, run_dashboard


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fleetscope.dashboard", description="Serve the fleetscope web dashboard."
    )
    add_arguments(p)
    return run_dashboard(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
