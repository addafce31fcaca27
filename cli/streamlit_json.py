"""``python -m fleetscope.cli.streamlit_json ARGS...``: Streamlit's command line with its log lines
as JSON on stderr; ``fleetscope dashboard --log-format json`` runs Streamlit through this.

Streamlit gives each of its loggers a console handler of its own (``streamlit.logger``); this
swaps that handler's formatter for :class:`fleetscope.cli.logging_setup.JsonFormatter` before
Streamlit starts, and turns the rest of stderr into JSON records as every ``--log-format json``
command does.
"""

from __future__ import annotations

import logging
import sys

from fleetscope.cli import logging_setup


def main(argv: list[str]) -> int:
    logging_setup.configure(logging.INFO, "json")
    stream = logging_setup.original_stderr()
    import streamlit.logger as st_logger

    def setup_formatter(logger: logging.Logger) -> None:
        old = getattr(logger, "streamlit_console_handler", None)
        if old is not None:
            logger.removeHandler(old)
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging_setup.JsonFormatter())
        logger.streamlit_console_handler = handler  # type: ignore[attr-defined]
        logger.addHandler(handler)

    st_logger.setup_formatter = setup_formatter
    st_logger.update_formatter()
    from streamlit.web import cli as st_cli

    sys.argv = ["streamlit", *argv]
    st_cli.main(prog_name="streamlit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
