"""The Streamlit entry point: settings, sign-in, and a thin router over the page functions.

Run by ``fleetscope dashboard --db URL`` as ``streamlit run app.py -- --db URL``; tests call
``main(db_url=..., default=...)`` through ``AppTest.from_function``. Everything a page shows
comes from ``fleetscope.dashboard.data``; a failure inside a page is logged with its
traceback on the server and shown to the viewer as one sentence, never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import streamlit as st

from fleetscope.dashboard import auth, data, nav

log = logging.getLogger("fleetscope.dashboard")

DB_ENV = "FLEETSCOPE_DB"
DEFAULT_DB = "sqlite:///fleetscope-data/fleetscope.db"
KEEP_PREFIX = "keep_"  # widget keys whose values survive switching pages


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fleetscope dashboard app", add_help=False)
    p.add_argument("--db", default=os.environ.get(DB_ENV, DEFAULT_DB))
    p.add_argument("--password-env", default=None)
    p.add_argument("--password-file", default=None)
    p.add_argument("--oidc", action="store_true")
    args, _unknown = p.parse_known_args(argv)
    return args


def _keep_widget_state() -> None:
    # Streamlit forgets a widget's value when a run does not draw it (another page). Writing
    # the value back as plain session state keeps filters when the user comes back.
    for key in list(st.session_state.keys()):
        if isinstance(key, str) and key.startswith(KEEP_PREFIX):
            st.session_state[key] = st.session_state[key]


# Streamlit's wide layout leaves 6rem above and 5rem beside the page: a wall display wants
# that room for the table. Only padding changes, nothing that hides content.
_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.5rem; padding-left: 2.5rem; padding-right: 2.5rem; }
</style>"""


def _sidebar() -> None:
    with st.sidebar:
        full = data.display_url()
        short = full.rsplit("/", 1)[-1] if full.startswith("sqlite") else full.split("@")[-1]
        st.caption(f"Database: {short}", help=f"{full} (read-only)")


# An emoji, not a ":material/...:" icon: Streamlit draws an emoji favicon in the page itself, but
# fetches a Material one from Google's font servers, which an air-gapped site never reaches.
# (Material icons inside the pages are fine: they come from the font Streamlit serves itself.)
PAGE_ICON = "🛰️"  # satellite


def main(*, db_url: str | None = None, password_env: str | None = None, default: str | None = None) -> None:
    st.set_page_config(page_title="fleetscope", page_icon=PAGE_ICON, layout="wide")
    password_file, oidc = None, False
    if db_url is None:
        args = parse_args(sys.argv[1:])
        db_url, password_env = args.db, password_env or args.password_env
        password_file, oidc = args.password_file, args.oidc
    data.set_url(db_url)
    if not auth.gate(password_env, password_file, oidc):
        return
    _keep_widget_state()
    st.html(_CSS)
    current = st.navigation(nav.pages(default), position="sidebar")
    _sidebar()
    try:
        current.run()
    except data.DataUnavailable as exc:
        st.error(str(exc))
    except Exception as exc:  # control-flow exceptions (rerun, stop) are BaseException and pass
        log.exception("page %s failed", current.title)
        st.error(
            f"This page could not be drawn ({type(exc).__name__}: {exc}). The dashboard's log has the details."
        )


if __name__ == "__main__":
    main()
